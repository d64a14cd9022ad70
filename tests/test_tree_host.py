"""Issue 22: the host-side shortcuts of a tree step give exactly what the plain versions gave.

Each test keeps the implementation it replaced (``_old_*``, as it was before the change) and compares
on random inputs: the block top-k and the float64 log-softmax of :func:`tree_from_logits` build the
same trees (nodes, order, parents, log-probabilities bit for bit), the lazy argmax walk of
:func:`tree_verify_greedy` finds the same path, ``TreeDraft``'s list-based helpers return the same
depths / path log-probabilities / children / branch sets (and ``check_tree`` / ``SpecStats.record_tree``
the same verdicts and sums), and ``Memory.seq_cp_many`` leaves the cache as the per-call ``seq_cp``
loop does.
"""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.errors import PyllamaSpecError
from pyllama_spec.speculative.stats import SpecStats, _grow
from pyllama_spec.speculative.tree import (
    TreeDraft,
    _order_desc,
    _topk_ids,
    build_tree,
    check_tree,
    sample_tree,
    tree_from_logits,
)
from pyllama_spec.speculative.tree_verify import tree_accept, tree_verify_greedy


# -- the implementations before issue 22's host work (the references) -----------------------------------
def _old_topk_desc(logp, k):
    k = min(k, logp.shape[1])
    idx = np.argpartition(-logp, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(logp, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)


def _old_tree_from_logits(logits, budget, top_k=10):
    lg = np.asarray(logits, dtype=np.float64)
    logp = lg - lg.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    ids, vals = _old_topk_desc(logp, top_k)
    return build_tree(ids, vals, budget)


def _old_depths(t):
    d = np.zeros(len(t), dtype=np.int64)
    for i, p in enumerate(t.parents):
        d[i] = 1 if p < 0 else d[p] + 1
    return d


def _old_path_logp(t):
    lp = np.asarray(t.logp, dtype=np.float64)
    out = np.zeros(len(t), dtype=np.float64)
    for i, p in enumerate(t.parents):
        out[i] = lp[i] + (out[p] if p >= 0 else 0.0)
    return out


def _old_seq_sets(t):
    leaves = t.leaves()
    sets = [set() for _ in range(len(t))]
    for j, leaf in enumerate(leaves):
        for i in t.path(leaf):
            sets[i].add(j)
    return leaves, [sorted(s) for s in sets]


def _old_tree_verify_greedy(logits, tree):
    return tree_accept(np.argmax(logits, axis=1), tree)


def _same_tree(a: TreeDraft, b: TreeDraft) -> None:
    assert a.tokens == b.tokens
    assert np.array_equal(a.parents, b.parents)
    assert np.array_equal(a.logp, b.logp)  # bit for bit, not just close
    assert np.array_equal(a.top_logp, b.top_logp)


def _random_tree(rng, n: int, n_vocab: int) -> TreeDraft:
    parents = [int(rng.integers(-1, i)) for i in range(n)]  # any earlier node, or the root
    kids: dict[int, set[int]] = {}
    tokens = []
    for p in parents:  # distinct siblings
        t = int(rng.integers(n_vocab))
        while t in kids.setdefault(p, set()):
            t = int(rng.integers(n_vocab))
        kids[p].add(t)
        tokens.append(t)
    return TreeDraft(tokens=tokens, parents=np.array(parents), logp=rng.normal(size=n) - 2.0)


# -- top-k and tree construction ------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_block_topk_is_the_stable_full_sort(dtype):
    """Ties (rounded values), -inf entries, rows with fewer finite entries than k, short rows, lengths
    that leave a remainder: always the k first of the stable argsort of -x."""
    rng = np.random.default_rng(0)
    for trial in range(150):
        V = 49152 if trial % 4 == 0 else int(rng.integers(1, 100_000))
        R, k = int(rng.integers(1, 9)), int(rng.integers(1, 30))
        x = (rng.standard_normal((R, V)) * 3).astype(dtype)
        if trial % 5 == 0:
            x = np.round(x)  # many ties, also at the block boundary
        if trial % 7 == 0:
            x[:, rng.integers(0, V, size=V // 2 + 1)] = -np.inf
        if trial % 11 == 0:  # fewer finite entries than k
            x[:] = -np.inf
            x[:, rng.integers(0, V, size=3)] = 1.0
        if trial % 13 == 0:  # the best entries are -0.0 and 0.0, which compare equal: ties by index
            x[0] = -np.abs(x[0]) - 1
            x[0, 1:100:2] = -0.0
            x[0, 0:100:2] = 0.0
        ids, row_max = _topk_ids(x, k)
        assert np.array_equal(ids, np.argsort(-x, axis=1, kind="stable")[:, :k]), (trial, V, R, k)
        assert np.array_equal(row_max, x.max(axis=1))


def test_candidate_order_breaks_ties_by_index():
    """The int64-key sort of float32 candidates: -0.0 and 0.0 are equal, -inf last, ties by index."""
    rng = np.random.default_rng(5)
    for _ in range(50):
        vals = rng.choice(np.array([-np.inf, -2.5, -0.0, 0.0, 1.0, 3.0], dtype=np.float32), size=(4, 300))
        ids = np.sort(rng.choice(100_000, size=(4, 300), replace=False), axis=1)  # distinct, ascending
        ref = np.take_along_axis(ids, np.argsort(-vals, axis=1, kind="stable"), axis=1)
        assert np.array_equal(_order_desc(vals, ids), ref)
        assert np.array_equal(_order_desc(vals.astype(np.float64), ids), ref)


def test_tree_from_logits_builds_the_old_trees():
    """Random logits (no ties), DFlash-shaped blocks and other shapes, budgets up to 64, any top_k:
    the same nodes in the same order with bit-identical log-probabilities."""
    rng = np.random.default_rng(1)
    for trial in range(120):
        D = int(rng.integers(1, 16))
        V = 49152 if trial % 2 else int(rng.integers(2, 70_000))
        logits = (rng.standard_normal((D, V)) * rng.uniform(0.5, 8.0)).astype(np.float32)
        budget, top_k = int(rng.integers(0, 65)), int(rng.integers(1, 12))
        _same_tree(tree_from_logits(logits, budget, top_k), _old_tree_from_logits(logits, budget, top_k))
    peaked = np.full((7, 49152), -4.0, dtype=np.float32)  # confident rows, a heavy tail
    peaked += rng.standard_normal(peaked.shape).astype(np.float32)
    peaked[np.arange(7), rng.integers(0, 49152, 7)] = 12.0
    for budget in (4, 16, 32):
        _same_tree(tree_from_logits(peaked, budget), _old_tree_from_logits(peaked, budget))
    lg64 = rng.standard_normal((5, 3000))  # float64 input (the stable-sort path) too
    _same_tree(tree_from_logits(lg64, 20), _old_tree_from_logits(lg64, 20))


def test_tree_from_logits_breaks_ties_by_token_id():
    """Equal logits (the old partition broke them in no defined order): the lower token id first."""
    logits = np.zeros((3, 40_000), dtype=np.float32)
    logits[:, [30_000, 7, 12_345]] = 5.0
    t = tree_from_logits(logits, budget=3, top_k=3)
    assert t.tokens[:3] == [7, 12_345, 30_000]
    assert np.allclose(t.logp, np.log(np.exp(5.0) / (3 * np.exp(5.0) + 39_997)))


def test_sample_tree_shape_is_the_old_shape():
    """sample_tree's shape (from the top-k of log q) is unchanged where log q has no ties."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        q = rng.dirichlet(np.ones(6000) * 0.3, size=5)
        with np.errstate(divide="ignore"):
            logq = np.log(q)
        old = build_tree(*_old_topk_desc(logq, 10), 12)
        new = sample_tree(q, 12, np.random.default_rng(0), 10)
        assert np.array_equal(new.parents, old.parents)
        assert np.array_equal(new.top_logp, old.top_logp)


# -- acceptance -----------------------------------------------------------------------------------------
def test_lazy_greedy_walk_is_the_full_argmax_walk():
    """Random trees whose first children are planted as the target's argmax along a random branch (so
    the walk goes deep), and fully random logits (so it stops early): the same path and bonus token."""
    rng = np.random.default_rng(3)
    V = 500
    for trial in range(400):
        n = int(rng.integers(0, 40))
        tree = _random_tree(rng, n, V)
        logits = rng.standard_normal((n + 1, V)).astype(np.float32)
        if n and trial % 2:
            kids = tree.children()
            row = 0
            while kids[row]:  # plant a path: the argmax of each row is one of its children's tokens
                c = int(rng.choice(kids[row]))
                logits[row, tree.tokens[c]] = 10.0
                row = c + 1
        assert tree_verify_greedy(logits, tree) == _old_tree_verify_greedy(logits, tree)


# -- TreeDraft helpers ----------------------------------------------------------------------------------
def test_tree_helpers_match_the_old_loops():
    rng = np.random.default_rng(4)
    for _ in range(200):
        t = _random_tree(rng, int(rng.integers(0, 65)), 100)
        assert np.array_equal(t.depths, _old_depths(t)) and t.depths.dtype == np.int64
        assert np.array_equal(t.path_logp(), _old_path_logp(t))
        assert t.seq_sets() == _old_seq_sets(t)
        assert t.children() == [[i for i in range(len(t)) if t.parents[i] == p] for p in range(-1, len(t))]


def test_check_tree_sibling_rule_is_the_old_one():
    """Repeated tokens are refused between siblings only (the set of (parent, token) pairs)."""
    rng = np.random.default_rng(6)
    for _ in range(300):
        n = int(rng.integers(1, 20))
        t = TreeDraft(tokens=rng.integers(0, 4, n).tolist(), parents=[int(rng.integers(-1, i)) for i in range(n)])
        dup = any(len({t.tokens[c] for c in kids}) != len(kids) for kids in t.children())
        if dup:
            with pytest.raises(PyllamaSpecError, match="siblings with the same token"):
                check_tree(t, 64, 4)
        else:
            check_tree(t, 64, 4)


def test_record_tree_sums_as_before():
    """SpecStats.record_tree over Python floats: the same sums as the loop over numpy scalars."""
    rng = np.random.default_rng(7)
    new, old = SpecStats(n_max=7), SpecStats(n_max=7)
    for _ in range(50):
        t = _random_tree(rng, int(rng.integers(1, 33)), 50)
        prob, depths, spine = np.exp(t.path_logp()), t.depths, np.exp(np.cumsum(-rng.random(7)))
        new.record_tree(prob, depths, spine)
        old.n_tree_steps += 1  # the loop as it was
        old.n_tree_nodes += len(prob)
        _grow(old.tree_mass, len(prob), max([int(d) for d in depths] + [len(spine)]))
        for b, (p, d) in enumerate(zip(prob, depths)):
            old.tree_mass[b][int(d) - 1] += float(p)
        old.spine_mass += [0.0] * (len(spine) - len(old.spine_mass))
        for d, p in enumerate(spine):
            old.spine_mass[d] += float(p)
    assert new.tree_mass == old.tree_mass and new.spine_mass == old.spine_mass
    assert (new.n_tree_steps, new.n_tree_nodes) == (old.n_tree_steps, old.n_tree_nodes)
    new.record_tree([0.5, 0.25], [1, 2])  # lists, no spine
    assert new.tree_mass[0][0] == old.tree_mass[0][0] + 0.5


# -- cache metadata -------------------------------------------------------------------------------------
def test_seq_cp_many_equals_seq_cp_calls(tiny_model):
    caches = []
    for many in (False, True):
        c = ps.Context(tiny_model, n_ctx=256, n_batch=64, n_seq_max=8, kv_unified=True)
        c.decode(list(range(1, 21)), np.arange(20), logits="none")
        c.memory.seq_rm(0, 15)
        if many:
            c.memory.seq_cp_many(0, range(1, 6))
        else:
            for s in range(1, 6):
                c.memory.seq_cp(0, s)
        caches.append([(c.memory.pos_min(s), c.memory.pos_max(s)) for s in range(8)])
        version = c.cache_version
        with pytest.raises(ps.InvalidArgumentError, match="seq_id"):
            c.memory.seq_cp_many(0, [6, 8])  # out of range: nothing is copied
        assert c.memory.pos_max(6) == -1 and c.cache_version == version
        with pytest.raises(ps.InvalidTypeError):
            c.memory.seq_cp_many(0, [1.0])
        c.close()
    assert caches[0] == caches[1] == [(0, 14)] * 6 + [(-1, -1)] * 2


def test_seq_rm_many_and_ranged_seq_cp_many_equal_per_call(tiny_model):
    caches = []
    for many in (False, True):
        c = ps.Context(tiny_model, n_ctx=256, n_batch=64, n_seq_max=8, kv_unified=True)
        c.decode(list(range(1, 21)), np.arange(20), logits="none")
        if many:
            c.memory.seq_cp_many(0, range(1, 6), 5, 12)
            c.memory.seq_rm_many([2, 4], 8)
        else:
            for s in range(1, 6):
                c.memory.seq_cp(0, s, 5, 12)
            for s in (2, 4):
                c.memory.seq_rm(s, 8)
        caches.append([(c.memory.pos_min(s), c.memory.pos_max(s)) for s in range(8)])
        version = c.cache_version
        with pytest.raises(ps.InvalidArgumentError, match="seq_id"):
            c.memory.seq_rm_many([1, 9])  # nothing removed
        with pytest.raises(ps.InvalidArgumentError, match="p0"):
            c.memory.seq_cp_many(0, [6], -2)
        assert c.memory.pos_max(1) == 11 and c.cache_version == version
        c.close()
    assert caches[0] == caches[1] == [(0, 19), (5, 11), (5, 7), (5, 11), (5, 7), (5, 11), (-1, -1), (-1, -1)]


def test_branch_mirrors_hold_the_committed_cells(tiny_model):
    """tree_step.BranchSeqs: after ensure / a tree's verify / commit / truncate, every mirror holds what
    sequence 0 holds; the next row decoded after the kept path equals a cold decode of the same tokens;
    release empties the mirrors without bumping the cache version (the prefix ledger stays valid)."""
    from pyllama_spec.speculative.tree_step import BranchSeqs

    from .conftest import close_logits

    c = ps.Context(tiny_model, n_ctx=256, n_batch=64, n_seq_max=8, kv_unified=True)
    try:
        mem, prefix = c.memory, list(range(10, 19))
        c.decode(prefix, np.arange(9), logits="none")
        br = BranchSeqs()
        br.ensure(mem, 6)  # more mirrors than this tree's 3 branches (a wider earlier tree's)
        tree = TreeDraft(tokens=[40, 41, 42, 43, 44], parents=np.array([-1, -1, 0, 0, 2]))
        leaves, sets = tree.seq_sets()
        pos = 9 + np.concatenate([[0], tree.depths])
        c.decode_seq_sets([5] + tree.tokens, pos, [list(range(len(leaves)))] + sets, logits="none")
        path = tree.path(4)  # 40 → 42 → 44: its branch is not sequence 0's
        s = sets[path[-1]][0]
        assert s != 0
        br.commit(mem, s, len(leaves), 9, len(path))
        held = [(mem.pos_min(q), mem.pos_max(q)) for q in range(8)]
        assert held == [(0, 12)] * 6 + [(-1, -1)] * 2
        c.decode([7], np.array([13]), logits="last")  # sequence 0 after the kept path
        kept = np.array(c.logits()[-1]).copy()
        br.truncate(mem, 11)
        assert [(mem.pos_min(q), mem.pos_max(q)) for q in range(8)] == [(0, 10)] * 6 + [(-1, -1)] * 2
        br.release(mem)
        assert br.n == 1
        assert [mem.pos_max(q) for q in range(8)] == [10] + [-1] * 7
        mem.clear()
        c.decode(prefix + [5, 40, 42, 44, 7], np.arange(14), logits="last")
        close_logits(kept, np.array(c.logits()[-1]))
    finally:
        c.close()
