"""Drafter/target pairing is checked at load (issue 12.5): a DFlash drafter made for a 264-token
vocabulary used to load on a 512-token target and fail mid-generation with
``InvalidBatchError: token id 337 is outside the vocabulary``."""
import pytest

import pyllama_spec as ps
from pyllama_spec import fixtures
from pyllama_spec.gguf_file import read_gguf, sample_indices


@pytest.fixture(scope="module")
def big_vocab(tmp_path_factory):
    """Targets like the tiny one (64 wide, 4 layers) with 512 tokens: two that agree, one that
    differs in some token texts, and one whose extra tokens are padding."""
    d = tmp_path_factory.mktemp("vocab")
    extra = [f"<extra_{i}>" for i in range(248)]
    paths = {}
    for name, toks in {"a": extra, "b": extra, "renamed": [f"<other_{i}>" for i in range(248)],
                       "padded": [f"[PAD{i}]" for i in range(248)]}.items():
        paths[name] = d / f"{name}.gguf"
        fixtures.write_tiny_target(paths[name], n_layer=4, n_embd=64, seed=1, extra_tokens=toks)
    paths["a_dflash"] = d / "a_dflash.gguf"
    fixtures.write_dflash_drafter(paths["a_dflash"], target=paths["a"], n_layer=1, block_size=8, seed=2)
    return paths


def test_vocabulary_size_mismatch_is_refused_at_load(tiny, big_vocab):
    gen = ps.Generator(big_vocab["a"], n_ctx=256, n_batch=32)
    assert gen.model.n_vocab == 512
    with pytest.raises(ps.DrafterMismatchError, match="264 tokens but the target a.gguf has 512"):
        gen.add_drafter("dflash", tiny["dflash"])  # made for the 264-token tiny target
    assert "dflash" not in gen.drafters
    gen.add_drafter("dflash", big_vocab["a_dflash"])
    assert len(gen.generate("hello", drafter="dflash", max_tokens=6).tokens) == 6
    gen.close()
    # the low-level API checks the same
    tgt = ps.Context(ps.Model(big_vocab["a"]), n_ctx=256, n_batch=32)
    with pytest.raises(ps.DrafterMismatchError, match="vocabulary"):
        ps.Context(ps.Model(tiny["dflash"]), n_ctx=256, n_batch=32, ctx_other=tgt, causal_attn=False)


def test_token_texts_are_compared(big_vocab):
    b = ps.Model(big_vocab["b"], vocab_only=True)
    renamed = ps.Model(big_vocab["renamed"], vocab_only=True)
    padded = ps.Model(big_vocab["padded"], vocab_only=True)
    info = read_gguf(big_vocab["a_dflash"])
    ps.pairing.check_vocab_match(b, info)  # same tokenizer, another file
    with pytest.raises(ps.DrafterMismatchError, match=r"token \d+ is '<extra_\d+>' in the drafter and '<other_"):
        ps.pairing.check_vocab_match(renamed, info)
    ps.pairing.check_vocab_match(padded, info)  # padding entries are not compared


@pytest.mark.smollm2
def test_long_vocabularies_are_sampled(smollm2):
    """A 49152-token list is not kept in the header, but its length and a sample of texts are."""
    info = read_gguf(smollm2)
    assert info.n_tokens == 49152 and "tokenizer.ggml.tokens" not in info.metadata
    m = ps.Model(smollm2, vocab_only=True)
    idx = sample_indices(49152)
    assert len(idx) >= 40 and idx[0] == 0 and idx[-1] == 49151
    assert all(info.token_text(i) == m.vocab.text(i) for i in idx)
    ps.pairing.check_vocab_match(m, info)
