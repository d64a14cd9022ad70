"""qwen2 and gemma3 targets (layer-input taps from our patches vendor/patches/0002, 0003), on tiny
random fixtures: the taps are the hidden states of a plain forward, logits do not change when taps
are on, and a DFlash drafter runs on both with a lossless loop that equals llama-speculative-simple.

Two references for "the hidden state a plain forward computes" (issue 15):
* a numpy forward of one layer (the graph of src/models/qwen2.cpp, gemma3.cpp written out) maps
  tap i to tap i+1, tap 0 is the (scaled) token embedding, and the last tap through the last layer,
  the final norm and the head gives llama.cpp's logits: by induction every tap is right;
* llama.cpp itself: a model cut after layer k (same seed: same first k layers) outputs the final
  norm of exactly the hidden state that the full model feeds into layer k.
"""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec import fixtures
from pyllama_spec.native import run_speculative_simple

from .conftest import EXACT, assert_same_tokens, native_or_skip

ARCHS = {"qwen2": {"n_layer": 4, "seed": 24}, "gemma3": {"n_layer": 6, "seed": 22, "sliding_window": 8}}
PROMPT = "The tiny model reads this sentence, which is longer than its sliding window, twice over."


@pytest.fixture(scope="module", params=sorted(ARCHS))
def arch(request, tmp_path_factory):
    name = request.param
    d = tmp_path_factory.mktemp(name)
    info = fixtures.write_tiny_target(d / "target.gguf", arch=name, **ARCHS[name])
    n_layer = ARCHS[name]["n_layer"]
    fixtures.write_dflash_drafter(d / "dflash.gguf", target=d / "target.gguf", n_layer=1, block_size=8,
                                  target_layers=[1, n_layer - 2], seed=5)
    model = ps.Model(d / "target.gguf")
    yield {"name": name, "dir": d, "target": d / "target.gguf", "dflash": d / "dflash.gguf", "model": model,
           "n_layer": n_layer, **info}
    model.close()


# --- a numpy forward of one layer ---------------------------------------------------------------

