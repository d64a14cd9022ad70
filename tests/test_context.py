"""Context: decoding, logits, layer-input taps, linked contexts, and decode errors."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.sampler import SamplerChain

from .conftest import EXACT, close_logits

PROMPT = "The quick brown fox jumps over the lazy dog, then the tiny model says"


@pytest.fixture()
def ctx(tiny_model):
    c = ps.Context(tiny_model, n_ctx=512, n_batch=128, n_ubatch=32)
    yield c
    c.close()


def test_batch_equals_token_by_token(ctx, tiny_model):
    toks = tiny_model.vocab.tokenize(PROMPT)
    assert len(toks) > ctx.n_ubatch  # several ubatches
    ctx.decode(toks, logits="all")
    batch = ctx.logits().copy()
    assert batch.shape == (len(toks), 264) and batch.dtype == np.float32
    ctx.memory.clear()
    for i, t in enumerate(toks):
        ctx.decode([t], [i])
        close_logits(ctx.logits()[0], batch[i])
        np.testing.assert_array_equal(ctx.logits_ith(-1), ctx.logits()[0])


def test_one_token_decodes_take_the_short_path_with_the_same_results(ctx, tiny_model):
    """A one-token decode given as Python or numpy ints (a draft token, a plain step) skips the array checks
    (``Context._one_token``): the logits, the backend sampler's tokens, the cache and the errors are those of the
    general path, and anything else (a token outside the vocabulary, a bool, a negative position) still gets
    the general path's exception — and leaves the context usable."""
    toks = tiny_model.vocab.tokenize(PROMPT)[:12]
    ctx.decode(toks[:-1], logits="none")
    assert ctx._one_token([toks[-1]], None, 0, "last") == (toks[-1], None, 0)
    ctx.decode([toks[-1]])  # position from the cache: 11
    short = ctx.logits().copy()
    assert ctx.memory.pos_max(0) == len(toks) - 1
    ctx.memory.seq_rm(0, len(toks) - 1)
    ctx.decode(np.array([toks[-1]]), np.array([len(toks) - 1]), logits=[True])  # (the general path)
    np.testing.assert_array_equal(ctx.logits(), short)
    ctx.memory.seq_rm(0, len(toks) - 1)
    ctx.decode([np.int64(toks[-1])], np.array([len(toks) - 1], dtype=np.int32), logits="all")  # short, numpy ints
    np.testing.assert_array_equal(ctx.logits(), short)
    for bad in ([264], [-1], [True]):
        with pytest.raises(ps.InvalidBatchError if bad != [True] else ps.InvalidTypeError):
            ctx.decode(bad, [len(toks)])
    assert ctx._one_token([1], [-1], 0, "last") is None and ctx._one_token([1], [2], 1, "last") is None
    assert ctx._one_token([1, 2], None, 0, "last") is None and ctx._one_token([1], None, 0, "none") is None
    ctx.decode([toks[-1]], [len(toks)])  # still usable, at the next position
    assert ctx.memory.pos_max(0) == len(toks)
    # the sampled token of a one-token decode, read through the reused row buffers, is the logits' argmax
    ctx.memory.seq_rm(0, len(toks) - 1)
    ctx.set_sampler(SamplerChain())
    try:
        nxt = toks[-1]
        for i in range(3):
            ctx.decode([nxt], [len(toks) - 1 + i])
            nxt = ctx.sampled_tokens(1)[0]
            assert nxt == int(np.argmax(short[0])) if i == 0 else 0 <= nxt < 264
        assert ctx.sampled_tokens() == [nxt]
    finally:
        ctx.set_sampler(None)


def test_seq_rm_then_redecode_reproduces_logits(ctx, tiny_model):
    toks = tiny_model.vocab.tokenize(PROMPT)
    ctx.decode(toks, logits="all")
    ref = ctx.logits().copy()
    ctx.memory.seq_rm(0, 20)
    assert ctx.memory.pos_max(0) == 19
    ctx.decode(toks[20:], logits="all")  # positions continue after the cache
    close_logits(ctx.logits(), ref[20:])


