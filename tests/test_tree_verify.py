"""Token trees and their acceptance rules (pure numpy): the best-first tree is the top-budget
set of paths, the T = 0 walk is the longest argmax path, and the T > 0 rules (match and recursive
rejection sampling) leave the committed tokens distributed as the target's (χ² tests)."""
import itertools

import numpy as np
import pytest
from scipy import stats

from pyllama_spec.errors import InvalidArgumentError, PyllamaSpecError
from pyllama_spec.speculative.sampling import SamplingParams
from pyllama_spec.speculative.tree import TreeDraft, build_tree, check_tree, sample_tree, tree_from_logits
from pyllama_spec.speculative.tree_verify import (
    tree_accept,
    tree_verify_greedy,
    tree_verify_match,
    tree_verify_rejection,
)


def _brute_force_best(lp: np.ndarray, budget: int) -> float:
    """Largest sum of path probabilities of a `budget`-node prefix-closed set (all rank vectors)."""
    D, k = lp.shape
    nodes = [r for d in range(1, D + 1) for r in itertools.product(range(k), repeat=d)]
    val = {r: float(np.exp(sum(lp[i, c] for i, c in enumerate(r)))) for r in nodes}
    # the best prefix-closed set is the top-`budget` by value when values shrink along paths and ranks
    return sum(sorted(val.values(), reverse=True)[:budget])


def test_build_tree_is_best_first_and_topological():
    rng = np.random.default_rng(0)
    for _ in range(20):
        D, k, budget = 4, 3, int(rng.integers(1, 16))
        p = rng.dirichlet(np.ones(6), size=D)
        ids = np.argsort(-p, axis=1)[:, :k]
        lp = np.log(np.take_along_axis(p, ids, axis=1))
        t = build_tree(ids, lp, budget)
        assert len(t) == budget
        assert np.all(t.parents < np.arange(len(t)))
        path_lp = [sum(t.logp[j] for j in t.path(i)) for i in range(len(t))]
        assert np.all(np.diff(path_lp) <= 1e-12)  # chosen in decreasing path probability
        np.testing.assert_allclose(np.exp(path_lp).sum(), _brute_force_best(lp, budget), rtol=1e-9)
        for i in range(len(t)):  # each node's token is its depth's candidate
            assert t.tokens[i] in ids[t.depths[i] - 1]
        check_tree(t, budget, 6)


def test_build_tree_shapes():
    ids = np.array([[5, 6], [7, 8], [9, 10]])
    sure = np.log(np.array([[0.9, 0.1], [0.9, 0.1], [0.9, 0.1]]))
    t = build_tree(ids, sure, 3)  # confident rows: a chain
    assert t.tokens == [5, 7, 9] and t.chain() and t.max_depth == 3
    flat = np.log(np.array([[0.5, 0.5], [0.2, 0.2], [0.2, 0.2]]))
    t = build_tree(ids, flat, 2)  # an unsure first row: two siblings
    assert t.tokens == [5, 6] and t.parents.tolist() == [-1, -1]
    assert t.leaves() == [0, 1] and t.seq_sets() == ([0, 1], [[0], [1]])
    t = build_tree(ids, flat, 4)
    leaves, sets = t.seq_sets()
    # ties go to the node found first
    assert t.parents.tolist() == [-1, -1, 0, 1] and leaves == [2, 3] and sets == [[0], [1], [0], [1]]
    assert len(build_tree(ids, flat, 0)) == 0 and len(build_tree(ids[:0], flat[:0], 5)) == 0
    inf = np.array([[0.0, -np.inf], [0.0, -np.inf], [0.0, -np.inf]])
    assert build_tree(ids, inf, 10).tokens == [5, 7, 9]  # -inf candidates are never nodes
    with pytest.raises(InvalidArgumentError):
        build_tree(ids, flat[:2], 3)
    with pytest.raises(InvalidArgumentError):
        build_tree(ids, flat, -1)


def test_check_tree_rejects_bad_trees():
    good = TreeDraft(tokens=[1, 2], parents=[-1, 0])
    check_tree(good, 2, 10)
    for bad, budget in [(good, 1), (TreeDraft(tokens=[1, 2], parents=[-1, 1]), 4),
                        (TreeDraft(tokens=[1, 12], parents=[-1, 0]), 4),
                        (TreeDraft(tokens=[3, 3], parents=[-1, -1]), 4),
                        (TreeDraft(tokens=[1], parents=[-1], probs=np.ones((1, 3))), 4)]:
        with pytest.raises(PyllamaSpecError):
            check_tree(bad, budget, 10)


