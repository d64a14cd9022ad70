"""Drafters: what proposes the draft block. One small interface, one module per drafter.

A drafter is created for one target context and lives as long as the generator. The loop
calls, per generation::

    begin(prompt)                                  # forget the previous generation
    observe(rows, positions, timer)                # after every target decode: rows of the
                                                   # target batch now committed
    propose(last_token, n_past, n_max, sp, rng, timer) -> Draft
                                                   # up to n_max tokens after last_token
    rollback(n_past)                               # drop everything at positions ≥ n_past

Register new kinds with :func:`register_drafter`; :func:`create_drafter` builds one by name.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from ...errors import InvalidArgumentError
from ..sampling import SamplingParams


@dataclass
class Draft:
    """A proposed block.

    Attributes:
        tokens: ``n`` draft token ids (n ≤ n_max; may be empty).
        probs: ``(n, n_vocab)`` float64 drafter probabilities the tokens were drawn from
            (needed by ``verify="rejection"``), or None for a deterministic drafter.
    """
    tokens: list
    probs: np.ndarray | None = None


class Drafter(ABC):
    """Base class of drafters.

    Class attributes:
        kind: registry name (``"dflash"``, ``"ngram"``, ...).
        needs_target_features: the loop must keep the target's layer-input taps on.
        supports_rejection: ``propose`` can return probabilities (``verify="rejection"``).
    """
    kind: str = ""
    needs_target_features: bool = False
    supports_rejection: bool = False

    #: the largest draft block this drafter can make
    max_n_max: int = 16
    #: the draft block size used when the caller gives none
    default_n_max: int = 4

    def begin(self, prompt: list) -> None:
        """A new generation over ``prompt`` starts (the caches are empty)."""

    def observe(self, target, tokens: list, positions: np.ndarray, rows: slice, timer) -> None:
        """Target rows ``rows`` of its last decode (``tokens`` at ``positions``) are committed."""

    @abstractmethod
    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams,
                rng: np.random.Generator, timer) -> Draft:
        """Propose up to ``n_max`` tokens to follow ``last_token`` (at position ``n_past``)."""

    def rollback(self, n_past: int) -> None:
        """Forget positions ≥ ``n_past``."""

    def memory_report(self) -> dict:
        """Weights / KV cache / compute buffers in MiB (empty for drafters without a model)."""
        return {}

    def close(self) -> None:
        """Free native resources (idempotent)."""


_REGISTRY: dict[str, type] = {}


def register_drafter(cls: type) -> type:
    """Class decorator: make ``cls`` creatable by ``create_drafter(cls.kind, ...)``."""
    if not cls.kind:
        raise InvalidArgumentError("a drafter class needs a non-empty `kind`")
    _REGISTRY[cls.kind] = cls
    return cls


def drafter_kinds() -> list:
    """Names accepted by :func:`create_drafter`."""
    return sorted(_REGISTRY)


def create_drafter(kind: str, target, **kwargs) -> Drafter:
    """Build a drafter of ``kind`` for the target :class:`~pyllama_spec.Context`.

    Raises:
        ValueError: unknown kind (the message lists the known ones).
    """
    try:
        cls = _REGISTRY[kind]
    except KeyError:
        raise InvalidArgumentError(f"unknown drafter kind {kind!r}; known kinds: {', '.join(drafter_kinds())}") from None
    return cls(target, **kwargs)


from . import dflash, ngram  # noqa: E402,F401  (registration)

__all__ = ["Drafter", "Draft", "register_drafter", "create_drafter", "drafter_kinds"]
