"""Speculative decoding for several sequences at once: one target decode verifies every draft.

    prefill every prompt[:-1], packed into decodes of ≤ n_batch tokens      → drafter.observe
    repeat while a sequence runs:
        drafts = drafter.propose([(seq, last, n_past, n_max) for each running seq])   # one call
        verify = target.decode(concat over seqs of [last] + draft)                    # one batch
        per sequence: k, bonus = accept(its rows, its draft); commit; rollback its stream
        drafter.observe(every sequence's rows, first k + 1 committed)

Sequence ``s`` is KV stream ``s`` of the target context (``n_seq_max`` streams, one cache each,
as llama.cpp's server slots and ``train.data.answer_batched``); the drafter is a
:class:`~pyllama_spec.speculative.drafters.batch.BatchDrafter` over the same sequence ids. Per
sequence the invariant of the single-sequence loop (``loop.py``) holds: its stream holds exactly
its positions ``[0, n_past)``, and ``last`` (at ``n_past``) is not decoded yet. Each sequence has
its own ``n_max``, ``max_tokens``, statistics, random generator and finish reason, and can be
stopped from outside (:meth:`BatchLoop.cancel`, for stop strings).

Same tokens as one sequence alone: llama.cpp computes each stream's attention on its own, and on
the CPU backend a row's result does not depend on the other rows of the batch, so at T = 0 each
sequence gives exactly the tokens of its single run — as long as no ubatch holds 64 tokens or more
of one sequence (from there the CPU's flash attention is tiled and sums in another order; packing
prompts together changes where their prefill is cut). On GPUs kernels chosen by batch size make
near-ties differ, as between speculative and plain decoding.

Batch shape: with one stream per sequence llama.cpp splits a multi-sequence batch into ubatches
holding equally many tokens of consecutive sequences, so sequences whose verify rows differ in
number cost extra ubatches (graph evaluations) in that step.
"""
from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field

import numpy as np

from ..context import Context
from ..errors import InvalidArgumentError, PyllamaSpecError
from ..sampler import SamplerChain
from .config import VERIFY_MODES, use_backend_sampling
from .drafters.batch import BatchDrafter, DraftRequest, SeqRows
from .loop import StepOutput
from .sampling import SamplingParams
from .stats import SpecStats
from .timing import StageTimer
from .verify import accept_prefix, verify_greedy, verify_match, verify_rejection


@dataclass
class SeqSpec:
    """One sequence of a batched generation.

    Attributes:
        prompt: token ids (≥ 1, shorter than the context's ``n_ctx_seq``).
        max_tokens: most tokens to commit.
        n_max: most draft tokens per step (0: plain decoding for this sequence).
        rng: its random generator (sampling, rejection).
    """
    prompt: list
    max_tokens: int
    n_max: int
    rng: np.random.Generator = field(default_factory=np.random.default_rng)


@dataclass
class _Seq:
    spec: SeqSpec
    stats: SpecStats
    chain: SamplerChain | None = None
    last: int = 0
    n_past: int = 0
    n_out: int = 0
    finish: str | None = None


