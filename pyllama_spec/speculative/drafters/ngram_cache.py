"""``ngram-cache``: llama.cpp's n-gram frequency caches (``common/ngram-cache.cpp``:
``common_ngram_cache_update`` / ``_draft`` / ``_load``, driven by
``common_speculative_impl_ngram_cache`` in ``common/speculative.cpp``; the algorithm of
``examples/lookup``, after Saxena 2023's prompt lookup).

Three caches map an n-gram (1 to 4 tokens) to the counts of the tokens that followed it: the
*context* cache, built from this generation's tokens; an optional *dynamic* cache and an optional
*static* cache, loaded from files written by ``llama-lookup-create`` / ``common_ngram_cache_save``
(``--lookup-cache-dynamic`` / ``--lookup-cache-static``). A draft grows one token at a time, up to
``n_draft``: the longest context n-gram whose most frequent follower passes a count and a share
threshold (lax), else the dynamic cache (strict), else the static cache alone; the static
cache's counts for the last 2 tokens also weigh the candidates.

Native behaviour mirrored:

* the context cache is updated at each draft with the tokens committed since the last one plus
  ``last``, counting only n-grams *inside* that chunk (``nnew`` = the chunk size): after a step
  that committed one token nothing is learned, and n-grams across chunk edges never are;
* ties between followers are broken by the iteration order of libstdc++'s
  ``std::unordered_map<llama_token, int32_t>`` (identity hash, a new key first in its bucket,
  new buckets first, 13 → 29 → 59 … buckets): :func:`stl_order` reproduces it, so drafts match
  token for token where two followers are equally frequent;
* ``n_draft`` is 8 in llama.cpp (a constant there, a keyword here).

llama.cpp reads memory out of bounds when the history plus ``last`` holds fewer than 4 tokens
(n-grams longer than the sequence); here those n-grams are simply not looked up.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from ..._check import check_int
from ...errors import InvalidArgumentError
from ._history import HistoryDrafter
from .base import register_drafter

if TYPE_CHECKING:
    from ...context import Context

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2   # LLAMA_NGRAM_MIN / _MAX / _STATIC
# draft_min_sample_size_* / draft_min_percent_*, indexed by n-gram size - 1
_LAX = ((2, 2, 1, 1), (66, 50, 50, 50))
_STRICT = ((4, 3, 2, 2), (75, 66, 66, 66))

# bucket counts a libstdc++ unordered_map passes through while it grows by single inserts
# (_Prime_rehash_policy, max load factor 1; measured with g++ 12: a 14th key rehashes 13 -> 29, ...)
_STL_BUCKETS = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061,
                712697, 1447153, 2938679, 5967347)


def stl_order(keys: Iterable[int]) -> list[int]:
    """Iteration order of a libstdc++ ``std::unordered_map<int, …>`` filled by inserting ``keys``
    (distinct, non-negative) in this order into an empty map, with no erasures.

    libstdc++ keeps one singly linked list of nodes: a new key is linked first in its bucket's
    run when the bucket holds keys, else first in the list (``_M_insert_bucket_begin``); a rehash
    re-links the old list front to back by the same rule (``_M_rehash_aux``). Copies keep the order.
    """
    n_bkt = 1
    runs: dict[int, deque] = {}   # bucket -> its keys, front first
    run_order: deque = deque()    # buckets, front first
    count = 0
    for k in keys:
        if n_bkt == 1 or count + 1 > n_bkt:  # _M_need_rehash: the next resize is at the bucket count
            old = [x for b in run_order for x in runs[b]]
            n_bkt = _STL_BUCKETS[0] if n_bkt == 1 else _STL_BUCKETS[_STL_BUCKETS.index(n_bkt) + 1]
            runs, run_order = {}, deque()
            for x in old:
                _link(runs, run_order, x, n_bkt)
        _link(runs, run_order, k, n_bkt)
        count += 1
    return [x for b in run_order for x in runs[b]]


def _link(runs: dict, run_order: deque, k: int, n_bkt: int) -> None:
    b = k % n_bkt
    run = runs.get(b)
    if run is None:
        runs[b] = deque([k])
        run_order.appendleft(b)
    else:
        run.appendleft(k)


class _Counts:
    """``common_ngram_cache_part``: follower token -> count, with the running total and the
    tokens at the maximum count (in insertion order), so a lookup costs O(1)."""
    __slots__ = ("counts", "total", "best", "leaders", "_order")

    def __init__(self):
        self.counts: dict[int, int] = {}
        self.total = 0
        self.best = 0
        self.leaders: list[int] = []
        self._order = None

    def add(self, tok: int, by: int = 1) -> None:
        c = self.counts.get(tok, 0)
        if c == 0:
            self._order = None
        c += by
        self.counts[tok] = c
        self.total += by
        if c > self.best:
            self.best, self.leaders = c, [tok]
        elif c == self.best:
            self.leaders.append(tok)

    def order(self) -> list[int]:
        """The keys in libstdc++'s iteration order (cached until a key is added)."""
        if self._order is None:
            self._order = stl_order(self.counts)
        return self._order

    def argmax(self) -> int:
        """The most frequent follower; a tie goes to the first in libstdc++'s order."""
        if len(self.leaders) == 1:
            return self.leaders[0]
        lead = set(self.leaders)
        return next(t for t in self.order() if t in lead)


