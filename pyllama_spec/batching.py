"""``Generator.generate_batch``: many prompts at once, every step one target decode for all of
them (the loop is ``speculative/batch_loop.py``); this module turns each sequence's committed
tokens into text (end-of-generation, stop strings) and collects the results."""
from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .errors import InvalidArgumentError, PromptTooLongError, PyllamaSpecError
from .speculative.batch_loop import BatchLoop, SeqSpec
from .speculative.config import SpecConfig
from .speculative.report import GenerationResult
from .speculative.sampling import SamplingParams
from .speculative.stats import SpecStats
from .speculative.timing import StageTimer

if TYPE_CHECKING:
    from .context import Context
    from .speculative.batch_loop import StepOutput
    from .speculative.drafters import Drafter
    from .vocab import Vocab


@dataclass
class BatchPiece:
    """A piece of text of sequence ``index`` (never splitting a UTF-8 character); the last piece
    of a sequence carries its ``finish_reason`` (its text may be empty)."""
    index: int
    text: str
    finish_reason: str | None = None


@dataclass
class BatchResult:
    """The outcome of :meth:`Generator.generate_batch`.

    A sequence of those results: ``len(res)``, ``res[i]`` (slices too) and ``for r in res`` read
    :attr:`results`.

    Attributes:
        results: one :class:`GenerationResult` per prompt, in order. Its ``timings`` are the whole
            batch's; its ``marks["finished"]`` is when that sequence ended, so its
            ``tokens_per_s`` is its own speed (tokens / seconds from the end of the batch's
            prefill to its end).
        timings: per-stage seconds of the whole batch (``{stage: {"seconds", "count"}}``, ``wall``).
        marks: ``prefill_start`` / ``prefill_done`` in seconds since the call began.
    """
    results: list
    timings: dict
    marks: dict = field(default_factory=dict)

    # a sequence of its results, as vLLM's generate() returns a list: len(res), res[i], for r in res
    def __len__(self) -> int:
        return len(self.results)

    def __iter__(self) -> Iterator[GenerationResult]:
        return iter(self.results)

    @overload
    def __getitem__(self, i: int) -> GenerationResult: ...

    @overload
    def __getitem__(self, i: slice) -> list[GenerationResult]: ...

    def __getitem__(self, i: int | slice) -> GenerationResult | list[GenerationResult]:
        return self.results[i]

    @property
    def n_generated(self) -> int:
        """Tokens committed over all sequences."""
        return sum(r.n_generated for r in self.results)

    @property
    def generation_seconds(self) -> float:
        """Seconds from the end of the prefill to the end of the call."""
        return self.timings["wall"]["seconds"] - self.marks["prefill_done"]

    @property
    def tokens_per_s(self) -> float:
        """Throughput: tokens committed over all sequences / :attr:`generation_seconds`."""
        s = self.generation_seconds
        return self.n_generated / s if s > 0 else float("nan")

    @property
    def stats(self) -> SpecStats:
        """Acceptance statistics summed over the sequences."""
        total = SpecStats(n_max=max((r.n_max for r in self.results), default=0))
        for r in self.results:
            if r.stats.n_max == total.n_max:
                total.merge(r.stats)
            else:  # a shorter n_max: pad its per-position counters
                pad = total.n_max - r.stats.n_max
                padded = SpecStats(n_max=total.n_max, n_steps=r.stats.n_steps, n_drafted=r.stats.n_drafted,
                                   n_accepted=r.stats.n_accepted, acceptance_lengths=list(r.stats.acceptance_lengths),
                                   drafted_at=r.stats.drafted_at + [0] * pad,
                                   accepted_at=r.stats.accepted_at + [0] * pad)
                total.merge(padded)
        return total

    def report(self) -> str:
        """One line per sequence plus the batch's throughput and acceptance."""
        lines = [f"{'seq':>4}{'prompt':>8}{'tokens':>8}{'steps':>7}{'τ':>7}{'tok/s':>10}  finish"]
        for i, r in enumerate(self.results):
            lines.append(f"{i:>4}{r.n_prompt:>8}{r.n_generated:>8}{r.stats.n_steps:>7}"
                         f"{r.stats.mean_accepted_length:>7.2f}{r.tokens_per_s:>10.1f}  {r.finish_reason}")
        s = self.stats
        lines.append(f"batch of {len(self.results)}: {self.n_generated} tokens in {self.generation_seconds:.3f} s "
                     f"after prefill = {self.tokens_per_s:,.1f} tok/s; τ {s.mean_accepted_length:.2f}, "
                     f"acceptance {100 * s.acceptance_rate:.1f}%")
        return "\n".join(lines)


