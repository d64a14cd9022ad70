"""Drafters: what proposes the draft block. One small interface, one module per drafter.

A drafter is created for one target :class:`~pyllama_spec.Context` (it keeps it as
``self.target``) and lives as long as the generator. Per generation the loop calls::

    begin(prompt[, n_keep])                         # a new generation over these prompt tokens
    observe(tokens, positions, n_commit, timer)     # after every target decode: the decoded
                                                    # tokens/positions (its batch rows, in order),
                                                    # of which the first n_commit are committed
    propose(last_token, n_past, n_max, sp, rng, timer) -> Draft
                                                    # at most n_max tokens to follow last_token
                                                    # (at position n_past); checked by the loop
    observe_deferred(tokens, positions, n_commit, timer)
                                                    # instead of observe after a step that drafted
                                                    # nothing (n_max="auto" resting): may postpone
    on_accept(n_drafted, n_accepted)                # after each verify step (adaptive drafters)
    rollback(n_past)                                # forget everything at positions ≥ n_past

so that, between steps, the drafter's state covers exactly the committed positions
``[0, n_past)`` — the loop's invariant (``loop.py``). ``observe`` is called for the prefill
chunks (every row committed) and after each verify (``[last, drafts…]``, the first ``k + 1``
committed); a drafter may use the rejected rows (e.g. inject all rows with one fixed shape and
drop the rejected ones in ``rollback``), as llama.cpp's drafters do.

**Prefix reuse** (``Generator.generate(reuse_prefix=True)``, the default). Between generations
the target keeps its KV cache, and a new prompt that starts like the tokens it holds is decoded
only from where they differ. Before ``begin`` the generator asks the drafter
``cached_prefix(prompt)``: how many leading tokens of ``prompt`` its own state still holds exactly
as a cold run would have built it. The kept prefix ``n_keep`` is at most that (and at most what
the target holds); then ``begin(prompt, n_keep)`` must keep the drafter's state for positions
``[0, n_keep)`` and drop everything at or after ``n_keep`` — the loop observes only
``[n_keep, len(prompt))``. A drafter that keeps nothing returns 0 (the default): the target then
starts cold too, because observe() could not be given the rows of a kept prefix, and ``begin``
is called with the prompt alone (so such drafters may define ``begin(self, prompt)``).
Per kind: state rebuilt from the tokens alone (n-gram) → ``len(prompt)``; per-position state fed
by the target (DFlash's injected features, EAGLE-3, a draft model's own KV cache) → the length of
the common prefix of ``prompt`` and the tokens that state was built from, or 0 when something
else changed it (``Context.cache_version``).

**Several sequences** (``Generator.generate_batch``): ``batched(n_seq)`` returns a
:class:`~pyllama_spec.speculative.drafters.batch.BatchDrafter` that drafts for sequences
``0 .. n_seq-1`` of the target at once (DFlash: every sequence's block in one decode). Kinds
without one raise UnsupportedError.

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

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...errors import InvalidArgumentError, InvalidTypeError, UnsupportedError
from ..sampling import SamplingParams
from ..timing import StageTimer

if TYPE_CHECKING:
    from ...context import Context
    from .batch import BatchDrafter


@dataclass
class Draft:
    """A proposed block.

    Attributes:
        tokens: ``n`` draft token ids (``n ≤ n_max``; may be empty).
        probs: ``(n, n_vocab)`` float32 probabilities the tokens were drawn from (the drafter's
            sampling distribution per position; needed by ``verify="rejection"``), or None for a
            deterministic proposal.
        confidence: ``(n,)`` float, the drafter's own probability that each draft token is right
            given the tokens before it (DFlash: the top probability of its row), or None. With
            ``n_max="auto"`` the loop uses it to cut the block (``speculative/costmodel.py``);
            drafters without it are cut by their measured acceptance per position.
        entropy: ``(n,)`` float, nats: the entropy of the drafter's distribution at each row (DFlash:
            over the candidates it read), or None. ``n_max="auto"`` with AdaEDL's stop rule reads it.
    """
    tokens: list[int]
    probs: np.ndarray | None = None
    confidence: np.ndarray | None = None
    entropy: np.ndarray | None = None

    def prefix(self, n: int) -> Draft:
        """The first ``n`` tokens (with their probabilities, confidences and entropies)."""
        return Draft(tokens=self.tokens[:n], probs=None if self.probs is None else self.probs[:n],
                     confidence=None if self.confidence is None else self.confidence[:n],
                     entropy=None if self.entropy is None else self.entropy[:n])


class Drafter(ABC):
    """Base class of drafters (see the module docstring for the protocol).

    Args:
        target: the target context this drafter serves.

    Class attributes:
        kind: registry name: llama.cpp's ``--spec-type`` name where one exists (``"dflash"``,
            ``"ngram-simple"``, ...).
        aliases: further names :func:`create_drafter` accepts (e.g. ``"draft"`` for
            ``"draft-simple"``).
        supports_rejection: ``propose`` can return probabilities.
        n_max_limit: the longest draft block this drafter can make (tokens).
        n_max_default: the draft block used when the caller gives no ``n_max`` (tokens).
    """
    kind: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    supports_rejection: ClassVar[bool] = False
    n_max_limit: int = 16
    n_max_default: int = 4

    def __init__(self, target: Context) -> None:
        self.target = target
        #: target layers whose inputs ``observe`` reads (empty: no taps needed)
        self.target_layer_ids: list[int] = []
        #: set by the loop for each generation: True when the draft length is chosen per step
        #: (``n_max="auto"``), which reads ``Draft.confidence``; a drafter whose confidences cost
        #: extra work may skip them otherwise
        self.want_confidence = False

    def begin(self, prompt: list[int], n_keep: int = 0) -> None:
        """A new generation over ``prompt`` (the tokens the target's cache will hold once the prompt
        is prefilled, i.e. the prompt without its last token) starts. Positions ``[0, n_keep)`` are
        kept from the previous generation (``n_keep ≤ cached_prefix(prompt)``, see the module
        docstring) and are not observed again; nothing at or after ``n_keep`` may remain."""

    def cached_prefix(self, prompt: list[int]) -> int:
        """How many leading tokens of ``prompt`` this drafter's state holds exactly as a cold run
        over ``prompt`` would build it (the most ``begin`` can keep). 0 here: no reuse."""
        return 0

    def save_state(self) -> dict | None:
        """A snapshot of sequence 0's per-position state for a
        :class:`~pyllama_spec.cache_reuse.ConversationState` — ``{"tokens": [...], "data": bytes}`` —
        or None when there is nothing to save (a state rebuilt from the prompt, or none)."""
        return None

    def load_state(self, state: dict) -> None:
        """Restore what :meth:`save_state` returned (the target's cache is restored alongside)."""

    def batched(self, n_seq: int) -> BatchDrafter:
        """A :class:`~pyllama_spec.speculative.drafters.batch.BatchDrafter` drafting for sequences
        ``0 .. n_seq-1`` of the target at once (``Generator.generate_batch``).

        Raises:
            UnsupportedError: this kind drafts for one sequence only.
        """
        raise UnsupportedError(f"drafter kind {self.kind!r} drafts for one sequence at a time; generate_batch "
                               "works with drafters that implement batched() (dflash, ngram)")

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        """The target decoded ``tokens`` at ``positions`` (its last decode's rows, in order);
        the first ``n_commit`` of them are committed, the others were rejected drafts."""

    def observe_deferred(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                         timer: StageTimer) -> None:
        """As :meth:`observe`, after a step that drafted nothing (``n_max="auto"`` resting): the
        drafter may postpone the work until its next ``propose`` (or ``begin`` / ``save_state``), as
        long as its state then covers every committed position. Default: :meth:`observe` now."""
        self.observe(tokens, positions, n_commit, timer)

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


class ModelDrafter(Drafter):
    """A drafter with a model and a context of its own (``self.model``, ``self.ctx``): rollback cuts
    its cache back to ``n_past``, its memory report is its context's, ``close`` frees both."""
    model: Any
    ctx: Any

    def rollback(self, n_past: int) -> None:
        self.ctx.memory.seq_rm(0, n_past)

    def memory_report(self) -> dict[str, float]:
        return self.ctx.memory_summary()

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


_REGISTRY: dict[str, type[Drafter]] = {}


def register_drafter(cls: type[Drafter]) -> type[Drafter]:
    """Class decorator: make ``cls`` creatable by ``create_drafter(cls.kind, ...)`` (and by each
    of ``cls.aliases``).

    Raises:
        InvalidTypeError: ``cls`` is not a Drafter subclass.
        InvalidArgumentError: ``cls.kind`` is empty.
    """
    if not (isinstance(cls, type) and issubclass(cls, Drafter)):
        raise InvalidTypeError(f"register_drafter takes a Drafter subclass, got {cls!r}")
    if not cls.kind:
        raise InvalidArgumentError("a drafter class needs a non-empty `kind`")
    _REGISTRY[cls.kind] = cls
    for alias in cls.aliases:
        _REGISTRY[alias] = cls
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


def drafter_kind_of_file(path: str | os.PathLike) -> str:
    """The drafter kind a ``.gguf`` file is for, from its header (as llama.cpp's
    ``common_speculative_types_from_gguf`` tells DFlash from DSpark): ``dflash`` files are
    ``"draft-dflash"`` (``"draft-dspark"`` with a Markov head), ``eagle3`` files
    ``"draft-eagle3"``, Gemma-4 assistants ``"draft-mtp"``, any other model ``"draft-simple"``.

    Raises:
        ModelNotFoundError, NotGGUFError, TruncatedGGUFError: not a readable GGUF file.
    """
    from ...gguf_file import read_gguf

    info = read_gguf(path)
    if info.arch == "dflash":
        return "draft-dspark" if "markov_w1.weight" in info.tensors else "draft-dflash"
    return {"eagle3": "draft-eagle3", "gemma4-assistant": "draft-mtp"}.get(info.arch, "draft-simple")


# registration
from . import dflash, draft_simple, dspark, eagle3, mtp, ngram, ngram_cache, ngram_map, ngram_mod  # noqa: E402,F401

__all__ = ["Drafter", "ModelDrafter", "Draft", "register_drafter", "create_drafter", "drafter_kinds",
           "drafter_kind_of_file"]