def test_several_sequences_in_one_batch(tiny_model):
    """Two prompts decoded together (one KV stream each) give the logits and taps of decoding
    each alone; bad sequence ids are refused before llama.cpp runs."""
    a = tiny_model.vocab.tokenize(PROMPT)
    b = tiny_model.vocab.tokenize("A different prompt for the second stream")
    c = ps.Context(tiny_model, n_ctx=512, n_batch=128, n_seq_max=2)
    c.enable_layer_inputs([1])
    alone = []
    for toks in (a, b):
        c.memory.clear()
        c.decode(toks, logits="all")
        alone.append((c.logits().copy(), c.layer_input(1).copy()))
    c.memory.clear()
    seq = np.repeat([0, 1], [len(a), len(b)])
    pos = np.concatenate([np.arange(len(a)), np.arange(len(b))])
    assert c.decode(a + b, pos, seq_id=seq, logits="all") == len(a) + len(b)
    together = c.logits().copy()
    taps = c.layer_input(1)
    close_logits(together[:len(a)], alone[0][0])
    close_logits(together[len(a):], alone[1][0])
    np.testing.assert_allclose(taps[len(a):], alone[1][1], rtol=1e-2, atol=1e-2 * np.abs(alone[1][1]).max())
    assert c.memory.pos_max(0) == len(a) - 1 and c.memory.pos_max(1) == len(b) - 1
    # one more token per stream, continuing each
    c.decode([a[0], b[0]], [len(a), len(b)], seq_id=[0, 1], logits="all")
    assert c.logits().shape == (2, 264)
    with pytest.raises(ps.InvalidArgumentError, match="n_seq_max"):
        c.decode([1, 2], [0, 0], seq_id=[0, 2])
    with pytest.raises(ps.InvalidArgumentError, match="pos is required"):
        c.decode([1, 2], seq_id=[0, 1])
    with pytest.raises(ps.InvalidBatchError, match="sequence ids"):
        c.decode([1, 2], [0, 1], seq_id=[0, 1, 1])
    c.decode([a[1]], [len(a) + 1], seq_id=0)  # still usable
    c.close()


def test_layer_input_taps(ctx, tiny_model):
    toks = tiny_model.vocab.tokenize(PROMPT)
    ctx.enable_layer_inputs([0, 2])
    with pytest.raises(ValueError, match="no decode"):
        ctx.layer_input(0)
    ctx.decode(toks, logits="none")
    l0, l2 = ctx.layer_input(0), ctx.layer_input(2)
    assert l0.shape == l2.shape == (len(toks), 64) and l2.dtype == np.float32
    # layer 0's input is the token embedding itself
    np.testing.assert_allclose(l0, tiny_model.token_embeddings()[toks], rtol=1e-6)
    first = l2.copy()
    ctx.memory.clear()
    other = toks[:5] + [(t + 1) % 256 for t in toks[5:]]
    ctx.decode(other, logits="none")
    np.testing.assert_allclose(ctx.layer_input(2)[:5], first[:5], rtol=1e-5 if EXACT else 1e-2,
                               atol=1e-5 if EXACT else 1e-2)
    assert not np.allclose(ctx.layer_input(2)[5:], first[5:])
    with pytest.raises(ValueError, match="not tapped"):
        ctx.layer_input(1)
    with pytest.raises(ValueError, match="outside"):
        ctx.enable_layer_inputs([4])


def test_taps_switched_between_decodes_of_one_shape_are_read_at_once(ctx, tiny_model):
    """A tap switched on (or off and on again) between one-token decodes — one graph shape, which llama.cpp would
    reuse — is read at the very next decode (patch 0016 rebuilds that graph instead of reserving the scheduler;
    n_max="auto" switches the taps so in a rest); the logits and the taps are those of decodes without a switch."""
    toks = tiny_model.vocab.tokenize(PROMPT)[:10]
    emb = tiny_model.token_embeddings()
    ref, ref2 = [], []
    ctx.set_layer_inputs([0, 2])
    for i, t in enumerate(toks):  # the reference: the taps on throughout
        ctx.decode([t], [i])
        ref.append(ctx.logits()[0].copy())
        ref2.append(ctx.layer_input(2).copy())
    ctx.memory.clear()
    on = {2, 3, 6, 7, 9}  # on, on, off, off, on, on, off, on: switches both ways between decodes of one shape
    for i, t in enumerate(toks):
        ctx.set_layer_inputs([0, 2] if i in on else [])
        ctx.decode([t], [i])
        close_logits(ctx.logits()[0], ref[i])
        if i in on:
            np.testing.assert_allclose(ctx.layer_input(0), emb[[t]], rtol=1e-6)  # this decode's row, not a stale one
            np.testing.assert_allclose(ctx.layer_input(2), ref2[i], rtol=1e-5, atol=1e-5)
        else:
            with pytest.raises(ValueError, match="not tapped"):
                ctx.layer_input(0)
    ctx.set_layer_inputs([])