def load_ngram_cache(path: str | os.PathLike, *, name: str = "path") -> dict[tuple, _Counts]:
    """Read a file written by ``common_ngram_cache_save`` (``llama-lookup-create``).

    Records: the n-gram as 4 int32 (-1 past its length), an int32 count ``k``, then ``k`` pairs
    of int32 (token, count); native byte order. Returns ``{n-gram tuple: counts}``.

    Raises:
        InvalidArgumentError: the file is missing or not such a cache (``name`` in the message).
    """
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except OSError as exc:
        raise InvalidArgumentError(f"{name}: cannot read n-gram cache {os.fspath(path)!r}: {exc}") from None
    if len(blob) % 4:
        raise InvalidArgumentError(f"{name}: {os.fspath(path)!r} is not an n-gram cache (size not a multiple of 4)")
    data = np.frombuffer(blob, dtype=np.int32).tolist()
    cache: dict[tuple, _Counts] = {}
    i, n = 0, len(data)
    while i < n:
        if i + 5 > n:
            raise InvalidArgumentError(f"{name}: {os.fspath(path)!r} is not an n-gram cache (truncated record)")
        ngram = tuple(t for t in data[i:i + NGRAM_MAX] if t != -1)
        k = data[i + NGRAM_MAX]
        i += NGRAM_MAX + 1
        if k <= 0 or i + 2 * k > n or not ngram:
            raise InvalidArgumentError(f"{name}: {os.fspath(path)!r} is not an n-gram cache (bad record)")
        part = _Counts()
        for j in range(i, i + 2 * k, 2):
            if data[j + 1] <= 0:
                raise InvalidArgumentError(f"{name}: {os.fspath(path)!r} is not an n-gram cache (count ≤ 0)")
            if data[j] not in part.counts:  # emplace keeps the first
                part.add(data[j], data[j + 1])
        i += 2 * k
        cache.setdefault(ngram, part)   # emplace keeps the first
    return cache


