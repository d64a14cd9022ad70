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
import math
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
        d = [0] * len(self)
        for i, p in enumerate(self.parents.tolist()):  # (Python ints: numpy scalars cost ~10× more per step)
            d[i] = 1 if p < 0 else d[p] + 1
        return np.asarray(d, dtype=np.int64)

    def path_logp(self) -> np.ndarray | None:
        """``(n,)`` float: each node's path log-probability (the sum of ``logp`` from the root's child
        down to it), or None without ``logp``."""
        if self.logp is None:
            return None
        lp = np.asarray(self.logp, dtype=np.float64).tolist()
        out = [0.0] * len(self)
        for i, p in enumerate(self.parents.tolist()):  # (parents come first)
            out[i] = lp[i] + (out[p] if p >= 0 else 0.0)
        return np.asarray(out, dtype=np.float64)

    @property
    def max_depth(self) -> int:
        """The longest branch (tokens); 0 for an empty tree."""
        return int(self.depths.max()) if len(self) else 0

    def children(self) -> list[list[int]]:
        """``n + 1`` lists: ``children()[0]`` the root's children, ``children()[i + 1]`` node i's, in node order."""
        out: list[list[int]] = [[] for _ in range(len(self) + 1)]
        for i, p in enumerate(self.parents.tolist()):
            out[p + 1].append(i)
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
        par = self.parents.tolist()
        sets: list[list[int]] = [[] for _ in range(len(self))]
        for j, leaf in enumerate(leaves):  # j ascends: each list comes out sorted
            i = leaf
            while i >= 0:
                sets[i].append(j)
                i = par[i]
        return leaves, sets

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
    # siblings are distinct (a repeated token would waste a node and break the rules): one set of
    # (parent, token) pairs; the children lists only to word the error
    if len(set(zip(tree.parents.tolist(), tree.tokens))) != n:
        for kids in tree.children():
            toks = [tree.tokens[c] for c in kids]
            if len(set(toks)) != len(toks):
                raise PyllamaSpecError(f"{fix} (siblings with the same token: {toks})")


#: a top-k over a row of V values first takes the maxima of about TOPK_BLOCKS strided blocks of the row,
#: then sorts only the k best blocks' values: for the (7, 49 152) DFlash block 0.16 ms (0.29 with the caches
#: swept first, as a decode leaves them) instead of the 0.46 ms (0.47) of a float32 argpartition of every row,
#: or the 2.8 ms of the float64 one the tree took before (AMD EPYC, one core, real drafter logits, each block
#: timed once: selection is branchy, and a loop over one array trains the branch predictor and reads 4–6×
#: too fast)
TOPK_BLOCKS = 2048


def _block_max(x: np.ndarray) -> np.ndarray:
    """``(R, B, nb)`` → ``(R, nb)``, the maximum over axis 1, by halving (a reduction over the middle axis
    runs about 1.6× slower than these contiguous elementwise maxima)."""
    while x.shape[1] > 1:
        h = x.shape[1] // 2
        top = np.maximum(x[:, :h], x[:, h:2 * h])
        if x.shape[1] % 2:
            np.maximum(top[:, :1], x[:, 2 * h:], out=top[:, :1])
        x = top
    return x[:, 0]


