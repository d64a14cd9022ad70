"""vendor/patches/0011-sampler-top-k-logprobs: a backend top-k that keeps each row's k best tokens with their
log-probabilities under the softmax of the whole row — the host's log softmax of the same logits — so that a
token tree is ranked by its drafter's full softmax with no row of logits copied."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.sampler import SamplerChain


@pytest.mark.parametrize("n_rows", [1, 4])
def test_candidates_are_the_host_log_softmax_of_the_best_logits(tiny_model, n_rows):
    toks = tiny_model.vocab.tokenize("a block of several draft rows")[:n_rows]
    host = ps.Context(tiny_model, n_ctx=256, n_batch=32)
    host.decode(toks, logits="all")
    lg = host.logits().astype(np.float64)
    m = lg.max(axis=1, keepdims=True)
    logp = lg - m - np.log(np.exp(lg - m).sum(axis=1, keepdims=True))
    dev = ps.Context(tiny_model, n_ctx=256, n_batch=32, n_outputs_max_per_seq=8)
    chain = SamplerChain.candidates(5, logprobs=True)
    assert chain.logprobs and "logprobs=True" in repr(chain)
    dev.set_sampler(chain)
    dev.decode(toks, logits="all")
    for i in range(n_rows):
        ids, vals = dev.sampled_candidates(i)
        best = np.argsort(-lg[i], kind="stable")[:5]
        assert sorted(ids.tolist()) == sorted(best.tolist())
        np.testing.assert_allclose(vals, logp[i, ids], atol=2e-5)  # (float32 in the graph)
        assert np.all(vals <= 0.0)
    # the plain candidates chain keeps the raw logits, as before
    raw = ps.Context(tiny_model, n_ctx=256, n_batch=32, n_outputs_max_per_seq=8)
    raw.set_sampler(SamplerChain.candidates(5))
    raw.decode(toks, logits="all")
    ids, vals = raw.sampled_candidates(0)
    np.testing.assert_allclose(vals, lg[0, ids], rtol=1e-5, atol=1e-5)
    for c in (host, dev, raw):
        c.close()


def test_k_is_checked_before_llama_cpp_sees_it():
    with pytest.raises(ps.InvalidArgumentError):
        SamplerChain.candidates(0, logprobs=True)
