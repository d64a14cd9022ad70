"""Verification of a token tree against the target (pure numpy; tested without models).

The target decoded the root (the last committed token) and every node of a
:class:`~pyllama_spec.speculative.tree.TreeDraft` in one batch with tree attention, so row 0 holds
its distribution after the committed prefix and row ``i + 1`` its distribution after the path to
node ``i``. Each rule walks down from the root and returns ``(path, next_token)``: the accepted
nodes (root's child first) and the target's own token after them (the "bonus" token). The
committed tokens are ``[tokens[i] for i in path] + [next_token]``.

* :func:`tree_verify_greedy` — T = 0: follow the child equal to the target's argmax (the longest
  path whose tokens are the target's argmax).
* :func:`tree_verify_match` — draw the target's token at each row reached and follow the child that
  equals it (llama.cpp's match rule on a tree; SpecInfer's rule for a deterministic drafter).
* :func:`tree_verify_rejection` — multi-candidate speculative sampling: recursive rejection sampling
  over each node's children (SpecInfer, Miao et al. 2024, arXiv 2305.09781, Algorithm 2; without
  replacement as in Jeon et al. 2024, "Recursive Speculative Decoding", arXiv 2402.14160), with the
  drafter's q; one-hot q for a deterministic tree.

All three leave the committed tokens distributed exactly as the target's.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .sampling import SamplingParams, densify, filtered_rows, sample, sample_rows
from .tree import TreeDraft


def tree_accept(target_tokens: Sequence[int] | np.ndarray, tree: TreeDraft) -> tuple[list[int], int]:
    """The match rule on tokens already chosen per row: ``target_tokens`` ``(n+1,)`` (row 0 the
    root's, row ``i + 1`` node i's) → ``(path, target_tokens[row of the path's last node])``."""
    return _walk(lambda row: int(target_tokens[row]), tree)


def _walk(token_at: Callable[[int], int], tree: TreeDraft) -> tuple[list[int], int]:
    """Down from the root, following the child whose token is ``token_at(row)`` of the row reached:
    ``(path, token of the last row)``. Only the rows on the walk are asked for."""
    kids = tree.children()
    tokens = tree.tokens
    path: list[int] = []
    row = 0
    while True:
        t = token_at(row)
        nxt = next((c for c in kids[row] if tokens[c] == t), None)
        if nxt is None:
            return path, t
        path.append(nxt)
        row = nxt + 1


def tree_verify_greedy(target_logits: np.ndarray, tree: TreeDraft) -> tuple[list[int], int]:
    """The T = 0 walk: :func:`tree_accept` on each row's argmax.

    Args:
        target_logits: ``(n+1, n_vocab)`` float32, the verify rows (row 0 the root's).
        tree: ``n`` nodes.

    Returns:
        ``(path, next_token)``.

    The argmax is taken only on the rows the walk reaches (at most ``depth + 1`` of the ``n + 1``): the
    others are never read, so a 32-node tree reads at most 8 of its 33 rows of fresh logits (6.5 MB for
    SmolLM2's 49 152-token vocabulary) instead of all of them (the ``accept`` stage: 0.58 → 0.20 ms a
    step on one shared AMD EPYC core).
    """
    return _walk(lambda row: int(np.argmax(target_logits[row])), tree)


def tree_verify_match(target_logits: np.ndarray, tree: TreeDraft, sp: SamplingParams,
                      rng: np.random.Generator) -> tuple[list[int], int]:
    """Args: target_logits ``(n+1, n_vocab)``; one independent draw per row (only the rows on the
    walk matter, so drawing them all up front is the same distribution)."""
    return tree_accept(sample_rows(*filtered_rows(target_logits, sp), rng), tree)


def tree_verify_rejection(target_logits: np.ndarray, tree: TreeDraft, sp: SamplingParams,
                          rng: np.random.Generator) -> tuple[list[int], int]:
    """Recursive rejection sampling down the tree.

    At a node with target distribution p and children ``c_1 .. c_m`` (node order = draw order,
    drawn without replacement from q = ``tree.probs[c_1]``): accept ``c_j`` with probability
    ``min(1, p_j(c_j) / q_j(c_j))``; on rejection ``p_{j+1} = norm(max(p_j − q_j, 0))`` and
    ``q_{j+1}`` is ``q_j`` without ``c_j``, renormalised; after m rejections the bonus token is
    drawn from ``p_{m+1}``. An accepted child continues the walk with its own row. With
    ``tree.probs`` None the tree counts as deterministic (q one-hot at each child: accept with
    ``p_j(c_j)``, then drop ``c_j`` from p) — the same law as :func:`tree_verify_match`.

    Args:
        target_logits: ``(n+1, n_vocab)`` float32, the verify rows.
        tree: the draft; with ``probs``, its shape must not depend on the draws
            (:func:`~pyllama_spec.speculative.tree.sample_tree`).

    Returns:
        ``(path, next_token)``.
    """
    V = target_logits.shape[1]
    kids = tree.children()
    path: list[int] = []
    row = 0
    while True:
        p0 = densify(*filtered_rows(target_logits[row:row + 1], sp), V)[0].astype(np.float64)
        p = p0.copy()
        children = kids[row]
        q = None
        if children and tree.probs is not None:
            q = np.asarray(tree.probs[children[0]], dtype=np.float64).copy()
            q /= q.sum()
        nxt = None
        for c in children:
            t = tree.tokens[c]
            if q is None:  # deterministic child: q one-hot at t
                if rng.random() < p[t]:
                    nxt = c
                    break
                p[t] = 0.0
            else:
                qt = q[t]
                if qt > 0.0 and rng.random() * qt < p[t]:  # u < min(1, p/q), without dividing
                    nxt = c
                    break
                resid = np.maximum(p - q, 0.0)
                if resid.sum() > 0.0:  # (0 only when p == q, where a rejection has probability 0)
                    p = resid
                q[t] = 0.0
                if q.sum() <= 0.0:
                    q = None  # no mass left to draw further children from (they cannot exist)
                else:
                    q /= q.sum()
            total = p.sum()
            if total <= 0.0:
                break
            p /= total
        if nxt is None:  # (p sums to 0 only through rounding after near-certain rejections: draw from p0)
            return path, sample(p if p.sum() > 0.0 else p0, rng)
        path.append(nxt)
        row = nxt + 1


__all__ = ["tree_accept", "tree_verify_greedy", "tree_verify_match", "tree_verify_rejection"]