def test_a_tap_switched_on_after_a_plan_made_without_it_is_read(tiny_model):
    """The allocator plans a larger graph anew by itself; with the taps off that plan reuses the tapped tensors'
    memory. Switched on again before a graph of that same shape, the taps must be planned anew (patch 0016) — a
    version that planned only a context's first switch read garbage here (a reviewer's case)."""
    emb = tiny_model.token_embeddings()
    toks = tiny_model.vocab.tokenize(PROMPT)[:17]
    ref = ps.Context(tiny_model, n_ctx=512, n_batch=128, n_ubatch=32)
    ctx = ps.Context(tiny_model, n_ctx=512, n_batch=128, n_ubatch=32)
    try:
        ref.set_layer_inputs([0, 2])  # the reference: taps on throughout, the same decodes
        for c in (ref, ctx):
            c.set_layer_inputs([0, 2])
            c.decode(toks[:1], [0])  # planned with the taps (one row)
            c.set_layer_inputs([0, 2] if c is ref else [])
            c.decode(toks[1:9], list(range(1, 9)), logits="all")  # larger: planned again, here without the taps
            c.set_layer_inputs([0, 2])
            c.decode(toks[9:17], list(range(9, 17)), logits="all")  # the same shape, the taps on again
        np.testing.assert_allclose(ctx.layer_input(0), emb[toks[9:17]], rtol=1e-6)
        np.testing.assert_allclose(ctx.layer_input(2), ref.layer_input(2), rtol=1e-5, atol=1e-5)
        close_logits(ctx.logits(), ref.logits())
    finally:
        ref.close()
        ctx.close()


def test_linked_dflash_context(tiny, tiny_model):
    tgt = ps.Context(tiny_model, n_ctx=256, n_batch=64)
    dm = ps.Model(tiny["dflash"])
    assert dm.arch == "dflash" and dm.target_layer_ids == [1, 2] and dm.vocab.mask == tiny["<|mask|>"]
    with pytest.raises(ps.InvalidArgumentError, match="ctx_other"):
        ps.Context(dm, n_ctx=256)
    drf = ps.Context(dm, n_ctx=256, n_batch=64, ctx_other=tgt, causal_attn=False)
    tgt.enable_layer_inputs(dm.target_layer_ids)
    toks = tiny_model.vocab.tokenize("linked contexts")
    tgt.decode(toks, logits="none")
    feats = np.concatenate([tgt.layer_input(i) for i in dm.target_layer_ids], axis=1)
    assert feats.shape == (len(toks), drf.embd_input_width) == (len(toks), 128)
    with pytest.raises(ps.InvalidBatchError, match="width"):
        drf.decode_embd(feats[:, :64], np.arange(len(toks)))
    drf.decode_embd(feats, np.arange(len(toks)))
    assert drf.memory.pos_max() == len(toks) - 1
    block = [toks[-1]] + [dm.vocab.mask] * 7
    drf.decode(block, np.arange(len(toks), len(toks) + 8), logits="all")
    assert drf.logits().shape == (8, 264)
    # closing the target closes the drafter linked to it first
    tgt.close()
    with pytest.raises(ValueError, match="closed"):
        drf.decode([1])


def test_decode_errors_leave_the_context_usable(ctx, tiny_model):
    toks = tiny_model.vocab.tokenize(PROMPT)
    with pytest.raises(ps.InvalidBatchError, match="outside the vocabulary"):
        ctx.decode([1, 2, 5000])
    with pytest.raises(ps.InvalidBatchError, match="n_batch"):
        ctx.decode(list(range(200)))
    ctx.decode(toks[:10])
    with pytest.raises(ps.InvalidBatchError, match="consecutive") as ei:  # position gap, rc -1
        ctx.decode(toks[10:12], [30, 31])
    assert ei.value.rc == -1
    with pytest.raises(ValueError, match="n_seq_max"):
        ctx.decode([1], seq_id=3)
    ctx.decode(toks[10:], logits="all")
    assert ctx.memory.pos_max() == len(toks) - 1