@register_drafter
class NgramCacheDrafter(HistoryDrafter):
    """llama.cpp's ``--spec-type ngram-cache`` (see the module docstring).

    Args:
        target: the target context (unused; for the common constructor signature).
        n_draft: longest draft (tokens; llama.cpp fixes it at 8); also ``n_max_default`` and
            ``n_max_limit``.
        lookup_cache_static: a static cache file (``--lookup-cache-static``), or None.
        lookup_cache_dynamic: a dynamic cache file (``--lookup-cache-dynamic``; read, not
            written back, as in llama.cpp's speculative driver), or None. llama-server and
            llama-lookup take these two options, llama-speculative-simple does not.

    Raises:
        InvalidArgumentError: a parameter out of range, or an unreadable cache file.
    """
    kind = native_type = "ngram-cache"

    def __init__(self, target: Context | None = None, *, n_draft: int = 8,
                 lookup_cache_static: str | os.PathLike | None = None,
                 lookup_cache_dynamic: str | os.PathLike | None = None) -> None:
        super().__init__(target)
        self.n_draft = check_int("n_draft", n_draft, min=1, max=1024)
        self.n_max_default = self.n_max_limit = self.n_draft
        self.lookup_cache_static = lookup_cache_static
        self.lookup_cache_dynamic = lookup_cache_dynamic
        self.nc_static = {} if lookup_cache_static is None else load_ngram_cache(
            lookup_cache_static, name="lookup_cache_static")
        self.nc_dynamic = {} if lookup_cache_dynamic is None else load_ngram_cache(
            lookup_cache_dynamic, name="lookup_cache_dynamic")
        self.nc_context: dict[tuple, _Counts] = {}
        self.cache_size = 0  # history tokens (and the last one) counted in nc_context

    # -- HistoryDrafter hooks -------------------------------------------------------------------
    def _reset(self) -> None:
        self.nc_context = {}
        self.cache_size = 0

    def _on_truncate(self, new_len: int) -> None:
        if new_len < self.cache_size:
            # the context cache has counted tokens that are going away: recount from scratch at
            # the next draft (llama.cpp never cuts committed tokens)
            self._reset()

    def _update(self, tokens: list) -> None:
        """``common_ngram_cache_update(nc_context, 1, 4, tokens, len(tokens))``."""
        cache = self.nc_context
        get = cache.get
        for size in range(NGRAM_MIN, NGRAM_MAX + 1):
            keys = zip(*(tokens[j:len(tokens) - size + j] for j in range(size)))  # tokens[i-size:i], i ≥ size
            for key, tok in zip(keys, tokens[size:]):
                part = get(key)
                if part is None:
                    part = cache[key] = _Counts()
                part.add(tok)

    def _draft(self, last: int) -> list[int]:
        h = self.history
        L = len(h)
        if self.cache_size < L + 1:
            self._update(h[self.cache_size:] + [last])
            self.cache_size = L + 1
        if L + 1 < NGRAM_STATIC:
            return []
        seq = h[-(NGRAM_MAX - 1):] + [last]  # the tail of history + [last] + drafts is all we read
        n_seq = L + 1                        # length of the whole sequence
        out: list[int] = []
        while len(out) < self.n_draft:
            static_key = tuple(seq[-NGRAM_STATIC:])
            part_static = self.nc_static.get(static_key) if self.nc_static else None
            keys = [tuple(seq[-s:]) if s <= n_seq else None for s in range(NGRAM_MIN, NGRAM_MAX + 1)]
            tok = _try_primary(self.nc_context, keys, part_static, _LAX)
            if tok is None and self.nc_dynamic:
                tok = _try_primary(self.nc_dynamic, keys, part_static, _STRICT)
            if tok is None and part_static is not None:
                tok = _try_static(part_static)
            if tok is None:
                break
            out.append(tok)
            seq.append(tok)
            n_seq += 1
        return out

    def native_args(self) -> list[str]:
        args = []
        if self.lookup_cache_static is not None:
            args += ["--lookup-cache-static", os.fspath(self.lookup_cache_static)]
        if self.lookup_cache_dynamic is not None:
            args += ["--lookup-cache-dynamic", os.fspath(self.lookup_cache_dynamic)]
        return args


def _try_primary(cache: dict, keys: list, part_static: _Counts | None,
                 limits: tuple[tuple[int, ...], tuple[int, ...]]) -> int | None:
    """``try_draft(nc_primary, ngrams_primary, part_static, ...)``: longest n-gram first."""
    min_sample, min_percent = limits
    for i in range(len(keys) - 1, -1, -1):
        if keys[i] is None:
            continue
        part = cache.get(keys[i])
        if part is None:
            continue
        if part_static is None:
            # every candidate weighs 1: the most frequent wins (the first in map order on a tie)
            max_count, total = part.best, part.total
            if total < min_sample[i] or 100 * max_count < min_percent[i] * total:
                continue
            return part.argmax()
        best_tok, max_p, max_s = None, 0, 0
        static = part_static.counts
        for t in part.order():
            c = part.counts[t]
            s = 100 * static[t] if t in static else 1
            if c * s > max_p * max_s:
                best_tok, max_p, max_s = t, c, s
        if part.total < min_sample[i] or 100 * max_p < min_percent[i] * part.total:
            continue
        return best_tok
    return None


def _try_static(part: _Counts) -> int | None:
    """``try_draft(nc_static, ngram_static)``: the static cache alone, lax thresholds for 2-grams."""
    if part.total < _LAX[0][NGRAM_STATIC - 1] or 100 * part.best < _LAX[1][NGRAM_STATIC - 1] * part.total:
        return None
    return part.argmax()


__all__ = ["NgramCacheDrafter", "load_ngram_cache", "stl_order"]