class BatchLoop:
    """Run N sequences of one target context speculatively (see the module docstring).

    Args:
        target: the target context (``n_seq_max ≥ len(seqs)``; its cache is cleared first).
        drafter: a batch drafter for ``len(seqs)`` sequences, or None for plain decoding.
        seqs: the sequences; sequence ``i`` uses KV stream ``i``.
        sp: sampling settings (every sequence).
        verify: ``"match"`` or ``"rejection"``.
        stats: one :class:`SpecStats` per sequence (filled in).
        timer: the stage timer of the whole batch.
        backend_sampling: draw the target's tokens in the decode graph where the rule allows it
            (``"auto"``: at temperature > 0 only, as :func:`~.loop.speculative_generate`).

    Raises:
        InvalidArgumentError: more sequences than the context has streams, or than fit one decode.
    """

    def __init__(self, target: Context, drafter: BatchDrafter | None, seqs: list[SeqSpec], *, sp: SamplingParams,
                 verify: str, stats: list[SpecStats], timer: StageTimer, backend_sampling: bool | str = "auto"):
        if verify not in VERIFY_MODES:
            raise InvalidArgumentError(f"verify must be one of {VERIFY_MODES}, got {verify!r}")
        n = len(seqs)
        if not 1 <= n <= target.n_seq_max:
            raise InvalidArgumentError(f"{n} sequences, but the target context has {target.n_seq_max} KV streams "
                                       "(n_seq_max); create it with more")
        if n > target.n_batch:
            raise InvalidArgumentError(f"{n} sequences need a verify batch of at least {n} tokens; n_batch is "
                                       f"{target.n_batch}")
        self.target, self.drafter, self.sp, self.verify, self.timer = target, drafter, sp, verify, timer
        self.seqs = [_Seq(spec=s, stats=st) for s, st in zip(seqs, stats)]
        self.backend_sampling = backend_sampling
        self._cancelled: set[int] = set()

    def cancel(self, seq: int) -> None:
        """Stop sequence ``seq`` before the next step (its finish reason becomes ``"stop"``)."""
        self._cancelled.add(seq)

    # ------------------------------------------------------------------------------------------
    def run(self) -> Generator[list[tuple[int, StepOutput]], None, None]:
        """Yield, per step, ``[(seq, StepOutput)]`` for every sequence that committed tokens (the
        last output of a sequence carries its finish reason)."""
        target, drafter = self.target, self.drafter
        target.memory.clear()
        target.set_layer_inputs(drafter.target_layer_ids if drafter is not None else [])
        host_rule = self.verify == "rejection" and not self.sp.greedy and drafter is not None
        n_max_all = max(s.spec.n_max for s in self.seqs)
        fits = n_max_all + 1 <= target.n_outputs_max_per_seq
        try:
            use_backend = use_backend_sampling(self.backend_sampling, self.sp.greedy, target.model.n_vocab)
            if use_backend and fits and not host_rule:
                for i, s in enumerate(self.seqs):
                    s.chain = SamplerChain.from_params(self.sp)
                    target.set_sampler(s.chain, i)
            if drafter is not None:
                for i, s in enumerate(self.seqs):
                    drafter.begin(i, s.spec.prompt[:-1])
            self._prefill()
            while True:
                out = self._step()
                yield out
                if all(s.finish is not None for s in self.seqs):
                    return
        finally:
            for i in list(target.samplers):
                target.set_sampler(None, i)

    def _prefill(self) -> None:
        """Decode every prompt but its last token, several sequences per decode (≤ n_batch tokens)."""
        target, drafter, timer = self.target, self.drafter, self.timer
        timer.mark("prefill_start")
        todo = [[i, 0, len(s.spec.prompt) - 1] for i, s in enumerate(self.seqs)]  # seq, next pos, end
        while any(p < e for _, p, e in todo):
            toks: list[int] = []
            pos: list[int] = []
            seq: list[int] = []
            rows: list[SeqRows] = []
            for t in todo:
                i, p, e = t
                take = min(e - p, target.n_batch - len(toks))
                if take <= 0:
                    continue
                chunk = self.seqs[i].spec.prompt[p:p + take]
                rows.append(SeqRows(i, len(toks), chunk, np.arange(p, p + take, dtype=np.int32), take))
                toks.extend(chunk)
                pos.extend(range(p, p + take))
                seq.extend([i] * take)
                t[1] = p + take
            with timer("prefill", target):
                target.decode(toks, np.asarray(pos, dtype=np.int32), seq_id=np.asarray(seq, dtype=np.int32),
                              logits="none")
            if drafter is not None:
                drafter.observe(rows, timer)
        for s in self.seqs:
            s.last = int(s.spec.prompt[-1])
            s.n_past = len(s.spec.prompt) - 1
        timer.mark("prefill_done")

    def _step(self) -> list[tuple[int, StepOutput]]:
        target, drafter, timer, sp = self.target, self.drafter, self.timer, self.sp
        vocab = target.model.vocab
        for i in self._cancelled:
            if self.seqs[i].finish is None:
                self.seqs[i].finish = "stop"
        running = [i for i, s in enumerate(self.seqs) if s.finish is None]
        if not running:
            return []
        # every running sequence sends [last] + draft; together they must fit one decode
        cap = target.n_batch // len(running) - 1
        n_ctx = target.n_ctx_seq
        want = {}
        for i in running:
            s = self.seqs[i]
            room = min(n_ctx - s.n_past - 1, s.spec.max_tokens - s.n_out - 1)
            want[i] = max(0, min(s.spec.n_max, room, cap))
        drafts: dict[int, list[int]] = {i: [] for i in running}
        probs: dict[int, np.ndarray | None] = {i: None for i in running}
        reqs = [DraftRequest(i, self.seqs[i].last, self.seqs[i].n_past, want[i], self.seqs[i].spec.rng)
                for i in running if want[i] > 0]
        if drafter is not None and reqs:
            dsp = sp if self.verify == "rejection" else SamplingParams()
            for q, dr in zip(reqs, drafter.propose(reqs, dsp, timer)):
                if len(dr.tokens) > q.n_max:
                    raise PyllamaSpecError(f"the batch drafter proposed {len(dr.tokens)} tokens for sequence {q.seq}, "
                                           f"more than the {q.n_max} asked for: fix its propose()")
                drafts[q.seq], probs[q.seq] = [int(t) for t in dr.tokens], dr.probs

        toks: list[int] = []
        pos: list[int] = []
        seq: list[int] = []
        rows: list[SeqRows] = []
        for i in running:
            s = self.seqs[i]
            block = [s.last] + drafts[i]
            rows.append(SeqRows(i, len(toks), block, np.arange(s.n_past, s.n_past + len(block), dtype=np.int32), 0))
            toks.extend(block)
            pos.extend(range(s.n_past, s.n_past + len(block)))
            seq.extend([i] * len(block))
        with timer("verify", target):
            target.decode(toks, np.asarray(pos, dtype=np.int32), seq_id=np.asarray(seq, dtype=np.int32), logits="all")

        committed = {}
        with timer("accept"):
            sampled = target.sampled_tokens() if target.samplers else None
            logits = np.empty((0, 0), np.float32) if sampled is not None else target.logits()
            for r in rows:
                s, d = self.seqs[r.seq], drafts[r.seq]
                sl = slice(r.start, r.start + len(r.tokens))
                if sampled is not None:
                    k, bonus = accept_prefix(sampled[sl], d)
                elif sp.greedy:
                    k, bonus = verify_greedy(logits[sl], d)
                elif self.verify == "rejection":
                    k, bonus = verify_rejection(logits[sl], d, probs[r.seq], sp, s.spec.rng)
                else:
                    k, bonus = verify_match(logits[sl], d, sp, s.spec.rng)
                s.stats.record(len(d), k)
                committed[r.seq] = d[:k] + [bonus]
                r.n_commit = k + 1
                if s.chain is not None:
                    for t in committed[r.seq]:  # the seeded draw advances only over accepted rows
                        s.chain.accept(t)
        if drafter is not None:
            drafter.observe(rows, timer)
            for r in rows:
                drafter.on_accept(r.seq, len(drafts[r.seq]), r.n_commit - 1)

        out = []
        with timer("rollback"):
            for r in rows:
                i, s, c = r.seq, self.seqs[r.seq], committed[r.seq]
                s.n_past += r.n_commit
                target.memory.seq_rm(i, s.n_past)
                if drafter is not None:
                    drafter.rollback(i, s.n_past)
                s.last = c[-1]
                for j, t in enumerate(c):
                    if vocab.is_eog(t):
                        c = c[:j + 1]
                        s.finish = "eos"
                        eos_pos = s.n_past - r.n_commit + j + 1  # nothing at or after the EOS stays cached
                        target.memory.seq_rm(i, eos_pos)
                        if drafter is not None:
                            drafter.rollback(i, eos_pos)
                        break
                s.n_out += len(c)
                if s.finish is None and s.n_out >= s.spec.max_tokens:
                    s.finish = "length"
                if s.finish is None and s.n_past >= n_ctx:
                    s.finish = "context"
                out.append((i, StepOutput(c, s.finish)))
        return out


__all__ = ["BatchLoop", "SeqSpec"]
