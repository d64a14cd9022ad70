"""One verify step with a token tree: draft a tree in one drafter call, verify every branch in one
target decode, keep the accepted path's KV cells and drop the rest.

    tree   = drafter.propose_tree(last, n_past, n_max, budget)     # DFlash: the block's candidates
    leaves = tree.leaves(); branch j = root → leaf j is sequence j
    branches.ensure(L)                                              # sequences 1..L-1 mirror 0: the prefix
    target.decode_seq_sets([last] + tree.tokens,                    # tree attention through seq sets:
        pos = n_past + [0] + depths, sets = [all] + per node)       # a node is in every branch through it
    path, bonus = tree rule (tree_verify.py)
    drafter.observe_rows(batch, pos, [0] + rows of path)            # DFlash: only the committed features
    seq_rm(s, n_past + 1 + k); seq_rm(others, n_past); seq_cp(s → others, n_past…)   # s: a branch on the path

llama.cpp's KV cache masks a token's attention to the cells of its first sequence id
(``llama_kv_cache::set_input_kq_mask``), so with every node in the sequences of the branches
through it a node sees the committed prefix and its ancestors only (its descendants on its first
branch lie at later positions, masked causally). The target context needs ``n_seq_max`` ≥ the
number of leaves and a unified KV cache (``kv_unified=True``): sequences then share one buffer and
``seq_cp`` / ``seq_rm`` only edit cell metadata (no K/V is copied or recomputed; the alternative —
re-decoding the accepted path into sequence 0 — costs a second target decode per step).

Why the branch sequences live for the whole generation (:class:`BranchSeqs`): every committed cell
must belong to every branch sequence during a verify. Copying the prefix into each branch before
the verify and stripping it after touches llama.cpp's per-sequence position map once per cached
position and branch — 0.13 ms a step at 64 cached positions but 5.7 ms at 3 584 (19 branches, one
AMD EPYC core; RESULTS 18.3), growing with the conversation. Kept, the branches cost that once, and
a step touches only the tree's own cells: the accepted path is copied into every branch, the rest
removed. So during a tree generation sequences ``0..branches.n-1`` all hold exactly the committed
positions ``[0, n_past)``; when it ends (:meth:`BranchSeqs.release`) the loop's invariant holds again:
sequence 0 holds exactly the committed positions and no other sequence holds anything.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..context import Context
from ..errors import InvalidArgumentError
from ..memory import Memory
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


class BranchSeqs:
    """The branch sequences of one generation's token trees, each a mirror of sequence 0.

    Sequences ``0..n-1`` hold exactly the same cells — the committed positions — between tree steps
    (the module docstring says why). Owned by the loop for one generation; :meth:`release` at its end.

    Attributes:
        n: how many sequences (0 included) mirror the committed prefix now.
    """

    def __init__(self) -> None:
        self.n = 1

    def ensure(self, mem: Memory, n: int) -> None:
        """Make sequences ``self.n..n-1`` mirror sequence 0 (a copy of the prefix, once per sequence)."""
        if n > self.n:
            mem.seq_cp_many(0, range(self.n, n))
            self.n = n

    def commit(self, mem: Memory, s: int, n_seq: int, n_past: int, k: int) -> None:
        """After a verify: keep the root and the accepted path (``k`` nodes, all in branch ``s``) in every
        mirror, drop every other node. Sequences ``0..n_seq-1`` were the verify's branches."""
        mem.seq_rm(s, n_past + 1 + k)  # s's nodes below the accepted path
        # every other branch drops its cells from the root on (cells of no sequence are freed) ...
        mem.seq_rm_many([j for j in range(n_seq) if j != s], n_past)
        # ... and gets the root and the accepted path back from s (the mirrors beyond n_seq had none of them)
        mem.seq_cp_many(s, [j for j in range(self.n) if j != s], n_past, n_past + 1 + k)

    def truncate(self, mem: Memory, p: int) -> None:
        """Remove positions ``[p, ∞)`` from every mirror (the loop's rollback at an EOS)."""
        mem.seq_rm_many(range(self.n), p)

    def release(self, mem: Memory) -> None:
        """Empty every branch sequence but 0 (the loop's invariant again); sequence 0 is untouched (the
        prefix ledger relies on it: ``cache_reuse.CacheLedger.track``)."""
        if self.n > 1:
            mem.seq_rm_many(range(1, self.n))
            self.n = 1


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
                     timer: StageTimer, branches: BranchSeqs) -> TreeStep:
    """Draft, verify and commit one tree (the module docstring gives the steps).

    Args:
        target: the target context (``n_seq_max ≥ budget``, ``kv_unified``; :func:`check_tree_context`);
            sequence 0 holds exactly positions ``[0, n_past)``, the others nothing.
        drafter: a drafter with ``supports_tree``.
        last: the newest committed token (position ``n_past``, not yet decoded by the target).
        n_max: the deepest branch (tokens).  budget: the most nodes.
        sp: the target's sampling.  dsp: the drafter's (greedy unless ``verify="rejection"``).
        verify: ``"match"`` or ``"rejection"``.
        branches: the generation's mirrors of sequence 0 (sequences ``0..branches.n-1`` hold exactly
            ``[0, n_past)``, the others nothing); the caller releases them when the generation ends.

    Returns:
        :class:`TreeStep`. Every mirror then holds ``[0, n_past + 1 + n_accepted)`` — the accepted
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
    # the root goes into every mirror, as many as the budget allows leaves, whatever this tree's shape: the
    # batch then has the same sequences every step and llama.cpp reuses its graph (llm_graph_params::
    # allow_reuse compares n_seqs_unq; with the root in the tree's own branches only, SmolLM2's target
    # rebuilt it at each of 24 steps on the CPU, a chain 3 of 27)
    n_seq = max(1, len(leaves), min(budget, target.n_seq_max))
    batch = [last] + tree.tokens
    pos = np.empty(len(batch), dtype=np.int32)
    pos[0] = n_past
    pos[1:] = n_past + depths
    with timer("verify", target):
        branches.ensure(mem, n_seq)  # every branch sees the committed prefix (once a generation; cell metadata only)
        target.decode_seq_sets(batch, pos, [list(range(n_seq))] + sets, logits="all")
    with timer("accept"):
        path, bonus = _accept(target.logits(), tree, sp, verify, rng)
    rows = [0] + [i + 1 for i in path]
    drafter.observe_rows(batch, pos, rows, timer)
    k = len(path)
    with timer("rollback"):
        branches.commit(mem, sets[path[-1]][0] if path else 0, n_seq, n_past, k)
    return TreeStep(committed=[tree.tokens[i] for i in path] + [bonus], n_accepted=k, depth=depth,
                    n_nodes=len(tree), tree=tree)


def _accept(logits: np.ndarray, tree: TreeDraft, sp: SamplingParams, verify: str,
            rng: np.random.Generator) -> tuple[list[int], int]:
    if sp.greedy:
        return tree_verify_greedy(logits, tree)
    if verify == "rejection":
        return tree_verify_rejection(logits, tree, sp, rng)
    return tree_verify_match(logits, tree, sp, rng)


__all__ = ["TreeStep", "BranchSeqs", "tree_verify_step", "check_tree_context"]
