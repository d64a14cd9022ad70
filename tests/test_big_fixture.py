"""fixtures.write_big_pair: the generator of the step-cost benchmark's Qwen3-shaped pairs, at a
size a test can load (a preset added for the test)."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec import fixtures

from .conftest import assert_same_tokens_but_near_ties

MINI = dict(n_layer=3, n_embd=128, n_head=4, n_head_kv=2, head_dim=32, n_ff=256, n_vocab=512,
            drafter_layers=1, block_size=8, target_layers=[0, 2])
# Q4_K rows are whole 256-value super-blocks: every matrix's input width must be a multiple of 256
MINI_K = dict(MINI, n_embd=256, n_head=8, n_ff=512)


@pytest.mark.parametrize("dtype", ["f16", "q4_0", "q4_K", "q4_K_M"])
def test_big_pair_loads_with_its_shape_and_speculates_losslessly(tmp_path, monkeypatch, dtype):
    preset = MINI_K if dtype.startswith("q4_K") else MINI
    monkeypatch.setitem(fixtures.BIG_PRESETS, "mini", preset)
    out = fixtures.write_big_pair(tmp_path, preset="mini", dtype=dtype)
    gen = ps.Generator(out["target"], drafters={"dflash": str(out["drafter"])}, n_ctx=512)
    try:
        m = gen.model
        assert (m.n_layer, m.n_embd, m.n_vocab) == (3, preset["n_embd"], 512)
        d = gen.drafters["dflash"]
        assert d.target_layer_ids == [0, 2] and d.n_max_limit == 7
        prompt = list(range(300, 340))
        plain = gen.generate(prompt_tokens=prompt, max_tokens=24)
        spec = gen.generate(prompt_tokens=prompt, drafter="dflash", n_max=5, max_tokens=24)
        assert len(plain.tokens) == 24 and spec.stats.n_drafted > 0
        # on a GPU the verify batch runs other kernels than the prefill (sbmm for Q4_K at 4..8 rows): the runs
        # may part only where the target's choice was a near-tie
        assert_same_tokens_but_near_ties(gen.ctx, prompt, spec.tokens, plain.tokens)
    finally:
        gen.close()
    with pytest.raises(ValueError, match="preset"):
        fixtures.write_big_pair(tmp_path, preset="nope")


def test_quantize_q4_K_round_trips_through_gguf_py():
    """Our Q4_K encoder against gguf-py's decoder (ggml's dequantize_row_q4_K): the layout must agree byte
    for byte, or the values come back as noise."""
    import gguf

    rng = np.random.default_rng(1)
    a = rng.standard_normal((48, 768)).astype(np.float32) * np.linspace(0.1, 3.0, 768, dtype=np.float32)
    q = fixtures.quantize_q4_K(a)
    assert q.shape == (48, 3 * 144) and q.dtype == np.uint8
    back = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q4_K)
    nmse = float(((back - a) ** 2).sum() / (a ** 2).sum())
    assert nmse < 0.01, nmse                      # 4-bit values, 6-bit scales: ~0.6 % on normals
    # each 32-value sub-block's range is used: its max and min come back within one quantization step
    sub, bsub = a.reshape(-1, 32), back.reshape(-1, 32)
    step = (sub.max(1) - np.minimum(sub.min(1), 0)) / 15
    assert np.all(np.abs(bsub.max(1) - sub.max(1)) <= 1.5 * step + 1e-3)
    with pytest.raises(ValueError, match="256"):
        fixtures.quantize_q4_K(a[:, :100])


def test_quantize_q6_K_round_trips_through_gguf_py():
    """Our Q6_K encoder against gguf-py's decoder (ggml's dequantize_row_q6_K): the layout of ql / qh / scales / d
    must agree byte for byte, or the values come back as noise."""
    import gguf

    rng = np.random.default_rng(2)
    a = rng.standard_normal((48, 768)).astype(np.float32) * np.linspace(0.1, 3.0, 768, dtype=np.float32)
    q = fixtures.quantize_q6_K(a)
    assert q.shape == (48, 3 * 210) and q.dtype == np.uint8
    back = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q6_K)
    nmse = float(((back - a) ** 2).sum() / (a ** 2).sum())
    assert nmse < 1e-3, nmse                      # 6-bit values, 8-bit scales: ~0.04 % on normals
    # each value is its group's step (d * scale, read back from the bytes: scales at 192..207, d at 208) times
    # the nearest integer in -32..31: within half a step of the value clipped to that range
    blocks = q.reshape(-1, 210)
    step = (blocks[:, 192:208].view(np.int8).astype(np.float32) *
            blocks[:, 208:210].copy().view(np.float16).astype(np.float32))[..., None]  # (super-blocks, 16, 1)
    x, bx = a.reshape(-1, 16, 16), back.reshape(-1, 16, 16)
    assert np.all(np.abs(bx - np.clip(x, -32 * step, 31 * step)) <= 0.5 * step * (1 + 1e-5) + 1e-7)
    with pytest.raises(ValueError, match="256"):
        fixtures.quantize_q6_K(a[:, :100])


def test_q4_K_M_types_follow_llama_quant():
    """llama.cpp's Q4_K_M rule (src/llama-quant.cpp, use_more_bits) at Qwen3-8B's 36 layers: Q6_K attn_v and ffn_down
    in the first and last eighth and every third layer between (18 of 36), a Q6_K head, Q4_K everywhere else."""
    more = [i for i in range(36) if fixtures.q4_K_M_type("attn_v.weight", i, 36) == "q6_K"]
    assert more == [0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30, 31, 32, 33, 34, 35]
    assert more == [i for i in range(36) if fixtures.q4_K_M_type("ffn_down.weight", i, 36) == "q6_K"]
    assert fixtures.q4_K_M_type("output.weight", 0, 36) == "q6_K"
    for name in ("token_embd.weight", "attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight",
                 "ffn_up.weight"):
        assert {fixtures.q4_K_M_type(name, i, 36) for i in range(36)} == {"q4_K"}


def test_q4_K_M_pair_has_the_mix_and_q4_K_drafter(tmp_path, monkeypatch):
    """The written Q4_K_M target has each tensor in the type of q4_K_M_type (file type MOSTLY_Q4_K_M), its Q6_K
    head has no two equal rows, and its drafter is Q4_K, named after the pair."""
    import gguf

    preset = dict(MINI_K, n_layer=8, target_layers=[0, 7])
    monkeypatch.setitem(fixtures.BIG_PRESETS, "mini", preset)
    out = fixtures.write_big_pair(tmp_path, preset="mini", dtype="q4_K_M")
    assert out["drafter"].name == "dflash-mini-q4_K_M.gguf"
    r = gguf.GGUFReader(out["target"])
    assert int(r.fields["general.file_type"].parts[-1][0]) == gguf.LlamaFileType.MOSTLY_Q4_K_M
    types = {t.name: t.tensor_type for t in r.tensors}
    Q4K, Q6K = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K
    assert types["output.weight"] == Q6K and types["token_embd.weight"] == Q4K
    for i in range(8):
        for name in ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight", "ffn_gate.weight",
                     "ffn_up.weight", "ffn_down.weight"):
            want = Q6K if name in ("attn_v.weight", "ffn_down.weight") and i in (0, 3, 6, 7) else Q4K
            assert types[f"blk.{i}.{name}"] == want, (i, name)
    head = next(t for t in r.tensors if t.name == "output.weight")
    rows = gguf.quants.dequantize(np.asarray(head.data), Q6K).reshape(512, -1)
    assert len({row.tobytes() for row in rows}) == 512
    dtypes = {t.tensor_type for t in gguf.GGUFReader(out["drafter"]).tensors if t.name.endswith("weight") and
              len(t.shape) == 2 and "norm" not in t.name}
    assert dtypes == {Q4K}