class _SeqText:
    """Text of one sequence, fed step by step: drops the end-of-generation token, holds back what
    could be the start of a stop string, cuts at a stop string (and the tokens with it)."""

    def __init__(self, vocab: Vocab, stops: list[str]):
        self.vocab, self.stops = vocab, stops
        self.dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.tokens: list = []
        self.text = ""
        self.emitted = 0
        self.n_committed = 0
        self.finish: str | None = None
        self.finished_at: float | None = None
        self.hold = max((len(s) for s in stops), default=0)

    def feed(self, tokens: list, finish: str | None) -> str:
        """Take one step's committed tokens; returns the text that is now final. Sets
        :attr:`finish` when the sequence ends (``"stop"`` at a stop string)."""
        self.n_committed += len(tokens)
        for t in tokens:
            if self.vocab.is_eog(t):
                break
            self.tokens.append(t)
            self.text += self.dec.decode(self.vocab.token_to_piece(t))
        if finish is not None:
            self.text += self.dec.decode(b"", final=True)
        hits = [i for i in (self.text.find(s) for s in self.stops) if i >= 0]
        if hits:
            cut = min(hits)
            self.text = self.text[:cut]
            self.tokens = self.vocab.tokens_covering(self.tokens, cut)
            finish = "stop"
        if finish is not None:
            self.finish = finish
            safe = len(self.text)
        else:
            safe = len(self.text) - (self.hold - 1 if self.hold else 0)
        piece = ""
        if safe > self.emitted:
            piece = self.text[self.emitted:safe]
            self.emitted = safe
        return piece


class BatchRun:
    """Drives a :class:`BatchLoop` and turns its steps into :class:`BatchPiece` s."""

    def __init__(self, vocab: Vocab, loop: BatchLoop, prompts: list, stops: list[str], timer: StageTimer,
                 stats: list[SpecStats], spec: SpecConfig, n_max: list[int], sampling: SamplingParams):
        self.loop, self.prompts, self.timer, self.stats = loop, prompts, timer, stats
        self.spec, self.n_max, self.sampling = spec, n_max, sampling
        self.texts = [_SeqText(vocab, stops) for _ in prompts]
        self.result: BatchResult | None = None
        self.invalid = False
        self._steps: Generator[list[tuple[int, StepOutput]], None, None] | None = None

    def invalidate(self) -> None:
        if self.result is None:
            self.invalid = True
            if self._steps is not None:
                self._steps.close()

    def pieces(self) -> Iterator[BatchPiece]:
        t0 = time.perf_counter()
        self._steps = self.loop.run()
        for step in self._steps:
            if self.invalid:
                break
            with self.timer("detokenize"):
                out = []
                for i, so in step:
                    st = self.texts[i]
                    if st.finish is not None:
                        continue
                    piece = st.feed(so.tokens, so.finish_reason)
                    if st.finish is not None:
                        st.finished_at = time.perf_counter() - t0
                        if so.finish_reason is None:  # a stop string: the loop stops this sequence
                            self.loop.cancel(i)
                    if piece or st.finish is not None:
                        out.append(BatchPiece(i, piece, st.finish))
            yield from out
            if all(st.finish is not None for st in self.texts):
                self._steps.close()
                break
        if self.invalid:
            raise PyllamaSpecError("this batch stream was cut off by a later generate() call on the same Generator "
                                   "(they share the KV caches); consume a stream before starting the next")
        self.timer.stop_wall()
        timings = self.timer.as_dict()
        marks = dict(self.timer.marks)
        results = []
        for i, st in enumerate(self.texts):
            m = dict(marks)
            m["finished"] = st.finished_at if st.finished_at is not None else timings["wall"]["seconds"]
            results.append(GenerationResult(
                text=st.text, tokens=st.tokens, finish_reason=st.finish or "length", prompt_tokens=self.prompts[i],
                stats=self.stats[i], timings=timings, spec=self.spec.replace(n_max=self.n_max[i]),
                sampling=self.sampling, n_committed=st.n_committed, marks=m))
        self.result = BatchResult(results=results, timings=timings, marks=marks)


class BatchStream:
    """An iterator of :class:`BatchPiece` (pieces of all sequences, as they are committed);
    ``.result`` is the :class:`BatchResult` once the iterator is exhausted."""

    def __init__(self, run: BatchRun):
        self._run = run
        self._it = run.pieces()

    def __iter__(self):
        return self

    def __next__(self) -> BatchPiece:
        return next(self._it)

    @property
    def result(self) -> BatchResult | None:
        return self._run.result


