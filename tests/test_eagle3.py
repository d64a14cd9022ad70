"""draft-eagle3: an EAGLE-3 head on the tiny llama/qwen3 targets (issue 9) against llama.cpp's
``--spec-type draft-eagle3``."""
import pytest

import pyllama_spec as ps
from pyllama_spec import drafter_fixtures, fixtures
from pyllama_spec.speculative.drafters.eagle3 import Eagle3Drafter

from .drafter_helpers import assert_in_graph_drafts_equal_the_host_argmax, assert_rests_defer_rows, compare_with_native

PROMPT = "hello there, how are you"


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    """A bigram-ish llama target with a random head, an echo head (often right) and a random head
    with its own hidden size, embedding and LM head; a qwen3 target with a random head."""
    d = tmp_path_factory.mktemp("eagle3")
    t = d / "target.gguf"
    info = fixtures.write_tiny_target(t, arch="llama", n_layer=4, n_embd=64, seed=21, layer_scale=0.1)
    drafter_fixtures.write_eagle3_drafter(d / "random.gguf", target=t, seed=1)
    drafter_fixtures.write_eagle3_drafter(d / "echo.gguf", target=t, echo=True, target_layers=[0, 2, 3])
    drafter_fixtures.write_eagle3_drafter(d / "wide.gguf", target=t, n_embd=96, n_head=4, seed=2)
    q = d / "qwen3.gguf"
    fixtures.write_tiny_target(q, arch="qwen3", n_layer=6, n_embd=64, seed=3)
    drafter_fixtures.write_eagle3_drafter(d / "qwen3_head.gguf", target=q, target_layers=[2, 3, 5], seed=4)
    return {"target": t, "qwen3": q, "dir": d, **{k: d / f"{k}.gguf" for k in ("random", "echo", "wide", "qwen3_head")},
            **info}


@pytest.fixture(scope="module")
def gen(heads):
    g = ps.Generator(heads["target"], drafters={k: heads[k] for k in ("random", "echo", "wide")},
                     n_ctx=1024, n_batch=64, n_ubatch=32)
    yield g
    g.close()


@pytest.mark.parametrize("name,n_max", [("random", 3), ("echo", 1), ("echo", 4), ("wide", 2)])
def test_matches_native_token_for_token(gen, heads, name, n_max):
    ours, nat, steps = compare_with_native(gen, name, target=heads["target"], drafter_file=heads[name],
                                           spec_type="draft-eagle3", prompt=PROMPT, n_max=n_max)
    if name == "echo":
        assert 0.4 < ours.stats.acceptance_rate < 1.0


def test_greedy_drafts_drawn_in_the_heads_graph_equal_the_host_argmax(gen):
    """A greedy EAGLE-3 draft with no p_min cut is drawn in the head's decode graph (ModelDrafter.backend_sampling:
    a token id per head decode, no row of logits read back): the same drafts, step for step, as the host's argmax;
    a sampled generation (rejection sampling needs the head's distributions) takes the sampler off, and the next
    greedy one puts it back (token trees: test_tree_kinds.py)."""
    assert_in_graph_drafts_equal_the_host_argmax(gen, "echo", PROMPT, PROMPT)


def test_a_big_encode_takes_the_heads_sampler_off_and_the_next_draft_puts_it_back(gen):
    """With a sampler attached, llama.cpp sizes a context's output buffer for three more vocabulary-sized arrays a
    row, and the head's encoder outputs every row: so an encode of more than IN_GRAPH_MAX_ENCODE rows (a prefill,
    a long rest's rows) takes the sampler off first, and the next greedy draft attaches it again. A verify's few
    rows keep it. Same tokens as plain decoding."""
    from pyllama_spec.speculative.drafters.eagle3 import IN_GRAPH_MAX_ENCODE

    d = gen.drafters["echo"]
    seen = []
    orig = d.ctx.encode_embd

    def spy(feats, pos, *a, **k):
        seen.append((len(feats), 0 in d.ctx.samplers))
        return orig(feats, pos, *a, **k)

    gen.generate(PROMPT, drafter="echo", n_max=4, max_tokens=8)
    assert 0 in d.ctx.samplers
    long_prompt = " ".join(["the tiny head encodes a long prompt"] * 12)
    d.ctx.encode_embd = spy
    try:
        r = gen.generate(long_prompt, drafter="echo", n_max=4, max_tokens=24, reuse_prefix=False)
    finally:
        del d.ctx.encode_embd
    plain = gen.generate(long_prompt, max_tokens=24, reuse_prefix=False)
    assert r.tokens == plain.tokens
    big = [on for n, on in seen if n > IN_GRAPH_MAX_ENCODE]
    small = [on for n, on in seen if n <= IN_GRAPH_MAX_ENCODE]
    assert big and not any(big), seen  # (the prefill's encodes ran without the sampler)
    assert small and any(small), seen  # (after the first draft the verifies' encodes keep it)
    assert 0 in d.ctx.samplers


