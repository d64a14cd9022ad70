"""What a Generator's KV caches hold between calls: prefix reuse and saved conversation states.

A chat grows turn by turn: each prompt repeats the whole history and adds a little. The target
and drafter caches still hold that history from the previous call, so :class:`CacheLedger`
remembers which tokens they hold (sequence 0, positions ``[0, len(tokens))``); the next call keeps
the longest common prefix of those tokens and the new prompt and decodes only the rest (the
``n_keep`` of ``speculative_generate``; llama.cpp's server does the same with ``cache_prompt``).
The kept entries are exactly those a cold run would compute wherever llama.cpp's results do not
depend on the batch shape — on the CPU while ubatches stay below 64 tokens (its flash attention
is tiled from there on) — and otherwise differ in the last bits (a near-tie may flip).

A record is only trusted while nothing else has touched the cache: it stores the context's
``cache_version`` and is void once that changes (a direct ``Context.decode``, a
``generate_batch``, a failed step). The drafter answers for its own state
(``Drafter.cached_prefix``): the kept prefix is the shorter of the two.

:class:`ConversationState` is a snapshot of both caches (``llama_state_seq_get_data`` of
sequence 0 of each context) with the tokens they hold, to switch between conversations or keep
one across processes (:meth:`ConversationState.save` / :meth:`ConversationState.load`).
"""
from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .errors import InvalidArgumentError

if TYPE_CHECKING:
    from .context import Context
    from .speculative.drafters import Drafter
    from .speculative.loop import StepOutput


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n], dtype=np.int64) != np.asarray(b[:n], dtype=np.int64))
    return int(diff[0]) if diff.size else n


class CacheLedger:
    """The tokens that sequence 0 of a target context holds, while the record is valid.

    Args:
        ctx: the target :class:`~pyllama_spec.Context`.
    """

    def __init__(self, ctx):
        self.ctx = ctx
        self._held: list[int] = []  # the cache holds self._held[:self._n]
        self._n = 0
        self._version = -1

    @property
    def tokens(self) -> list[int]:
        """The tokens the record says the cache holds (a copy)."""
        return self._held[:self._n]

    @property
    def valid(self) -> bool:
        """Whether the cache is known to hold exactly :attr:`tokens`."""
        return self._version == self.ctx.cache_version

    def record(self, tokens: Iterable[int]) -> None:
        """The cache holds exactly ``tokens`` at positions ``[0, len(tokens))`` now."""
        self._held = [int(t) for t in tokens]
        self._n = len(self._held)
        self._version = self.ctx.cache_version

    def _record_prefix(self, history: list[int], n: int) -> None:
        """The cache holds ``history[:n]`` (ints): kept by reference, not copied — :meth:`track` calls
        this every step, and copying the whole history each time made plain decoding O(n²) (a
        4 000-token history cost ~0.2 ms a token in Python)."""
        self._held, self._n = history, n
        self._version = self.ctx.cache_version

    def forget(self) -> None:
        self._version = -1

    def plan(self, prompt: list[int], drafter: Drafter | None) -> int:
        """How many leading positions of ``prompt`` both caches can keep (``n_keep``): at most
        ``len(prompt) - 1`` (the last prompt token is decoded by the first verify step), at most
        what the target holds, and at most ``drafter.cached_prefix`` (None: plain decoding)."""
        held = prompt[:-1]
        n = common_prefix(self.tokens, held) if self.valid else 0
        if n and drafter is not None:
            n = min(n, int(drafter.cached_prefix(held)))
        return n

    def track(self, steps: Iterator[StepOutput], prompt: list[int]) -> Iterator[StepOutput]:
        """Pass the loop's steps through, keeping the record: while the caller holds a step the
        cache holds the prompt and every committed token but the newest (the loop's invariant;
        after an EOS the EOS is the newest and is not cached); while the loop runs it is unknown."""
        history = [int(t) for t in prompt]
        self.forget()
        held = None  # what the record says while the caller holds a step (None: the loop is running)
        try:
            for step in steps:
                history.extend(map(int, step.tokens))
                held = len(history) - 1
                self._record_prefix(history, held)  # (history only grows: the prefix stays valid)
                yield step
                if step.finish_reason is None:
                    self.forget()  # the loop resumes and changes the caches
                    held = None
        finally:
            getattr(steps, "close", lambda: None)()  # the loop's generator: its finally clause runs now
            if held is not None:
                # the loop ended at a yield, where its invariant holds, and its finally clause edits only
                # other sequences (a token tree's branch mirrors: speculative/tree_step.BranchSeqs.release),
                # so sequence 0 still holds what was recorded; the version those edits bumped is taken over
                self._record_prefix(history, held)


