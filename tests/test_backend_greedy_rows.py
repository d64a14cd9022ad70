"""vendor/patches/0007-backend-greedy-rows: a greedy backend sampler draws all of a sequence's rows with one
argmax, the same tokens as the host's argmax of the logits, and copies no logits rows to the host."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec._ffi import lib
from pyllama_spec.sampler import SamplerChain


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
