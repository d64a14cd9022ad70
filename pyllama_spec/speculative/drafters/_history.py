"""What the n-gram drafters share: the committed token history, an index of its n-grams, and
argument checks.

llama.cpp's n-gram drafters (``common/speculative.cpp``, ``common_speculative_impl_ngram_*``)
see, at each draft, the committed tokens before ``id_last`` (``prompt_tgt`` in
``examples/speculative-simple``) and ``id_last`` itself. :class:`HistoryDrafter` keeps exactly
that list — positions ``[0, n_past)`` — from ``begin``/``observe``/``rollback``, and hands a
subclass three hooks: ``_draft(last)`` (the native ``draft``), ``_accept(n_accepted)`` (the
native ``accept``) and ``_on_append``/``_on_truncate`` (to keep incremental indices in step).
"""
from __future__ import annotations

import sys
from bisect import bisect_right
from collections import deque
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..._check import check_int
from ...errors import PyllamaSpecError
from ..sampling import SamplingParams
from ..timing import StageTimer
from .base import Draft, Drafter

if TYPE_CHECKING:
    from ...context import Context
    from .batch import BatchDrafter


class NgramIndex:
    """Start positions of every ``n``-gram of a token list, kept in step with it.

    ``pos[tuple(tokens[p:p+n])]`` lists the starts ``p`` in ascending order, so the latest
    occurrence below a bound is one bisection away, and appending or cutting the list costs
    O(n) per token (not O(history) per lookup).
    """
    __slots__ = ("n", "pos", "count")

    def __init__(self, n: int):
        self.n = n
        self.pos: dict[tuple, list[int]] = {}
        self.count = 0  # n-grams indexed: starts 0 .. count-1

    def clear(self) -> None:
        self.pos.clear()
        self.count = 0

    def extend(self, tokens: list) -> None:
        """Index the n-grams that ``tokens`` (grown since the last call) now holds."""
        n, pos = self.n, self.pos
        for p in range(self.count, len(tokens) - n + 1):
            key = tuple(tokens[p:p + n])
            lst = pos.get(key)
            if lst is None:
                pos[key] = [p]
            else:
                lst.append(p)
        self.count = max(self.count, len(tokens) - n + 1)

    def truncate(self, tokens: list, new_len: int) -> None:
        """Forget the n-grams that end at or after ``new_len`` (call before cutting ``tokens``)."""
        n, pos = self.n, self.pos
        keep = max(0, new_len - n + 1)
        for p in range(self.count - 1, keep - 1, -1):
            key = tuple(tokens[p:p + n])
            lst = pos[key]
            lst.pop()  # p is the largest start of its n-gram
            if not lst:
                del pos[key]
        self.count = min(self.count, keep)

    def last_in(self, key: tuple, lo: int, hi: int) -> int | None:
        """The largest start ``p`` of ``key`` with ``lo ≤ p ≤ hi``, or None."""
        lst = self.pos.get(key)
        if not lst or hi < lo:
            return None
        i = bisect_right(lst, hi) - 1
        return lst[i] if i >= 0 and lst[i] >= lo else None

    def starts_in(self, key: tuple, lo: int, hi: int) -> list[int]:
        """Every start of ``key`` in ``[lo, hi]``, ascending."""
        lst = self.pos.get(key)
        if not lst or hi < lo:
            return []
        return lst[bisect_right(lst, lo - 1):bisect_right(lst, hi)]