@dataclass
class ConversationState:
    """A snapshot of a Generator's caches: the target's and each drafter's (sequence 0).

    Attributes:
        tokens: the token ids the target cache holds (positions ``[0, len(tokens))``).
        target: llama.cpp's serialized sequence state of the target (``llama_state_seq_get_data``).
        drafters: ``{name: state}`` of the drafters that keep a cache (``Drafter.save_state``).
        model: a fingerprint of the target model and context, checked at restore.
    """
    tokens: list[int]
    target: bytes
    drafters: dict = field(default_factory=dict)
    model: dict = field(default_factory=dict)

    @property
    def n_bytes(self) -> int:
        """Size of the serialized caches in bytes."""
        return len(self.target) + sum(len(d.get("data", b"")) for d in self.drafters.values())

    def save(self, path: str | os.PathLike) -> None:
        """Write the state to ``path`` (an ``.npz`` archive: no pickle, safe to load)."""
        arrays = {"meta": np.frombuffer(json.dumps({
            "tokens": self.tokens, "model": self.model,
            "drafters": {n: {"tokens": d["tokens"]} for n, d in self.drafters.items()}}).encode(), dtype=np.uint8),
            "target": np.frombuffer(self.target, dtype=np.uint8)}
        for name, d in self.drafters.items():
            arrays[f"drafter.{name}"] = np.frombuffer(d["data"], dtype=np.uint8)
        with open(os.fspath(path), "wb") as f:
            buf = io.BytesIO()
            np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub checks **arrays against allow_pickle
            f.write(buf.getvalue())

    @classmethod
    def load(cls, path: str | os.PathLike) -> ConversationState:
        """Read a state written by :meth:`save`.

        Raises:
            InvalidArgumentError: not such a file.
        """
        try:
            with np.load(os.fspath(path), allow_pickle=False) as z:
                meta = json.loads(z["meta"].tobytes().decode())
                drafters = {n: {"tokens": d["tokens"], "data": z[f"drafter.{n}"].tobytes()}
                            for n, d in meta["drafters"].items()}
                return cls(tokens=meta["tokens"], target=z["target"].tobytes(), drafters=drafters,
                           model=meta["model"])
        except (OSError, ValueError, KeyError) as exc:
            raise InvalidArgumentError(f"{os.fspath(path)!r} is not a saved conversation state: {exc}") from exc


def fingerprint(ctx: Context) -> dict:
    """What a saved state must match to be restored into ``ctx``: model and cache layout."""
    m = ctx.model
    return {"desc": m.description, "n_params": m.n_params, "n_layer": m.n_layer, "n_embd": m.n_embd,
            "n_vocab": m.n_vocab, "n_ctx_seq": ctx.n_ctx_seq}


def snapshot(ledger: CacheLedger, ctx: Context, drafters: Mapping[str, Drafter]) -> ConversationState:
    """The body of :meth:`Generator.save_state` (see there): the conversation ``ledger`` records for
    the target ``ctx`` and each drafter's own state (the caller checks that no stream is running).

    Raises:
        InvalidArgumentError: the ledger holds no valid record.
    """
    if not ledger.valid:
        raise InvalidArgumentError("the caches hold no known conversation (no generate() since the Generator "
                                   "was made or the contexts were used directly): nothing to save")
    states = {}
    for name, d in drafters.items():
        st = d.save_state()
        if st is not None:
            states[name] = st
    return ConversationState(tokens=list(ledger.tokens), target=ctx.memory.state_get(0),
                             drafters=states, model=fingerprint(ctx))


def check_state(ctx: Context, state: ConversationState) -> None:
    """Raise unless ``state`` can be restored into the target ``ctx`` (changes nothing).

    Raises:
        InvalidArgumentError: not a ConversationState, or saved from another model or context layout.
    """
    if not isinstance(state, ConversationState):
        raise InvalidArgumentError(f"state must be a ConversationState, got {type(state).__name__}")
    mine = fingerprint(ctx)
    if state.model != mine:
        diff = {k: (state.model.get(k), v) for k, v in mine.items() if state.model.get(k) != v}
        raise InvalidArgumentError(f"this state was saved from another model or context (saved, here): {diff}")


def restore(ledger: CacheLedger, ctx: Context, drafters: Mapping[str, Drafter], state: ConversationState) -> None:
    """The body of :meth:`Generator.load_state` (see there): ``state`` into the target ``ctx`` and
    the drafters of the same names, recorded in ``ledger`` (the caller cuts off a running stream).

    Raises:
        InvalidArgumentError: as :func:`check_state`; nothing was changed then.
    """
    check_state(ctx, state)
    ledger.forget()
    ctx.memory.clear()
    ctx.memory.state_set(state.target, 0)
    ledger.record(state.tokens)
    for name, st in state.drafters.items():
        if name in drafters:
            drafters[name].load_state(st)


__all__ = ["CacheLedger", "ConversationState", "check_state", "common_prefix", "fingerprint", "restore", "snapshot"]
