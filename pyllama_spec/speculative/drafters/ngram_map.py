"""``ngram-map-k`` and ``ngram-map-k4v``: llama.cpp's n-gram map (``common/ngram-map.cpp``:
``common_ngram_map_begin`` / ``_draft`` / ``_accept``, driven by
``common_speculative_impl_ngram_map_k`` in ``common/speculative.cpp``; llama.cpp PR 18471).

Both look up the last ``n = size_n`` tokens of ``history + [last]`` and draft the ``m = size_m``
tokens that followed an earlier occurrence of that key, remembering per key how many tokens
the target accepted last time (the next draft from that key is no longer than that):

* ``ngram-map-k`` (key only) drafts whatever followed the occurrence found;
* ``ngram-map-k4v`` (key and up to 4 values) also counts the distinct m-grams seen after the
  key (``COMMON_NGRAM_MAX_VALUES = 4`` slots) and drafts only after ``min_hits`` hits of the key
  and when the most frequent m-gram is at least twice as frequent as the others together.

The occurrence is found the native way, quirks included, so proposals match token for token:
a hash table of 2^18 slots from the key's LCG hash to its first-inserted position (collisions
keep the older entry; filled in descending order per call, for starts up to ``L - n - m - 1``,
skipping the starts ``(L₀ - n - m - 1, L₀]`` around the prompt end ``L₀``), then a backwards
scan of the starts not yet in the table. Where llama.cpp scans, we bisect an index of the
history's n-grams; where it walks its list of keys, we use a dictionary.

Native quirks mirrored:

* the draft copies the tokens after the occurrence found, not the winning m-gram;
* the statistics walk re-counts the occurrence at the previous ``stat_idx`` (inclusive bounds);
* after a step that accepted 0 tokens the key's next draft is empty (``n_accepted = 0`` is kept),
  and an empty draft still counts as "created", so such a key stays silent.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..._check import check_int
from ._history import HistoryDrafter, NgramIndex
from .base import register_drafter

if TYPE_CHECKING:
    from ...context import Context

_MAX_VALUES = 4             # COMMON_NGRAM_MAX_VALUES
_MAX_COUNT = 16380          # COMMON_NGRAM_MAX_VALUE_COUNT
_HASH_SLOTS = 262144        # COMMON_NGRAM_HASH_MAP_SIZE (a power of two: the low 18 bits)
_LCG = 2654435761           # LCG_FACTOR


def lcg_slot(tokens: Sequence[int]) -> int:
    """``common_ngram_map_hash(tokens) % COMMON_NGRAM_HASH_MAP_SIZE`` (uint32 LCG hash)."""
    h = 0
    for t in tokens:
        h = (h * _LCG + t) & (_HASH_SLOTS - 1)
    return h


class _Key:
    """``common_ngram_map_key``: a key n-gram's position, statistics and up to 4 values."""
    __slots__ = ("key_idx", "stat_idx", "key_num", "values")

    def __init__(self, key_idx: int, m: int):
        self.key_idx = key_idx
        self.stat_idx = 0
        self.key_num = 0
        # per value slot: [value_idx (0 = unused), value_num, n_accepted]
        self.values = [[0, 0, m] for _ in range(_MAX_VALUES)]


