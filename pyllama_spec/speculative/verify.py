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

All three leave the output distributed exactly as the target's. They work on all rows of a
verify batch at once (``sampling.filtered_rows``): one uniform per row, drawn up front, which
is the same distribution as drawing row by row. With backend sampling the loop applies the
greedy and match rules to the tokens llama.cpp drew (:func:`accept_prefix`) and never reads
logits; these functions are the host path (and rejection sampling, which needs p and q).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .sampling import SamplingParams, densify, filtered_rows, sample, sample_rows


def accept_prefix(target_tokens: Sequence[int] | np.ndarray, draft: Sequence[int]) -> tuple[int, int]:
    """The match rule on tokens already drawn per row: ``target_tokens`` ``(n+1,)`` (one per verify
    row), ``draft`` ``n`` ids → ``(k, target_tokens[k])`` with k the length of the agreeing prefix."""
    n = len(draft)
    k = 0
    while k < n and int(target_tokens[k]) == int(draft[k]):
        k += 1
    return k, int(target_tokens[k])


def verify_greedy(target_logits: np.ndarray, draft: Sequence[int]) -> tuple[int, int]:
    """Args: target_logits ``(n+1, n_vocab)``; draft: ``n`` token ids."""
    return accept_prefix(np.argmax(target_logits, axis=1), draft)


def verify_match(target_logits: np.ndarray, draft: Sequence[int], sp: SamplingParams,
                 rng: np.random.Generator) -> tuple[int, int]:
    """Args: target_logits ``(n+1, n_vocab)``; draft: ``n`` token ids; one independent draw per row."""
    return accept_prefix(sample_rows(*filtered_rows(target_logits, sp), rng), draft)


def verify_rejection(target_logits: np.ndarray, draft: Sequence[int], draft_probs: np.ndarray | None,
                     sp: SamplingParams, rng: np.random.Generator) -> tuple[int, int]:
    """Speculative sampling (Leviathan et al. 2023, "Fast Inference from Transformers via
    Speculative Decoding", Algorithm 1; Chen et al. 2023): accept draft token ``d_i`` with
    probability ``min(1, p_i(d_i) / q_i(d_i))``; at the first rejection draw from the residual
    ``max(p_k - q_k, 0)``; after ``n`` acceptances draw the bonus token from ``p_n``.

    Args:
        target_logits: ``(n+1, n_vocab)`` float32, the verify rows.
        draft: ``n`` ids drawn from ``draft_probs``.
        draft_probs: ``(n, n_vocab)`` q, or None for a deterministic drafter (q one-hot at each
            draft token: accept with p(d), else draw from p without d — as likely to accept as
            :func:`verify_match`).

    Returns:
        ``(n_accepted, next_token)``.

    Only the rows the walk reaches are turned into distributions (a rejection at row k leaves rows
    k+1.. untouched), one uniform is drawn per row reached, then one draw for the last token. The
    bonus row (all there is to a step that drafted nothing, e.g. a rest of ``n_max="auto"``) is drawn
    from its sparse / unnormalised form by :func:`sampling.sample_rows`, never made dense: 139 → 63 µs
    (no filter) and 152 → 9 µs (top-k 40, top-p 0.95) for a 49 152-token row on 2 cores of our Intel
    Xeon (a whole resting step's draw 239 → 165 / 307 → 135 µs, RESULTS.md 19.11).
    """
    n = len(draft)
    V = target_logits.shape[1]
    d = np.asarray(draft, dtype=np.int64)
    u = rng.random(n)
    for k in range(n + 1):
        rows = filtered_rows(target_logits[k:k + 1], sp)
        if k == n:
            return n, int(sample_rows(*rows, rng)[0])
        pk = densify(*rows, V)[0]  # (V,) float32
        pd = float(pk[d[k]])
        qd = 1.0 if draft_probs is None else float(draft_probs[k, d[k]])
        if qd > 0.0 and u[k] * qd < pd:  # u < min(1, p/q), without dividing
            continue
        if qd <= 0.0:  # the drafter could not have drawn it: treat as a rejection
            return k, sample(pk, rng)
        if draft_probs is None:
            resid = pk.astype(np.float64)
            resid[d[k]] = 0.0
        else:
            resid = np.maximum(pk.astype(np.float64) - draft_probs[k], 0.0)
        total = resid.sum()
        return k, sample(resid / total if total > 0 else pk.astype(np.float64), rng)
    raise AssertionError("unreachable")


__all__ = ["accept_prefix", "verify_greedy", "verify_match", "verify_rejection"]
