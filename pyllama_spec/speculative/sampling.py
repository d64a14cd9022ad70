"""Token distributions from logits, in numpy (pure; no llama.cpp).

The filter order follows llama.cpp's default sampler chain (common/sampling.cpp):
top-k → top-p → min-p on the untempered distribution, then temperature, then the draw.
Both the target's and the drafter's distributions go through the same function, which is
what speculative sampling needs (Leviathan et al. 2023, arXiv 2211.17192).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidArgumentError


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

    def __post_init__(self):
        def bad(name, value, allowed):
            raise InvalidArgumentError(f"{name} must be {allowed}, got {value!r}")
        if not isinstance(self.temperature, (int, float)) or not np.isfinite(self.temperature) or self.temperature < 0:
            bad("temperature", self.temperature, "a finite number ≥ 0 (0 = greedy)")
        if not isinstance(self.top_k, (int, np.integer)) or self.top_k < 0:
            bad("top_k", self.top_k, "an int ≥ 0 (0 = off)")
        if not isinstance(self.top_p, (int, float)) or not 0.0 < self.top_p <= 1.0:
            bad("top_p", self.top_p, "in (0, 1] (1 = off)")
        if not isinstance(self.min_p, (int, float)) or not 0.0 <= self.min_p < 1.0:
            bad("min_p", self.min_p, "in [0, 1) (0 = off)")
        if self.seed is not None and (not isinstance(self.seed, (int, np.integer)) or self.seed < 0):
            bad("seed", self.seed, "None or an int ≥ 0")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def probs(logits: np.ndarray, sp: SamplingParams) -> np.ndarray:
    """The sampling distribution of one row of logits.

    Args:
        logits: ``(n_vocab,)`` float32.

    Returns:
        ``(n_vocab,)`` float64 probabilities summing to 1 (zeros outside the kept set).
        For ``temperature == 0`` a one-hot at the argmax.
    """
    x = np.asarray(logits, dtype=np.float64)
    out = np.zeros_like(x)
    if sp.greedy:
        out[int(np.argmax(x))] = 1.0
        return out
    idx = np.arange(x.shape[0])
    if sp.top_k and sp.top_k < x.shape[0]:
        idx = np.argpartition(-x, sp.top_k - 1)[:sp.top_k]
    lv = x[idx]
    order = np.argsort(-lv, kind="stable")
    idx, lv = idx[order], lv[order]
    if sp.top_p < 1.0 or sp.min_p > 0.0:
        p = np.exp(lv - lv[0])
        p /= p.sum()
        keep = len(p)
        if sp.top_p < 1.0:
            keep = min(keep, int(np.searchsorted(np.cumsum(p), sp.top_p) + 1))
        if sp.min_p > 0.0:
            keep = min(keep, max(1, int(np.count_nonzero(p >= sp.min_p * p[0]))))
        idx, lv = idx[:keep], lv[:keep]
    z = (lv - lv[0]) / sp.temperature
    p = np.exp(z)
    out[idx] = p / p.sum()
    return out


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from probabilities ``p`` ``(n_vocab,)``."""
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


__all__ = ["SamplingParams", "probs", "sample"]
