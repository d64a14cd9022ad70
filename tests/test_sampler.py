"""llama.cpp's sampler chain and our numpy distributions agree where they must."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.sampler import SamplerChain
from pyllama_spec.speculative.sampling import SamplingParams, probs, sample


def test_chain_greedy_and_seeded(tiny_model):
    c = ps.Context(tiny_model, n_ctx=128, n_batch=32)
    c.decode(tiny_model.vocab.tokenize("sampling"), logits="all")
    last = c.logits()[-1].copy()
    assert SamplerChain().sample(c, -1) == int(np.argmax(last))
    assert SamplerChain(temperature=0.7, top_k=1, seed=3).sample(c, -1) == int(np.argmax(last))
    a = [SamplerChain(temperature=1.0, top_k=20, seed=s).sample(c, -1) for s in range(20)]
    b = [SamplerChain(temperature=1.0, top_k=20, seed=s).sample(c, -1) for s in range(20)]
    assert a == b and len(set(a)) > 1
    top20 = set(np.argsort(-last)[:20].tolist())
    assert set(a) <= top20
    c.decode(tiny_model.vocab.tokenize(" again"), logits="last")
    with pytest.raises(ps.errors.NoOutputError, match="no logits"):  # also an IndexError
        SamplerChain().sample(c, 0)  # row 0 was not an output: llama.cpp would return garbage/abort


def test_numpy_probs_filters():
    logits = np.log(np.array([0.5, 0.25, 0.15, 0.07, 0.03]))
    p = probs(logits, SamplingParams(temperature=1.0))
    np.testing.assert_allclose(p, [0.5, 0.25, 0.15, 0.07, 0.03], rtol=1e-9)
    np.testing.assert_allclose(probs(logits, SamplingParams(temperature=1.0, top_k=2)), [2 / 3, 1 / 3, 0, 0, 0])
    np.testing.assert_allclose(probs(logits, SamplingParams(temperature=1.0, top_p=0.8)),
                               np.array([0.5, 0.25, 0.15, 0, 0]) / 0.9)
    np.testing.assert_allclose(probs(logits, SamplingParams(temperature=1.0, min_p=0.35)), [2 / 3, 1 / 3, 0, 0, 0])
    hot = probs(logits, SamplingParams(temperature=2.0))
    root = np.sqrt([0.5, 0.25, 0.15, 0.07, 0.03])
    np.testing.assert_allclose(hot, root / root.sum())
    assert probs(logits, SamplingParams()).tolist() == [1, 0, 0, 0, 0]
    rng = np.random.default_rng(0)
    draws = np.bincount([sample(p, rng) for _ in range(20000)], minlength=5) / 20000
    np.testing.assert_allclose(draws, p, atol=0.015)


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"temperature": float("nan")}, {"top_k": -2},
                                    {"top_p": 0.0}, {"top_p": 1.5}, {"min_p": 1.0}, {"seed": -1}])
def test_bad_sampling_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        SamplingParams(**kwargs)


SETTINGS = [dict(temperature=0.8), dict(temperature=1.0, top_k=5), dict(temperature=0.7, top_p=0.9),
            dict(temperature=1.3, min_p=0.05), dict(temperature=0.6, top_k=40, top_p=0.95, min_p=0.02),
            dict(temperature=1.0, top_p=0.999), dict(temperature=0.9, top_k=1), dict()]


@pytest.mark.parametrize("kw", SETTINGS)
def test_fast_rows_equal_the_reference(kw):
    """The loop's vectorised float32 path (filtered_rows) gives probs()'s distribution row by row."""
    from pyllama_spec.speculative.sampling import densify, filtered_rows

    rng = np.random.default_rng(7)
    V = 3000
    logits = (rng.standard_normal((6, V)) * 3).astype(np.float32)
    logits[2, :] = rng.standard_normal(V) * 1e-3  # nearly flat: top-p/min-p keep almost everything
    logits[3, 17] = 40.0  # a peaked row
    sp = SamplingParams(**kw)
    dense = densify(*filtered_rows(logits, sp), V)
    for i in range(len(logits)):
        ref = probs(logits[i], sp)
        np.testing.assert_allclose(dense[i], ref, rtol=2e-4, atol=2e-7)


@pytest.mark.parametrize("kw", [dict(temperature=0.9, top_k=6), dict(temperature=1.1),
                                dict(temperature=1.0, top_p=0.8)])
def test_fast_rows_draw_from_their_distribution(kw):
    from scipy import stats

    from pyllama_spec.speculative.sampling import filtered_rows, sample_rows

    rng = np.random.default_rng(1)
    V = 12
    logits = rng.standard_normal((3, V)).astype(np.float32)
    sp = SamplingParams(**kw)
    rows = filtered_rows(logits, sp)
    n = 6000
    counts = np.zeros((3, V))
    for _ in range(n):
        counts[np.arange(3), sample_rows(*rows, rng)] += 1
    for i in range(3):
        p = probs(logits[i], sp)
        keep = p > 0
        assert counts[i, ~keep].sum() == 0
        assert stats.chisquare(counts[i, keep], p[keep] * n).pvalue > 1e-3


def test_dense_rows_two_level_draw_equals_one_inverse_cdf():
    """sample_rows on a full-vocabulary row searches block sums then one block: with the same
    uniforms it picks what one inverse CDF over the whole row picks (V not a multiple of 256, zeros
    inside, a row with all its mass in one token at the end)."""
    from pyllama_spec.speculative.sampling import sample_rows

    rng = np.random.default_rng(3)
    V = 5000
    p = rng.random((4, V)).astype(np.float32) ** 4
    p[1, :2500] = 0.0
    p[2, :] = 0.0
    p[2, V - 1] = 1.0
    p /= p.sum(axis=1, keepdims=True)
    for seed in range(300):
        got = sample_rows(None, p, np.random.default_rng(seed))
        c = np.cumsum(p, axis=1, dtype=np.float64)
        u = np.random.default_rng(seed).random(4) * c[:, -1]
        want = np.minimum((c <= u[:, None]).sum(axis=1), V - 1)
        assert (got == want).all() or (np.abs(got - want) <= 1).all()  # a boundary within float64 rounding
        assert p[np.arange(4), got].min() > 0 and got[2] == V - 1


def test_dense_rows_two_level_draw_chi2():
    from scipy import stats

    from pyllama_spec.speculative.sampling import sample_rows

    rng = np.random.default_rng(5)
    V = 1500  # above the one-level cut-off (4 blocks of 256)
    logits = rng.standard_normal(V) * 2
    p = np.exp(logits - logits.max())
    p[p < 0.05] = 0.0
    p /= p.sum()
    rows = np.repeat(p[None].astype(np.float32), 50, axis=0)
    counts = np.zeros(V)
    for _ in range(200):
        np.add.at(counts, sample_rows(None, rows, rng), 1)
    keep = p > 0
    assert counts[~keep].sum() == 0
    assert stats.chisquare(counts[keep], p[keep] / p[keep].sum() * counts.sum()).pvalue > 1e-3


def test_a_chain_switched_between_decodes_draws_and_leaves_logits_as_without_switches(tiny_model):
    """A sampler chain attached or detached between decodes of one shape, and after the allocator planned a larger
    graph without it (vendor/patches/0017 rebuilds the graph and plans it anew instead of reserving the scheduler;
    n_max="auto" switches a chain so around a long rest, AutoState.draw_in_graph_when_dormant): each decode with a
    chain draws the argmax of a switch-free context's logits (a greedy chain), each without one returns those
    logits."""
    from .conftest import close_logits

    toks = tiny_model.vocab.tokenize("The quick brown fox jumps over the lazy dog")[:13]
    ref = ps.Context(tiny_model, n_ctx=256, n_batch=32, n_ubatch=32)
    ctx = ps.Context(tiny_model, n_ctx=256, n_batch=32, n_ubatch=32, n_outputs_max_per_seq=8)
    try:
        want = []
        for i, t in enumerate(toks[:9]):
            ref.decode([t], [i])
            want.append(ref.logits()[0].copy())
        ref.decode(toks[9:13], [9, 10, 11, 12], logits="all")
        want4 = ref.logits().copy()
        on = {1, 2, 5, 6, 8}  # off, on, on, off, off, on, on (another chain), off, on
        for i, t in enumerate(toks[:9]):
            if (i in on) != bool(ctx._samplers) or i == 6:
                ctx.set_sampler(SamplerChain() if i in on else None)
            ctx.decode([t], [i])
            if i in on:
                assert ctx.sampled_tokens(1) == [int(np.argmax(want[i]))]
            else:
                close_logits(ctx.logits()[0], want[i])
        # a plan made without the chain for a larger graph, then the chain on for that shape, then off again
        for lo in (9, 9):  # (twice: the second plan is made after a plan with the chain)
            ctx.memory.seq_rm(0, lo)
            ctx.set_sampler(None)
            ctx.decode(toks[lo:lo + 4], list(range(lo, lo + 4)), logits="all")
            close_logits(ctx.logits(), want4)
            ctx.memory.seq_rm(0, lo)
            ctx.set_sampler(SamplerChain())
            ctx.decode(toks[lo:lo + 4], list(range(lo, lo + 4)), logits="all")
            assert ctx.sampled_tokens(4) == np.argmax(want4, axis=1).tolist()
        ctx.set_sampler(None)
    finally:
        ref.close()
        ctx.close()


NODE_BUDGET_CHILD = r"""
import json, sys
import numpy as np
import pyllama_spec as ps
from pyllama_spec.sampler import SamplerChain
ctx = ps.Context(ps.Model(sys.argv[1]), n_ctx=512, n_batch=64, n_outputs_max_per_seq=32, n_threads=1)
toks = list(range(10, 42))
ctx.decode(toks, list(range(32)), logits="all")
want = np.argmax(ctx.logits(), axis=1).tolist()
ctx.memory.clear()
ctx.set_sampler(SamplerChain(temperature=0.8, top_p=0.9, seed=1))  # more graph nodes than the context planned for
ctx.decode(toks, list(range(32)), logits="all")
n_drawn = len(ctx.sampled_tokens(32))
ctx.memory.clear()
ctx.set_sampler(SamplerChain())  # a greedy chain: fits the budget the last attach reserved
ctx.decode(toks, list(range(32)), logits="all")
print("RESULT " + json.dumps({"n_drawn": n_drawn, "greedy": ctx.sampled_tokens(32), "want": want}))
"""


def test_a_chain_needing_more_graph_nodes_than_planned_is_reserved_for(tiny, tmp_path):
    """graph_max_nodes() counts an attached chain's nodes once per row it may sample; only a scheduler reserve sizes
    the graph for that. A top-p chain over 32 rows needs more nodes than the tiny context planned for: patch 0017
    reserves then (without that, ggml's context ran out of objects and llama.cpp aborted the process — a
    reviewer's case, also reached by generate_batch over 32 sequences at T > 0 with top-p). In a child process, so
    that an abort fails this test instead of ending the run."""
    from .conftest import child_result

    out = child_result(NODE_BUDGET_CHILD, tiny["target"], cwd=tmp_path, timeout=120)
    assert out["n_drawn"] == 32 and out["greedy"] == out["want"]
