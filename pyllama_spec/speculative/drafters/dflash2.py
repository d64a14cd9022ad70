"""DFlash2 drafter: DFlash with a selector that picks the draft as a path through per-position
candidates (llama.cpp ``common_speculative_impl_draft_dflash`` with ``is_dflash2``, and
``build_dflash2_selector`` in ``src/models/dflash.cpp``; ``--spec-type draft-dflash`` on a file
with ``dflash.selector_top_k > 0``).

The block pass is DFlash's (target features injected as K/V, one non-causal pass over
``[last, mask × n_max]``), but instead of logits the graph emits a *lattice*, one row per block
position ``i ≥ 1``: the ``k`` top candidate token ids (as floats), then a ``k × k`` table of
transition scores (predecessor-major: ``scores[p·k + s]`` scores successor ``s`` after
predecessor ``p``; at position 1 the predecessor is the anchor token, so all ``k`` rows are
alike). The draft walks it greedily: start at predecessor 0, at each position take the
best-scoring successor; with ``p_min > 0`` stop where that choice's softmax over the ``k``
scores falls below ``p_min``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..sampling import SamplingParams
from ..timing import StageTimer
from ..tree import TreeDraft, build_lattice_tree
from .base import Draft, Drafter
from .dflash import DFlashDrafter

if TYPE_CHECKING:
    from .batch import BatchDrafter


def walk_lattice(rows: np.ndarray, top_k: int, p_min: float = 0.0) -> list[int]:
    """The greedy path through DFlash2 lattice rows ``(n, width)`` (row ``i`` = block position
    ``i + 1``), as ``common_speculative_impl_draft_dflash::draft`` walks it.

    Returns:
        The draft token ids (at most ``n``).
    """
    tokens: list[int] = []
    pred = 0
    for row in rows:
        scores = row[top_k + pred * top_k: top_k + (pred + 1) * top_k]
        pred = int(np.argmax(scores))
        if p_min > 0.0 and 1.0 / float(np.exp(scores.astype(np.float64) - scores[pred]).sum()) < p_min:
            break
        tokens.append(int(row[pred]))
    return tokens


class DFlash2Drafter(DFlashDrafter):
    """A DFlash2 drafter (made by :class:`~.dflash.DFlashDrafter` for a file with a selector).

    The selector gives a path, not distributions: with ``verify="rejection"`` the draft counts
    as deterministic. Token trees (``tree=``): the best-first tree through the same lattice
    (:func:`~pyllama_spec.speculative.tree.build_lattice_tree`), from the one block decode; deterministic
    too (the match rule's acceptance at T > 0, one-hot q for ``verify="rejection"``); ``p_min`` / ``n_min``
    do not apply to trees.
    """
    supports_rejection = False
    supports_tree = True

    def __init__(self, target, path=None, **kwargs):
        super().__init__(target, path, **kwargs)
        self.top_k = self.meta["selector_top_k"]
        # the lattice rows are read for every block token (llama.cpp: masked = false)
        self.ctx.set_embeddings_nextn(True, False)

    def _lattice(self, last_token: int, n_past: int, n_max: int, timer: StageTimer) -> np.ndarray:
        """One block decode of ``[last, mask × n_max]``: the lattice rows of positions 1..n_max ``(n_max, width)``
        (a view of the drafter's output, valid until its next decode); the block leaves the drafter's cache."""
        self.flush(timer)  # rows deferred while n_max="auto" rested (observe_deferred); closes a hole of a long rest
        block = np.full(n_max + 1, self.mask_token, dtype=np.int32)
        block[0] = last_token
        with timer("draft", self.ctx):
            # no logits rows: DFlash2 reads the lattice only
            self.ctx.decode(block, np.arange(n_past, n_past + n_max + 1, dtype=np.int32), logits="none")
        rows = self.ctx.embeddings_nextn()[1:n_max + 1]
        with timer("rollback"):
            self.ctx.memory.seq_rm(0, n_past)
        self._settle()
        return rows

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        n_max = min(n_max, self.n_max_limit)
        if n_max <= 0:
            return Draft(tokens=[])
        rows = self._lattice(last_token, n_past, n_max, timer)
        with timer("draft_sample"):
            tokens = walk_lattice(rows, self.top_k, self.p_min)
        return Draft(tokens=tokens if len(tokens) >= self.n_min else [])

    def propose_tree(self, last_token: int, n_past: int, n_max: int, budget: int, sp: SamplingParams,
                     rng: np.random.Generator, timer: StageTimer) -> TreeDraft:
        # the block decode of propose(); the lattice becomes a tree instead of one greedy path
        n_max = min(n_max, self.n_max_limit, budget)
        if n_max <= 0:
            return TreeDraft(tokens=[], parents=np.zeros(0, dtype=np.int64))
        rows = self._lattice(last_token, n_past, n_max, timer)
        with timer("draft_sample"):
            return build_lattice_tree(rows, self.top_k, budget)

    def batched(self, n_seq: int) -> BatchDrafter:
        # DFlashBatch drafts plain DFlash blocks (logits rows); this kind reads more of its graph
        return Drafter.batched(self, n_seq)


DFlashDrafter.selector_class = DFlash2Drafter  # what DFlashDrafter(target, path) makes for such a file


__all__ = ["DFlash2Drafter", "walk_lattice"]
