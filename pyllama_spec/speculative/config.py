"""``SpecConfig``: how one generation speculates (which drafter, how far, which verification rule).

Frozen and validated on construction, like :class:`~pyllama_spec.SamplingParams` next to it
(HF's ``GenerationConfig`` and vLLM's ``SpeculativeConfig`` are the models):
``Generator.generate(drafter=..., n_max=..., verify=...)`` only builds one of these.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .._check import check_bool, check_choice, check_int, check_str
from ..errors import InvalidTypeError
from .tree import TREE_BUDGET_MAX

#: verification rules: llama.cpp's (sample the target, accept while equal) and speculative sampling
VERIFY_MODES = ("match", "rejection")
#: ``n_max`` value that lets the cost model choose each step's draft length
AUTO = "auto"


@dataclass(frozen=True)
class SpecConfig:
    """Speculation settings of one generation.

    Attributes:
        drafter: name of a drafter of the Generator, or None for plain decoding.
        n_max: most draft tokens per verify step (tokens); None = the drafter's default
            (``Drafter.n_max_default``); ``"auto"`` = chosen per step by the cost model
            (``speculative/costmodel.py``: the drafter's confidence in this block against the
            measured verify cost of each extra row; nothing, with a probe now and then, where no
            length pays), at most ``Drafter.n_max_limit``. Clamped to what the drafter and the
            verify batch allow. 0 with a drafter: ``Generator.generate`` runs plain decoding and logs
            a warning (a draft of 0 tokens would cost the drafter's per-step work for nothing);
            ``generate_batch`` takes 0 per sequence (that sequence drafts nothing while the others do).
        verify: ``"match"`` (llama.cpp's rule: sample each target row, accept while equal) or
            ``"rejection"`` (speculative sampling, Leviathan et al. 2023). Both keep the target's
            distribution; at temperature 0 both are greedy verification.
        sync_stages: synchronize the backend at stage boundaries, so each stage's clock holds the
            GPU work it queued; False lets the loop run free (fastest; GPU time then lands in the
            stage that next reads a result).
        backend_sampling: let llama.cpp draw the target's tokens inside the decode graph where
            the rule allows it (match and plain decoding): no logits are copied to the host.
            ``"auto"`` (default): :func:`use_backend_sampling` — at temperature > 0, and at
            temperature 0 on vocabularies of ≥ 100 000 tokens, where the host's argmax costs
            ≈ 75 µs a verify row (benchmarks/RESULTS.md 13.3). True / False force either path.
            Rejection sampling always reads logits: it needs both distributions.
        tree: token trees (``speculative/tree_step.py``): the most nodes of the tree drafted and
            verified per step (``n_max`` is then its depth), 0 = chains; None = the Generator's
            ``tree`` for drafters that support trees (draft-dflash), chains for the others. At most the
            Generator's ``tree`` (its target context is sized for it).

    Raises:
        InvalidArgumentError: a value of the wrong type or out of range (the message names it).
    """
    drafter: str | None = None
    n_max: int | str | None = None
    verify: str = "match"
    sync_stages: bool = True
    backend_sampling: bool | str = "auto"
    tree: int | None = None

    def __post_init__(self) -> None:
        check_str("drafter", self.drafter, none_ok=True)
        if not (isinstance(self.n_max, str) and self.n_max == AUTO):
            object.__setattr__(self, "n_max", check_int(
                "n_max", self.n_max, min=0, none_ok=True,
                what="an int ≥ 0, 'auto' (chosen per step) or None (the drafter's default)"))
        check_choice("verify", self.verify, VERIFY_MODES)
        check_bool("sync_stages", self.sync_stages)
        object.__setattr__(self, "tree", check_int(
            "tree", self.tree, min=0, max=TREE_BUDGET_MAX, none_ok=True,
            what=f"a node budget in [0, {TREE_BUDGET_MAX}] (0 = chains) or None (the Generator's)"))
        if not (isinstance(self.backend_sampling, str) and self.backend_sampling == "auto"):
            if not isinstance(self.backend_sampling, (bool, np.bool_)):
                raise InvalidTypeError("backend_sampling must be True, False or 'auto' (backend sampling at "
                                       f"temperature > 0 only), got {self.backend_sampling!r}")
            object.__setattr__(self, "backend_sampling", bool(self.backend_sampling))

    def replace(self, **changes: Any) -> SpecConfig:
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)


# at T = 0, "auto" draws in the graph from this vocabulary size on (RESULTS.md 13.3)
BACKEND_GREEDY_MIN_VOCAB = 100_000


def use_backend_sampling(backend_sampling: bool | str, greedy: bool, n_vocab: int) -> bool:
    """Whether the target's tokens are drawn in the decode graph (``SpecConfig.backend_sampling``
    resolved; the caller still falls back to the host where the rule or the graph cannot).

    ``"auto"``: always at temperature > 0 (H200, SmolLM2: plain decoding at T = 0.8 835 vs 651
    tok/s with the host's draw); at temperature 0 only for vocabularies of at least
    ``BACKEND_GREEDY_MIN_VOCAB`` tokens. Measured on the H200: on SmolLM2 (49 152 tokens, before
    patch 0007) the host's argmax was faster (865 vs 780 tok/s); on the Qwen3-8B-shaped pairs
    (151 936 tokens, patch 0007) the host's argmax cost 0.73–0.93 ms a step of 8 rows and the
    graph's draw won 5 of 6 drafting configurations by 1.6–7 % of the step (RESULTS.md 13.3).
    """
    if backend_sampling is True or backend_sampling is False:
        return backend_sampling
    return not greedy or n_vocab >= BACKEND_GREEDY_MIN_VOCAB


__all__ = ["SpecConfig", "VERIFY_MODES", "AUTO", "BACKEND_GREEDY_MIN_VOCAB", "use_backend_sampling"]