def _order_desc(vals: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """``(R, n)`` values and their distinct indices (ascending along each row) → the indices ordered by
    value, largest first, ties to the lower index.

    float32 values go through one sort of int64 keys (the value's bits mapped to an order-preserving
    unsigned int, inverted, above the index): the keys are distinct, so the unstable vectorised sort
    gives the stable order, in a third of a stable argsort's time (7 × 240 candidates: 0.018 vs 0.05 ms).
    """
    if vals.dtype != np.float32:  # (float64: a stable sort; the indices ascend, so ties keep the lower)
        return np.take_along_axis(ids, np.argsort(-vals, axis=1, kind="stable"), axis=1)
    u = (vals + np.float32(0.0)).view(np.uint32)  # (+0: −0.0 becomes +0.0, which compares equal to it)
    asc = np.where(u >= 0x80000000, ~u, u | np.uint32(0x80000000))  # negatives reversed, below positives
    key = ((~asc).astype(np.uint64) << np.uint64(32)) | ids.astype(np.uint64)
    key.sort(axis=1)
    return (key & np.uint64(0xFFFFFFFF)).astype(np.int64)


def _topk_ids(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(R, V)`` float → ``(ids, row_max)``: ``(R, min(k, V))`` int64, each row's ``k`` largest entries'
    indices, largest first, ties to the lower index (exactly ``np.argsort(-x, axis=1, kind="stable")[:, :k]``),
    and ``(R,)`` each row's maximum (``x.max(axis=1)``, which the block maxima give for free).

    Block ``j`` is the entries ``j, j + nb, j + 2 nb, …`` of the first ``B · nb`` (``B = max(8, V //
    TOPK_BLOCKS)`` entries per block, ``nb = V // B`` blocks); the rest (fewer than ``B``) are always
    candidates. Every entry of the top ``k`` lies in a block whose maximum is at least the ``k``-th largest
    block maximum ``b_k`` (the ``k``-th largest entry is ≥ ``b_k``: the ``k`` largest block maxima are
    ``k`` distinct entries), so the blocks whose maximum is ≥ ``b_k`` hold it; they are exactly the ``k``
    best blocks unless another block's maximum equals ``b_k``, and such rows (rare for real logits;
    rows with fewer than ``k + 1`` finite entries, e.g. filtered ones) take the full sort instead.
    """
    R, V = x.shape
    k = min(k, V)
    if k <= 0:
        return np.zeros((R, 0), dtype=np.int64), x.max(axis=1)
    B = max(8, V // TOPK_BLOCKS)
    nb = V // B  # (then the remainder, V − B · nb < B, is small)
    if nb < 4 * (k + 1):  # too short for blocks to pay
        return np.argsort(-x, axis=1, kind="stable")[:, :k], x.max(axis=1)
    main = x[:, :B * nb].reshape(R, B, nb)
    bmax = _block_max(main)  # (R, nb)
    row_max = bmax.max(axis=1)
    if B * nb < V:
        row_max = np.maximum(row_max, x[:, B * nb:].max(axis=1))
    # one kth: a partition that also places the (k+1)-th costs 4× as much; a tie is told by counting
    blocks = np.argpartition(bmax, nb - k, axis=1)[:, nb - k:]
    b_k = np.take_along_axis(bmax, blocks, axis=1).min(axis=1)
    tie = np.count_nonzero(bmax >= b_k[:, None], axis=1) > k
    blocks.sort(axis=1)  # ascending: the candidates' indices then ascend too
    vals = np.take_along_axis(main, blocks[:, None, :], axis=2).reshape(R, B * k)
    ids = (blocks[:, None, :] + nb * np.arange(B)[None, :, None]).reshape(R, B * k)
    if B * nb < V:
        vals = np.concatenate([vals, x[:, B * nb:]], axis=1)
        ids = np.concatenate([ids, np.broadcast_to(np.arange(B * nb, V), (R, V - B * nb))], axis=1)
    out = _order_desc(vals, ids)[:, :k]
    for r in np.flatnonzero(tie):
        out[r] = np.argsort(-x[r], kind="stable")[:k]
    return out, row_max


def _topk_desc(logp: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(D, V)`` log-probabilities → each row's ``k`` best ``(ids, logp)``, best first, ties to the lower
    id (``-inf`` entries come back as ``-inf`` and are never expanded)."""
    ids = _topk_ids(logp, k)[0]
    return ids, np.take_along_axis(logp, ids, axis=1)


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
    lpl, tokl = lp.tolist(), tok.tolist()  # (Python floats and ints: indexing numpy scalars costs 3× more)

    def offer(parent: int, d: int, r: int) -> None:
        nonlocal serial
        if d < D and r < k and math.isfinite(lpl[d][r]):
            base = path_lp[parent] if parent >= 0 else 0.0
            heapq.heappush(heap, (-(base + lpl[d][r]), d, serial, parent, r))
            serial += 1

    if spine:
        parent = -1
        for d in range(min(D, budget)):
            if not math.isfinite(lpl[d][0]):
                break
            tokens.append(tokl[d][0])
            parents.append(parent)
            logp.append(lpl[d][0])
            path_lp.append((path_lp[parent] if parent >= 0 else 0.0) + lpl[d][0])
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
        tokens.append(tokl[d][r])
        parents.append(parent)
        logp.append(lpl[d][r])
        path_lp.append(-neg)
        offer(parent, d, r + 1)  # the next sibling
        offer(i, d + 1, 0)       # the first child
    return TreeDraft(tokens=tokens, parents=np.asarray(parents, dtype=np.int64), logp=np.asarray(logp),
                     top_logp=top)


def build_lattice_tree(rows: np.ndarray, top_k: int, budget: int) -> TreeDraft:
    """The best-first tree through a DFlash2 selector's lattice (``drafters/dflash2.py``), where a
    candidate's score depends on the candidate before it.

    Row ``d`` (depth ``d + 1``) holds the position's ``top_k`` candidate ids (as floats), then a
    ``top_k × top_k`` table of transition scores, predecessor-major (``scores[p·k + s]``: successor ``s``
    after the previous position's candidate ``p``; at depth 1 the predecessor is the anchor, row 0 of
    the table). A node is (depth, candidate) under its parent candidate; its log-probability is the
    log softmax of its parent's score row at it, and the tree keeps the ``budget`` nodes of highest path
    log-probability (EAGLE-2 / DDTree's rule, as :func:`build_tree`, with the parent-dependent scores
    the lattice gives instead of one distribution per depth). llama.cpp walks the same lattice greedily
    for one path (``common_speculative_impl_draft_dflash``, :func:`~.drafters.dflash2.walk_lattice`);
    that path's nodes are each depth's best under their parent.

    Args:
        rows: ``(D, width)`` float, ``width ≥ top_k + top_k²``.
        top_k: candidates per position (the file's ``dflash.selector_top_k``).
        budget: the most nodes (≥ 0).

    Returns:
        A deterministic :class:`TreeDraft` (``probs`` None; ``logp`` per node; ``top_logp`` the greedy
        walk's per-depth log-probabilities), nodes in the order chosen (topological, siblings best first).

    Raises:
        InvalidArgumentError: rows of another shape, ``top_k`` < 1 or a negative budget.
    """
    budget = check_int("budget", budget, min=0)
    k = check_int("top_k", top_k, min=1)
    r = np.asarray(rows, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < k + k * k:
        raise InvalidArgumentError(f"lattice rows must be (D, >= top_k + top_k^2 = {k + k * k}), got {r.shape}")
    D = r.shape[0]
    ids = np.rint(r[:, :k]).astype(np.int64).tolist()
    sc = r[:, k:k + k * k].reshape(D, k, k)
    m = sc.max(axis=2, keepdims=True)
    lsm = sc - m - np.log(np.exp(sc - m).sum(axis=2, keepdims=True))  # [depth, predecessor, successor]
    order = np.argsort(-lsm, axis=2, kind="stable").tolist()  # successors best first, per (depth, predecessor)
    lsl = lsm.tolist()
    top, pred = np.full(D, -np.inf), 0
    for d in range(D):  # the greedy walk (llama.cpp's draft)
        s = order[d][pred][0]
        top[d], pred = lsl[d][pred][s], s
    tokens: list[int] = []
    parents: list[int] = []
    logp: list[float] = []
    path_lp: list[float] = []
    heap: list[tuple[float, int, int, int, int, int]] = []  # (-path logp, depth, serial, parent, predecessor, rank)
    serial = 0

    def offer(parent: int, d: int, p: int, rank: int) -> None:
        nonlocal serial
        if d < D and rank < k:
            v = lsl[d][p][order[d][p][rank]]
            if math.isfinite(v):
                heapq.heappush(heap, (-((path_lp[parent] if parent >= 0 else 0.0) + v), d, serial, parent, p, rank))
                serial += 1

    if D and budget:
        offer(-1, 0, 0, 0)
    while heap and len(tokens) < budget:
        neg, d, _, parent, p, rank = heapq.heappop(heap)
        s = order[d][p][rank]
        i = len(tokens)
        tokens.append(ids[d][s])
        parents.append(parent)
        logp.append(lsl[d][p][s])
        path_lp.append(-neg)
        offer(parent, d, p, rank + 1)  # the next sibling
        offer(i, d + 1, s, 0)         # the first child: the best successor of this candidate
    return TreeDraft(tokens=tokens, parents=np.asarray(parents, dtype=np.int64), logp=np.asarray(logp),
                     top_logp=top)


def tree_from_logits(logits: np.ndarray, budget: int, top_k: int = 10) -> TreeDraft:
    """:func:`build_tree` over the ``top_k`` best tokens of each row of ``logits`` (softmax per row).

    Args:
        logits: ``(D, V)`` float (row d: depth d + 1), float32 as llama.cpp returns them.
        budget: the most nodes.  top_k: candidates per depth.

    Returns:
        The tree; its ``logp`` (natural log-probabilities) are float64, ``(x − max) − log Σ exp(x − max)``
        per row.
    """
    lg = np.asarray(logits)
    if lg.dtype not in (np.float32, np.float64):
        lg = lg.astype(np.float64)
    # candidates by logit: x − max − lse is monotone in x, so a row's log-softmax orders its entries as its
    # logits do (rounding may only merge neighbours, which then keep the logits' order)
    ids, row_max = _topk_ids(lg, top_k)
    m = row_max.astype(np.float64)[:, None]
    # log Σ exp in float64 as before, so that the trees stay the same bit for bit (a float32 pass saves
    # ~0.1 ms but moves the normaliser by ~1e-8, enough to swap two near-equal paths of different rows);
    # a row at a time through one float64 buffer (393 KB for 49 152) that stays in the 1 MB L2 cache, the cast
    # folded into the subtraction (the same pairwise sums as over the whole block: 0.61 → 0.48 ms cache-cold)
    lse = np.empty_like(m)
    z = np.empty(lg.shape[1], dtype=np.float64)
    for r in range(lg.shape[0]):
        np.subtract(lg[r], m[r, 0], out=z, dtype=np.float64)
        np.exp(z, out=z)
        lse[r, 0] = np.log(z.sum())
    vals = (np.take_along_axis(lg, ids, axis=1).astype(np.float64) - m) - lse
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


__all__ = ["TreeDraft", "check_tree", "build_tree", "build_lattice_tree", "tree_from_logits", "sample_tree",
           "TREE_BUDGET_MAX"]