class HistoryDrafter(Drafter):
    """Base of the drafters that read only the committed tokens (no model, no KV cache).

    ``self.history`` holds exactly the committed tokens at positions ``[0, n_past)``; the token
    at ``n_past`` (``last_token``, llama.cpp's ``id_last``) is passed to ``propose``.

    Native bookkeeping mirrored here: llama.cpp calls an implementation's ``accept`` only once
    it has produced a non-empty draft in this generation (``common_speculative::impl_last``),
    and then after every verify step, also those whose draft was empty.

    Class attributes:
        native_type: llama.cpp's ``--spec-type`` name of the algorithm.
        free: True — a draft is a lookup in ``history`` (``Drafter.free``).
    """
    native_type: ClassVar[str] = ""
    free: ClassVar[bool] = True

    def __init__(self, target: Context | None = None) -> None:
        super().__init__(target)  # type: ignore[arg-type]  # (n-gram drafting reads no target)
        self.history: list[int] = []
        self._drafted = False  # llama.cpp's impl_last != nullptr
        self._trim: tuple[int, int] | None = None  # this step's (proposed, kept) where n_max="auto" cut the draft

    # -- the protocol ---------------------------------------------------------------------------
    def begin(self, prompt: list, n_keep: int = 0) -> None:
        """A new generation: fresh state over ``prompt`` (one run of ``llama-speculative-simple``).
        The state is rebuilt from the tokens whatever prefix the target keeps (``n_keep``)."""
        self.history = []
        self._drafted = False
        self._reset()
        self._append([int(t) for t in prompt])
        self._begin()

    def cached_prefix(self, prompt: list[int]) -> int:
        # nothing per position to keep: begin() rebuilds the state from the prompt, so any prefix
        # the target keeps will do (prefix reuse)
        return len(prompt)

    def batched(self, n_seq: int) -> BatchDrafter:
        from .batch import PerSequence

        return PerSequence(self, n_seq)

    def observe(self, tokens: Sequence[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        if n_commit <= 0:
            return
        with timer("draft"):
            p0 = int(positions[0])
            new = [int(t) for t in tokens[:n_commit]]
            h = self.history
            if p0 > len(h):
                raise PyllamaSpecError(f"{self.kind}: observed tokens at position {p0}, but the history ends at "
                                       f"{len(h)} (a decode was not observed)")
            # the prefill re-observes the prompt given to begin(): keep what is unchanged
            i = 0
            while i < len(new) and p0 + i < len(h) and h[p0 + i] == new[i]:
                i += 1
            if p0 + i < len(h):
                self._truncate(p0 + i)
            if i < len(new):
                self._append(new[i:])

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        if len(self.history) > n_past:
            self._truncate(n_past)
        elif len(self.history) < n_past:
            raise PyllamaSpecError(f"{self.kind}: asked to draft at position {n_past}, but the history ends at "
                                   f"{len(self.history)} (a decode was not observed)")
        self._trim = None
        with timer("draft"):
            tokens = self._draft(int(last_token))
        # common_speculative_draft: a draft longer than the room left is cut (n_max > 0 here)
        tokens = tokens[:n_max]
        if tokens:
            self._drafted = True
        return Draft(tokens=tokens)

    def on_trim(self, n_proposed: int, n_kept: int) -> None:
        self._trim = (int(n_proposed), int(n_kept))

    def on_accept(self, n_drafted: int, n_accepted: int) -> None:
        trim, self._trim = self._trim, None
        if not self._drafted:
            return
        if trim is not None and n_accepted >= trim[1]:
            # n_max="auto" verified a prefix and the target took all of it: what it would have said of the tokens
            # cut off is unknown, so the native bookkeeping sees the whole draft taken — not the prefix, which
            # would cap ngram-map's value for this key at the cost model's cut for good (values only shrink) and
            # count against ngram-mod a draft it never verified (a review's find, 2026-12-06)
            self._accept(trim[0])
        else:
            self._accept(n_accepted)

    def rollback(self, n_past: int) -> None:
        if n_past < len(self.history):
            self._truncate(max(0, n_past))

    # -- hooks ----------------------------------------------------------------------------------
    def _reset(self) -> None:
        """Drop all state (indices included): a fresh drafter."""

    def _begin(self) -> None:
        """llama.cpp's ``begin(prompt)`` over ``self.history`` (the prompt)."""

    def _draft(self, last: int) -> list[int]:
        """llama.cpp's ``draft``: the tokens to follow ``last`` after ``self.history`` (uncut)."""
        raise NotImplementedError

    def _accept(self, n_accepted: int) -> None:
        """llama.cpp's ``accept(n_accepted)``."""

    def _on_append(self, old_len: int) -> None:
        """``self.history`` grew from ``old_len`` tokens."""

    def _on_truncate(self, new_len: int) -> None:
        """``self.history`` is about to be cut to ``new_len`` tokens (still whole here)."""

    # -- helpers --------------------------------------------------------------------------------
    def _append(self, tokens: list) -> None:
        old = len(self.history)
        self.history.extend(tokens)
        self._on_append(old)

    def _truncate(self, n: int) -> None:
        self._on_truncate(n)
        del self.history[n:]

    def memory_report(self) -> dict:
        """No weights, KV cache or compute buffers; ``host_mib``: the Python objects holding the
        history and the indices (measured with ``sys.getsizeof``, shared small ints excepted)."""
        return {"weights_mib": 0.0, "kv_cache_mib": 0.0, "compute_mib": 0.0,
                "host_mib": _deep_size(vars(self), skip={id(self.target)}) / 2**20}

    def native_args(self) -> list[str]:
        """llama.cpp command-line options that give a native program (``--spec-type
        native_type``) this drafter's settings."""
        return []


def _deep_size(root: object, skip: Collection[int] = ()) -> int:
    """Bytes of ``root`` and of the containers and objects it reaches (each counted once)."""
    seen, stack, total = set(skip), [root], 0
    while stack:
        o = stack.pop()
        if id(o) in seen or (isinstance(o, int) and -5 <= o <= 256):
            continue
        seen.add(id(o))
        total += sys.getsizeof(o)
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, deque)):
            stack.extend(o)
        elif hasattr(o, "__slots__"):
            stack.extend(getattr(o, a) for a in o.__slots__ if hasattr(o, a))
        elif hasattr(o, "__dict__") and not isinstance(o, type):
            stack.append(vars(o))
    return total


__all__ = ["HistoryDrafter", "NgramIndex", "check_int"]