def start_batch(ctx: Context, *, resolve: Callable[[SpecConfig], tuple[Drafter | None, SpecConfig, bool]],
                tokenize: Callable[[str | None, list | None, Mapping[str, Any] | None], list[int]],
                release: Callable[[], None], prompts: list | None, messages: list | None,
                prompt_tokens: list | None, max_tokens: int | Sequence[int], n_max: int | Sequence[int] | None,
                stop: str | Iterable[str] | None, template_kwargs: Mapping[str, Any] | None,
                sampling: SamplingParams, spec: SpecConfig) -> BatchRun:
    """The body of :meth:`Generator.generate_batch` (see there), with the configuration objects built:
    checks the arguments, tokenizes, and returns the run, not started (iterate ``run.pieces()``).

    The generator's own parts come as callables, so this module does not depend on it: ``resolve``
    (a SpecConfig → its drafter, the SpecConfig with ``n_max`` resolved, whether it was ``"auto"``),
    ``tokenize`` (``(prompt, messages, template_kwargs)`` → token ids) and ``release`` (called once
    the arguments are good, before the target's cache is cleared: an unfinished stream is void and
    the prefix-reuse record forgotten). ``ctx`` is the target context.

    Raises:
        InvalidArgumentError, PromptTooLongError: as :meth:`Generator.generate_batch`.
    """
    given = [x for x in (prompts, messages, prompt_tokens) if x is not None]
    if len(given) != 1 or not isinstance(given[0], (list, tuple)) or not given[0]:
        raise InvalidArgumentError("pass exactly one of prompts=, messages= or prompt_tokens=, a non-empty list "
                                   "(one entry per sequence)")
    n = len(given[0])
    if n > ctx.n_seq_max:
        raise InvalidArgumentError(f"{n} prompts, but this Generator runs at most {ctx.n_seq_max} sequences "
                                   f"at once: create it with n_parallel={n} (or more)")
    per_seq_max: list[Any] = list(max_tokens) if isinstance(max_tokens, (list, tuple)) else [max_tokens] * n
    per_seq_nmax = list(n_max) if isinstance(n_max, (list, tuple)) else [n_max if n_max is not None
                                                                         else spec.n_max] * n
    if any(isinstance(k, str) for k in per_seq_nmax):
        raise InvalidArgumentError("n_max='auto' chooses each step's draft length in generate(); generate_batch "
                                   "takes ints (one, or one per prompt) or None")
    if len(per_seq_max) != n or len(per_seq_nmax) != n:
        raise InvalidArgumentError(f"max_tokens and n_max take one value, or one per prompt ({n}); got "
                                   f"{len(per_seq_max)} and {len(per_seq_nmax)}")
    for m in per_seq_max:
        if not isinstance(m, int) or isinstance(m, bool) or m < 1:
            raise InvalidArgumentError(f"max_tokens must be an int ≥ 1 (or one per prompt), got {m!r}")
    resolved = [resolve(spec.replace(n_max=m)) for m in per_seq_nmax]
    d, spec = resolved[0][0], resolved[0][1]
    nmaxes = [int(r[1].n_max or 0) for r in resolved]  # resolved: always an int
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    if any(not isinstance(s_, str) or not s_ for s_ in stops):
        raise InvalidArgumentError(f"stop must be a non-empty string or a list of them, got {stop!r}")
    timer = StageTimer(sync=spec.sync_stages)
    timer.start_wall()
    with timer("tokenize"):
        if prompt_tokens is not None:
            toks = []
            for p in prompt_tokens:
                p = [int(t) for t in p]
                bad = [t for t in p if not 0 <= t < ctx.model.n_vocab]
                if bad:
                    raise InvalidArgumentError(f"prompt_tokens holds ids outside the vocabulary "
                                               f"[0, {ctx.model.n_vocab}): {bad[:5]}")
                toks.append(p)
        elif prompts is not None:
            toks = [tokenize(p, None, template_kwargs) for p in prompts]
        else:
            assert messages is not None  # exactly one of the three was given (checked above)
            toks = [tokenize(None, m, template_kwargs) for m in messages]
    for i, p in enumerate(toks):
        if not p:
            raise InvalidArgumentError(f"prompt {i} is empty (no tokens)")
        if len(p) >= ctx.n_ctx_seq:
            raise PromptTooLongError(f"prompt {i} has {len(p)} tokens but n_ctx is {ctx.n_ctx_seq}; "
                                     "shorten it or create the Generator with a larger n_ctx")
    batch_drafter = d.batched(n) if d is not None else None
    release()  # the caches are about to be used
    stats = [SpecStats(n_max=m) for m in nmaxes]
    seqs = [SeqSpec(prompt=p, max_tokens=m, n_max=k, rng=np.random.default_rng(sampling.seed))
            for p, m, k in zip(toks, per_seq_max, nmaxes)]
    loop = BatchLoop(ctx, batch_drafter, seqs, sp=sampling, verify=spec.verify, stats=stats, timer=timer,
                     backend_sampling=spec.backend_sampling)
    return BatchRun(ctx.model.vocab, loop, toks, stops, timer, stats, spec, nmaxes, sampling)


__all__ = ["BatchPiece", "BatchResult", "BatchRun", "BatchStream", "start_batch"]
