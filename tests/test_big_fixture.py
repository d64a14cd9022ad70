"""fixtures.write_big_pair: the generator of the step-cost benchmark's Qwen3-shaped pairs, at a
size a test can load (a preset added for the test)."""
import pytest

import pyllama_spec as ps
from pyllama_spec import fixtures

from .conftest import assert_same_tokens

MINI = dict(n_layer=3, n_embd=128, n_head=4, n_head_kv=2, head_dim=32, n_ff=256, n_vocab=512,
            drafter_layers=1, block_size=8, target_layers=[0, 2])


@pytest.mark.parametrize("dtype", ["f16", "q4_0"])
def test_big_pair_loads_with_its_shape_and_speculates_losslessly(tmp_path, monkeypatch, dtype):
    monkeypatch.setitem(fixtures.BIG_PRESETS, "mini", MINI)
    out = fixtures.write_big_pair(tmp_path, preset="mini", dtype=dtype)
    gen = ps.Generator(out["target"], drafters={"dflash": str(out["drafter"])}, n_ctx=512)
    try:
        m = gen.model
        assert (m.n_layer, m.n_embd, m.n_vocab) == (3, 128, 512)
        d = gen.drafters["dflash"]
        assert d.target_layer_ids == [0, 2] and d.n_max_limit == 7
        prompt = list(range(300, 340))
        plain = gen.generate(prompt_tokens=prompt, max_tokens=24)
        spec = gen.generate(prompt_tokens=prompt, drafter="dflash", n_max=5, max_tokens=24)
        assert len(plain.tokens) == 24 and spec.stats.n_drafted > 0
        assert_same_tokens(spec.tokens, plain.tokens)
    finally:
        gen.close()
    with pytest.raises(ValueError, match="preset"):
        fixtures.write_big_pair(tmp_path, preset="nope")
