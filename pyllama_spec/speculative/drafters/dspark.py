"""DSpark drafter: DFlash with a Markov head and an optional confidence head (llama.cpp
``common_speculative_impl_draft_dflash`` with ``is_dspark``, ``build_dspark_markov_head`` in
``src/models/dflash.cpp``; ``--spec-type draft-dspark``, chosen from a file with
``markov_w1.weight``).

The block pass is DFlash's; inside the graph a low-rank Markov head adds to each position's
logits a bias from the previous position's (greedy) token, ``markov_w2 · markov_w1[prev]``, so
the block is drafted semi-autoregressively in one pass. With ``dflash.sample_from_anchor``
(the default) the anchor row itself predicts the first draft token, so a block of ``n``
tokens ``[last, mask × (n − 1)]`` gives ``n`` drafts (up to the trained block size);
otherwise it is DFlash's ``[last, mask × n]`` read from row 1. A confidence head (sigmoid per
row, emitted as next-n embeddings) lets ``p_min`` cut the draft where acceptance becomes
unlikely.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import DrafterMismatchError, InvalidArgumentError
from ..sampling import SamplingParams
from ..timing import StageTimer
from .base import Draft, Drafter, register_drafter
from .dflash import DFlashDrafter

if TYPE_CHECKING:
    from .batch import BatchDrafter


@register_drafter
class DSparkDrafter(DFlashDrafter):
    """A DSpark drafter (``--spec-type draft-dspark``); arguments as :class:`~.dflash.DFlashDrafter`.

    Raises:
        DrafterMismatchError: not a DSpark file for this target.
        InvalidArgumentError: ``p_min > 0`` with a file that has no confidence head (llama.cpp:
            "please set --spec-draft-p-min 0").
    """
    kind = "draft-dspark"
    aliases = ("dspark",)
    supports_tree = False  # (its Markov head conditions each row on the one before: not per-position candidates)

    def __init__(self, target, path=None, **kwargs):
        super().__init__(target, path, **kwargs)
        if not self.meta["markov"]:
            self.close()
            raise DrafterMismatchError(f"{self.model.path.name} has no Markov head (markov_w1.weight): it is a "
                                       "DFlash drafter, use kind 'draft-dflash'")
        if self.p_min > 0.0 and not self.meta["confidence"]:
            self.close()
            raise InvalidArgumentError(f"{self.model.path.name} has no confidence head, so p_min must be 0 "
                                       f"(got {self.p_min})")
        self.from_anchor = self.meta["sample_from_anchor"]
        self.n_max_limit = self.block_size if self.from_anchor else self.block_size - 1
        self.n_max_default = min(7, self.n_max_limit)

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        n_max = min(n_max, self.n_max_limit)
        if n_max <= 0:
            return Draft(tokens=[])
        self.flush(timer)  # rows deferred while n_max="auto" rested (observe_deferred); closes a hole of a long rest
        first = 0 if self.from_anchor else 1  # the row that predicts the first draft token
        n_block = n_max + first
        block = np.full(n_block, self.mask_token, dtype=np.int32)
        block[0] = last_token
        with timer("draft", self.ctx):
            self.ctx.decode(block, np.arange(n_past, n_past + n_block, dtype=np.int32), logits="all")
        with timer("draft_sample"):
            conf = self.ctx.embeddings_nextn()[first:, 0] if self.p_min > 0.0 else None
            draft = self._read_block(self.ctx.logits()[first:], sp, rng, conf)
        with timer("rollback"):
            self.ctx.memory.seq_rm(0, n_past)
        self._settle()
        return draft


    def batched(self, n_seq: int) -> BatchDrafter:
        # DFlashBatch drafts plain DFlash blocks (logits rows); this kind reads more of its graph
        return Drafter.batched(self, n_seq)


__all__ = ["DSparkDrafter"]