def test_kv_cache_full(tiny_model):
    c = ps.Context(tiny_model, n_ctx=256, n_batch=256)
    c.decode(list(range(200)))
    with pytest.raises(ps.KVCacheFullError) as ei:
        c.decode(list(range(100)))
    assert ei.value.rc == 1
    c.memory.seq_rm(0, 100)
    c.decode(list(range(100)))  # fits again
    assert c.memory.pos_max() == 199


def test_non_causal_batch_must_fit_one_ubatch(tiny_model):
    c = ps.Context(tiny_model, n_ctx=256, n_batch=64, n_ubatch=16, causal_attn=False)
    with pytest.raises(ps.InvalidBatchError, match="n_ubatch"):
        c.decode(list(range(20)))
    c.decode(list(range(16)))


@pytest.mark.parametrize("kwargs, match", [
    ({"n_ubatch": 1024, "n_batch": 512}, "n_ubatch"),
    ({"type_k": "q3_x"}, "type_k"),
    ({"flash_attn": "maybe"}, "flash_attn"),
    ({"n_batch": 0}, "n_batch"),
])
def test_bad_context_parameters(tiny_model, kwargs, match):
    with pytest.raises(ps.InvalidArgumentError, match=match):
        ps.Context(tiny_model, **kwargs)


def test_quantized_kv_cache_needs_divisible_head(tiny_model):
    # head dim 16 is not a multiple of q8_0's block of 32: llama.cpp refuses, we raise and stay usable
    with pytest.raises(ps.ContextError, match="does not divide"):
        ps.Context(tiny_model, n_ctx=256, n_batch=64, type_k="q8_0", type_v="q8_0", flash_attn=True)
    assert ps.Context(tiny_model, n_ctx=256, n_batch=64).n_ctx == 256


@pytest.mark.smollm2
def test_quantized_kv_cache_and_breakdown(smollm2):
    m = ps.Model(smollm2)
    f16 = ps.Context(m, n_ctx=512, n_batch=64)
    q8 = ps.Context(m, n_ctx=512, n_batch=64, type_k="q8_0", type_v="q8_0", flash_attn=True)
    toks = m.vocab.tokenize("The capital of France is")
    for c in (f16, q8):
        c.decode(toks, logits="all")
    assert np.argmax(f16.logits()[-1]) == np.argmax(q8.logits()[-1])
    kv16 = sum(r["context_mib"] for r in f16.memory_breakdown())
    kv8 = sum(r["context_mib"] for r in q8.memory_breakdown())
    # 30 layers × 2 (K,V) × 192 (3 heads × 64) × 512 cells × 2 bytes = 11.25 MiB in f16; q8_0 is 34/64 of
    # it on the CPU (the CUDA buffers add a little padding)
    assert kv16 == pytest.approx(11.25, rel=1e-3)
    assert kv8 == pytest.approx(11.25 * 34 / 64, rel=1e-3 if EXACT else 1e-2)
    weights = sum(r["model_mib"] for r in f16.memory_breakdown())
    if EXACT:
        assert weights == pytest.approx(m.size_bytes / 2**20, rel=0.01)
    else:  # with CUDA the tied token embedding (q8_0: 34 bytes per 32 values) also stays in host memory
        tok_embd_mib = m.n_vocab * m.n_embd * 34 / 32 / 2**20
        assert m.size_bytes / 2**20 * 0.99 <= weights <= (m.size_bytes / 2**20 + tok_embd_mib) * 1.01
    perf = f16.perf()
    assert perf["n_p_eval"] == len(toks)


