"""Model loading, metadata, vocabulary, and the errors for bad files."""
import numpy as np
import pytest

import pyllama_spec as ps


def test_metadata(tiny, tiny_model):
    m = tiny_model
    assert (m.arch, m.n_layer, m.n_embd, m.n_head, m.n_head_kv) == ("llama", 4, 64, 4, 2)
    assert m.n_vocab == tiny["n_vocab"] == 264
    assert m.meta("llama.block_count") == "4"
    assert m.meta("no.such.key") is None
    assert m.metadata["general.architecture"] == "llama"
    assert m.chat_template.startswith("{% for message in messages %}")
    assert m.supports_layer_taps and m.target_layer_ids == []


def test_token_embeddings_match_the_file(tiny, tiny_model):
    import gguf

    r = gguf.GGUFReader(str(tiny["target"]))
    t = next(t for t in r.tensors if t.name == "token_embd.weight")
    emb = tiny_model.token_embeddings()
    assert emb.shape == (264, 64) and emb.dtype == np.float32
    np.testing.assert_array_equal(emb, np.asarray(t.data).reshape(264, 64))


def test_vocab_roundtrip_and_specials(tiny, tiny_model):
    v = tiny_model.vocab
    text = "Hello, wörld! ⚡ the tiny"
    toks = v.tokenize(text)
    assert all(0 <= t < v.n_tokens for t in toks)
    assert v.detokenize(toks) == text
    assert b"".join(v.token_to_piece(t) for t in toks).decode() == text
    assert v.eos == tiny["<|im_end|>"] and v.bos == tiny["<|endoftext|>"] and v.is_eog(v.eos)
    # is_eog keeps each token's answer: the same as llama.cpp's for every id, asked twice
    from pyllama_spec._ffi import lib
    want = [bool(lib.llama_vocab_is_eog(v._ptr, t)) for t in range(v.n_tokens)]
    assert [v.is_eog(t) for t in range(v.n_tokens)] == want == [v.is_eog(t) for t in range(v.n_tokens)]
    assert sum(want) >= 1
    # special-token text is plain text unless parse_special
    assert tiny["<|im_start|>"] not in v.tokenize("<|im_start|>")
    assert v.tokenize("<|im_start|>", parse_special=True) == [tiny["<|im_start|>"]]
    assert v.token_to_piece(v.eos) == b"" and v.token_to_piece(v.eos, special=True) == b"<|im_end|>"
    with pytest.raises(ValueError, match="outside the vocabulary"):
        v.detokenize([999])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        v.is_control(-5)
    assert v.is_control(tiny["<|im_start|>"]) and not v.is_control(65)


def test_bad_main_gpu(tiny):
    with pytest.raises(ValueError, match="main_gpu"):
        ps.Model(tiny["target"], main_gpu=7)


@pytest.mark.smollm2
def test_smollm2_vocab(smollm2):
    m = ps.Model(smollm2, vocab_only=True)
    assert (m.arch, m.n_layer, m.n_embd, m.n_vocab) == ("llama", 30, 576, 49152)
    v = m.vocab
    s = "def fibonacci(n):\n    return n"
    assert v.detokenize(v.tokenize(s)) == s
    assert v.tokenize("<|im_start|>user", parse_special=True)[0] == 1
    with pytest.raises(ps.InvalidArgumentError, match="vocab_only"):
        ps.Context(m)


def test_missing_file(tmp_path):
    with pytest.raises(ps.ModelNotFoundError, match="not found") as ei:
        ps.Model(tmp_path / "nope.gguf")
    assert isinstance(ei.value, FileNotFoundError)


def test_not_gguf(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"PK\x03\x04 this is a zip file" * 10)
    with pytest.raises(ps.NotGGUFError, match="not a GGUF"):
        ps.Model(p)


@pytest.mark.parametrize("keep", [0.5, 0.995, 40 / 734528])
def test_truncated_gguf(tiny, tmp_path, keep):
    data = tiny["target"].read_bytes()
    p = tmp_path / "cut.gguf"
    p.write_bytes(data[:max(8, int(len(data) * keep))])
    with pytest.raises(ps.TruncatedGGUFError, match="truncated"):
        ps.Model(p)
    # a good file still loads afterwards
    assert ps.Model(tiny["target"]).n_layer == 4
