"""The drafter protocol (:class:`Drafter`, :class:`Draft`, :class:`ModelDrafter`) and the registry of
kinds (:func:`register_drafter`, :func:`create_drafter`); the package's docstring describes the
protocol. Each kind's module imports this one and registers itself; the package imports every kind,
so that the registry is full once ``pyllama_spec.speculative.drafters`` is imported."""
from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...errors import InvalidArgumentError, InvalidTypeError, UnsupportedError
from ...sampler import SamplerChain
from ..sampling import SamplingParams
from ..timing import StageTimer
from ..tree import TreeDraft

log = logging.getLogger("pyllama_spec")

if TYPE_CHECKING:
    from ...context import Context
    from .batch import BatchDrafter


class DeferredRows:
    """The committed rows a drafter keeps while ``n_max="auto"`` rests (``Drafter.observe_deferred``), to go into
    the drafter in one batch before its next draft: tokens, positions (consecutive) and, where the drafter needs
    them, a per-row array the target will overwrite (EAGLE-3's features, MTP's hidden states; a draft model
    needs none), in order.

    Args:
        limit: rows kept at most — :meth:`add` says when a batch's worth waits (the caller flushes then), so a long
            prompt decoded inside a long rest is not held on the host whole.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._parts: list[tuple[list[int], np.ndarray, np.ndarray | None]] = []
        self.n = 0

    def __bool__(self) -> bool:
        return self.n > 0

    def add(self, tokens: Sequence[int], positions: np.ndarray, rows: np.ndarray | None = None) -> bool:
        """Keep ``len(tokens)`` rows (``rows``: their ``(n, width)`` array, or None); True when ``limit`` rows or
        more wait."""
        self._parts.append(([int(t) for t in tokens], np.asarray(positions), rows))
        self.n += len(tokens)
        return self.n >= self.limit

    def take(self) -> tuple[list[int], np.ndarray, np.ndarray | None]:
        """All rows kept, joined (``(tokens, positions (n,), rows (n, width) or None)``), and forget them."""
        parts, self._parts, self.n = self._parts, [], 0
        rows = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
        return [t for p in parts for t in p[0]], np.concatenate([p[1] for p in parts]), rows

    def cut(self, n_past: int) -> None:
        """Drop the rows at positions ≥ ``n_past`` (a rollback: an EOS inside a rest)."""
        kept = []
        for toks, pos, rows in self._parts:
            keep = int(np.count_nonzero(pos < n_past))
            if keep:
                kept.append((toks[:keep], pos[:keep], None if rows is None else rows[:keep]))
        self._parts, self.n = kept, sum(len(k[0]) for k in kept)


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
        dormant_reads_taps: :meth:`observe_dormant` may read the target's layer inputs
            (``target_layer_ids``), so the loop keeps the taps on for dormant steps. True here (the default
            ``observe_dormant`` observes); a kind whose ``observe_dormant`` reads none (DFlash, EAGLE-3: they skip
            the rows) sets False, and with ``AutoState.taps_off_when_dormant`` the loop then turns the target's
            taps off for those steps.
        supports_rejection: ``propose`` can return probabilities.
        supports_tree: ``propose_tree`` and ``observe_rows`` are implemented (token trees).
        n_max_limit: the longest draft block this drafter can make (tokens).
        n_max_default: the draft block used when the caller gives no ``n_max`` (tokens).
        free: its ``propose`` is a lookup in the committed tokens (microseconds, no model): ``n_max="auto"``
            treats it as free from the first step (``costmodel.AutoDraftLength.free_drafter``) instead of
            measuring its call against ``FREE_DRAFTER`` of a 1-row verify — a threshold that a lookup's
            timing noise crossed on a GPU host, after which auto rested it for up to 512 steps
            (RESULTS.md 19.9).
    """
    kind: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    supports_rejection: ClassVar[bool] = False
    supports_tree: ClassVar[bool] = False
    free: ClassVar[bool] = False
    n_max_limit: int = 16
    n_max_default: int = 4
    dormant_reads_taps: ClassVar[bool] = True

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

    def observe_dormant(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                        timer: StageTimer) -> None:
        """As :meth:`observe_deferred`, inside a long rest (``n_max="auto"`` will not draft for at least
        ``costmodel.DORMANT_WINDOW`` more steps): the drafter may skip the work these rows would cost
        (DFlash: their target features — its cache then has a gap at these positions, which its next
        drafts see less context for; the loop feeds it the last ``DORMANT_WINDOW`` rows before the probe
        with :meth:`observe_deferred`). What is committed stays the target's. Default: :meth:`observe_deferred`.
        A kind that reads no target layer input here says so with ``dormant_reads_taps = False``: the target
        may then have decoded these rows with its taps off (``AutoState.taps_off_when_dormant``)."""
        self.observe_deferred(tokens, positions, n_commit, timer)

    @abstractmethod
    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams,
                rng: np.random.Generator, timer: StageTimer) -> Draft:
        """Propose at most ``n_max`` tokens to follow ``last_token`` (at position ``n_past``)."""

    def propose_tree(self, last_token: int, n_past: int, n_max: int, budget: int, sp: SamplingParams,
                     rng: np.random.Generator, timer: StageTimer) -> TreeDraft:
        """Propose a token tree of at most ``budget`` nodes and depth ``n_max`` rooted at ``last_token``
        (at position ``n_past``): nodes in topological order, siblings distinct; with a non-greedy ``sp``
        (``verify="rejection"``) drawn from the drafter's distributions, with ``probs`` set.

        Raises:
            UnsupportedError: this kind drafts chains only (``supports_tree`` is False).
        """
        raise UnsupportedError(f"drafter kind {self.kind!r} drafts chains only; token trees need a drafter with "
                               "supports_tree (draft-dflash, DFlash2, draft-eagle3)")

    def observe_rows(self, tokens: list[int], positions: np.ndarray, rows: list[int], timer: StageTimer) -> None:
        """As :meth:`observe` for a tree verify: the target decoded ``tokens`` at ``positions`` (its
        batch rows), of which rows ``rows`` (increasing; the root's row 0 first, then the accepted
        path's) are committed. Here: the committed rows must be the batch's first ones.

        Raises:
            UnsupportedError: committed rows that are not a prefix of the batch, for a drafter without
                tree support.
        """
        if list(rows) != list(range(len(rows))):
            raise UnsupportedError(f"drafter kind {self.kind!r} takes a prefix of a verify batch only; token "
                                   "trees need a drafter with supports_tree")
        self.observe(tokens, positions, len(rows), timer)

    def on_trim(self, n_proposed: int, n_kept: int) -> None:
        """``n_max="auto"`` verifies only the first ``n_kept`` (≥ 1) of the ``n_proposed`` tokens ``propose``
        returned this step; called before :meth:`on_accept`, whose ``n_drafted`` is then ``n_kept``. No-op
        here (the n-gram kinds use it: a prefix accepted whole says nothing of the tokens cut off)."""

    def on_accept(self, n_drafted: int, n_accepted: int) -> None:
        """One verify step checked ``n_drafted`` tokens and accepted ``n_accepted`` (no-op here;
        for drafters that adapt their draft length, as HF's ``update_candidate_strategy``). Not called
        after a step that verified nothing of the drafter's: a resting step of ``n_max="auto"`` (no
        ``propose``) or one whose proposal auto's trim cut to nothing."""

    def rollback(self, n_past: int) -> None:
        """Forget positions ≥ ``n_past``."""

    def memory_report(self) -> dict[str, float]:
        """Weights / KV cache / compute buffers in MiB (empty for drafters without a model)."""
        return {}

    def close(self) -> None:
        """Free native resources (idempotent)."""


