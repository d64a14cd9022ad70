"""``AutoState.draw_in_graph_when_dormant`` (issue 25): at temperature > 0 with the rejection rule, whose verify reads
the target's logits and draws on the host, the dormant steps of a long ``n_max="auto"`` rest draw in the target's
graph through a sampler chain attached for the rest (seeded from the generation's generator) and detached before
the rest's first step that is not dormant. On the tiny fixtures: the tokens from the attach on are plain decoding's
with that chain's seed, the chain is on exactly for the dormant steps of rests with ``IN_GRAPH_MIN_STEPS`` of them
ahead (never for a drafting step's verify), a seeded generation repeats, the match rule keeps its one chain, and
the Generator is left with no sampler. (The switch's llama.cpp side, vendor/patches/0017, is tested in
test_sampler.py: logits and draws after each switch equal those of a context that never switched.)"""
import pytest

import pyllama_spec as ps
from pyllama_spec.speculative import loop
from pyllama_spec.speculative.costmodel import DORMANT_WINDOW, IN_GRAPH_MIN_STEPS

from .conftest import assert_same_tokens

PROMPT = "The quick brown fox"  # (the tiny target goes on past 400 tokens here greedily, and with top-k 1)
STORY = "Once upon a time"  # (at T = 0.8, top-k 2 and seed 4: 160 tokens in the run below on the CPU)
N_TOK = 160


@pytest.fixture(scope="module")
def gen(tiny):
    g = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"]}, n_ctx=1024, n_batch=64, n_ubatch=32)
    g.generate(PROMPT, drafter="dflash", n_max="auto", max_tokens=2)  # auto's verify table, measured on first use
    yield g
    g.close()


class Spy:
    """Per target decode: its first position, its rows, and whether a sampler chain was attached; the seeds of the
    chains the loop made for rests."""

    def __init__(self, gen, monkeypatch):
        self.t = gen.ctx
        self.decodes: list[tuple[int, int, bool]] = []  # (first position, rows, chain attached)
        self.seeds: list[int] = []
        dec = self.t.decode

        def decode(tokens, pos, *a, **kw):
            self.decodes.append((int(pos[0]), len(tokens), bool(self.t._samplers)))
            return dec(tokens, pos, *a, **kw)

        monkeypatch.setattr(self.t, "decode", decode)
        made = loop.SamplerChain.from_params

        def from_params(sp):
            self.seeds.append(sp.seed)
            return made(sp)

        monkeypatch.setattr(loop.SamplerChain, "from_params", staticmethod(from_params))

    def steps(self, n_prompt):
        """The generation's step decodes (after the prefill): (first position, rows, chain attached)."""
        return [d for d in self.decodes if d[0] >= n_prompt - 1]


def _resting(gen, max_rest, in_graph=True):
    """A fresh AutoState whose cost model says a drafting step costs 1000 s: rests of ``max_rest`` steps from the
    first step, one-token probes between them."""
    gen._auto_state.pop("dflash", None)
    st = gen.auto_state("dflash")
    st.other_ms, st.rest_ms, st.max_rest, st.draw_in_graph_when_dormant = 1e6, 0.0, max_rest, in_graph
    return st


def _run(gen, monkeypatch, max_rest, *, in_graph=True, verify="rejection", seed=7, n=N_TOK, prompt=PROMPT, top_k=1):
    """An auto generation at T = 0.8 (top-k 1 by default: long answers that still take the rejection rule's host
    path) from a fresh resting state, spied on."""
    toks = gen.tokenize_prompt(prompt)
    _resting(gen, max_rest, in_graph)
    try:
        spy = Spy(gen, monkeypatch)
        r = gen.generate(prompt_tokens=toks, drafter="dflash", n_max="auto", max_tokens=n, reuse_prefix=False,
                         verify=verify, temperature=0.8, top_k=top_k, seed=seed)
    finally:
        monkeypatch.undo()
        gen._auto_state.pop("dflash", None)
    return toks, r, spy


