"""How llama.cpp's model drafters choose a draft token from one row of logits.

``draft-simple``, ``draft-eagle3`` and ``draft-mtp`` (common/speculative.cpp) share one rule:
the drafter's sampler chain is top-k(10) then a draw, and the draft token is the *most
probable* candidate (``cur_p->data[0]`` after sorting by probability), i.e. the argmax;
drafting stops early when that candidate's probability — the softmax over the 10 kept
logits — is below ``p_min`` (``--spec-draft-p-min``, default 0: never).
"""
from __future__ import annotations

import numpy as np

from ..sampling import SamplingParams, probs, sample

#: the top-k of the native drafters' sampler chain
TOP_K = 10


def top_probability(logits: np.ndarray) -> float:
    """Softmax probability of the argmax among the ``TOP_K`` largest logits (``(n_vocab,)`` in)."""
    x = np.asarray(logits, dtype=np.float64)
    k = min(TOP_K, x.shape[0])
    top = x[np.argpartition(-x, k - 1)[:k]]
    return float(1.0 / np.exp(top - top.max()).sum())


def pick(logits: np.ndarray, sp: SamplingParams, rng: np.random.Generator,
         p_min: float) -> tuple[int | None, np.ndarray | None]:
    """One draft token from ``logits`` ``(n_vocab,)``.

    Returns:
        ``(token, q)``: ``q`` is the ``(n_vocab,)`` distribution it was drawn from (None when
        greedy), or ``(None, None)`` when the top candidate's probability is below ``p_min``.
    """
    if p_min > 0.0 and top_probability(logits) < p_min:
        return None, None
    if sp.greedy:
        return int(np.argmax(logits)), None
    q = probs(logits, sp)
    return sample(q, rng), q


__all__ = ["pick", "top_probability", "TOP_K"]
