"""``ngram-mod``: llama.cpp's hashed n-gram table (``common/ngram-mod.cpp``, ``common_ngram_mod``,
driven by ``common_speculative_impl_ngram_mod`` in ``common/speculative.cpp``; llama.cpp PR 19164;
the n-gram drafter of ``--spec-default``).

A table of 4 Mi slots maps the hash of every ``n_match``-gram of the history to the token that
followed it (a later occurrence overwrites; colliding n-grams share a slot, unchecked). A draft
starts from the last ``n_match`` tokens of ``history + [last]`` and follows the table one token at
a time, up to ``n_max`` tokens; it is dropped when the chain breaks before ``n_min`` tokens.

Native behaviour mirrored:

* the prompt's n-grams enter the table at ``begin``; later ones only in chunks, once more than 32
  new tokens have accumulated (so the tail of the history is not looked up yet);
* the table is cleared when more than a quarter of it is used at ``begin``, and after 5
  consecutive steps that accepted under a quarter of the (uncut) draft; then it is refilled from
  the whole history at the next draft.

The hash is ``Σ tokenᵢ · 6364136223846793005^(n-1-i) mod 2^64``, then mod 2^22 (the table size):
we keep it mod 2^22 and roll it along the draft chain, so a drafted token costs O(1), and keep
the table as a dictionary of the used slots.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..._check import check_int
from ._history import HistoryDrafter
from .base import register_drafter

if TYPE_CHECKING:
    from ...context import Context

log = logging.getLogger("pyllama_spec")

_SLOTS = 4 * 1024 * 1024            # entries of common_ngram_mod in common_speculative_impl_ngram_mod
_MASK = _SLOTS - 1
_MULT = 6364136223846793005 & _MASK  # common_ngram_mod::idx multiplier, mod the table size
_CHUNK = 32                          # draft_one adds new n-grams once i_last + 32 < history length
_OCCUPANCY_MAX = 0.25                # begin() clears the table above this fill
_LOW_ACCEPT = 0.25                   # accept(): a step below this acceptance is "low"
_LOW_STREAK = 5                      # ... and this many in a row clear the table


@register_drafter
class NgramModDrafter(HistoryDrafter):
    """llama.cpp's ``--spec-type ngram-mod`` (see the module docstring).

    Args:
        target: the target context (unused; for the common constructor signature).
        n_match: n-gram length hashed (``--spec-ngram-mod-n-match``, 1..1024; llama.cpp warns
            below 16).
        n_max: longest draft (``--spec-ngram-mod-n-max``, 0..1024; also ``n_max_default`` and
            ``n_max_limit``).
        n_min: shortest draft kept (``--spec-ngram-mod-n-min``, 0..1024).

    Raises:
        InvalidArgumentError: a parameter out of range (the message names it).
    """
    kind = native_type = "ngram-mod"

    def __init__(self, target: Context | None = None, *, n_match: int = 24, n_max: int = 64, n_min: int = 48):
        super().__init__(target)
        self.n_match = check_int("n_match", n_match, min=1, max=1024)
        self.n_max = check_int("n_max", n_max, min=0, max=1024)
        self.n_min = check_int("n_min", n_min, min=0, max=1024)
        if self.n_match < 16:
            log.warning("ngram-mod n_match=%d is small: poor drafts are possible (llama.cpp PR 19164)", self.n_match)
        self.n_max_default = self.n_max_limit = self.n_max
        self._pow = pow(_MULT, self.n_match - 1, _SLOTS)  # weight of a window's first token
        self.table: dict[int, int] = {}  # slot -> next token (absent = EMPTY)
        self._reset_state()

    def _reset_state(self) -> None:
        self.table.clear()
        self.i_last = 0         # first start not yet added
        self.n_draft_last = 0   # length of the last (uncut) draft
        self.n_low = 0          # consecutive low-acceptance steps
        self._consumed = 0      # history tokens the table has read

    def _hash(self, tokens: Sequence[int]) -> int:
        h = 0
        for t in tokens:
            h = (h * _MULT + t) & _MASK
        return h

    def _add(self, lo: int, hi: int) -> None:
        """``common_ngram_mod::add`` for the n-grams starting at ``lo .. hi-1`` of the history."""
        h, n, table = self.history, self.n_match, self.table
        if hi <= lo:
            return
        x = self._hash(h[lo:lo + n])
        for i in range(lo, hi):
            table[x] = h[i + n]
            x = ((x - h[i] * self._pow) * _MULT + h[i + n]) & _MASK
        self._consumed = max(self._consumed, hi + n)

    # -- HistoryDrafter hooks -------------------------------------------------------------------
    def _reset(self) -> None:
        self._reset_state()

    def _begin(self) -> None:
        self.i_last = 0
        self.n_draft_last = 0
        n, L = self.n_match, len(self.history)
        if L < n:
            return
        self._add(0, L - n)
        self.i_last = L - n
        if len(self.table) / _SLOTS > _OCCUPANCY_MAX:
            log.warning("ngram-mod table occupancy %.2f exceeds %.2f: clearing it", len(self.table) / _SLOTS,
                        _OCCUPANCY_MAX)
            self.table.clear()
            self._consumed = 0

    def _on_truncate(self, new_len: int) -> None:
        if new_len < self._consumed:
            # the table has read tokens that are going away: rebuild it from what stays
            # (llama.cpp never cuts committed tokens), as a fresh drafter begun on them
            self._reset_state()
            n = self.n_match
            if new_len >= n:
                self._add(0, new_len - n)
                self.i_last = new_len - n

    def _draft(self, last: int) -> list[int]:
        self.n_draft_last = 0
        h, n = self.history, self.n_match
        L = len(h)
        if L < n:
            return []
        if self.i_last + _CHUNK < L:
            self._add(self.i_last, L - n)
            self.i_last = L - n
        window = h[L - n + 1:] + [last]
        x = self._hash(window)
        out: list[int] = []
        table, pw = self.table, self._pow
        for i in range(self.n_max):
            tok = table.get(x)
            if tok is None:
                if i < self.n_min:
                    return []
                break
            out.append(tok)
            first = window[i] if i < n else out[i - n]
            x = ((x - first * pw) * _MULT + tok) & _MASK
        self.n_draft_last = len(out)
        return out

    def _accept(self, n_accepted: int) -> None:
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < _LOW_ACCEPT:
                self.n_low += 1
                if self.n_low >= _LOW_STREAK:
                    self.table.clear()
                    self._consumed = 0
                    self.n_low = 0
                    self.i_last = 0
            else:
                self.n_low = 0

    def native_args(self) -> list[str]:
        return ["--spec-ngram-mod-n-match", str(self.n_match),
                "--spec-ngram-mod-n-max", str(self.n_max),
                "--spec-ngram-mod-n-min", str(self.n_min)]


__all__ = ["NgramModDrafter"]
