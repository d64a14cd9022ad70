"""``ngram-simple``: prompt lookup (Saxena 2023, "Prompt Lookup Decoding",
https://github.com/apoorvumang/prompt-lookup-decoding) as llama.cpp does it —
``common_ngram_simple_draft`` in ``common/ngram-map.cpp``, driven by
``common_speculative_impl_ngram_simple`` in ``common/speculative.cpp``. No model, no KV cache.

The rule, with ``N = size_n``, ``M = size_m`` and the committed history ``h`` (``L`` tokens,
``last`` not included):

* nothing while ``L ≤ N + M + 1``;
* the pattern is the last ``N`` tokens of ``h + [last]``;
* its latest earlier occurrence starts at the largest ``j`` in ``[1, L - N - 1]`` (position 0 is
  never a match, and the n-gram ending at ``h[L-1]`` is skipped);
* the draft is ``h[j+N : j+N+copy]`` with ``copy = min(M, L - j - N)``, and nothing when
  ``copy < N`` (llama.cpp compares the copy length with ``N``, not with 1).

``min_hits`` is accepted (llama.cpp has the option) but the native algorithm never reads it.
Where llama.cpp scans the history backwards at every step, an index of the history's n-grams
(:class:`~._history.NgramIndex`) finds the same position with one dictionary lookup.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..._check import check_int
from ._history import HistoryDrafter, NgramIndex
from .base import register_drafter

if TYPE_CHECKING:
    from ...context import Context


@register_drafter
class NgramSimpleDrafter(HistoryDrafter):
    """llama.cpp's ``--spec-type ngram-simple``.

    Args:
        target: the target context (unused; for the common constructor signature).
        size_n: length of the looked-up n-gram (``--spec-ngram-simple-size-n``, 1..1024).
        size_m: length of the drafted m-gram (``--spec-ngram-simple-size-m``, 1..1024); also
            ``n_max_default`` and ``n_max_limit``. No draft is made when ``size_m < size_n``.
        min_hits: ``--spec-ngram-simple-min-hits`` (≥ 1; unused by the native algorithm).

    Raises:
        InvalidArgumentError: a parameter out of range (the message names it).
    """
    kind = "ngram-simple"
    native_type = "ngram-simple"

    def __init__(self, target: Context | None = None, *, size_n: int = 12, size_m: int = 48, min_hits: int = 1):
        super().__init__(target)
        self.size_n = check_int("size_n", size_n, min=1, max=1024)
        self.size_m = check_int("size_m", size_m, min=1, max=1024)
        self.min_hits = check_int("min_hits", min_hits, min=1, max=65535)
        self.n_max_default = self.n_max_limit = self.size_m
        self._index = NgramIndex(self.size_n)

    def _reset(self) -> None:
        self._index.clear()

    def _on_append(self, old_len: int) -> None:
        self._index.extend(self.history)

    def _on_truncate(self, new_len: int) -> None:
        self._index.truncate(self.history, new_len)

    def _draft(self, last: int) -> list[int]:
        h, n, m = self.history, self.size_n, self.size_m
        L = len(h)
        if L <= n + m + 1:
            return []
        pattern = tuple(h[L - n + 1:]) + (last,)
        j = self._index.last_in(pattern, 1, L - n - 1)
        if j is None:
            return []
        copy = min(m, L - (j + n))
        if copy < n:
            return []
        return h[j + n:j + n + copy]

    def native_args(self) -> list[str]:
        return ["--spec-ngram-simple-size-n", str(self.size_n),
                "--spec-ngram-simple-size-m", str(self.size_m),
                "--spec-ngram-simple-min-hits", str(self.min_hits)]


@register_drafter
class NgramDrafter(NgramSimpleDrafter):
    """``"ngram"``: another name of :class:`NgramSimpleDrafter` (llama.cpp's ``ngram-simple``),
    with the same parameters and defaults."""
    kind = "ngram"


__all__ = ["NgramSimpleDrafter", "NgramDrafter"]