class ModelDrafter(Drafter):
    """A drafter with a model and a context of its own (``self.model``, ``self.ctx``): rollback cuts
    its cache back to ``n_past``, its memory report is its context's, ``close`` frees both.

    ``backend_sampling``: a drafter that decodes one token at a time (draft-simple, EAGLE-3) draws a greedy draft
    (no ``p_min``) in its decode graph, a token id per decode (:meth:`_draw_in_graph`); False: the row of logits
    comes back and the host takes its argmax (as llama.cpp's own drafters do). The drafter's switch, as the
    DFlash drafter's is; ``SpecConfig.backend_sampling`` is about the target's tokens. The chain stays attached
    between generations (the draft context is the drafter's own); a backend that cannot run it turns this off."""
    model: Any
    ctx: Any
    backend_sampling: bool = True

    def _draw_in_graph(self, on: bool) -> bool:
        """Attach a greedy backend sampler to the drafter's context, or take it off (a sampled or p_min draft, a
        token tree, reads the logits). Each change rebuilds the graph once (patch 0017); a generation keeps one
        setting. Returns whether drafts are drawn in the graph (False where the backend refused the chain: then
        ``backend_sampling`` is turned off, with a warning, and the host draws, as llama.cpp's drafters fall
        back to the CPU sampler)."""
        if on and 0 not in self.ctx.samplers:
            try:
                self.ctx.set_sampler(SamplerChain())
            except UnsupportedError as exc:
                log.warning("%s: %s; drawing the drafts on the host", self.kind, exc)
                self.backend_sampling = on = False
        elif not on and 0 in self.ctx.samplers:
            self.ctx.set_sampler(None)
        return on

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


__all__ = ["Drafter", "ModelDrafter", "Draft", "DeferredRows", "register_drafter", "create_drafter", "drafter_kinds",
           "drafter_kind_of_file"]