class _NgramMapDrafter(HistoryDrafter):
    key_only = True
    _opt = ""

    def __init__(self, target: Context | None = None, *, size_n: int = 12, size_m: int = 48, min_hits: int = 1):
        super().__init__(target)
        self.size_n = check_int("size_n", size_n, min=1, max=1024)
        self.size_m = check_int("size_m", size_m, min=1, max=1024)
        self.min_hits = check_int("min_hits", min_hits, min=1, max=65535)
        self.n_max_default = self.n_max_limit = self.size_m
        self._index = NgramIndex(self.size_n)
        self._reset_state()

    def _reset_state(self) -> None:
        self.keys: list[_Key] = []
        self._key_of: dict[tuple, int] = {}      # key n-gram -> offset in self.keys
        self.key_map: dict[int, int] = {}        # hash slot -> start position (absent = 0)
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0

    # -- HistoryDrafter hooks -------------------------------------------------------------------
    def _reset(self) -> None:
        self._index.clear()
        self._reset_state()

    def _begin(self) -> None:
        # common_ngram_map_begin on a fresh map: nothing to clean up
        self.idx_last_check = self.size_last_begin = len(self.history)

    def _on_append(self, old_len: int) -> None:
        self._index.extend(self.history)

    def _on_truncate(self, new_len: int) -> None:
        self._index.truncate(self.history, new_len)
        if new_len < self.idx_last_check:
            # the map has read tokens that are going away: start afresh on what stays (llama.cpp
            # never cuts committed tokens; this keeps every stored position inside the history)
            self._reset_state()
            self.idx_last_check = self.size_last_begin = new_len

    def _draft(self, last: int) -> list[int]:
        self.last_draft_created = False
        self.last_draft_key_idx = 0
        self.last_draft_value_idx = 0
        inp, n, m = self.history, self.size_n, self.size_m
        L = len(inp)
        if L < 2 * n + m:
            return []
        self.idx_last_check = L
        key = tuple(inp[L - n + 1:]) + (last,)
        slb, kmli = self.size_last_begin, self.key_map_last_idx
        top = L - n - m - 1  # the largest start looked at

        match_pos = 0
        idx_key = self.key_map.get(lcg_slot(key), 0)
        if idx_key != 0 and idx_key < top and tuple(inp[idx_key:idx_key + n]) == key:
            match_pos = idx_key
        if match_pos == 0 and slb > n + m + 1:  # starts (kmli, slb - n - m - 1], latest first
            match_pos = self._index.last_in(key, kmli + 1, slb - n - m - 1) or 0
        if match_pos == 0:                       # starts (max(slb, kmli), top], latest first
            match_pos = self._index.last_in(key, max(slb, kmli) + 1, top) or 0

        # add the new starts to the hash table, in the native order (first writer wins)
        if slb > n + m + 1:
            self._fill(kmli + 1, slb - n - m - 1)
        self._fill(max(slb, kmli) + 1, top)
        self.key_map_last_idx = max(top, kmli)

        if match_pos == 0:
            return []
        off = self._key_of.get(key)
        if off is None:
            off = len(self.keys)
            self.keys.append(_Key(match_pos, m))
            self._key_of[key] = off
        k = self.keys[off]
        k.key_num = min(k.key_num + 1, _MAX_COUNT)

        if self.key_only:
            n_draft = max(0, min(m, k.values[0][2]))
            self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, off, 0
            return inp[match_pos + n:match_pos + n + n_draft]

        if k.key_num < self.min_hits:
            return []
        # count the m-grams after every occurrence of the key in [stat_idx, match_pos]
        for i in self._index.starts_in(key, k.stat_idx, match_pos):
            vb = i + n
            value = inp[vb:vb + m]
            slot = -1
            for v, val in enumerate(k.values):
                if val[0] == 0:  # an empty slot: a new m-gram
                    val[0], val[1], val[2] = vb, 0, m
                    slot = v
                    break
                if inp[val[0]:val[0] + m] == value:
                    slot = v
                    break
            if slot >= 0:
                k.values[slot][1] = min(k.values[slot][1] + 1, _MAX_COUNT)
        k.stat_idx = match_pos

        max_occur, slot_max = 0, 0
        for v, val in enumerate(k.values):
            if val[1] > max_occur:
                max_occur, slot_max = val[1], v
        sum_occur = sum(val[1] for v, val in enumerate(k.values) if v != slot_max)
        if sum_occur > 0 and max_occur < 2 * sum_occur:
            return []  # no clear favourite
        n_draft = max(0, min(m, k.values[slot_max][2]))
        self.last_draft_created, self.last_draft_key_idx, self.last_draft_value_idx = True, off, slot_max
        return inp[match_pos + n:match_pos + n + n_draft]

    def _fill(self, lo: int, hi: int) -> None:
        """Put the starts ``hi, hi-1, …, lo`` into the hash table where their slot is free."""
        if hi < lo:
            return
        inp, n, km = self.history, self.size_n, self.key_map
        if hi - lo < 64:
            for j in range(hi, lo - 1, -1):
                km.setdefault(lcg_slot(inp[j:j + n]), j)
            return
        # many starts (the prompt, at the first draft): hash them together
        a = np.asarray(inp[lo:hi + n], dtype=np.uint32)
        cnt = hi - lo + 1
        h = np.zeros(cnt, dtype=np.uint32)
        for i in range(n):
            h = h * np.uint32(_LCG) + a[i:i + cnt]  # uint32 arithmetic wraps like the C code
        slots = (h & np.uint32(_HASH_SLOTS - 1)).tolist()
        for j in range(hi, lo - 1, -1):
            km.setdefault(slots[j - lo], j)

    def _accept(self, n_accepted: int) -> None:
        # common_ngram_map_accept: the next draft from this key/value is at most n_accepted long
        if self.last_draft_created:
            self.keys[self.last_draft_key_idx].values[self.last_draft_value_idx][2] = n_accepted

    def native_args(self) -> list[str]:
        p = f"--spec-ngram-{self._opt}-"
        return [p + "size-n", str(self.size_n), p + "size-m", str(self.size_m),
                p + "min-hits", str(self.min_hits)]


@register_drafter
class NgramMapKDrafter(_NgramMapDrafter):
    """llama.cpp's ``--spec-type ngram-map-k`` (see the module docstring).

    Args:
        target: the target context (unused; for the common constructor signature).
        size_n: key length (``--spec-ngram-map-k-size-n``, 1..1024).
        size_m: draft length (``--spec-ngram-map-k-size-m``, 1..1024; also ``n_max_default``
            and ``n_max_limit``).
        min_hits: ``--spec-ngram-map-k-min-hits`` (≥ 1; unused in key-only mode, as natively).

    Raises:
        InvalidArgumentError: a parameter out of range (the message names it).
    """
    kind = native_type = "ngram-map-k"
    key_only = True
    _opt = "map-k"


@register_drafter
class NgramMapK4VDrafter(_NgramMapDrafter):
    """llama.cpp's ``--spec-type ngram-map-k4v`` (see the module docstring).

    Args:
        target: the target context (unused; for the common constructor signature).
        size_n: key length (``--spec-ngram-map-k4v-size-n``, 1..1024).
        size_m: value (draft) length (``--spec-ngram-map-k4v-size-m``, 1..1024; also
            ``n_max_default`` and ``n_max_limit``).
        min_hits: hits of the key before it drafts (``--spec-ngram-map-k4v-min-hits``, ≥ 1).

    Raises:
        InvalidArgumentError: a parameter out of range (the message names it).
    """
    kind = native_type = "ngram-map-k4v"
    key_only = False
    _opt = "map-k4v"


__all__ = ["NgramMapKDrafter", "NgramMapK4VDrafter", "lcg_slot"]
