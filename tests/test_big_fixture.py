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


@pytest.mark.parametrize("dtype", ["f16", "q4_0", "q4_K"])
def test_big_pair_loads_with_its_shape_and_speculates_losslessly(tmp_path, monkeypatch, dtype):
    preset = MINI_K if dtype == "q4_K" else MINI
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
