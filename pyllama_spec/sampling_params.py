"""Sampling settings (temperature, top-k, top-p, min-p, seed): plain values checked once, read
by the llama.cpp sampler chain (``sampler.py``) and by the loop's numpy sampling
(``speculative/sampling.py``, which re-exports :class:`SamplingParams`)."""
from __future__ import annotations

from dataclasses import dataclass

from ._check import check_float, check_int


@dataclass(frozen=True)
class SamplingParams:
    """Sampling settings.

    Attributes:
        temperature: 0 = greedy (argmax); > 0 samples.
        top_k: keep the k most likely tokens (0 = off).
        top_p: keep the smallest set with cumulative probability ≥ top_p (1.0 = off).
        min_p: drop tokens below min_p × the top probability (0.0 = off).
        seed: seed of the random generator (None = fresh entropy).
    """
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        # wrong types raise InvalidTypeError (a bool is not a number here), wrong values InvalidArgumentError
        check_float("temperature", self.temperature, min=0.0, what="a finite number ≥ 0 (0 = greedy)")
        check_int("top_k", self.top_k, min=0, what="an int ≥ 0 (0 = off)")
        check_float("top_p", self.top_p, min=0.0, max=1.0, min_open=True, what="in (0, 1] (1 = off)")
        check_float("min_p", self.min_p, min=0.0, max=1.0, max_open=True, what="in [0, 1) (0 = off)")
        check_int("seed", self.seed, min=0, none_ok=True, what="None or an int ≥ 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


__all__ = ["SamplingParams"]
