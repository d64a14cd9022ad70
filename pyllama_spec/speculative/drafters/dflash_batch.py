"""The batched form of the DFlash drafter (``DFlashDrafter.batched``): every sequence's noise
block in one drafter decode, as llama.cpp's ``common_speculative_impl_draft_dflash::draft`` does
for ``n_seq > 1`` (common/speculative.cpp)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import InvalidArgumentError
from ...sampler import SamplerChain
from ..sampling import SamplingParams, densify, filtered_rows, sample_rows
from ..timing import StageTimer
from .base import Draft
from .batch import BatchDrafter, DraftRequest, SeqRows

if TYPE_CHECKING:  # the parent's type only: dflash.py imports this module to make the batch form
    from .dflash import DFlashDrafter


class DFlashBatch(BatchDrafter):
    """:meth:`DFlashDrafter.batched`: sequences ``0 .. n_seq-1`` of the drafter's own context.

    Per step: the committed rows of every sequence are injected in one embedding batch, and the
    noise blocks of every drafting sequence are decoded in one batch. The blocks of one decode all
    have the same length (the longest ``n_max`` asked for, + 1; shorter requests read only their
    first rows): with one KV stream per sequence llama.cpp splits a batch into ubatches holding
    equally many tokens of each sequence, which would cut an unequal block in two and break its
    non-causal attention. A request near the end of its context gets a block of its own length.

    Raises:
        InvalidArgumentError: ``n_seq`` exceeds the target context's ``n_seq_max``.
    """

    def __init__(self, parent: DFlashDrafter, n_seq: int):
        if not 1 <= n_seq <= parent.ctx.n_seq_max:
            raise InvalidArgumentError(f"a batched DFlash draft serves 1..{parent.ctx.n_seq_max} sequences (the "
                                       f"target context's n_seq_max), got {n_seq}")
        super().__init__(n_seq, parent.target_layer_ids, parent.n_max_limit)
        self.parent = parent
        self._chains = False

    def begin(self, seq: int, prompt: list[int]) -> None:
        self.parent.ctx.memory.seq_rm(seq)  # the whole stream of this sequence
        self.parent._pending = None  # rows staged by a single run (fused injection) are void
        self.parent._recent = None  # and so are the rows it kept to inject again (constant_shape)
        self.parent._version = -1  # sequence 0's record of a single run no longer holds

    def observe(self, rows: list[SeqRows], timer: StageTimer) -> None:
        rows = [r for r in rows if r.n_commit > 0]
        if not rows:
            return
        target, ctx = self.parent.target, self.parent.ctx
        with timer("extract"):
            idx = np.concatenate([np.arange(r.start, r.start + r.n_commit) for r in rows])
            feats = np.concatenate([target.layer_input(i)[idx] for i in self.target_layer_ids], axis=1)
            pos = np.concatenate([np.asarray(r.positions[:r.n_commit], dtype=np.int32) for r in rows])
            seq = np.concatenate([np.full(r.n_commit, r.seq, dtype=np.int32) for r in rows])
        with timer("inject", ctx):
            ctx.decode_embd(feats, pos, seq_id=seq)

    def propose(self, requests: list[DraftRequest], sp: SamplingParams, timer: StageTimer) -> list[Draft]:
        drafts = [Draft(tokens=[]) for _ in requests]
        live = [i for i, q in enumerate(requests) if min(q.n_max, self.n_max_limit) > 0]
        if not live:
            return drafts
        ctx = self.parent.ctx
        # p_min reads each row's top candidates, so it needs the logits
        greedy_backend = sp.greedy and self.parent.backend_sampling and self.parent.p_min == 0.0
        if greedy_backend and not self._chains:
            for s in range(self.n_seq):
                ctx.set_sampler(SamplerChain(), s)  # a fresh chain each: llama.cpp sets each up once
            self._chains = True
        elif not greedy_backend and ctx.samplers:
            for s in list(ctx.samplers):
                ctx.set_sampler(None, s)
            self._chains = False
        length = max(min(requests[i].n_max, self.n_max_limit) for i in live) + 1
        groups: dict[int, list[int]] = {}
        for i in live:
            q = requests[i]
            fits = q.n_past + length <= ctx.n_ctx_seq
            groups.setdefault(length if fits else min(q.n_max, self.n_max_limit) + 1, []).append(i)
        for blen, members in groups.items():
            self._draft_group(requests, members, blen, sp, drafts, timer)
        return drafts

    def _draft_group(self, requests: list[DraftRequest], members: list[int], blen: int, sp: SamplingParams,
                     drafts: list[Draft], timer: StageTimer) -> None:
        ctx, mask = self.parent.ctx, self.parent.mask_token
        n = len(members) * blen
        toks = np.full(n, mask, dtype=np.int32)
        pos = np.empty(n, dtype=np.int32)
        seq = np.empty(n, dtype=np.int32)
        for j, i in enumerate(members):
            q = requests[i]
            toks[j * blen] = q.last_token
            pos[j * blen:(j + 1) * blen] = np.arange(q.n_past, q.n_past + blen)
            seq[j * blen:(j + 1) * blen] = q.seq
        with timer("draft", ctx):
            ctx.decode(toks, pos, seq_id=seq, logits="all")
        with timer("draft_sample"):
            sampled = ctx.sampled_tokens() if ctx.samplers else None
            logits = np.empty((0, 0), np.float32) if sampled is not None else ctx.logits()
            for j, i in enumerate(members):
                q = requests[i]
                k = min(q.n_max, self.n_max_limit)
                rows = slice(j * blen + 1, j * blen + 1 + k)
                if sampled is not None:
                    drafts[i] = Draft(tokens=sampled[rows])
                elif self.parent.p_min > 0.0:  # cut at the first unsure row, as the single-sequence draft
                    drafts[i] = self.parent._read_block(logits[rows], sp, q.rng)
                elif sp.greedy:
                    drafts[i] = Draft(tokens=[int(t) for t in np.argmax(logits[rows], axis=1)])
                else:
                    fr = filtered_rows(logits[rows], sp)
                    drafts[i] = Draft(tokens=[int(t) for t in sample_rows(*fr, q.rng)],
                                      probs=densify(*fr, self.parent.target.model.n_vocab))
                if len(drafts[i].tokens) < self.parent.n_min:
                    drafts[i] = Draft(tokens=[])
        with timer("rollback"):
            for i in members:  # the noise blocks never stay in the drafter's cache
                ctx.memory.seq_rm(requests[i].seq, requests[i].n_past)

    def rollback(self, seq: int, n_past: int) -> None:
        self.parent.ctx.memory.seq_rm(seq, n_past)


__all__ = ["DFlashBatch"]