def _weights(path) -> dict:
    import gguf

    return {t.name: np.array(t.data, dtype=np.float32) for t in gguf.GGUFReader(str(path)).tensors}


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope_neox(x, pos, base):
    """ggml_rope_ext, NEOX mode (qwen2, gemma3): dimension i pairs with i + d/2."""
    d = x.shape[-1]
    ang = pos[:, None] * base ** (-np.arange(d // 2) * 2.0 / d)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., :d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def _attention(q, k, v, scale, window=None):
    """Causal GQA attention over (T, H, D) queries and (T, H_kv, D) keys/values; a sliding window
    masks keys with ``p_query - p_key >= window`` (llama_hparams::is_masked_swa, standard)."""
    t, h, _ = q.shape
    k = np.repeat(k, h // k.shape[1], axis=1)
    v = np.repeat(v, h // v.shape[1], axis=1)
    s = np.einsum("qhd,khd->hqk", q, k) * scale
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    masked = (j > i) if window is None else (j > i) | (i - j >= window)
    s = np.where(masked[None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", p, v).reshape(t, -1)


def _gelu(x):
    """ggml's CPU GELU: the tanh approximation, looked up in a table indexed by the input rounded to
    f16 and holding f16 values (ggml-cpu/vec.h, GGML_GELU_FP16), exact beyond |x| >= 10."""
    h = x.astype(np.float16).astype(np.float64)
    g = (0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))).astype(np.float16)
    return np.where(x <= -10, 0.0, np.where(x >= 10, x, g.astype(np.float64)))


def _layer(arch, W, il, x, info):
    """Layer ``il`` of the qwen2 / gemma3 graph (src/models/qwen2.cpp, gemma3.cpp) on all rows of ``x``."""
    g = lambda n: W[f"blk.{il}.{n}"]  # noqa: E731
    eps, hd, nh, nkv = info["eps"], info["head_dim"], info["n_head"], info["n_head_kv"]
    pos = np.arange(len(x), dtype=np.float64)
    h = _rms(x, g("attn_norm.weight"), eps)
    q = (h @ g("attn_q.weight").T).reshape(len(x), nh, hd)
    k = (h @ g("attn_k.weight").T).reshape(len(x), nkv, hd)
    v = (h @ g("attn_v.weight").T).reshape(len(x), nkv, hd)
    if arch == "qwen2":
        q = q + g("attn_q.bias").reshape(nh, hd)
        k = k + g("attn_k.bias").reshape(nkv, hd)
        v = v + g("attn_v.bias").reshape(nkv, hd)
        q, k = _rope_neox(q, pos, info["rope_base"]), _rope_neox(k, pos, info["rope_base"])
        a = _attention(q, k, v, 1 / np.sqrt(hd)) @ g("attn_output.weight").T
        x = x + a
        f = _rms(x, g("ffn_norm.weight"), eps)
        f = (lambda u: u / (1 + np.exp(-u)))(f @ g("ffn_gate.weight").T) * (f @ g("ffn_up.weight").T)
        return x + f @ g("ffn_down.weight").T
    swa = il % 6 < 5  # llama.cpp's gemma3 pattern: 5 sliding-window layers, then a global one
    base = 10000.0 if swa else info["rope_base"]
    q = _rope_neox(_rms(q, g("attn_q_norm.weight"), eps), pos, base) / np.sqrt(hd)
    k = _rope_neox(_rms(k, g("attn_k_norm.weight"), eps), pos, base)
    a = _attention(q, k, v, 1.0, info["window"] if swa else None) @ g("attn_output.weight").T
    x = x + _rms(a, g("post_attention_norm.weight"), eps)
    f = _rms(x, g("ffn_norm.weight"), eps)
    f = (_gelu(f @ g("ffn_gate.weight").T) * (f @ g("ffn_up.weight").T)) @ g("ffn_down.weight").T
    return x + _rms(f, g("post_ffw_norm.weight"), eps)


def _close(ours, ref):
    """Equal up to float32 rounding: on the CPU (f32 KV cache, no flash attention, whose f16
    accumulation alone costs ~1e-3) 99.9% of the values lie within 5e-5 of the largest one, and all
    within 5e-3: an input at an f16 rounding boundary of ggml's GELU table may round the other way
    (measured: 3 values in 5120). A missed norm, window or layer is off by 0.1-0.8 everywhere. GPU
    kernels round differently (no f16 GELU table, other matmuls)."""
    err = np.abs(np.asarray(ours, np.float64) - ref) / float(np.abs(ref).max())
    bulk, worst = (5e-5, 5e-3) if EXACT else (5e-3, 5e-2)
    assert np.quantile(err, 0.999) <= bulk and err.max() <= worst, (np.quantile(err, 0.999), err.max())


# --- tests ---------------------------------------------------------------------------------------

def test_taps_are_the_hidden_states_of_a_plain_forward(arch):
    model, name, n_layer = arch["model"], arch["name"], arch["n_layer"]
    assert model.arch == name and model.supports_layer_taps
    W = _weights(arch["target"])
    nh = model.info.get(f"{name}.attention.head_count")
    info = {"eps": model.info.get(f"{name}.attention.layer_norm_rms_epsilon"), "n_head": nh,
            "n_head_kv": model.info.get(f"{name}.attention.head_count_kv"),
            "head_dim": model.info.get(f"{name}.attention.key_length"),
            "rope_base": model.info.get(f"{name}.rope.freq_base"),
            "window": model.info.get(f"{name}.attention.sliding_window")}
    toks = model.vocab.tokenize(PROMPT)
    assert info["window"] is None or len(toks) > 3 * info["window"]  # the window masks something
    # f32 KV cache and no flash attention: float32 throughout; 3 ubatches: taps are assembled per ubatch
    ctx = ps.Context(model, n_ctx=256, n_batch=128, n_ubatch=32, type_k="f32", type_v="f32", flash_attn=False)
    ctx.decode(toks, logits="all")
    plain = ctx.logits().copy()
    ctx.memory.clear()
    ctx.enable_layer_inputs(range(n_layer))
    ctx.decode(toks, logits="all")
    # taps only mark existing tensors as outputs: the logits do not move
    if EXACT:
        np.testing.assert_array_equal(ctx.logits(), plain)
    taps = [ctx.layer_input(i).copy() for i in range(n_layer)]
    assert all(t.shape == (len(toks), model.n_embd) for t in taps)
    emb = W["token_embd.weight"][toks] * (np.sqrt(model.n_embd) if name == "gemma3" else 1.0)
    np.testing.assert_allclose(taps[0], emb, rtol=1e-6, atol=1e-6)
    for il in range(n_layer - 1):
        _close(taps[il + 1], _layer(name, W, il, taps[il].astype(np.float64), info))
    last = _layer(name, W, n_layer - 1, taps[-1].astype(np.float64), info)
    head = W.get("output.weight", W["token_embd.weight"])  # gemma3: tied
    _close(plain, _rms(last, W["output_norm.weight"], info["eps"]) @ head.T)
    ctx.close()


def test_taps_equal_llama_cpp_forward_of_a_cut_model(arch):
    """A model cut after layer k (same seed: same weights for its k layers) ends in the final norm of
    the hidden state that the full model feeds into layer k; llama.cpp computes both."""
    name, n_layer, model = arch["name"], arch["n_layer"], arch["model"]
    toks = model.vocab.tokenize(PROMPT)
    full = ps.Context(model, n_ctx=256, n_batch=128, type_k="f32", type_v="f32", flash_attn=False)
    full.enable_layer_inputs(range(1, n_layer))
    full.decode(toks, logits="none")
    w_out = _weights(arch["target"])["output_norm.weight"]
    eps = model.info.get(f"{name}.attention.layer_norm_rms_epsilon")
    for k in range(1, n_layer):
        cut = arch["dir"] / f"cut{k}.gguf"
        fixtures.write_tiny_target(cut, arch=name, **{**ARCHS[name], "n_layer": k})
        with ps.Model(cut) as m, ps.Context(m, n_ctx=256, n_batch=128, embeddings=True, type_k="f32",
                                            type_v="f32", flash_attn=False) as c:
            c.decode(toks, logits="all")
            _close(c.embeddings(), _rms(full.layer_input(k).astype(np.float64), w_out, eps))
    full.close()


@pytest.fixture(scope="module")
def arch_gen(arch):
    # ngram with a short n-gram: llama.cpp's default (12 tokens) finds nothing in 48 random-model tokens
    gen = ps.Generator(arch["target"], drafters={"dflash": arch["dflash"],
                                                 "ngram": ("ngram-simple", {"size_n": 2, "size_m": 8})},
                       n_ctx=1024, n_batch=64, n_ubatch=32)
    yield gen
    gen.close()


@pytest.mark.parametrize("drafter,n_max", [("dflash", 3), ("dflash", 7), ("ngram", 4)])
def test_speculation_is_lossless(arch, arch_gen, drafter, n_max):
    plain = arch_gen.generate(PROMPT, max_tokens=48)
    spec = arch_gen.generate(PROMPT, drafter=drafter, n_max=n_max, max_tokens=48)
    assert len(plain.tokens) == 48
    assert_same_tokens(spec.tokens, plain.tokens)
    assert spec.stats.n_drafted > 0


def test_dflash_drafter_reads_the_target_taps(arch, arch_gen):
    d = arch_gen.drafters["dflash"]
    assert d.target_layer_ids == [1, arch["n_layer"] - 2]
    arch_gen.generate(PROMPT, drafter="dflash", n_max=4, max_tokens=8)
    assert arch_gen.ctx.enabled_layer_inputs == [1, arch["n_layer"] - 2]


@pytest.mark.native
@pytest.mark.parametrize("n_max", [5])
def test_dflash_matches_speculative_simple(arch, arch_gen, n_max):
    native_or_skip("llama-speculative-simple")
    ours = arch_gen.generate(PROMPT, drafter="dflash", n_max=n_max, max_tokens=40)
    nat = run_speculative_simple(arch["target"], arch["dflash"], PROMPT, n_max=n_max, n_predict=40, n_ctx=1024)
    vocab = arch_gen.model.vocab
    pieces = b"".join(vocab.token_to_piece(t, special=True) for t in ours.prompt_tokens + ours.tokens)
    assert nat.stdout.lstrip(b"\n").startswith(pieces)
    assert nat.n_drafted > 0 and ours.stats.n_drafted > 0
