"""Drafters: what proposes the draft block. One small interface, one module per drafter.

A drafter is created for one target :class:`~pyllama_spec.Context` (it keeps it as
``self.target``) and lives as long as the generator. Per generation the loop calls::

    begin(prompt)                                   # a new generation over these prompt tokens
    observe(tokens, positions, n_commit, timer)     # after every target decode: the decoded
                                                    # tokens/positions (its batch rows, in order),
                                                    # of which the first n_commit are committed
    propose(last_token, n_past, n_max, sp, rng, timer) -> Draft
                                                    # at most n_max tokens to follow last_token
                                                    # (at position n_past); checked by the loop
    on_accept(n_drafted, n_accepted)                # after each verify step (adaptive drafters)
    rollback(n_past)                                # forget everything at positions ≥ n_past

so that, between steps, the drafter's state covers exactly the committed positions
``[0, n_past)`` — the loop's invariant (``loop.py``). ``observe`` is called for the prefill
chunks (every row committed) and after each verify (``[last, drafts…]``, the first ``k + 1``
committed); a drafter may use the rejected rows (e.g. inject all rows with one fixed shape and
drop the rejected ones in ``rollback``), as llama.cpp's drafters do.

Capabilities are class or instance attributes that the loop reads:

* ``target_layer_ids`` — the target's layer inputs that ``observe`` reads (``Context.layer_input``);
  the loop turns on exactly these taps for the generation (and none for a drafter without them).
* ``supports_rejection`` — ``propose`` returns the drafter's probabilities (``Draft.probs``,
  ``(len(tokens), n_vocab)``; the loop checks both and raises otherwise). For ``verify="rejection"``
  a drafter without the capability counts as deterministic (q = one-hot at each draft token,
  whatever it returns), which is exact and accepts as often as the match rule.
* ``n_max_limit`` / ``n_max_default`` — the longest draft block it can make, and the one used
  when the caller gives none.

Register new kinds with :func:`register_drafter`; :func:`create_drafter` builds one by name
(vLLM's ``create_proposer`` and HF's ``CandidateGenerator`` are the models).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...errors import InvalidArgumentError, InvalidTypeError
from ..sampling import SamplingParams
from ..timing import StageTimer

if TYPE_CHECKING:
    from ...context import Context


@dataclass
class Draft:
    """A proposed block.

    Attributes:
        tokens: ``n`` draft token ids (``n ≤ n_max``; may be empty).
        probs: ``(n, n_vocab)`` float32 probabilities the tokens were drawn from (the drafter's
            sampling distribution per position; needed by ``verify="rejection"``), or None for a
            deterministic proposal.
    """
    tokens: list[int]
    probs: np.ndarray | None = None


class Drafter(ABC):
    """Base class of drafters (see the module docstring for the protocol).

    Args:
        target: the target context this drafter serves.

    Class attributes:
        kind: registry name: llama.cpp's ``--spec-type`` name where one exists (``"dflash"``,
            ``"ngram-simple"``, ...).
        supports_rejection: ``propose`` can return probabilities.
        n_max_limit: the longest draft block this drafter can make (tokens).
        n_max_default: the draft block used when the caller gives no ``n_max`` (tokens).
    """
    kind: ClassVar[str] = ""
    supports_rejection: ClassVar[bool] = False
    n_max_limit: int = 16
    n_max_default: int = 4

    def __init__(self, target: Context) -> None:
        self.target = target
        #: target layers whose inputs ``observe`` reads (empty: no taps needed)
        self.target_layer_ids: list[int] = []

    def begin(self, prompt: list[int]) -> None:
        """A new generation over ``prompt`` starts (the target's cache is empty)."""

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        """The target decoded ``tokens`` at ``positions`` (its last decode's rows, in order);
        the first ``n_commit`` of them are committed, the others were rejected drafts."""

    @abstractmethod
    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams,
                rng: np.random.Generator, timer: StageTimer) -> Draft:
        """Propose at most ``n_max`` tokens to follow ``last_token`` (at position ``n_past``)."""

    def on_accept(self, n_drafted: int, n_accepted: int) -> None:
        """One verify step checked ``n_drafted`` tokens and accepted ``n_accepted`` (no-op here;
        for drafters that adapt their draft length, as HF's ``update_candidate_strategy``)."""

    def rollback(self, n_past: int) -> None:
        """Forget positions ≥ ``n_past``."""

    def memory_report(self) -> dict[str, float]:
        """Weights / KV cache / compute buffers in MiB (empty for drafters without a model)."""
        return {}

    def close(self) -> None:
        """Free native resources (idempotent)."""


_REGISTRY: dict[str, type[Drafter]] = {}


def register_drafter(cls: type[Drafter]) -> type[Drafter]:
    """Class decorator: make ``cls`` creatable by ``create_drafter(cls.kind, ...)``.

    Raises:
        InvalidTypeError: ``cls`` is not a Drafter subclass.
        InvalidArgumentError: ``cls.kind`` is empty.
    """
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        raise InvalidTypeError(f"register_drafter takes a Drafter subclass, got {cls!r}")
    if not cls.kind:
        raise InvalidArgumentError("a drafter class needs a non-empty `kind`")
    _REGISTRY[cls.kind] = cls
    return cls


def drafter_kinds() -> list[str]:
    """Names accepted by :func:`create_drafter`."""
    return sorted(_REGISTRY)


def create_drafter(kind: str, target: Context, **kwargs: Any) -> Drafter:
    """Build a drafter of ``kind`` for the target :class:`~pyllama_spec.Context`.

    Raises:
        InvalidTypeError: ``kind`` is not a str.
        InvalidArgumentError: unknown kind (the message lists the known ones).
    """
    if not isinstance(kind, str):
        raise InvalidTypeError(f"kind must be a drafter kind (str), got {kind!r}")
    try:
        cls = _REGISTRY[kind]
    except KeyError:
        raise InvalidArgumentError(f"unknown drafter kind {kind!r}; known kinds: "
                                   f"{', '.join(drafter_kinds())}") from None
    return cls(target, **kwargs)


from . import dflash, ngram, ngram_cache, ngram_map, ngram_mod  # noqa: E402,F401  (registration)

__all__ = ["Drafter", "Draft", "register_drafter", "create_drafter", "drafter_kinds"]