def test_the_dormant_steps_draw_plain_decodings_tokens_with_the_rests_chain(gen, monkeypatch):
    """One rest longer than the generation: from the step that attached the chain on, the tokens are those plain
    decoding draws with a chain of that seed after the same prefix — the logits after the switch are right and
    the draw is llama.cpp's in-graph one."""
    toks, r, spy = _run(gen, monkeypatch, max_rest=512, prompt=STORY, top_k=2, seed=4)
    # (on the CPU 160 tokens; CUDA draws otherwise from the same seed and ended at an EOS after 65 on an H100)
    assert len(r.tokens) >= 32
    steps = spy.steps(len(toks))
    on = [i for i, (_, _, c) in enumerate(steps) if c]
    assert len(spy.seeds) == 1 and on, "one rest, one chain"
    j = on[0]
    assert on == list(range(j, len(steps)))  # on from there to the end: no detach inside the rest
    assert all(rows == 1 for _, rows, _ in steps)  # every step rested
    assert j <= 2  # the rest is dormant from its second step (its first follows no rest)
    ref = gen.generate(prompt_tokens=toks + r.tokens[:j], max_tokens=N_TOK - j, temperature=0.8, top_k=2,
                       seed=spy.seeds[0], reuse_prefix=False)
    assert_same_tokens(r.tokens[j:], ref.tokens)
    assert not gen.ctx._samplers  # the generation detached its chain


def test_the_chain_is_on_for_dormant_steps_only_and_never_for_a_drafting_verify(gen, monkeypatch):
    """Rests of DORMANT_WINDOW + IN_GRAPH_MIN_STEPS + 16 steps: each attaches a chain at its second step and detaches
    it once DORMANT_WINDOW steps are left (its rows then go to the probe's drafter); a probe verifies its draft
    with the host's rejection rule (no chain). A new seed per rest."""
    rest = DORMANT_WINDOW + IN_GRAPH_MIN_STEPS + 16
    toks, r, spy = _run(gen, monkeypatch, max_rest=rest, n=2 * rest + 24)
    steps = spy.steps(len(toks))
    assert all(not c for _, rows, c in steps if rows > 1)  # drafting steps read logits
    # runs of chain-on steps: one per whole rest, its steps before its window of DORMANT_WINDOW; the third rest, cut
    # by the generation's end after fewer than IN_GRAPH_MIN_STEPS steps, attaches nothing
    runs, cur = [], 0
    for _, _, c in steps + [(0, 1, False)]:
        if c:
            cur += 1
        elif cur:
            runs.append(cur)
            cur = 0
    assert len(runs) == len(spy.seeds) == 2 and len(set(spy.seeds)) == 2, (runs, spy.seeds)
    assert runs == [rest - DORMANT_WINDOW] * 2, runs
    assert len(steps) > 2 * rest + 2  # (a third rest began)
    assert sum(rows > 1 for _, rows, _ in steps) >= 2  # a probe drafted after each whole rest
    assert not gen.ctx._samplers


def test_a_rest_with_few_dormant_steps_attaches_nothing(gen, monkeypatch):
    """Rests of DORMANT_WINDOW + 16 steps: 16 dormant steps, fewer than IN_GRAPH_MIN_STEPS — two graph rebuilds would
    cost more than they save: the host draws throughout."""
    toks, r, spy = _run(gen, monkeypatch, max_rest=DORMANT_WINDOW + 16, n=120)
    assert not spy.seeds and not any(c for _, _, c in spy.steps(len(toks)))


def test_seeded_runs_repeat_and_the_switch_off_draws_on_the_host(gen, monkeypatch):
    _, a, spy_a = _run(gen, monkeypatch, max_rest=512, n=64)
    _, b, _ = _run(gen, monkeypatch, max_rest=512, n=64)
    assert a.tokens == b.tokens and spy_a.seeds
    toks, c, spy_c = _run(gen, monkeypatch, max_rest=512, n=64, in_graph=False)
    assert not spy_c.seeds and not any(ch for _, _, ch in spy_c.steps(len(toks)))
    assert len(c.tokens) == 64
    assert ps.speculative.costmodel.AutoState().draw_in_graph_when_dormant  # on by default


