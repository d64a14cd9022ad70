"""Prompt-lookup / n-gram drafter: copy what followed the last occurrence of the current
suffix in the context (Saxena 2023, "prompt lookup decoding"; llama.cpp's
``ngram-simple`` in common/speculative.cpp). No model, no KV cache."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..._check import check_int
from ...errors import InvalidArgumentError
from ..sampling import SamplingParams
from ..timing import StageTimer
from . import Draft, Drafter, register_drafter

if TYPE_CHECKING:
    from ...context import Context


@register_drafter
class NgramDrafter(Drafter):
    """Args:
        target: the target context (unused; for the common constructor signature).
        n_min, n_max_ngram: suffix lengths tried, longest first.
    """
    kind = "ngram"
    n_max_limit = 64
    n_max_default = 8

    def __init__(self, target: Context | None = None, *, n_min: int = 2, n_max_ngram: int = 4) -> None:
        super().__init__(target)  # type: ignore[arg-type]  # (n-gram drafting reads no target)
        n_min, n_max_ngram = check_int("n_min", n_min, min=1), check_int("n_max_ngram", n_max_ngram, min=1)
        if not 1 <= n_min <= n_max_ngram:
            raise InvalidArgumentError(f"need 1 ≤ n_min ≤ n_max_ngram, got {n_min}, {n_max_ngram}")
        self.n_min, self.n_max_ngram = n_min, n_max_ngram
        self.history: list = []

    def begin(self, prompt: list[int]) -> None:
        self.history = list(prompt)

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        # the committed tokens, in order; positions start where the history ends
        p0 = int(positions[0]) if len(positions) else len(self.history)
        del self.history[p0:]
        self.history.extend(int(t) for t in tokens[:n_commit])

    def rollback(self, n_past: int) -> None:
        del self.history[n_past:]

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        with timer("draft"):
            seq = self.history[:n_past] + [int(last_token)]
            arr = np.asarray(seq, dtype=np.int64)
            for n in range(min(self.n_max_ngram, len(seq) - 1), self.n_min - 1, -1):
                suffix = arr[-n:]
                # last earlier occurrence of the suffix (not the suffix itself)
                for start in range(len(arr) - n - 1, -1, -1):
                    if arr[start] == suffix[0] and np.array_equal(arr[start:start + n], suffix):
                        cont = seq[start + n:start + n + n_max]
                        if cont:
                            return Draft(tokens=[int(t) for t in cont])
                        break
        return Draft(tokens=[])
