"""Token trees: a draft that proposes several continuations at once (pure numpy, no models).

A block drafter such as DFlash gives a distribution for every position of its block in one call;
the second and third candidates of each position cost nothing more to propose. A
:class:`TreeDraft` holds them as a tree rooted at the last committed token, and the target verifies
every branch in one decode (``speculative/tree_step.py``), accepting the longest branch that its
own tokens follow (``speculative/tree_verify.py``).

The tree is chosen best-first by path probability under a node budget (EAGLE-2's dynamic tree, Li
et al. 2024, arXiv 2406.16858; DDTree, arXiv 2604.12989, which builds it from a block drafter's
per-position distributions): of all nodes (depth d, candidate rank r at each depth on its path) the
``budget`` with the highest product of per-position probabilities — for per-position
distributions that do not depend on the tokens before (DFlash's rows), this set maximises the
expected number of accepted tokens, Σ over nodes of P(path accepted), when the drafter's
probabilities are the target's.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from .._check import check_int
from ..errors import InvalidArgumentError, PyllamaSpecError

#: the most nodes a tree may have: each leaf becomes a target sequence (llama.cpp: LLAMA_MAX_SEQ 256)
TREE_BUDGET_MAX = 64


@dataclass
class TreeDraft:
    """A proposed token tree.

    Attributes:
        tokens: ``n`` token ids, one per node, in topological order (a parent before its children;
            siblings in the order they were drawn, best first).
        parents: ``(n,)`` int, the index of each node's parent; ``-1`` for the root's children (the
            root is the last committed token, which the target decodes first). ``parents[i] < i``.
        logp: ``(n,)`` float, log of the drafter's probability of each node's token at its position
            (the path's log probability is the sum over the path), or None.
        probs: ``(n, n_vocab)`` float32, the distribution each node's token was drawn from, or None
            for a deterministic tree (top candidates). Siblings were drawn *without replacement*
            from one distribution, in node order (their rows are equal); ``verify="rejection"``
            needs it (:func:`~pyllama_spec.speculative.tree_verify.tree_verify_rejection`).
        top_logp: ``(D,)`` float, log of the drafter's best candidate's probability at each depth
            1..D it drafted (the chain's tokens, whether or not the tree holds them), or None; the
            cost model calibrates the tree's path probabilities by it (``costmodel.tree_tau_from_mass``).
    """
    tokens: list[int]
    parents: np.ndarray
    logp: np.ndarray | None = None
    probs: np.ndarray | None = None
    top_logp: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.tokens = [int(t) for t in self.tokens]
        self.parents = np.asarray(self.parents, dtype=np.int64).reshape(-1)

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def depths(self) -> np.ndarray:
        """``(n,)`` int: 1 for the root's children, parent's depth + 1 below."""
        d = np.zeros(len(self), dtype=np.int64)
        for i, p in enumerate(self.parents):
            d[i] = 1 if p < 0 else d[p] + 1
        return d

    def path_logp(self) -> np.ndarray | None:
        """``(n,)`` float: each node's path log-probability (the sum of ``logp`` from the root's child
        down to it), or None without ``logp``."""
        if self.logp is None:
            return None
        lp = np.asarray(self.logp, dtype=np.float64)
        out = np.zeros(len(self), dtype=np.float64)
        for i, p in enumerate(self.parents):  # (parents come first)
            out[i] = lp[i] + (out[p] if p >= 0 else 0.0)
        return out

    @property
    def max_depth(self) -> int:
        """The longest branch (tokens); 0 for an empty tree."""
        return int(self.depths.max()) if len(self) else 0

    def children(self) -> list[list[int]]:
        """``n + 1`` lists: ``children()[0]`` the root's children, ``children()[i + 1]`` node i's, in node order."""
        out: list[list[int]] = [[] for _ in range(len(self) + 1)]
        for i, p in enumerate(self.parents):
            out[int(p) + 1].append(i)
        return out

    def leaves(self) -> list[int]:
        """Nodes without children, in node order."""
        has_child = np.zeros(len(self), dtype=bool)
        has_child[self.parents[self.parents >= 0]] = True
        return [int(i) for i in np.flatnonzero(~has_child)]

    def path(self, i: int) -> list[int]:
        """Nodes from the root's child down to node ``i`` (``[]`` for ``i = -1``, the root)."""
        out = []
        while i >= 0:
            out.append(int(i))
            i = int(self.parents[i])
        return out[::-1]

    def seq_sets(self) -> tuple[list[int], list[list[int]]]:
        """The branch sequences of tree attention: leaf ``j`` (in :meth:`leaves` order) is sequence
        ``j``; a node belongs to every sequence whose leaf lies below it (or is it).

        Returns:
            ``(leaves, sets)``: ``sets[i]`` the sorted sequence ids of node i.
        """
        leaves = self.leaves()
        sets: list[set[int]] = [set() for _ in range(len(self))]
        for j, leaf in enumerate(leaves):
            for i in self.path(leaf):
                sets[i].add(j)
        return leaves, [sorted(s) for s in sets]

    def chain(self) -> bool:
        """True when the tree is a single branch (every node the previous one's child)."""
        return bool(np.array_equal(self.parents, np.arange(len(self)) - 1))


def check_tree(tree: TreeDraft, budget: int, n_vocab: int, kind: str = "drafter") -> None:
    """Check what a drafter returned: ``len(tree) ≤ budget``, parents before children, ids in
    the vocabulary, shapes of ``logp`` / ``probs``.

    Raises:
        PyllamaSpecError: the tree breaks one of these (the message names the drafter and the fix).
    """
    n = len(tree)
    fix = f"drafter {kind!r} returned a bad tree: fix its propose_tree()"
    if n > budget:
        raise PyllamaSpecError(f"{fix} ({n} nodes, more than the budget of {budget})")
    if tree.parents.shape != (n,):
        raise PyllamaSpecError(f"{fix} (parents has shape {tree.parents.shape}, expected ({n},))")
    if n and (np.any(tree.parents < -1) or np.any(tree.parents >= np.arange(n))):
        raise PyllamaSpecError(f"{fix} (each parent must be -1 or an earlier node: {tree.parents.tolist()})")
    if n and (min(tree.tokens) < 0 or max(tree.tokens) >= n_vocab):
        raise PyllamaSpecError(f"{fix} (token ids outside [0, {n_vocab}))")
    if tree.logp is not None and np.shape(tree.logp) != (n,):
        raise PyllamaSpecError(f"{fix} (logp has shape {np.shape(tree.logp)}, expected ({n},))")
    if tree.probs is not None and np.shape(tree.probs) != (n, n_vocab):
        raise PyllamaSpecError(f"{fix} (probs has shape {np.shape(tree.probs)}, expected ({n}, {n_vocab}))")
    for kids in tree.children():  # siblings are distinct (a repeated token would waste a node and break the rules)
        toks = [tree.tokens[c] for c in kids]
        if len(set(toks)) != len(toks):
            raise PyllamaSpecError(f"{fix} (siblings with the same token: {toks})")


def _topk_desc(logp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(D, V)`` log-probabilities → each row's ``k`` best ``(ids, logp)``, best first, finite only
    (``-inf`` entries come back as ``-inf`` and are never expanded)."""
    k = min(k, logp.shape[1])
    idx = np.argpartition(-logp, k - 1, axis=1)[:, :k]
    vals = np.take_along_axis(logp, idx, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(idx, order, axis=1), np.take_along_axis(vals, order, axis=1)


def build_tree(cand_tokens: np.ndarray, cand_logp: np.ndarray, budget: int, spine: bool = False) -> TreeDraft:
    """The best-first tree over per-position candidates (EAGLE-2 / DDTree).

    Args:
        cand_tokens: ``(D, k)`` int, each depth's candidate tokens (depth d+1 below the root is row d).
        cand_logp: ``(D, k)`` float, their log-probabilities (any order; ``-inf`` = no candidate).
        budget: the most nodes (≥ 0).
        spine: take the chain of every depth's best candidate first (as deep as the budget allows), then
            best-first: the tree then holds the chain's draft, so a step never accepts less than the
            chain would.

    Returns:
        A deterministic :class:`TreeDraft` (``probs`` None, ``logp`` the per-node log-probabilities,
        ``top_logp`` each depth's best candidate's) of the ``min(budget, …)`` nodes with the highest
        path log-probability, in the order they were chosen (which is topological: a child's path
        probability never exceeds its parent's; siblings come best first), so the first ``b`` nodes
        are the tree of budget ``b``. Ties go to the shallower, then the earlier-found node.

    Raises:
        InvalidArgumentError: mismatched shapes or a negative budget.

    A heap of the frontier (each chosen node offers its next sibling and its first child) makes
    this O(budget log budget); a depth holds at most ``k`` siblings per parent.
    """
    budget = check_int("budget", budget, min=0)
    tok = np.asarray(cand_tokens)
    lp = np.asarray(cand_logp, dtype=np.float64)
    if tok.ndim != 2 or tok.shape != lp.shape:
        raise InvalidArgumentError(f"cand_tokens and cand_logp must both be (D, k), got {tok.shape} and {lp.shape}")
    D, k = tok.shape
    order = np.argsort(-lp, axis=1, kind="stable")
    tok, lp = np.take_along_axis(tok, order, axis=1), np.take_along_axis(lp, order, axis=1)
    tokens: list[int] = []
    parents: list[int] = []
    logp: list[float] = []
    path_lp: list[float] = []
    top = lp[:, 0].copy() if k else np.full(D, -np.inf)  # the chain's per-depth log-probabilities
    if D == 0 or k == 0 or budget == 0:
        return TreeDraft(tokens=[], parents=np.zeros(0, dtype=np.int64), logp=np.zeros(0), top_logp=top)
    # heap entries: (-path logp, depth index, serial, parent node, rank at this depth)
    heap: list[tuple[float, int, int, int, int]] = []
    serial = 0

    def offer(parent: int, d: int, r: int) -> None:
        nonlocal serial
        if d < D and r < k and np.isfinite(lp[d, r]):
            base = path_lp[parent] if parent >= 0 else 0.0
            heapq.heappush(heap, (-(base + lp[d, r]), d, serial, parent, r))
            serial += 1

    if spine:
        parent = -1
        for d in range(min(D, budget)):
            if not np.isfinite(lp[d, 0]):
                break
            tokens.append(int(tok[d, 0]))
            parents.append(parent)
            logp.append(float(lp[d, 0]))
            path_lp.append((path_lp[parent] if parent >= 0 else 0.0) + float(lp[d, 0]))
            offer(parent, d, 1)  # its next sibling
            parent = len(tokens) - 1
        if tokens:
            offer(parent, len(tokens), 0)  # below the spine
        else:
            offer(-1, 0, 0)
    else:
        offer(-1, 0, 0)
    while heap and len(tokens) < budget:
        neg, d, _, parent, r = heapq.heappop(heap)
        i = len(tokens)
        tokens.append(int(tok[d, r]))
        parents.append(parent)
        logp.append(float(lp[d, r]))
        path_lp.append(-neg)
        offer(parent, d, r + 1)  # the next sibling
        offer(i, d + 1, 0)       # the first child
    return TreeDraft(tokens=tokens, parents=np.asarray(parents, dtype=np.int64), logp=np.asarray(logp),
                     top_logp=top)


def tree_from_logits(logits: np.ndarray, budget: int, top_k: int = 10) -> TreeDraft:
    """:func:`build_tree` over the ``top_k`` best tokens of each row of ``logits`` ``(D, V)`` (softmax per row)."""
    lg = np.asarray(logits, dtype=np.float64)
    logp = lg - lg.max(axis=1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
    ids, vals = _topk_desc(logp, top_k)
    return build_tree(ids, vals, budget)


def sample_tree(q: np.ndarray, budget: int, rng: np.random.Generator, top_k: int = 10) -> TreeDraft:
    """A tree whose tokens are drawn from the drafter's distributions, for ``verify="rejection"``.

    The shape is :func:`build_tree`'s over each row's ``top_k`` most probable tokens — a function of
    ``q`` alone, never of the draws, which recursive rejection sampling needs to stay exact — and the
    ``m`` children of each node are then ``m`` draws without replacement from ``q`` of their depth
    (successive sampling: Gumbel-top-m), in draw order; child j keeps the subtree shape of the j-th
    best candidate.

    Args:
        q: ``(D, V)`` float, each depth's distribution (rows sum to 1).
        budget: the most nodes.
        rng: the generator the draws come from.

    Returns:
        A :class:`TreeDraft` with ``probs`` (each node's row of ``q``) and ``logp``.
    """
    q = np.asarray(q, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logq = np.log(q)
    ids, vals = _topk_desc(logq, top_k)
    shape = build_tree(ids, vals, budget)
    n = len(shape)
    depth = shape.depths
    tokens = np.zeros(n, dtype=np.int64)
    for kids in shape.children():
        if not kids:
            continue
        d = int(depth[kids[0]]) - 1
        g = logq[d] + rng.gumbel(size=q.shape[1])  # Gumbel-top-m = m successive draws without replacement
        tokens[kids] = np.argsort(-g, kind="stable")[:len(kids)]
    rows = q[depth - 1].astype(np.float32) if n else np.zeros((0, q.shape[1]), dtype=np.float32)
    lp = logq[depth - 1, tokens] if n else np.zeros(0)
    return TreeDraft(tokens=tokens.tolist(), parents=shape.parents, logp=lp, probs=rows, top_logp=shape.top_logp)


__all__ = ["TreeDraft", "check_tree", "build_tree", "tree_from_logits", "sample_tree", "TREE_BUDGET_MAX"]
