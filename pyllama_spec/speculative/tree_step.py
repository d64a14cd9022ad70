"""One verify step with a token tree: draft a tree in one drafter call, verify every branch in one
target decode, keep the accepted path's KV cells and drop the rest.

    tree   = drafter.propose_tree(last, n_past, n_max, budget)     # DFlash: the block's candidates
    leaves = tree.leaves(); branch j = root → leaf j is sequence j
    seq_cp(0 → 1..L-1)                                              # every branch sees the prefix
    target.decode_seq_sets([last] + tree.tokens,                    # tree attention through seq sets:
        pos = n_past + [0] + depths, sets = [all] + per node)       # a node is in every branch through it
    path, bonus = tree rule (tree_verify.py)
    drafter.observe_rows(batch, pos, [0] + rows of path)            # DFlash: only the committed features
    seq_keep(s); seq_rm(s, n_past + 1 + k); seq_cp(s → 0); seq_rm(s)   # s: a branch through the path

llama.cpp's KV cache masks a token's attention to the cells of its first sequence id
(``llama_kv_cache::set_input_kq_mask``), so with every node in the sequences of the branches
through it a node sees the committed prefix and its ancestors only (its descendants on its first
branch lie at later positions, masked causally). The target context needs ``n_seq_max`` ≥ the
number of leaves and a unified KV cache (``kv_unified=True``): sequences then share one buffer and
``seq_cp`` / ``seq_keep`` only edit cell metadata, one pass over the cells each (no K/V is copied or
recomputed; the alternative — re-decoding the accepted path into sequence 0 — costs a second target
decode per step). Afterwards the loop's invariant holds again: sequence 0 holds exactly the
committed positions and no other sequence holds anything.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..context import Context
from ..errors import InvalidArgumentError
from .drafters import Drafter
from .sampling import SamplingParams
from .timing import StageTimer
from .tree import TreeDraft, check_tree
from .tree_verify import tree_verify_greedy, tree_verify_match, tree_verify_rejection


@dataclass
class TreeStep:
    """What a tree verify step committed.

    Attributes:
        committed: the accepted path's tokens, then the target's bonus token.
        n_accepted: accepted draft tokens (``len(committed) - 1``).
        depth: the tree's longest branch (the "draft length" counted in the stats).
        n_nodes: nodes verified.
        tree: the verified tree (its ``logp`` / ``top_logp`` feed ``SpecStats.record_tree``).
    """
    committed: list[int]
    n_accepted: int
    depth: int
    n_nodes: int
    tree: TreeDraft | None = None


def check_tree_context(target: Context, budget: int) -> None:
    """Raise unless ``target`` can verify trees of ``budget`` nodes (as many branch sequences, one buffer).

    Raises:
        InvalidArgumentError: ``n_seq_max < budget``, a per-sequence KV cache, or ``n_batch ≤ budget``.
    """
    if target.n_seq_max < budget or (budget > 1 and not target.kv_unified):
        raise InvalidArgumentError(f"a tree of {budget} nodes needs a target context with n_seq_max ≥ {budget} and "
                                   f"kv_unified=True (it has n_seq_max={target.n_seq_max}, kv_unified="
                                   f"{target.kv_unified}): create the Generator with tree={budget}")
    if target.n_batch < budget + 1:
        raise InvalidArgumentError(f"a tree of {budget} nodes is a verify batch of {budget + 1} rows, more than "
                                   f"n_batch={target.n_batch}: lower the budget or raise n_batch")


def tree_verify_step(target: Context, drafter: Drafter, last: int, n_past: int, *, n_max: int, budget: int,
                     sp: SamplingParams, dsp: SamplingParams, verify: str, rng: np.random.Generator,
                     timer: StageTimer) -> TreeStep:
    """Draft, verify and commit one tree (the module docstring gives the steps).

    Args:
        target: the target context (``n_seq_max ≥ budget``, ``kv_unified``; :func:`check_tree_context`);
            sequence 0 holds exactly positions ``[0, n_past)``, the others nothing.
        drafter: a drafter with ``supports_tree``.
        last: the newest committed token (position ``n_past``, not yet decoded by the target).
        n_max: the deepest branch (tokens).  budget: the most nodes.
        sp: the target's sampling.  dsp: the drafter's (greedy unless ``verify="rejection"``).
        verify: ``"match"`` or ``"rejection"``.

    Returns:
        :class:`TreeStep`. Sequence 0 then holds ``[0, n_past + 1 + n_accepted)`` — the accepted
        path's cells as the verify decode wrote them — and the drafter has observed those rows; the
        loop rolls both back further at an EOS.

    Raises:
        PyllamaSpecError: the drafter returned a bad tree (:func:`~.tree.check_tree`).
    """
    tree = drafter.propose_tree(last, n_past, n_max, budget, dsp, rng, timer)
    check_tree(tree, budget, target.model.n_vocab, drafter.kind)
    depths = tree.depths
    depth = int(depths.max()) if len(tree) else 0
    if depth > n_max:
        raise InvalidArgumentError(f"drafter {drafter.kind!r} returned a tree {depth} deep, more than "
                                   f"n_max={n_max}: fix its propose_tree()")
    mem = target.memory
    leaves, sets = tree.seq_sets()
    n_seq = max(1, len(leaves))
    batch = [last] + tree.tokens
    pos = np.empty(len(batch), dtype=np.int32)
    pos[0] = n_past
    pos[1:] = n_past + depths
    with timer("verify", target):
        mem.seq_cp_many(0, range(1, n_seq))  # every branch sees the committed prefix (cell metadata only)
        target.decode_seq_sets(batch, pos, [list(range(n_seq))] + sets, logits="all")
    with timer("accept"):
        path, bonus = _accept(target.logits(), tree, sp, verify, rng)
    rows = [0] + [i + 1 for i in path]
    drafter.observe_rows(batch, pos, rows, timer)
    k = len(path)
    with timer("rollback"):
        s = sets[path[-1]][0] if path else 0  # a branch through the accepted path
        mem.seq_keep(s)  # drops every other branch's cells; the kept cells now belong to s alone
        mem.seq_rm(s, n_past + 1 + k)  # s's nodes below the accepted path
        if s != 0:
            mem.seq_cp(s, 0)
            mem.seq_rm(s)
    return TreeStep(committed=[tree.tokens[i] for i in path] + [bonus], n_accepted=k, depth=depth,
                    n_nodes=len(tree), tree=tree)


def _accept(logits: np.ndarray, tree: TreeDraft, sp: SamplingParams, verify: str,
            rng: np.random.Generator) -> tuple[list[int], int]:
    if sp.greedy:
        return tree_verify_greedy(logits, tree)
    if verify == "rejection":
        return tree_verify_rejection(logits, tree, sp, rng)
    return tree_verify_match(logits, tree, sp, rng)


__all__ = ["TreeStep", "tree_verify_step", "check_tree_context"]