def test_qwen3_target(heads):
    with ps.Generator(heads["qwen3"], drafters={"eagle3": heads["qwen3_head"]}, n_ctx=512, n_batch=32) as g:
        compare_with_native(g, "eagle3", target=heads["qwen3"], drafter_file=heads["qwen3_head"],
                            spec_type="draft-eagle3", prompt=PROMPT, n_max=3, n_ctx=512)


def test_prompt_longer_than_a_batch_and_one_token_prompt(gen, heads):
    """The deferred boundary crosses prefill chunks (n_batch 64) and survives a 1-token prompt."""
    long_prompt = "abcdefghij " * 12
    plain = gen.generate(long_prompt, max_tokens=20)
    r = gen.generate(long_prompt, drafter="echo", n_max=3, max_tokens=20)
    assert r.tokens == plain.tokens and len(r.prompt_tokens) > 64 and r.stats.n_accepted > 0
    compare_with_native(gen, "echo", target=heads["target"], drafter_file=heads["echo"],
                        spec_type="draft-eagle3", prompt=long_prompt, n_max=3)
    one = gen.generate(prompt_tokens=[5], drafter="echo", n_max=3, max_tokens=12)
    assert one.tokens == gen.generate(prompt_tokens=[5], max_tokens=12).tokens


def test_taps_and_memory(gen):
    d = gen.drafters["echo"]
    assert d.kind == "draft-eagle3" and d.target_layer_ids == [0, 2, 3]
    gen.generate(PROMPT, drafter="echo", max_tokens=4)
    assert gen.ctx.enabled_layer_inputs == [0, 2, 3]
    mem = d.memory_report()
    assert mem["kv_cache_mib"] > 0


def test_mismatched_heads_raise(gen, heads, tiny):
    d = heads["dir"]
    drafter_fixtures.write_eagle3_drafter(d / "other_size.gguf", target=heads["target"], target_hidden_size=128)
    with pytest.raises(ps.DrafterMismatchError, match="hidden size 128.*has 64"):
        Eagle3Drafter(gen.ctx, d / "other_size.gguf")
    with pytest.raises(ps.DrafterMismatchError, match=r"6 layers|has 4 layers"):
        # a head for the 6-layer qwen3 target reads layer 5, which the 4-layer llama lacks
        Eagle3Drafter(gen.ctx, heads["qwen3_head"])
    drafter_fixtures.write_eagle3_drafter(d / "final.gguf", target=heads["target"], target_layers=[1, 2, 4])
    with pytest.raises(ps.DrafterMismatchError, match="final hidden state"):
        Eagle3Drafter(gen.ctx, d / "final.gguf")
    with pytest.raises(ps.DrafterMismatchError, match="not an EAGLE-3 head"):
        Eagle3Drafter(gen.ctx, tiny["dflash"])
    assert gen.generate(PROMPT, drafter="echo", max_tokens=4).stats.n_steps > 0


@pytest.mark.parametrize("max_rest", [3, 12])
def test_auto_rests_defer_the_heads_rows_to_the_probe(gen, max_rest):
    """n_max="auto" resting (a cost model where nothing pays): the resting steps' committed rows (their target
    features copied at once) go into the head in one encode + decode before the probe's draft instead of one
    pair a step — the drafts are those of injecting each row as it came, the output is plain decoding's, and
    the head decodes fewer batches."""
    assert_rests_defer_rows(gen, "echo", PROMPT, max_rest)


def test_a_rest_longer_than_a_batch_goes_into_the_head_in_batches(heads):
    """Rests of up to 40 steps with n_batch 16: the deferred rows go into the head whenever 16 wait, inside a resting
    step — and the boundary stays the last row injected (a resting step's on_accept leaves it; it used to reset it
    to the flushed batch's first row, and the next injection failed on non-consecutive positions)."""
    with ps.Generator(heads["target"], drafters={"echo": heads["echo"]}, n_ctx=1024, n_batch=16, n_ubatch=16) as g:
        assert_rests_defer_rows(g, "echo", PROMPT, 40, max_tokens=120)


def test_a_rest_after_a_rejected_draft_leaves_no_wrong_pair_in_the_heads_cache(heads):
    """After a step that accepted less than it drafted, the boundary cell of the head's cache pairs a *rejected*
    draft token with g until a draft replaces it; a resting step drafts nothing, so the next injection must drop
    it (found by a review, 2026-12-06: 6 wrong pairs in 48 tokens before). Every cached pair (token at p + 1, g_p)
    must hold the token committed at p + 1 — rebuilt here from the head's decode and removal calls."""
    from .test_auto_rest import _auto_with_probes

    g = ps.Generator(heads["target"], drafters={"random": heads["random"]}, n_ctx=1024, n_batch=64, n_ubatch=32)
    with g:
        d = g.drafters["random"]
        cache: dict[int, int] = {}
        dec, rm = d.ctx.decode_tokens_embd, d.ctx.memory.seq_rm

        def decode(tokens, rows, pos, **k):
            for t, p in zip(tokens, pos):
                cache[int(p)] = int(t)
            return dec(tokens, rows, pos, **k)

        def seq_rm(seq, p0=-1, p1=-1):
            for p in [p for p in cache if p >= max(p0, 0) and (p1 < 0 or p < p1)]:
                del cache[p]
            return rm(seq, p0, p1)

        d.ctx.decode_tokens_embd, d.ctx.memory.seq_rm = decode, seq_rm
        try:
            r, calls = _auto_with_probes(g, PROMPT, name="random", max_rest=6)
        finally:
            del d.ctx.decode_tokens_embd, d.ctx.memory.seq_rm
        full = g.tokenize_prompt(PROMPT) + list(r.tokens)
    assert len(calls) >= 3 and r.stats.n_drafted > r.stats.n_accepted  # (probes whose drafts were rejected)
    wrong = [p for p, t in cache.items() if p + 1 < len(full) and t != full[p + 1]]
    assert wrong == []