def test_greedy_walk_is_the_longest_argmax_path():
    #        root
    #       /    \
    #     0:a    1:b
    #    /   \      \
    #  2:c   3:d    4:e
    t = TreeDraft(tokens=[10, 11, 12, 13, 14], parents=[-1, -1, 0, 0, 1])
    assert tree_accept([11, 0, 14, 0, 0, 7], t) == ([1, 4], 7)
    assert tree_accept([10, 13, 0, 0, 9, 0], t) == ([0, 3], 9)
    assert tree_accept([10, 5, 0, 0, 0, 0], t) == ([0], 5)
    assert tree_accept([3, 0, 0, 0, 0, 0], t) == ([], 3)
    logits = np.full((6, 20), -5.0, dtype=np.float32)
    for row, tok in enumerate([11, 0, 14, 0, 0, 7]):
        logits[row, tok] = 5.0
    assert tree_verify_greedy(logits, t) == ([1, 4], 7)
    empty = TreeDraft(tokens=[], parents=[])
    assert tree_verify_greedy(logits[:1], empty) == ([], 11)


# -- T > 0: the committed tokens follow the target's law ------------------------------------------------
V = 5


def _target_logits(context: tuple) -> np.ndarray:
    """A target whose next-token law depends on the whole context (a hash of it)."""
    r = np.random.default_rng(abs(hash(context)) % (2 ** 32))
    return (r.normal(size=V) * 1.5).astype(np.float32)


def _one_step(tree: TreeDraft, sp, rng, rule) -> list[int]:
    """Two tokens: one verify step's first two committed tokens, the second drawn from the
    target directly when the step committed one (as the next step would)."""
    rows = np.stack([_target_logits(tuple(tree.tokens[j] for j in tree.path(i))) for i in range(-1, len(tree))])
    path, bonus = rule(rows, tree, sp, rng)
    out = [tree.tokens[j] for j in path] + [bonus]
    if len(out) < 2:
        p = np.exp(_target_logits((out[0],)).astype(np.float64) / sp.temperature)
        out.append(int(rng.choice(V, p=p / p.sum())))
    return out[:2]


def _joint_law(sp) -> np.ndarray:
    def soft(x):
        e = np.exp(x.astype(np.float64) / sp.temperature)
        return e / e.sum()
    p1 = soft(_target_logits(()))
    return np.array([[p1[a] * soft(_target_logits((a,)))[b] for b in range(V)] for a in range(V)])


def _chi2(samples, law) -> float:
    counts = np.zeros((V, V))
    for a, b in samples:
        counts[a, b] += 1
    expected = law.ravel() * len(samples)
    keep = expected > 5
    obs, exp = counts.ravel()[keep], expected[keep]
    exp *= obs.sum() / exp.sum()
    return float(stats.chisquare(obs, exp).pvalue)


@pytest.mark.parametrize("rule", ["match", "rejection_deterministic", "rejection_sampled"])
def test_tree_rules_keep_the_target_distribution(rule):
    sp = SamplingParams(temperature=1.0)
    rng = np.random.default_rng(7)
    q = np.random.default_rng(3).dirichlet(np.ones(V) * 0.7, size=3)  # the drafter's per-depth law
    n = 6000
    samples = []
    for _ in range(n):
        if rule == "rejection_sampled":
            tree = sample_tree(q, budget=6, rng=rng, top_k=3)
            samples.append(_one_step(tree, sp, rng, tree_verify_rejection))
        else:
            tree = tree_from_logits(np.log(q), budget=6, top_k=3)
            fn = tree_verify_match if rule == "match" else tree_verify_rejection
            samples.append(_one_step(tree, sp, rng, fn))
    assert _chi2(samples, _joint_law(sp)) > 1e-3


def test_sample_tree_shape_and_draws():
    q = np.array([[0.5, 0.3, 0.2, 0.0], [0.7, 0.2, 0.1, 0.0]])
    rng = np.random.default_rng(0)
    shape = tree_from_logits(np.log(np.maximum(q, 1e-300)), budget=5, top_k=3)
    firsts = []
    for _ in range(400):
        t = sample_tree(q, budget=5, rng=rng, top_k=3)
        assert t.parents.tolist() == shape.parents.tolist()  # the shape does not depend on the draws
        check_tree(t, 5, 4)
        assert 3 not in t.tokens  # a token of probability 0 is never drawn
        assert t.probs.shape == (5, 4) and np.allclose(t.probs[0], q[0])
        firsts.append(t.tokens[0])
    freq = np.bincount(firsts, minlength=4) / len(firsts)
    assert abs(freq[0] - 0.5) < 0.08  # the first child is a draw from q


def test_build_tree_spine_holds_the_chain():
    rng = np.random.default_rng(1)
    for _ in range(10):
        D, k = 4, 3
        p = rng.dirichlet(np.ones(6), size=D)
        ids = np.argsort(-p, axis=1)[:, :k]
        lp = np.log(np.take_along_axis(p, ids, axis=1))
        t = build_tree(ids, lp, 10, spine=True)
        check_tree(t, 10, 6)
        assert len(t) == 10 and t.tokens[:D] == ids[:, 0].tolist() and t.parents[:D].tolist() == [-1, 0, 1, 2]
        # the other nodes are the best-first ones outside the chain: path probabilities never increase
        path_lp = [sum(t.logp[j] for j in t.path(i)) for i in range(D, len(t))]
        assert np.all(np.diff(path_lp) <= 1e-12)
        assert build_tree(ids, lp, 2, spine=True).tokens == ids[:2, 0].tolist()
