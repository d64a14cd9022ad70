"""vendor/patches/0006-dflash-fused-inject: a step's committed features injected in the same drafter
decode as the next draft block. The drafts must be exactly those of the two-decode path (CPU: the
rows' K/V and the block's attention are computed the same way), and misuse must raise."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.speculative.costmodel import AutoState
from pyllama_spec.speculative.drafters import Drafter
from pyllama_spec.speculative.drafters.dflash import DFlashDrafter

from .conftest import EXACT, assert_same_tokens_but_near_ties

PROMPTS = ["hello there, how are you", "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n"]


class Recording(DFlashDrafter):
    kind = "dflash-recording-test"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.drafts = []

    def propose(self, *a, **kw):
        d = super().propose(*a, **kw)
        self.drafts.append(list(d.tokens))
        return d


@pytest.fixture(scope="module")
def pair(tiny):
    gen = ps.Generator(tiny["target"], n_ctx=1024, n_batch=64, n_ubatch=32)
    gen.add_drafter("sep", Recording(gen.ctx, tiny["dflash"], fused_inject=False))
    gen.add_drafter("fused", Recording(gen.ctx, tiny["dflash"], fused_inject=True))
    varying = Recording(gen.ctx, tiny["dflash"], fused_inject=True)
    varying.constant_shape = False  # each step injects just what it committed: the shape follows acceptance
    gen.add_drafter("varying", varying)
    yield gen
    gen.close()


class Tee(Drafter):
    """Feeds two drafters the same calls — the same target rows to observe, the same blocks to draft
    after the same committed tokens — and proposes the first one's drafts: both paths then draft from
    identical inputs, whatever the target does on this backend, and ``pairs`` holds their drafts."""
    kind = "tee-test"

    def __init__(self, target, a, b):
        super().__init__(target)
        self.a, self.b = a, b
        self.target_layer_ids = a.target_layer_ids
        self.n_max_limit, self.n_max_default = a.n_max_limit, a.n_max_default
        self.pairs: list[tuple[list[int], list[int]]] = []

    def cached_prefix(self, prompt):
        return min(self.a.cached_prefix(prompt), self.b.cached_prefix(prompt))

    def begin(self, prompt, n_keep=0):
        self.a.begin(prompt, n_keep)
        self.b.begin(prompt, n_keep)

    def observe(self, tokens, positions, n_commit, timer):
        self.a.observe(tokens, positions, n_commit, timer)
        self.b.observe(tokens, positions, n_commit, timer)

    def propose(self, last_token, n_past, n_max, sp, rng, timer):
        da = self.a.propose(last_token, n_past, n_max, sp, rng, timer)
        db = self.b.propose(last_token, n_past, n_max, sp, rng, timer)
        self.pairs.append((list(da.tokens), list(db.tokens)))
        return da

    def on_accept(self, n_drafted, n_accepted):
        self.a.on_accept(n_drafted, n_accepted)
        self.b.on_accept(n_drafted, n_accepted)

    def rollback(self, n_past):
        self.a.rollback(n_past)
        self.b.rollback(n_past)


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("n_max", [1, 3, 7])
def test_fused_drafts_equal_the_two_decode_path(pair, prompt, n_max):
    """Both paths draft after the same target run: the same drafts on the CPU; on a GPU, where the
    fused graph (more rows) may run other kernels, the same drafts but for near-ties of the random
    drafter. A wrong injection (rows, positions, K/V) changes most drafts on either backend."""
    tee = Tee(pair.ctx, pair.drafters["sep"], pair.drafters["fused"])
    pair.drafters["tee"] = tee
    try:
        pair.generate(prompt, drafter="tee", n_max=n_max, max_tokens=40)
    finally:
        del pair.drafters["tee"]
    assert len(tee.pairs) > 3
    sep = [t for a, _ in tee.pairs for t in a]
    fused = [t for _, b in tee.pairs for t in b]
    assert len(sep) == len(fused) and [len(a) for a, _ in tee.pairs] == [len(b) for _, b in tee.pairs]
    agree = np.mean(np.asarray(sep) == np.asarray(fused))
    assert agree == 1.0 if EXACT else agree >= 0.9, (agree, tee.pairs[:4])


@pytest.mark.parametrize("n_max", [1, 7])
def test_fused_makes_one_drafter_decode_per_step(pair, n_max):
    """Injections after the prefill ride on the draft calls (each run counted against its own steps)."""
    out = {}
    for name in ("sep", "fused"):
        r = pair.generate(PROMPTS[0], drafter=name, n_max=n_max, max_tokens=40)
        out[name] = (r.timings, r.stats.n_steps)
    (t_sep, n_sep), (t_fused, n_fused) = out["sep"], out["fused"]
    assert t_sep["inject"]["count"] >= n_sep  # an embedding decode after every verify
    assert t_fused["inject"]["count"] <= 2 < n_fused  # the prefill's only
    for t, n in ((t_sep, n_sep), (t_fused, n_fused)):
        assert n - 1 <= t["draft"]["count"] <= n


def test_fused_with_an_oracle_target_path_and_eos_rollback(pair, tiny):
    """Rejections and rollbacks in between: sampled runs agree between the two paths too."""
    for seed in range(3):
        a = pair.generate(PROMPTS[1], drafter="sep", n_max=5, max_tokens=30, temperature=0.9, seed=seed)
        b = pair.generate(PROMPTS[1], drafter="fused", n_max=5, max_tokens=30, temperature=0.9, seed=seed)
        assert a.tokens == b.tokens and a.stats.acceptance_lengths == b.stats.acceptance_lengths


def test_staging_misuse_raises_and_the_context_stays_usable(pair, tiny):
    d = pair.drafters["fused"]
    ctx = d.ctx
    w = ctx.embd_input_width
    with pytest.raises(ps.InvalidBatchError, match="staged rows"):
        ctx.stage_dflash_inject(np.zeros((2, w + 1), np.float32))
    with pytest.raises(ps.UnsupportedError, match="fused injection"):
        pair.ctx.stage_dflash_inject(np.zeros((1, pair.ctx.embd_input_width), np.float32))
    # staged rows but a batch with no room for a block after the placeholders: refused, not aborted
    ctx.memory.clear()
    ctx.stage_dflash_inject(np.zeros((3, w), np.float32))
    with pytest.raises(ps.InvalidBatchError):
        ctx.decode([0, 0, 0], np.arange(3, dtype=np.int32), logits="none")
    # the staging was consumed by that decode: a plain draft decode works again
    ctx.memory.clear()
    ctx.decode([1, 2, 3], np.arange(3, dtype=np.int32), logits="all")
    assert ctx.n_outputs == 3
    assert pair.generate(PROMPTS[0], drafter="fused", n_max=3, max_tokens=8).tokens == \
        pair.generate(PROMPTS[0], max_tokens=8).tokens


def test_a_short_prompt_with_a_fresh_sampler_does_not_abort(tiny):
    """A prompt of at most a block stages its prefill rows for the first draft, the very decode in
    which llama.cpp may re-reserve its graphs for the sampler chain just attached (patch 0017 keeps the
    reserve where the chain needs more graph nodes than planned for; a fused graph cannot be reserved:
    GGML_ASSERT). The drafter injects those rows separately then; the drafts
    stay those of the two-decode path. Misuse of the low-level API raises instead of aborting."""
    gen = ps.Generator(tiny["target"], n_ctx=1024, n_batch=64, n_ubatch=32)
    try:
        gen.add_drafter("sep", Recording(gen.ctx, tiny["dflash"], fused_inject=False))
        gen.add_drafter("fused", Recording(gen.ctx, tiny["dflash"], fused_inject=True))
        toks = gen.model.vocab.tokenize("hey")
        assert len(toks) <= gen.drafters["fused"].block_size
        plain = gen.generate(prompt_tokens=toks, max_tokens=20).tokens
        for kw in ({}, {"temperature": 0.9, "seed": 3}, {}):  # attach, detach, attach a fresh chain
            a = gen.generate(prompt_tokens=toks, drafter="sep", n_max=5, max_tokens=20, **kw)
            b = gen.generate(prompt_tokens=toks, drafter="fused", n_max=5, max_tokens=20, **kw)
            assert a.tokens == b.tokens and a.stats.acceptance_lengths == b.stats.acceptance_lengths
            if not kw:
                assert b.tokens == plain
        ctx = gen.drafters["fused"].ctx
        ctx.set_sampler(None)
        ctx.set_sampler(ps.sampler.SamplerChain())
        with pytest.raises(ps.InvalidArgumentError, match="re-reserve"):
            ctx.stage_dflash_inject(np.zeros((1, ctx.embd_input_width), np.float32))
    finally:
        gen.close()


@pytest.mark.parametrize("prompt", PROMPTS)
@pytest.mark.parametrize("n_max", [3, 7])
def test_constant_shape_drafts_equal_the_shape_following_path(pair, prompt, n_max):
    """``constant_shape`` (the default) injects the committed rows before a step's own again, so that
    every fused draft decode at one n_max has the same rows: the drafts are those of the path whose
    shape follows acceptance (CPU: exactly), the output that of plain decoding."""
    tee = Tee(pair.ctx, pair.drafters["fused"], pair.drafters["varying"])
    pair.drafters["tee"] = tee
    try:
        spec = pair.generate(prompt, drafter="tee", n_max=n_max, max_tokens=48)
    finally:
        del pair.drafters["tee"]
    same = [t for a, _ in tee.pairs for t in a]
    vary = [t for _, b in tee.pairs for t in b]
    assert len(tee.pairs) > 3 and len(same) == len(vary)
    agree = np.mean(np.asarray(same) == np.asarray(vary))
    assert agree == 1.0 if EXACT else agree >= 0.9, (agree, tee.pairs[:4])
    # (CPU: token for token; GPU: the verify batches of another shape may flip a near-tie, nothing else)
    ref = pair.generate(prompt, max_tokens=48, reuse_prefix=False)
    assert_same_tokens_but_near_ties(pair.ctx, ref.prompt_tokens, spec.tokens, ref.tokens)


@pytest.mark.smollm2
def test_constant_shape_lets_llama_cpp_reuse_the_drafter_graph(smollm2):
    """With real acceptance (SmolLM2 + the shipped drafter: 0..7 rows a step) the shape-following
    fused decode changes shape at most steps, and llama.cpp rebuilds its graph (on CUDA: no graph
    replay); with ``constant_shape`` it reuses it at every step but the first two and those where its
    KV view grows (``perf()["n_reused"]``). Same tokens both ways, and as plain decoding."""
    from pyllama_spec.assets import smollm2_dflash_path

    gen = ps.Generator(smollm2, n_ctx=1024)
    try:
        msgs = [{"role": "user", "content": "Write a Python function that checks whether a string is a palindrome."}]
        out = {}
        for cs in (True, False):
            d = DFlashDrafter(gen.ctx, smollm2_dflash_path(), fused_inject=True)
            d.constant_shape = cs
            gen.add_drafter(f"d{cs}", d)
            d.ctx.reset_perf()
            r = gen.generate(messages=msgs, drafter=f"d{cs}", n_max=7, max_tokens=64, reuse_prefix=False)
            out[cs] = (d.ctx.perf()["n_reused"], r.stats.n_steps, r.tokens, sorted(set(r.stats.acceptance_lengths)))
        plain = gen.generate(messages=msgs, max_tokens=64, reuse_prefix=False).tokens
    finally:
        gen.close()
    (n_c, steps, toks_c, lengths), (n_v, _, toks_v, _) = out[True], out[False]
    assert toks_c == toks_v and (toks_c == plain or not EXACT)
    assert len(lengths) >= 3, lengths  # acceptance varies: so does the other path's shape
    assert n_c >= steps - 6, out  # (the first two, and up to two KV-view growths of two steps each)
    assert n_v <= steps // 2, out


def test_constant_shape_after_rollback_prefix_reuse_and_a_restored_state(pair):
    """The kept rows follow the cache: after a generation they are the last block of committed
    positions; a rollback cuts them with the cache; a next chat turn that keeps the prefix drafts as the
    shape-following path does; a restored state keeps none (it injects what it commits until it has a
    block again) and still gives the tokens of plain decoding."""
    d, v = pair.drafters["fused"], pair.drafters["varying"]
    turn = PROMPTS[1]
    r1 = pair.generate(turn, drafter="fused", n_max=5, max_tokens=24)
    n_past = len(r1.prompt_tokens) + len(r1.tokens) - 1  # (the last committed token is not decoded yet)
    feats, kept = d._recent.rows()
    np.testing.assert_array_equal(kept, np.arange(n_past - d.block_size, n_past))
    nxt = pair.model.vocab.detokenize(r1.prompt_tokens + r1.tokens) + " and more"
    for name in ("fused", "varying"):
        pair.drafters[name].drafts.clear()
    a = pair.generate(nxt, drafter="fused", n_max=5, max_tokens=24)
    assert a.n_reused > 0  # the prefix was kept (drafter cache and its kept rows included)
    pair.generate(turn, drafter="varying", n_max=5, max_tokens=24)
    v.drafts.clear()
    b = pair.generate(nxt, drafter="varying", n_max=5, max_tokens=24)
    plain = pair.generate(nxt, max_tokens=24, reuse_prefix=False).tokens
    assert a.tokens == b.tokens == plain
    if EXACT:
        assert d.drafts == v.drafts
    # a rollback into the kept rows: the cut ones go, the others stay as they were
    pair.generate(turn, drafter="fused", n_max=5, max_tokens=24, reuse_prefix=False)
    d.rollback(n_past - 3)
    got_f, got_p = d._recent.rows()
    np.testing.assert_array_equal(got_p[-(d.block_size - 3):], kept[:-3])  # (rows older than the block may stay)
    np.testing.assert_allclose(got_f[-(d.block_size - 3):], feats[:-3], rtol=0 if EXACT else 1e-3,
                               atol=0 if EXACT else 1e-3)
    state = d.save_state()
    d.load_state(state)
    assert d._recent is None
    assert pair.generate(nxt, drafter="fused", n_max=5, max_tokens=24).tokens == plain


def test_auto_with_the_whole_block_keeps_one_drafter_shape(smollm2):
    """n_max="auto" asks the drafter for a length that changes from step to step; with ``auto_full_block`` (the
    default on a GPU) the drafter decodes its whole block every time and reads the rows asked for, so llama.cpp
    reuses the drafter's graph (on CUDA: replays it) where a block as wide as each ask rebuilds it at most steps.
    Lossless both ways: the output is plain decoding's."""
    from pyllama_spec.assets import smollm2_dflash_path

    gen = ps.Generator(smollm2, n_ctx=1024)
    try:
        msgs = [{"role": "user", "content": "Write a Python function that checks whether a string is a palindrome."}]
        plain = gen.generate(messages=msgs, max_tokens=48, reuse_prefix=False).tokens
        out = {}
        for full in (True, False):
            d = DFlashDrafter(gen.ctx, smollm2_dflash_path(), fused_inject=True)
            d.auto_full_block = full
            gen.add_drafter(f"d{full}", d)
            # drafting every step (no rests), so that every step asks and the asks vary
            gen.reset_auto_state(f"d{full}", AutoState(rest=False))
            widths: list[int] = []

            def spy(last, n_past, n_max, *a, _orig=d._decode_block, _widths=widths, **k):
                _widths.append(n_max)  # (the block's rows less one: what the drafter decodes)
                return _orig(last, n_past, n_max, *a, **k)

            d._decode_block = spy
            d.ctx.reset_perf()
            r = gen.generate(messages=msgs, drafter=f"d{full}", n_max="auto", max_tokens=48, reuse_prefix=False)
            del d._decode_block
            out[full] = (d.ctx.perf()["n_reused"], r.stats.n_steps, r.tokens, widths, r.stats.draft_lengths)
    finally:
        gen.close()
    (n_f, _, toks_f, w_f, lengths_f), (n_n, _, toks_n, w_n, _) = out[True], out[False]
    assert toks_f == plain or not EXACT
    assert toks_n == plain or not EXACT
    assert set(w_f) == {7} and len(set(w_n)) >= 2, (w_f, w_n)  # (the asks varied)
    assert max(lengths_f) <= 7 and len(set(lengths_f)) >= 2
    assert n_f > n_n, out


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("full", [False, True])
def test_auto_with_the_whole_block_at_the_end_of_the_context(tiny, full, fused):
    """n_max="auto" with the whole block decoded, to the context's end: the last steps ask for fewer tokens than
    the block holds, and the block is cut to what the drafter's cache (the target's n_ctx cells) can take — the
    first version decoded the whole block there and ran out of cache cells (a review's find)."""
    gen = ps.Generator(tiny["target"], n_ctx=256, n_batch=64, n_ubatch=32)
    try:
        d = DFlashDrafter(gen.ctx, tiny["dflash"], fused_inject=fused)
        d.auto_full_block = full  # (True: the GPU default)
        gen.add_drafter("d", d)
        gen.reset_auto_state("d", AutoState(rest=False))  # draft every step
        prompt = [10 + (i * 7 + 26) % 200 for i in range(236)]  # (no EOS before the context's end)
        plain = gen.generate(prompt_tokens=prompt, max_tokens=400, reuse_prefix=False)
        assert plain.finish_reason == "context", (len(plain.tokens), plain.finish_reason)  # (the context's end reached)
        r = gen.generate(prompt_tokens=prompt, drafter="d", n_max="auto", max_tokens=400, reuse_prefix=False)
        assert r.tokens == plain.tokens
    finally:
        gen.close()