def test_the_match_rule_keeps_its_one_chain(gen, monkeypatch):
    """With the match rule the target's chain is attached for the whole generation (no host rule): no rest chain."""
    toks, r, spy = _run(gen, monkeypatch, max_rest=512, n=64, verify="match")
    assert len(spy.seeds) == 1 and spy.seeds[0] == 7  # the generation's own chain, seeded by the caller
    assert all(c for _, _, c in spy.steps(len(toks)))


def test_plain_and_fixed_lengths_run_as_before_after_a_rest_in_the_graph(gen, monkeypatch):
    """A generation that ended with its rest chain attached leaves the Generator as it was: plain decoding, DFlash
    at a fixed n_max (match, and rejection at T = 0.8 with a seed) give the tokens they gave before it."""
    def runs():
        return [gen.generate(PROMPT, max_tokens=24, reuse_prefix=False).tokens,
                gen.generate(PROMPT, drafter="dflash", n_max=3, max_tokens=24).tokens,
                gen.generate(PROMPT, drafter="dflash", n_max=3, max_tokens=24, verify="rejection", temperature=0.8,
                             seed=3).tokens]

    before = runs()
    _, r, spy = _run(gen, monkeypatch, max_rest=512, n=48)
    assert spy.seeds and spy.steps(0)[-1][2]  # (its last step still drew in the graph)
    assert not gen.ctx._samplers
    after = runs()
    assert after == before
    assert_same_tokens(after[1], after[0])  # (DFlash is lossless: plain decoding's tokens)


def test_a_short_generation_inside_a_long_rest_attaches_nothing(gen, monkeypatch):
    """The rest goes on into a generation of 8 tokens: fewer steps than IN_GRAPH_MIN_STEPS, so its two graph
    rebuilds would cost more than they save — the host draws (a reviewer's case)."""
    toks = gen.tokenize_prompt(PROMPT)
    st = _resting(gen, 512)
    try:
        gen.generate(prompt_tokens=toks, drafter="dflash", n_max="auto", max_tokens=24, reuse_prefix=False,
                     verify="rejection", temperature=0.8, top_k=1, seed=1)
        assert st.rest_left - DORMANT_WINDOW >= IN_GRAPH_MIN_STEPS  # (the rest goes on, deep)
        spy = Spy(gen, monkeypatch)
        r = gen.generate(prompt_tokens=toks, drafter="dflash", n_max="auto", max_tokens=8, reuse_prefix=False,
                         verify="rejection", temperature=0.8, top_k=1, seed=2)
    finally:
        monkeypatch.undo()
        gen._auto_state.pop("dflash", None)
    assert len(r.tokens) == 8 and not spy.seeds


def test_a_backend_that_refuses_the_chain_leaves_the_draws_to_the_host(gen, monkeypatch):
    """Context.set_sampler raises UnsupportedError where llama.cpp cannot run a chain on the backend: the rest then
    draws on the host, as before the change, and asks no more (one try a generation)."""
    tries = []
    real = gen.ctx.set_sampler

    def refuse(chain, seq_id=0):
        if chain is not None:
            tries.append(chain)
            raise ps.UnsupportedError("llama.cpp cannot run the sampler chain on this context's backend")
        return real(chain, seq_id)

    toks = gen.tokenize_prompt(PROMPT)
    _resting(gen, 512)
    try:
        monkeypatch.setattr(gen.ctx, "set_sampler", refuse)
        r = gen.generate(prompt_tokens=toks, drafter="dflash", n_max="auto", max_tokens=96, reuse_prefix=False,
                         verify="rejection", temperature=0.8, top_k=1, seed=3)
    finally:
        monkeypatch.undo()
        gen._auto_state.pop("dflash", None)
    ref = gen.generate(prompt_tokens=toks, max_tokens=96, reuse_prefix=False)  # top-k 1: greedy's tokens
    assert len(tries) == 1 and r.tokens == ref.tokens
