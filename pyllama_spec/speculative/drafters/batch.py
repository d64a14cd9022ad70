"""Drafting for several sequences at once: the protocol of ``Generator.generate_batch``.

One target context runs N sequences (sequence ``s`` is its KV stream ``s``); every step the
batched loop (``speculative/batch_loop.py``) asks for the drafts of all running sequences in one
call and verifies them in one target decode. A :class:`BatchDrafter` is what
``Drafter.batched(n_seq)`` returns; per batched generation the loop calls::

    begin(seq, prompt)                      # sequence seq starts over prompt (its cache is empty)
    observe(rows, timer)                    # after every target decode: each sequence's rows in it
    propose(requests, sp, timer) -> drafts  # one Draft per DraftRequest, in order
    on_accept(seq, n_drafted, n_accepted)   # after each verify step of seq
    rollback(seq, n_past)                   # seq forgets positions ≥ n_past

with the invariant of the single-sequence protocol per sequence: between steps a sequence's state
covers exactly its committed positions ``[0, n_past)``.

The point of a batch drafter is to cost one call for all sequences: llama.cpp's DFlash drafter
decodes the noise blocks of every drafting sequence in one batch (``draft()`` of
``common_speculative_impl_draft_dflash`` in common/speculative.cpp, ``n_seq > 1``), and so does
ours. Drafters that read only their own token history need no shared model: :class:`PerSequence`
gives each sequence its own copy of a single-sequence drafter.
"""
from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from ..sampling import SamplingParams
from ..timing import StageTimer
from .base import Draft, Drafter


@dataclass
class SeqRows:
    """The rows of one sequence in the target's last decode.

    Attributes:
        seq: the sequence id.
        start: index of its first row in that decode (rows of one sequence are contiguous);
            ``Context.layer_input(i)[start:start + len(tokens)]`` are its features.
        tokens: its decoded token ids, in order.
        positions: ``(len(tokens),)`` int32 positions.
        n_commit: how many of its first rows are committed (the others were rejected drafts).
    """
    seq: int
    start: int
    tokens: list[int]
    positions: np.ndarray
    n_commit: int


@dataclass
class DraftRequest:
    """Draft at most ``n_max`` tokens to follow ``last_token`` (at position ``n_past``) of ``seq``;
    ``rng`` is that sequence's generator (for drafters that sample)."""
    seq: int
    last_token: int
    n_past: int
    n_max: int
    rng: np.random.Generator = field(default_factory=np.random.default_rng)


class BatchDrafter(ABC):
    """Drafts for sequences ``0 .. n_seq-1`` of one target context (see the module docstring).

    Attributes:
        n_seq: how many sequences it serves.
        target_layer_ids: the target's layer inputs ``observe`` reads (the loop turns on those taps).
        n_max_limit: the longest draft block it can make.
    """

    def __init__(self, n_seq: int, target_layer_ids: tuple[int, ...] | list[int] = (), n_max_limit: int = 16):
        self.n_seq = n_seq
        self.target_layer_ids = list(target_layer_ids)
        self.n_max_limit = n_max_limit

    def begin(self, seq: int, prompt: list[int]) -> None:
        """Sequence ``seq`` starts over ``prompt`` (the prompt without its last token); its cache
        stream is empty."""

    def observe(self, rows: list[SeqRows], timer: StageTimer) -> None:
        """The target decoded these rows (one entry per sequence present in the decode)."""

    @abstractmethod
    def propose(self, requests: list[DraftRequest], sp: SamplingParams, timer: StageTimer) -> list[Draft]:
        """One :class:`Draft` per request, in order, each at most ``request.n_max`` tokens."""

    def on_accept(self, seq: int, n_drafted: int, n_accepted: int) -> None:
        """A verify step of ``seq`` checked ``n_drafted`` tokens and accepted ``n_accepted``."""

    def rollback(self, seq: int, n_past: int) -> None:
        """Sequence ``seq`` forgets positions ≥ ``n_past``."""


class PerSequence(BatchDrafter):
    """A batch drafter made of one copy of a single-sequence drafter per sequence, for drafters
    whose state is their own (an n-gram history): each call is forwarded to the copy of its
    sequence. No call is shared, so nothing is gained over N separate drafters but the interface.

    Args:
        drafter: the drafter to copy (deep copies; the target context is shared, not copied).
        n_seq: number of sequences.
    """

    def __init__(self, drafter: Drafter, n_seq: int):
        super().__init__(n_seq, drafter.target_layer_ids, drafter.n_max_limit)
        memo = {id(drafter.target): drafter.target}
        self.copies = [copy.deepcopy(drafter, dict(memo)) for _ in range(n_seq)]

    def begin(self, seq, prompt):
        self.copies[seq].begin(prompt)

    def observe(self, rows, timer):
        for r in rows:
            self.copies[r.seq].observe(r.tokens, r.positions, r.n_commit, timer)

    def propose(self, requests, sp, timer):
        return [self.copies[q.seq].propose(q.last_token, q.n_past, q.n_max, sp, q.rng, timer) for q in requests]

    def on_accept(self, seq, n_drafted, n_accepted):
        self.copies[seq].on_accept(n_drafted, n_accepted)

    def rollback(self, seq, n_past):
        self.copies[seq].rollback(n_past)


__all__ = ["BatchDrafter", "DraftRequest", "PerSequence", "SeqRows"]