def test_a_long_rest_keeps_at_most_a_batch_of_rows_waiting(gen):
    """A prompt decoded inside a long rest (the last generation's rest goes on) with its rows deferred (as the base
    class's observe_dormant does): the head takes them whenever a batch's worth waits, so the features kept on the
    host stay below n_batch rows; the output is plain decoding's. EAGLE-3's own observe_dormant keeps none."""
    d = gen.drafters["echo"]
    prompt = PROMPT * 12
    ref = gen.generate(prompt, max_tokens=16, reuse_prefix=False)
    assert len(gen.tokenize_prompt(prompt)) > 2 * gen.ctx.n_batch
    for skip in (False, True):
        if not skip:
            d.observe_dormant = d.observe_deferred  # (the base class's observe_dormant: the rows deferred)
        st = gen.reset_auto_state("echo")
        st.other_ms, st.rest_ms, st.rest_left, st.gap = 1e6, 0.0, 400, 400
        try:
            r = gen.generate(prompt, drafter="echo", n_max="auto", max_tokens=16, reuse_prefix=False)
            assert r.tokens == ref.tokens and not any(r.stats.draft_lengths)
            assert (d._deferred.n == 0) if skip else (0 < d._deferred.n < gen.ctx.n_batch)
        finally:
            gen.reset_auto_state("echo")
            d.__dict__.pop("observe_dormant", None)


@pytest.mark.parametrize("dormant", [True, False])
def test_a_long_rest_skips_the_features_of_all_but_its_last_window(gen, dormant):
    """A rest of 80 steps: the head is handed its first 16 rows with observe_dormant — no feature copied, no pair
    decoded: a hole in its cache, emptied before the window's rows go in — and the last 64 with observe_deferred
    (decoded at the probe). The output is plain decoding's either way, and after the probe every pair the head's
    cache holds pairs the token committed at p + 1 with g_p. dormant=False: every resting row goes in."""
    from pyllama_spec.speculative.costmodel import DORMANT_WINDOW

    d = gen.drafters["echo"]
    n_tok = 100
    ref = gen.generate(PROMPT, max_tokens=n_tok, reuse_prefix=False)
    if len(ref.tokens) < n_tok:
        pytest.skip("the tiny target ends this prompt early")
    read, cache, probes = [], {}, []
    feats, dec, prop = d._features, d.ctx.decode_tokens_embd, d.propose
    rm, clear = d.ctx.memory.seq_rm, d.ctx.memory.clear

    def features(rows):
        out = feats(rows)
        read.append(len(out))
        return out

    def decode(tokens, rows, pos, **k):
        cache.update((int(p), int(t)) for t, p in zip(tokens, pos))
        return dec(tokens, rows, pos, **k)

    def seq_rm(seq, p0=-1, p1=-1):
        for p in [p for p in cache if p >= max(p0, 0) and (p1 < 0 or p < p1)]:
            del cache[p]
        return rm(seq, p0, p1)

    def clear_all(*a):
        cache.clear()
        return clear(*a)

    def propose(last, n_past, *a):
        out = prop(last, n_past, *a)
        probes.append((n_past, dict(cache)))
        return out

    d._features, d.ctx.decode_tokens_embd, d.ctx.memory.seq_rm, d.ctx.memory.clear, d.propose = \
        features, decode, seq_rm, clear_all, propose
    st = gen.reset_auto_state("echo")
    st.other_ms, st.rest_ms, st.max_rest, st.dormant = 1e6, 0.0, DORMANT_WINDOW + 16, dormant
    try:
        r = gen.generate(PROMPT, drafter="echo", n_max="auto", max_tokens=n_tok, reuse_prefix=False)
    finally:
        del d._features, d.ctx.decode_tokens_embd, d.ctx.memory.seq_rm, d.ctx.memory.clear, d.propose
        gen.reset_auto_state("echo")
    assert r.tokens == ref.tokens  # lossless
    full = gen.tokenize_prompt(PROMPT) + list(r.tokens)
    p0 = len(gen.tokenize_prompt(PROMPT)) - 1  # the first rest's first row
    n_past, held = probes[0]  # the first probe, after the 80-step rest
    assert n_past == p0 + DORMANT_WINDOW + 16
    assert all(full[p + 1] == t for p, t in held.items())  # every pair right
    if dormant:
        # the hole: none of the rest's first 16 positions (nor the prompt before them) is in the head's cache
        assert min(held) == p0 + 16 and sum(read) < len(full) - 16
    else:
        assert min(held) == 0
