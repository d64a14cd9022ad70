"""``SpecConfig``: how one generation speculates (which drafter, how far, which verification rule).

Frozen and validated on construction, like :class:`~pyllama_spec.SamplingParams` next to it
(HF's ``GenerationConfig`` and vLLM's ``SpeculativeConfig`` are the models):
``Generator.generate(drafter=..., n_max=..., verify=...)`` only builds one of these.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..errors import InvalidArgumentError

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
            measured verify cost of each extra row), at most ``Drafter.n_max_limit``. Clamped to
            what the drafter and the verify batch allow.
        verify: ``"match"`` (llama.cpp's rule: sample each target row, accept while equal) or
            ``"rejection"`` (speculative sampling, Leviathan et al. 2023). Both keep the target's
            distribution; at temperature 0 both are greedy verification.
        sync_stages: synchronize the backend at stage boundaries, so each stage's clock holds the
            GPU work it queued; False lets the loop run free (fastest; GPU time then lands in the
            stage that next reads a result).
        backend_sampling: let llama.cpp draw the target's and the drafter's tokens inside the
            decode graph where the rule allows it (greedy, match, plain decoding): no logits are
            copied to the host. False reads logits and samples with numpy (the reference path;
            rejection sampling always does, as it needs both distributions).

    Raises:
        InvalidArgumentError: a value of the wrong type or out of range (the message names it).
    """
    drafter: str | None = None
    n_max: int | str | None = None
    verify: str = "match"
    sync_stages: bool = True
    backend_sampling: bool = True

    def __post_init__(self):
        if self.drafter is not None and not isinstance(self.drafter, str):
            raise InvalidArgumentError(f"drafter must be a drafter's name (str) or None, got {self.drafter!r}")
        if self.n_max is not None and self.n_max != AUTO and (not isinstance(self.n_max, int)
                                                              or isinstance(self.n_max, bool) or self.n_max < 0):
            raise InvalidArgumentError(f"n_max must be an int ≥ 0, 'auto' (chosen per step) or None (the drafter's "
                                       f"default), got {self.n_max!r}")
        if self.verify not in VERIFY_MODES:
            raise InvalidArgumentError(f"verify must be one of {VERIFY_MODES}, got {self.verify!r}")
        for name in ("sync_stages", "backend_sampling"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidArgumentError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def replace(self, **changes) -> "SpecConfig":
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)


__all__ = ["SpecConfig", "VERIFY_MODES", "AUTO"]