def test_use_after_close_raises_instead_of_crashing(tiny):
    """Regression: using a Vocab, Context or Generator after close() used to segfault/abort."""
    m = ps.Model(tiny["target"])
    v = m.vocab
    c = ps.Context(m, n_ctx=256, n_batch=32)
    m.close()  # closes its contexts first
    with pytest.raises(ps.ClosedError):
        c.decode([1, 2, 3])
    with pytest.raises(ps.ClosedError):
        v.tokenize("hi")
    with pytest.raises(ps.ClosedError):
        _ = v.eos
    m.close()  # idempotent
    gen = ps.Generator(tiny["target"], n_ctx=256)
    with gen:
        assert gen.generate("hi", max_tokens=2).finish_reason == "length"
    with pytest.raises(ps.ClosedError):
        gen.generate("hi", max_tokens=2)
    with pytest.raises(ps.ClosedError):
        gen.generate(prompt_tokens=[1, 2], max_tokens=2)


def test_views_are_read_only_and_outlive_close(tiny_model):
    """Issues 12.8 / 13.4: a logits view kept across close() used to read reused memory (and was
    writable into llama.cpp's buffer). Now it is read-only, its base keeps the Context's native
    memory alive, and it still holds the last decode's values after close()."""
    import gc
    import weakref

    c = ps.Context(tiny_model, n_ctx=256, n_batch=64)
    toks = tiny_model.vocab.tokenize(PROMPT)[:20]
    c.enable_layer_inputs([1])
    c.decode(toks, logits="all")
    views = {"logits": c.logits(), "row": c.logits_ith(3), "tap": c.layer_input(1)}
    ref = {k: v.copy() for k, v in views.items()}
    for v in views.values():
        assert not v.flags.writeable and v.dtype == np.float32
        with pytest.raises(ValueError, match="read-only"):
            v[0] = 1.0
    assert views["logits"].shape == (20, 264) and views["tap"].shape == (20, 64)
    c.close()
    with pytest.raises(ps.ClosedError):
        c.logits()
    junk = [np.ones(264 * 20, np.float32) for _ in range(50)]  # would reuse freed memory
    for k, v in views.items():
        np.testing.assert_array_equal(v, ref[k])
    alive = weakref.ref(c)
    del c, junk, v
    gc.collect()
    assert alive() is not None  # the views hold it
    views.clear()
    gc.collect()
    assert alive() is None  # and free it with the last of them


def test_views_survive_a_growing_decode(tiny_model):
    """A decode that needs a larger output buffer than any before makes llama.cpp replace it; our
    patch 0002 keeps the old one while a view reads it, and frees it once no view does."""
    c = ps.Context(tiny_model, n_ctx=512, n_batch=128)
    toks = tiny_model.vocab.tokenize(PROMPT * 3)[:128]
    c.decode(toks[:4], logits="last")
    v = c.logits()
    ref = v.copy()
    c.memory.clear()
    c.decode(toks, logits="all")  # 128 output rows: a new, larger buffer
    assert c._out_gen > c._out_gen_released  # the old buffer is kept for v
    junk = [np.full(264 * 8, 7.0, np.float32) for _ in range(50)]
    np.testing.assert_array_equal(v, ref)
    del v, junk
    c.memory.clear()
    c.decode(toks[:4], logits="last")
    assert c._out_gen == c._out_gen_released  # no view left: released at this decode
    c.close()


def test_closed_model_with_a_live_view(tiny):
    m = ps.Model(tiny["target"])
    c = ps.Context(m, n_ctx=256, n_batch=32)
    c.decode(m.vocab.tokenize("abc"), logits="all")
    v = c.logits()
    ref = v.copy()
    m.close()  # closes c first; both native objects wait for v
    with pytest.raises(ps.ClosedError):
        c.decode([1])
    np.testing.assert_array_equal(v, ref)
    del v, c, m
    import gc
    gc.collect()


