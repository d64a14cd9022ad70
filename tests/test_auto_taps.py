"""``AutoState.taps_off_when_dormant`` (issue 25): in a long rest of ``n_max="auto"`` the target's layer-input
taps are off for the decodes whose rows go to DFlash's (or EAGLE-3's) ``observe_dormant`` (which reads none)
and on again for the rest's last ``DORMANT_WINDOW`` steps and every drafting step. On the tiny fixtures: the
output is plain decoding's and the switch-off run's, the taps are off exactly for the dormant decodes, a probe
drafts what it drafts with the switch off, and a rest that ends with a generation leaves the Generator usable
as before."""
import pytest

import pyllama_spec as ps
from pyllama_spec.speculative.costmodel import DORMANT_WINDOW
from pyllama_spec.speculative.drafters.dflash import DFlashDrafter
from pyllama_spec.speculative.drafters.dflash2 import DFlash2Drafter
from pyllama_spec.speculative.drafters.draft_simple import DraftModelDrafter
from pyllama_spec.speculative.drafters.dspark import DSparkDrafter
from pyllama_spec.speculative.drafters.eagle3 import Eagle3Drafter
from pyllama_spec.speculative.drafters.mtp import MTPDrafter

from .conftest import EXACT

PROMPT = "The quick brown fox"  # (the tiny target goes on past 400 tokens here)
N_TOK = 200  # a rest of 80 steps (16 dormant, then the window of 64), a probe, another rest of 80, ...


@pytest.fixture(scope="module")
def gen(tiny):
    g = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"], "ngram": "ngram"},
                     n_ctx=1024, n_batch=64, n_ubatch=32)
    yield g
    g.close()


class Spy:
    """Records, per target decode, its first position and the taps it ran with, and per drafter call the first
    position it observed (by method) or drafted at."""

    def __init__(self, gen, name="dflash"):
        self.gen, self.target, self.d = gen, gen.ctx, gen.drafters[name]
        self.taps: dict[int, list[int]] = {}  # first position of a target decode -> its taps
        self.order: list[tuple[int, list[int]]] = []
        self.observed: list[tuple[str, int, int]] = []  # (method, first position, rows committed)
        self.proposed: list[tuple[int, list[int]]] = []  # (n_past, draft tokens)

    def __enter__(self):
        t, d = self.target, self.d
        dec = t.decode

        def decode(tokens, pos, *a, **kw):
            taps = t.enabled_layer_inputs
            self.taps[int(pos[0])] = taps
            self.order.append((int(pos[0]), taps))
            return dec(tokens, pos, *a, **kw)

        t.decode = decode
        for name in ("observe", "observe_deferred", "observe_dormant"):
            orig = getattr(d, name)

            def obs(tokens, positions, n_commit, timer, _orig=orig, _name=name):
                self.observed.append((_name, int(positions[0]), n_commit))
                return _orig(tokens, positions, n_commit, timer)

            setattr(d, name, obs)
        prop = d.propose

        def propose(last, n_past, n_max, sp, rng, timer):
            out = prop(last, n_past, n_max, sp, rng, timer)
            self.proposed.append((n_past, list(out.tokens)))
            return out

        d.propose = propose
        return self

    def __exit__(self, *exc):
        del self.target.decode
        for name in ("observe", "observe_deferred", "observe_dormant", "propose"):
            delattr(self.d, name)


def _resting_state(gen, taps_off, max_rest=DORMANT_WINDOW + 16, name="dflash"):
    """A fresh AutoState whose cost model says a drafting step costs 1000 s: rests of ``max_rest`` steps
    (the first one begins at the first step), one-token probes between them."""
    gen._auto_state.pop(name, None)
    st = gen.auto_state(name)
    st.other_ms, st.rest_ms, st.max_rest, st.taps_off_when_dormant = 1e6, 0.0, max_rest, taps_off
    return st


def _auto(gen, taps_off, prompt=PROMPT, max_tokens=N_TOK, name="dflash"):
    _resting_state(gen, taps_off, name=name)
    try:
        with Spy(gen, name) as spy:
            r = gen.generate(prompt, drafter=name, n_max="auto", max_tokens=max_tokens, reuse_prefix=False)
    finally:
        gen._auto_state.pop(name, None)
    return r, spy


def test_only_the_feature_kinds_skip_the_taps_in_observe_dormant():
    """The capability: DFlash's and EAGLE-3's observe_dormant read no feature (DFlash2 and DSpark inherit
    DFlash's; EAGLE-3's since 2026-12-07); MTP and draft-simple keep the default (observe_deferred)."""
    assert not any(c.dormant_reads_taps for c in (DFlashDrafter, DFlash2Drafter, DSparkDrafter, Eagle3Drafter))
    assert all(c.dormant_reads_taps for c in (MTPDrafter, DraftModelDrafter))


def test_an_eagle3_head_with_the_taps_off_in_its_dormant_steps(tmp_path):
    """EAGLE-3's observe_dormant reads no feature either (2026-12-07): with the switch on the target decodes the
    dormant rows without taps, the output is plain decoding's, and the probes draft what they draft with the
    switch off (from the same window's features)."""
    from pyllama_spec import drafter_fixtures, fixtures

    t = tmp_path / "target.gguf"
    fixtures.write_tiny_target(t, arch="llama", n_layer=4, n_embd=64, seed=21, layer_scale=0.1)
    drafter_fixtures.write_eagle3_drafter(tmp_path / "echo.gguf", target=t, echo=True, target_layers=[0, 2, 3])
    with ps.Generator(t, drafters={"echo": tmp_path / "echo.gguf"}, n_ctx=1024, n_batch=64, n_ubatch=32) as g:
        prompt = "hello there, how are you"
        ref = g.generate(prompt, max_tokens=N_TOK, reuse_prefix=False)
        if len(ref.tokens) < N_TOK:
            pytest.skip("the tiny target ends this prompt early")
        r_off, off = _auto(g, False, prompt=prompt, name="echo")
        r_on, on = _auto(g, True, prompt=prompt, name="echo")
        ids = sorted(g.drafters["echo"].target_layer_ids)
    assert r_on.tokens == r_off.tokens == ref.tokens
    dormant = {p for m, p, _ in on.observed if m == "observe_dormant"}
    assert len(dormant) >= 16 and all((on.taps[p] == []) == (p in dormant) for p in on.taps)
    assert all(t == ids for t in off.taps.values())
    assert on.proposed == off.proposed and any(tok for _, tok in on.proposed)


