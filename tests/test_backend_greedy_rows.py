"""vendor/patches/0007-backend-greedy-rows: a greedy backend sampler draws all of a sequence's rows with one
argmax, the same tokens as the host's argmax of the logits, and copies no logits rows to the host."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec._ffi import ffi, lib
from pyllama_spec.sampler import SamplerChain

from .conftest import EXACT, close_logits


@pytest.mark.parametrize("n_rows", [1, 3, 8])
def test_greedy_rows_match_host_argmax_without_logits_copies(tiny_model, n_rows):
    toks = tiny_model.vocab.tokenize("a verify block of several rows")[:n_rows]
    assert len(toks) == n_rows
    host = ps.Context(tiny_model, n_ctx=256, n_batch=32)
    host.decode(toks, logits="all")
    want = np.argmax(host.logits(), axis=1).tolist()
    dev = ps.Context(tiny_model, n_ctx=256, n_batch=32, n_outputs_max_per_seq=8)
    dev.set_sampler(SamplerChain())
    dev.decode(toks, logits="all")
    assert dev.sampled_tokens() == want
    # the patch's other half: greedy rows keep no logits (before it, each row copied n_vocab floats)
    assert [int(lib.llama_get_sampled_logits_count_ith(dev.ptr, i)) for i in range(n_rows)] == [0] * n_rows
    host.close()
    dev.close()


def test_greedy_rows_of_two_sequences(tiny_model):
    """Rows of two sequences in one batch, each sequence's rows consecutive: one argmax each."""
    a = tiny_model.vocab.tokenize("first sequence")[:3]
    b = tiny_model.vocab.tokenize("second one here")[:4]
    want = []
    for toks in (a, b):
        host = ps.Context(tiny_model, n_ctx=256, n_batch=32)
        host.decode(toks, logits="all")
        want += np.argmax(host.logits(), axis=1).tolist()
        host.close()
    dev = ps.Context(tiny_model, n_ctx=256, n_batch=32, n_seq_max=2, n_outputs_max_per_seq=8)
    dev.set_sampler(SamplerChain(), 0)
    dev.set_sampler(SamplerChain(), 1)
    dev.decode(a + b, pos=list(range(len(a))) + list(range(len(b))), seq_id=[0] * len(a) + [1] * len(b),
               logits="all")
    assert dev.sampled_tokens() == want
    dev.close()


def test_greedy_rows_of_many_streams_interleaved_and_one_without_a_sampler(tiny_model):
    """Patch 0009: every sampler greedy-only → one argmax over all output rows of the ubatch. Rows of four
    sequences interleaved (one row each per position, as batched generation feeds them), a fifth stream
    with a sampler but no row (inactive) and a sequence without a sampler, which keeps its logits."""
    texts = ["first stream", "second stream of text", "third", "fourth one", "no sampler here"]
    seqs = [tiny_model.vocab.tokenize(t)[:3] for t in texts]
    assert all(len(s) == 3 for s in seqs)
    want = []
    for toks in seqs:
        host = ps.Context(tiny_model, n_ctx=256, n_batch=32)
        host.decode(toks, logits="all")
        want.append(host.logits().copy())
        host.close()
    dev = ps.Context(tiny_model, n_ctx=512, n_batch=64, n_seq_max=6, n_outputs_max_per_seq=8)
    for k in (0, 1, 2, 3, 5):  # 5: attached, never in the batch
        dev.set_sampler(SamplerChain(), k)
    order = [(j, k) for j in range(3) for k in (0, 1, 2, 3, 4)]  # position-major: rows of streams interleave
    dev.decode([seqs[k][j] for j, k in order], pos=[j for j, _ in order], seq_id=[k for _, k in order],
               logits="all")
    n_vocab = tiny_model.n_vocab
    for row, (j, k) in enumerate(order):
        if k == 4:  # no sampler: no token, and its logits rows as a decode of it alone gives them
            assert int(lib.llama_get_sampled_token_ith(dev.ptr, row)) < 0
            got = np.frombuffer(ffi.buffer(lib.llama_get_logits_ith(dev.ptr, row), 4 * n_vocab),
                                dtype=np.float32)
            if EXACT:
                np.testing.assert_allclose(got, want[4][j], rtol=1e-4, atol=1e-4)
            else:  # (a batch of 15 rows runs other kernels than one of 3 on a GPU: near-equal logits)
                close_logits(got, want[4][j])
            continue
        assert int(lib.llama_get_sampled_token_ith(dev.ptr, row)) == int(np.argmax(want[k][j])), (row, j, k)
        assert int(lib.llama_get_sampled_logits_count_ith(dev.ptr, row)) == 0
    dev.close()