def test_ctx_other_is_checked_like_check_dflash_pair(tiny, tiny_model, tmp_path):
    """Issue 12.2: linking a DFlash drafter's context to the wrong target through the public
    Context API aborted the process (GGML_ASSERT(ggml_can_repeat(b, a)) for another hidden size,
    an assert in src/models/dflash.cpp for another drafter); now it raises DrafterMismatchError."""
    from pyllama_spec import fixtures

    dm = ps.Model(tiny["dflash"])
    wide = tmp_path / "wide.gguf"
    fixtures.write_tiny_target(wide, n_layer=4, n_embd=32, seed=5)
    other = ps.Context(ps.Model(wide), n_ctx=256, n_batch=32)
    with pytest.raises(ps.DrafterMismatchError, match="hidden size 64 .* has 32"):
        ps.Context(dm, n_ctx=256, n_batch=32, ctx_other=other, causal_attn=False)
    tgt = ps.Context(tiny_model, n_ctx=256, n_batch=32)
    drf = ps.Context(dm, n_ctx=256, n_batch=32, ctx_other=tgt, causal_attn=False)
    with pytest.raises(ps.DrafterMismatchError, match="itself a DFlash drafter"):
        ps.Context(dm, n_ctx=256, n_batch=32, ctx_other=drf, causal_attn=False)
    shallow = tmp_path / "shallow.gguf"
    fixtures.write_tiny_target(shallow, n_layer=2, n_embd=64, seed=6)
    with pytest.raises(ps.DrafterMismatchError, match="layers"):
        ps.Context(dm, n_ctx=256, n_batch=32, ctx_other=ps.Context(ps.Model(shallow), n_ctx=256), causal_attn=False)
    with pytest.raises(ps.InvalidTypeError, match="ctx_other"):
        ps.Context(dm, n_ctx=256, ctx_other="target")
    closed = ps.Context(tiny_model, n_ctx=256, n_batch=32)
    closed.close()
    with pytest.raises(ps.ClosedError):
        ps.Context(dm, n_ctx=256, ctx_other=closed)
    assert drf.embd_input_width == 128  # the good pair still works


def test_n_ctx_rounding_is_said(tiny_model, caplog):
    """Issue 12.10: n_ctx=64 silently ran with 256 and the prompt-too-long error spoke of 256."""
    c = ps.Context(tiny_model, n_ctx=64, n_batch=32)
    assert (c.n_ctx, c.n_ctx_requested) == (256, 64)
    assert "n_ctx=64 was rounded up to 256" in caplog.text
    caplog.clear()
    ps.Context(tiny_model, n_ctx=512, n_batch=32)
    assert "rounded" not in caplog.text
    gen = ps.Generator(tiny_model.path, n_ctx=64, n_batch=32)
    with pytest.raises(ps.PromptTooLongError, match=r"n_ctx is 256 \(n_ctx=64 was rounded up to 256"):
        gen.generate("y" * 300)
    gen.close()


def test_repack_is_refused_on_amx_cpus(tiny, monkeypatch):
    """Issue 12.3: repack=True segfaulted on the first multi-token decode on AMX CPUs. The refusal
    runs on every machine (AMX simulated where the CPU has none); without AMX repack is allowed."""
    from pyllama_spec import model as model_mod

    if not model_mod.cpu_has_amx():
        m = ps.Model(tiny["target"], repack=True)  # allowed elsewhere
        assert m.n_layer == 4
        m.close()
        monkeypatch.setattr(model_mod, "cpu_has_amx", lambda: True)
    with pytest.raises(ps.UnsupportedError, match="AMX"):
        ps.Model(tiny["target"], repack=True)
    with pytest.raises(ps.UnsupportedError, match="AMX"):
        ps.Generator(tiny["target"], repack=True)
    assert ps.Model(tiny["target"]).n_layer == 4  # repack off (the default) still loads


def test_perf_counters_count_each_call_once_across_a_reset(tiny):
    """llama.cpp counts a decode at the next synchronisation and its reset leaves the queued count, so
    tokens decoded before reset_perf() used to land in the counters after it (on the H200, 2026-12-02, a
    six-turn chat counted 389 prompt tokens for 189 decoded). reset_perf() and perf() wait for the
    backend first: the counts are those of the calls made since the reset."""
    m = ps.Model(tiny["target"])
    ctx = ps.Context(m, n_ctx=256)
    try:
        ctx.decode(list(range(10, 30)), logits="none")   # 20 prompt tokens, no read: still queued
        ctx.reset_perf()
        ctx.decode([40])                                   # one token, its logits read (a sync)
        ctx.logits()
        perf = ctx.perf()
        assert (perf["n_p_eval"], perf["n_eval"]) == (1, 1)   # llama.cpp floors both at 1: no prompt tokens
        ctx.decode(list(range(50, 57)), logits="none")    # 7 more, never read: perf() waits for them
        perf = ctx.perf()
        assert (perf["n_p_eval"], perf["n_eval"]) == (7, 1)
    finally:
        ctx.close()
        m.close()