def test_taps_are_off_exactly_for_the_dormant_decodes_and_the_output_is_plain(gen):
    ref = gen.generate(PROMPT, max_tokens=N_TOK, reuse_prefix=False)
    if len(ref.tokens) < N_TOK:
        pytest.skip("the tiny target ends this prompt early")
    r_off, off = _auto(gen, False)
    r_on, on = _auto(gen, True)
    assert r_on.tokens == r_off.tokens == ref.tokens  # lossless, and the switch changes no token
    ids = sorted(gen.drafters["dflash"].target_layer_ids)
    assert ids and all(t == ids for t in off.taps.values())  # switch off: the taps on for every decode
    # switch on: each target decode ran with the taps its rows' observer needed — none for observe_dormant,
    # the drafter's for observe / observe_deferred (the rest's last window, the probe's verify, the prefill)
    dormant = [p for m, p, _ in on.observed if m == "observe_dormant"]
    seen = [p for m, p, _ in on.observed if m != "observe_dormant"]
    assert len(dormant) >= 32 and len(seen) >= 2 * DORMANT_WINDOW
    assert all(on.taps[p] == [] for p in dormant)
    assert all(on.taps[p] == ids for p in seen)
    # every drafting step's verify (its first position is the draft's n_past) had the taps on
    assert on.proposed and all(on.taps[n] == ids for n, _ in on.proposed)
    # two switches a rest: off for its first (dormant) steps, on for its window
    switches = sum(a[1] != b[1] for a, b in zip(on.order, on.order[1:]))
    rests = sum(1 for a, b in zip(on.observed, on.observed[1:])
                if a[0] != "observe_dormant" and b[0] == "observe_dormant")
    assert rests >= 2 and switches == 2 * rests - (on.observed[-1][0] == "observe_dormant")
    # the same steps were dormant and the probes drafted the same tokens from the same window's features
    assert [(m, p) for m, p, _ in on.observed] == [(m, p) for m, p, _ in off.observed]
    assert [n for n, _ in on.proposed] == [n for n, _ in off.proposed]
    same = [a == b for (_, a), (_, b) in zip(on.proposed, off.proposed)]
    assert all(same) if EXACT else sum(same) >= len(same) // 2


@pytest.mark.parametrize("first", [8, 17, 40, 80, 81, 400])
def test_a_rest_ending_with_a_generation_leaves_the_generator_as_before(gen, first):
    """A generation ends inside a long rest (dormant: taps off, or in its window: on), right where it ends, or at
    an EOS;
    the next generation goes on resting from its prompt (dormant prefill) into the window and a probe; then plain
    decoding, the n-gram drafter and DFlash at a fixed n_max run on the same Generator as they do without
    the switch — no read of a tap that is off, the taps each needs."""
    prompts = ["Once upon a time " * 4, PROMPT]  # (the first ends at an EOS after 160 tokens)
    refs = [gen.generate(p, max_tokens=n, reuse_prefix=False).tokens for p, n in zip(prompts, (first, 120))]
    ids = sorted(gen.drafters["dflash"].target_layer_ids)
    st = _resting_state(gen, True)
    try:
        r1 = gen.generate(prompts[0], drafter="dflash", n_max="auto", max_tokens=first, reuse_prefix=False)
        left = st.rest_left
        with Spy(gen) as spy:
            r2 = gen.generate(prompts[1], drafter="dflash", n_max="auto", max_tokens=120)
    finally:
        gen._auto_state.pop("dflash", None)
    assert [r1.tokens, r2.tokens] == refs
    if left >= DORMANT_WINDOW:  # the rest went on into the second prompt: its rows skipped, the taps off
        assert spy.observed[0][0] == "observe_dormant" and spy.order[0][1] == []
    assert all(spy.taps[p] == ([] if m == "observe_dormant" else ids) for m, p, _ in spy.observed)
    plain = gen.generate(prompts[1], max_tokens=24, reuse_prefix=False)
    assert gen.ctx.enabled_layer_inputs == []
    assert gen.generate(prompts[1], drafter="ngram", n_max=3, max_tokens=24).tokens == plain.tokens
    assert gen.generate(prompts[1], drafter="dflash", n_max=3, max_tokens=24).tokens == plain.tokens
    assert gen.ctx.enabled_layer_inputs == ids


def test_the_switch_is_off_by_default_and_plain_decoding_keeps_no_taps(gen):
    assert not ps.speculative.costmodel.AutoState().taps_off_when_dormant
    _resting_state(gen, True)
    try:
        gen.generate(PROMPT, drafter="dflash", n_max="auto", max_tokens=24, reuse_prefix=False)
    finally:
        gen._auto_state.pop("dflash", None)
    gen.generate(PROMPT, drafter="dflash", n_max=0, max_tokens=4)  # plain decoding: drafter=None, no taps
    assert gen.ctx.enabled_layer_inputs == []
