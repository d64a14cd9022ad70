"""Verification of a draft block against the target (pure numpy; tested without models).

Three rules, each returning ``(n_accepted, next_token)`` where ``next_token`` is the
target's own token after the accepted prefix (the "bonus" token: at the first
disagreement, or after the last draft token when all were accepted):

* :func:`verify_greedy` — T = 0: accept while the draft equals the target's argmax.
* :func:`verify_match` — llama.cpp's rule (``common_sampler_sample_and_accept_n``): sample
  the target row by row and accept while the sample equals the draft.
* :func:`verify_rejection` — speculative sampling (Leviathan et al. 2023, arXiv 2211.17192;
  Chen et al. 2023, arXiv 2302.01318): accept draft token d with probability
  min(1, p(d)/q(d)); on rejection draw from norm(max(p − q, 0)).

All three leave the output distributed exactly as the target's.
"""
from __future__ import annotations

import numpy as np

from .sampling import SamplingParams, probs, sample


def verify_greedy(target_logits: np.ndarray, draft) -> tuple[int, int]:
    """Args: target_logits ``(n+1, n_vocab)``; draft: ``n`` token ids."""
    best = np.argmax(target_logits, axis=1)
    n = len(draft)
    k = 0
    while k < n and int(best[k]) == int(draft[k]):
        k += 1
    return k, int(best[k])


def verify_match(target_logits: np.ndarray, draft, sp: SamplingParams, rng: np.random.Generator) -> tuple[int, int]:
    """Args: target_logits ``(n+1, n_vocab)``; draft: ``n`` token ids; one independent draw per row."""
    n = len(draft)
    for k in range(n + 1):
        tok = sample(probs(target_logits[k], sp), rng)
        if k == n or tok != int(draft[k]):
            return k, tok
    raise AssertionError("unreachable")


def verify_rejection(target_logits: np.ndarray, draft, draft_probs: np.ndarray | None, sp: SamplingParams,
                     rng: np.random.Generator) -> tuple[int, int]:
    """Args: target_logits ``(n+1, n_vocab)``; draft: ``n`` ids drawn from ``draft_probs`` ``(n, n_vocab)``,
    or None for a deterministic drafter (q one-hot at each draft token: accept with p(d), else
    draw from p without d — as likely to accept as :func:`verify_match`)."""
    n = len(draft)
    for k in range(n):
        p = probs(target_logits[k], sp)
        d = int(draft[k])
        if draft_probs is None:
            q = np.zeros_like(p)
            q[d] = 1.0
        else:
            q = draft_probs[k]
        if q[d] <= 0.0:  # the drafter could not have drawn it: treat as a rejection
            return k, sample(p, rng)
        if rng.random() < min(1.0, p[d] / q[d]):
            continue
        resid = np.maximum(p - q, 0.0)
        total = resid.sum()
        return k, sample(resid / total if total > 0 else p, rng)
    return n, sample(probs(target_logits[n], sp), rng)


__all__ = ["verify_greedy", "verify_match", "verify_rejection"]
