"""Where two greedy outputs of one target part, and whether the target was near a tie there.

At temperature 0 a speculative run commits only the target's argmax, so it equals plain decoding —
up to llama.cpp's floating point: the logits of one position differ in the last bits between a
1-row decode and a verify batch of several rows (other kernels, other activation quantization), so
where the target's two best tokens are nearly tied the two runs can pick different ones and part
from there on (README, Known issues). :func:`first_divergence` finds the first differing token and
the target's top-2 logit margin at it, so a report can say whether that is what happened.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

#: a top-2 logit margin below this (logit units) counts as a near-tie. A generous bound, not a
#: measured one: on a 2-core AMD EPYC (Zen 4) SmolLM2 Q4_1's logits were bit-identical between a
#: 1-row decode and verify batches of 2..32 rows (2026-12-01), while runs on an Intel Xeon CPU and
#: on CUDA parted after near-ties (benchmarks/RESULTS.md); a parting above it deserves a report
NEAR_TIE = 0.5


@dataclass(frozen=True)
class Divergence:
    """The first position where two generations of one prompt differ.

    Attributes:
        position: index into the generated tokens (0 = the first generated token).
        ref_token, other_token: the token ids there (reference run, other run).
        margin: the target's top-1 minus top-2 logit at that position, computed with the prompt and
            the common prefix in one batch (a third batch shape: it says how close the tie was,
            not which run is "right").
        top2: the target's two best token ids there (by that computation).
        near_tie: ``margin < NEAR_TIE``.
    """
    position: int
    ref_token: int
    other_token: int
    margin: float
    top2: tuple[int, int]
    near_tie: bool


def first_differing(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first position where ``a`` and ``b`` differ (the shorter one's length when one
    is a prefix of the other), or None when they are equal."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def first_divergence(gen: Any, prompt_tokens: Sequence[int], ref: Sequence[int], other: Sequence[int], *,
                     near_tie: float = NEAR_TIE) -> Divergence | None:
    """Where ``other`` first differs from ``ref`` (two generations of ``gen``'s target for
    ``prompt_tokens``), with the target's top-2 logit margin there; None when they are equal or
    one is a prefix of the other (a shorter run: it stopped, it did not part).

    Decodes ``prompt_tokens + ref[:position]`` on the target from an empty cache (clears the
    Generator's KV cache, like :meth:`~pyllama_spec.Generator.verify_ms`).

    Raises:
        InvalidArgumentError: the tokens do not fit the context.
    """
    i = first_differing(ref, other)
    if i is None or i >= min(len(ref), len(other)):
        return None
    toks = [int(t) for t in prompt_tokens] + [int(t) for t in ref[:i]]
    with gen._lock:  # (it decodes on the target context)
        if gen._active is not None:
            gen._active.invalidate()  # the caches are about to be reused
        ctx = gen.ctx
        ctx.memory.clear()
        gen._ledger.forget()
        try:
            for s in range(0, len(toks), ctx.n_batch):
                chunk = toks[s:s + ctx.n_batch]
                last = s + len(chunk) == len(toks)
                ctx.decode(chunk, np.arange(s, s + len(chunk), dtype=np.int32), logits="last" if last else "none")
            logits = np.array(ctx.logits_ith(-1), dtype=np.float64)
        finally:
            ctx.memory.clear()
    top = np.argsort(logits)[-2:][::-1]
    margin = float(logits[top[0]] - logits[top[1]])
    return Divergence(position=i, ref_token=int(ref[i]), other_token=int(other[i]), margin=margin,
                      top2=(int(top[0]), int(top[1])), near_tie=margin < near_tie)


__all__ = ["Divergence", "first_divergence", "first_differing", "NEAR_TIE"]
