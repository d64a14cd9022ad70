"""The cost model of speculative decoding: tokens/s for any ``n_max`` from measured stage costs
and measured acceptance, the τ at which speculation breaks even, and the draft length chosen per
step (``n_max="auto"``).

Notation (one verify step; times in ms; positions ``i`` 0-based)::

    s_i   = P(the step accepts more than i draft tokens)         survival of the accepted prefix
    q_i   = P(the step drafts more than i tokens)                 (1 for i < n_max with DFlash)
    τ(n)  = 1 + Σ_{i<n} s_i          tokens committed per step at n_max = n (the bonus included)
    d(n)  = Σ_{i<n} q_i              draft tokens verified per step
    V(R)  verify: the target decoding R = d + 1 rows — piecewise linear through measured points
    D(d)  = D0 + D1·d                drafter: per call + per drafted token (draft, draft_sample)
    W(τ)  = W0 + W1·τ                the rest of a step: extract/inject (rows = committed tokens),
                                     accept, rollback, detokenize, Python glue
    T(n)  = V(1 + d(n)) + D(d(n)) + W(τ(n))                       ms per step
    tok/s(n) = 1000 · τ(n) / T(n)

Plain decoding costs T₁ ms per token (measured), so speculation at ``n`` pays exactly when
``τ(n) > τ*(n) = T(n) / T₁`` — the break-even τ. The best ``n_max`` maximises tok/s(n).

``s`` and ``q`` come from :class:`~pyllama_spec.SpecStats` counters (``accepted_at[i]`` and
``drafted_at[i]`` over ``n_steps``), pooled over the runs whose ``n_max`` exceeds ``i``. This
assumes a drafter's first ``i`` tokens do not depend on ``n_max`` — true for n-gram and
autoregressive drafters, approximately for DFlash (its non-causal block also sees the masks after
a position).

**Start states.** Pooling also assumes that where a step begins does not depend on ``n_max``, and it
does: a step that took its whole draft leaves the next one inside the same easy stretch, and at a
short ``n_max`` many steps begin so, at a long one few. Measured (2026-12-07, SmolLM2 + its draft
model, ``builtin:mixed``, T = 0, 2 CPU cores): the first token was accepted 42–47 % of the time after
a partly rejected draft at every ``n_max`` (1…15), but 72–86 % right after a whole one; 59 % of the
steps began so at n_max 1, 4 % at n_max 15. Pooled, τ(15) came out 9.5 % high and τ(1) 3.5 % low. Where
the runs recorded their steps (``SpecStats.draft_lengths`` / ``acceptance_lengths``),
:func:`start_counts` splits them into "R" starts (a generation's first step, after a partly rejected
or empty draft) and "F" starts (right after a whole one), :meth:`Acceptance.pooled` pools ``s`` and
``q`` per state, and τ(n), d(n) mix the two by the stationary share of F starts of a two-state chain,
π_F = f_R / (1 − f_F + f_R), f_X = P(a step begun in X takes its whole draft) at n
(:meth:`Acceptance.start_mix`; f_X counts the whole drafts shorter than n, as an n-gram lookup makes,
apart): τ(n) = 1 + π_R·Σ_{i<n} s^R_i + π_F·Σ_{i<n} s^F_i. Left out: an F start after a long whole
draft is easier than one after a short one (72 % at n_max 1, 86 % at 7), which the chain pools; and
that every generation begins in R (the stationary share is a little high: 60.5 % against 59.2 % at
n_max 1). ``V``, ``D`` and ``W`` are fitted from the runs' per-stage times after prefill
(least squares for D and W, slopes kept ≥ 0), or ``V`` from a direct measurement
(:func:`measure_verify_ms`, what ``benchmarks/step_cost.py`` does in its verify section).

**Per step** (``n_max="auto"``, :class:`AutoDraftLength`): the drafter proposes its longest block
``t_0..t_{d-1}`` with confidences ``c_j`` (its probability of ``t_j`` given the tokens before;
DFlash: the top probability of row j). The chance that the first ``i + 1`` are all accepted is
``p_i = Π_{j≤i} ĉ_j``, where ``ĉ`` is ``c`` calibrated online (binned by confidence: how often
earlier tokens of similar confidence were accepted). Verifying the prefix of length ``L`` yields
``E[tokens] = 1 + Σ_{i<L} p_i`` for ``E[ms] = O + V(L + 1)``, ``O`` being the step's other costs
(measured online: wall time between two steps minus their verify as the stage timer measured it;
``V`` is the measured table scaled by this run's verifies against it, ``AutoState.verify_scale``,
so a table measured in a quieter or busier moment does not leak into ``O``). The loop verifies
``L* = argmax_L E[tokens] / E[ms]``: one more row is kept exactly while its expected gain
``p_L`` exceeds its verify cost ``V(L+2) − V(L+1)`` times the step's current rate. Drafters without
confidences are cut the same way with ``p_i`` = this generation's measured acceptance at position
``i`` (with a prior). Cutting a draft never changes what is committed — the target's rule decides
every token; only fewer are offered — so the output is the target's, as with any fixed ``n_max``.
Where even the best length does not pay (τ_L below the break-even τ of the measured costs), the
loop **rests**: plain steps, no drafter call, probing again after an exponentially growing rest
(:class:`AutoDraftLength`, "Resting"). AdaEDL's entropy stop rule (Agrawal et al. 2024) is the
alternative cut (``AutoState.rule = "adaedl"``).

**Token trees** (``tree=B``, :meth:`CostModel.tree_tok_s`): a step drafts once (one drafter call,
the chain's: D at the chain's d(n) for depth n), verifies the root and B nodes — ``V(B + 1)`` — and
commits τ_tree(B) tokens, so ``T_tree(B) = V(B + 1) + D(d(n)) + R·n + W(τ_tree(B))``, R being
what a tree's drafter call costs beyond a chain's per depth row (reading the block's logits back
for the full softmax, the top candidates, building the tree; fitted from tree runs, 0 without).
τ_tree(B) comes either **measured** (a tree run at that budget) or **predicted** from the drafter's own
probabilities (:func:`tree_tau_from_mass`): a tree's expected accepted length is the sum over its
nodes of the probability that the node's whole path is accepted (EAGLE-2, Li et al. 2024,
arXiv 2406.16858, §4; DDTree, arXiv 2604.12989), and that probability is taken as the drafter's path
probability times a per-depth calibration factor ``K_d`` fitted so that the chain's own path (each
depth's best candidate) gets exactly the chain's measured survival ``s_d``. The drafter's
probabilities alone overrate a small drafter (§16 of RESULTS.md); the calibration is what makes the
prediction a measurement. What it assumes is listed in :func:`tree_tau_from_mass`. Other per-step
costs of a tree that a chain does not pay (the acceptance walk and rollback over more nodes, a few
tenths of a ms on the CPU) are not in the model: the bake-off prints the predicted tok/s beside
the measured, so their size is seen.

The speculative-sampling analysis behind τ is Leviathan et al. 2023 ("Fast Inference from
Transformers via Speculative Decoding", §3.4, expected tokens per step and the walltime
improvement); confidence-based cutting is llama.cpp's ``--spec-draft-p-min`` (common/speculative.cpp),
here with the threshold derived from the measured costs instead of fixed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .._check import check_int
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..context import Context

#: stages charged to the drafter (D); ``verify`` is V; every other stage and the glue is W
DRAFT_STAGES = ("draft", "draft_sample")
VERIFY_STAGES = ("verify",)


# -- the pieces ------------------------------------------------------------------------------------
#: the fewest rows a slope of :class:`VerifyCost` beyond its points is measured over
EXTEND_SPAN = 0.5


@dataclass
class VerifyCost:
    """V(R): ms of a verify batch of ``R`` rows, piecewise linear through measured points and
    extended linearly beyond them (constant when there is one point). The slopes beyond the ends are
    taken over at least ``EXTEND_SPAN`` rows (from the end point to the nearest point that far, else
    the farthest), and never negative above the last point: a bake-off fits V through runs' *mean*
    rows, which two runs of a lookup drafter may put 0.003 rows apart — their noise made a slope of
    84 ms a row, and the prediction one n_max further 3.6 × too slow (H100 sweep of 2026-12-06,
    ngram-cache n_max 7 / 8: −72 / −78 %, RESULTS.md 19.9).

    Attributes:
        rows: ``(k,)`` row counts, increasing (may be fractional: mean rows of a run).
        ms: ``(k,)`` milliseconds.
    """
    rows: list
    ms: list

    def __post_init__(self):
        if not self.rows or len(self.rows) != len(self.ms):
            raise InvalidArgumentError(f"VerifyCost needs as many ms as rows (≥ 1), got {len(self.rows)} and "
                                       f"{len(self.ms)}")
        order = np.argsort(self.rows, kind="stable")
        self.rows = [float(self.rows[i]) for i in order]
        self.ms = [float(self.ms[i]) for i in order]

    def __call__(self, r):
        x, y = np.asarray(self.rows), np.asarray(self.ms)
        r = np.asarray(r, dtype=float)
        if len(x) == 1:
            return np.full_like(r, y[0]) if r.ndim else float(y[0])
        out = np.interp(r, x, y)
        far = x - x[0] >= EXTEND_SPAN  # the first point at least EXTEND_SPAN rows above the first
        i = int(np.argmax(far)) if far.any() else len(x) - 1
        far = x[-1] - x >= EXTEND_SPAN  # the last point at least EXTEND_SPAN rows below the last
        j = int(len(x) - 1 - np.argmax(far[::-1])) if far.any() else 0
        lo = (y[i] - y[0]) / max(x[i] - x[0], 1e-9)
        hi = max(0.0, (y[-1] - y[j]) / max(x[-1] - x[j], 1e-9))
        out = np.where(r < x[0], y[0] + lo * (r - x[0]), out)
        out = np.where(r > x[-1], y[-1] + hi * (r - x[-1]), out)
        return out if out.ndim else float(out)

    def as_dict(self) -> dict:
        return {"rows": self.rows, "ms": self.ms}


@dataclass
class StepCosts:
    """Costs of one step in ms: ``T = V(1 + d) + D0 + D1·d + W0 + W1·τ`` (module docstring)."""
    verify: VerifyCost
    draft_call_ms: float = 0.0
    draft_token_ms: float = 0.0
    other_step_ms: float = 0.0
    other_token_ms: float = 0.0

    def step_ms(self, d: float, tau: float, drafts: bool = True) -> float:
        """ms of one step that verifies ``d`` draft tokens (mean) and commits ``tau`` tokens (mean)."""
        draft = self.draft_call_ms + self.draft_token_ms * d if drafts else 0.0
        return float(self.verify(1.0 + d)) + draft + self.other_step_ms + self.other_token_ms * tau

    def as_dict(self) -> dict:
        return {"verify": self.verify.as_dict(), "draft_call_ms": self.draft_call_ms,
                "draft_token_ms": self.draft_token_ms, "other_step_ms": self.other_step_ms,
                "other_token_ms": self.other_token_ms}


def start_counts(steps: Any, n: int) -> dict:
    """Per-position counters of a drafter's steps split by how each step began (``Acceptance.by_start``).

    Args:
        steps: per generation, its steps' ``(draft tokens verified, accepted)`` in order
            (``SpecStats.draft_lengths`` / ``acceptance_lengths``).
        n: positions to count (the point's n_max).

    Returns:
        ``{"R": [n_steps, accepted_at, drafted_at, whole_at], "F": [...]}``: "F" the steps right after a step that
        took its whole (non-empty) draft, "R" the others (a generation's first step, after a rejection or an empty
        draft); ``whole_at[k − 1]``: the steps that drafted exactly k tokens and took all of them.
    """
    out: dict[str, Any] = {k: [0, [0] * n, [0] * n, [0] * n] for k in "RF"}
    for gen in steps:
        whole = False
        for d, a in gen:
            c = out["F" if whole else "R"]
            c[0] += 1
            for i in range(min(int(d), n)):
                c[2][i] += 1
                if i < a:
                    c[1][i] += 1
            whole = d > 0 and a == d
            if whole and d <= n:
                c[3][int(d) - 1] += 1
    return out


@dataclass
class Acceptance:
    """Per-position survival ``s_i`` and draft-length survival ``q_i`` (module docstring).

    Attributes:
        survival: ``s_i`` = P(more than i draft tokens accepted in a step), i = 0..len−1.
        drafted: ``q_i`` = P(more than i draft tokens verified in a step).
        steps: the verify steps behind each position (evidence).
        by_start: ``{"R": (s, q), "F": (s, q)}``, the same curves over the steps that began after a step that did
            not take its whole draft (or a generation's first step) and over those right after one that did
            (:func:`start_counts`); empty where the runs did not record their steps. With them :meth:`tau` and
            :meth:`mean_draft` mix the two by how often a step at n_max = n begins after a whole draft
            (module docstring, "Start states").
    """
    survival: list
    drafted: list
    steps: list = field(default_factory=list)
    by_start: dict = field(default_factory=dict)
    #: per start state, w_k = P(a step drafts exactly k + 1 tokens and takes them all, short of its n_max)
    whole_short: dict = field(default_factory=dict)

    @property
    def n_max(self) -> int:
        """The longest draft the data covers."""
        return len(self.survival)

    def start_mix(self, n: int) -> tuple[float, float]:
        """(π_R, π_F) at n_max = n: the stationary shares of steps that begin after a partly rejected (or empty)
        draft and right after a whole one, from f_X = P(a step begun in X takes its whole draft) — a two-state
        chain R → F with probability f_R, F → F with f_F: π_F = f_R / (1 − f_F + f_R). (1, 0) without ``by_start``."""
        self._check(n)
        if not self.by_start:
            return 1.0, 0.0
        # f_X(n): a whole draft shorter than n (counted: an n-gram lookup's short drafts may be surer than its long
        # ones) or all n accepted
        f = {k: float(sum(self.whole_short[k][:n - 1])) + float(self.by_start[k][0][n - 1]) for k in "RF"}
        den = 1.0 - f["F"] + f["R"]
        pi_f = f["R"] / den if den > 1e-12 else 0.0  # (f_R = 0, f_F = 1: generations begin in R and stay)
        return 1.0 - pi_f, pi_f

    def _mixed(self, j: int, n: int) -> list:
        """Curve ``j`` (0: s, 1: q) at positions i < n for n_max = n: π_R·c^R_i + π_F·c^F_i with ``by_start``,
        else the pooled curve."""
        self._check(n)
        if not self.by_start:
            return list((self.survival, self.drafted)[j][:n])
        pr, pf = self.start_mix(n)
        return [pr * r + pf * f for r, f in zip(self.by_start["R"][j][:n], self.by_start["F"][j][:n])]

    def mixed_survival(self, n: int) -> list:
        """s_i at n_max = n, i < n (what :meth:`tau` sums; what a token tree's calibration to the chain at depth n
        needs): with ``by_start`` π_R·s^R_i + π_F·s^F_i, else the pooled ``survival``."""
        return self._mixed(0, n)

    def tau(self, n: int) -> float:
        """τ(n) = 1 + Σ_{i<n} s_i: tokens per step at n_max = n (n ≤ :attr:`n_max`); with ``by_start``
        1 + π_R·Σ s^R_i + π_F·Σ s^F_i."""
        return 1.0 + float(sum(self._mixed(0, n)))

    def mean_draft(self, n: int) -> float:
        """d(n) = Σ_{i<n} q_i: draft tokens verified per step (with ``by_start``, mixed as :meth:`tau`)."""
        return float(sum(self._mixed(1, n)))

    def _check(self, n):
        if not 0 <= n <= self.n_max:
            raise InvalidArgumentError(f"acceptance is measured up to n_max={self.n_max}, asked for {n}")

    @classmethod
    def pooled(cls, points: Any) -> Acceptance:
        """Pool :class:`Measured` points (or anything with ``n_max, n_steps, accepted_at, drafted_at``):
        position i uses the points whose ``n_max`` exceeds i. ``by_start`` where every point has its
        ``start`` counters (:func:`start_counts`)."""
        n = max((p.n_max for p in points), default=0)
        surv, drafted, steps = [], [], []
        for i in range(n):
            use = [p for p in points if p.n_max > i and p.n_steps]
            den = sum(p.n_steps for p in use)
            surv.append(sum(p.accepted_at[i] for p in use) / den if den else 0.0)
            drafted.append(sum(p.drafted_at[i] for p in use) / den if den else 0.0)
            steps.append(den)
        by_start: dict = {}
        whole: dict = {}
        if points and all(getattr(p, "start", None) for p in points):
            # the pooled rate of whole drafts of each length below n_max (the points whose n_max exceeds it)
            w_all = [sum(p.start[k][3][i] for p in points if p.n_max > i + 1 for k in "RF")
                     / max(1, sum(p.n_steps for p in points if p.n_max > i + 1)) for i in range(n)]
            for k in "RF":
                s_k, q_k, w_k = [], [], []
                for i in range(n):
                    use = [p.start[k] for p in points if p.n_max > i]
                    den = sum(c[0] for c in use) + START_PRIOR_STEPS
                    # shrunk toward the pooled rate by START_PRIOR_STEPS steps of it: a state seen in a few steps
                    # (F after long drafts) takes little of its own noise into τ
                    s_k.append((sum(c[1][i] for c in use) + START_PRIOR_STEPS * surv[i]) / den)
                    q_k.append((sum(c[2][i] for c in use) + START_PRIOR_STEPS * drafted[i]) / den)
                    short = [p.start[k] for p in points if p.n_max > i + 1]
                    w_k.append((sum(c[3][i] for c in short) + START_PRIOR_STEPS * w_all[i])
                               / (sum(c[0] for c in short) + START_PRIOR_STEPS))
                by_start[k] = (s_k, q_k)
                whole[k] = w_k
        return cls(surv, drafted, steps, by_start, whole)

    def as_dict(self) -> dict:
        return {"survival": self.survival, "drafted": self.drafted, "steps": self.steps,
                "by_start": {k: {"survival": v[0], "drafted": v[1], "whole_short": self.whole_short.get(k, [])}
                             for k, v in self.by_start.items()}}


#: pseudo-steps of the pooled rate that :meth:`Acceptance.pooled` adds to each start state's rate at a position
START_PRIOR_STEPS = 20


@dataclass
class Measured:
    """One configuration (drafter, n_max, sampling) pooled over its runs: the inputs of a fit.

    Attributes:
        n_max: draft tokens per step (0 = plain decoding).
        n_steps, n_generated, n_drafted: verify steps, tokens committed, draft tokens verified.
        generation_ms: ms after prefill (what tokens/s divides by).
        accepted_at, drafted_at: :class:`SpecStats` counters per position.
        stage_ms: ms per stage over the decode steps (``GenerationResult.step_timings``), ``other`` included.
    """
    n_max: int
    n_steps: int
    n_generated: int
    n_drafted: int
    generation_ms: float
    accepted_at: list
    drafted_at: list
    stage_ms: dict
    #: :func:`start_counts` of the runs' steps, or None where they were not recorded
    start: dict | None = None

    @property
    def ms_per_step(self) -> float:
        return self.generation_ms / self.n_steps if self.n_steps else float("nan")

    @property
    def tau(self) -> float:
        """Tokens committed per step, as tokens/s counts them."""
        return self.n_generated / self.n_steps if self.n_steps else float("nan")

    @property
    def tok_s(self) -> float:
        return 1e3 * self.n_generated / self.generation_ms if self.generation_ms else float("nan")

    def stage_per_step(self, names: Any) -> float:
        return sum(self.stage_ms.get(k, 0.0) for k in names) / self.n_steps if self.n_steps else 0.0

    @classmethod
    def from_results(cls, results: Any) -> Measured:
        """Pool :class:`~pyllama_spec.GenerationResult` objects of one configuration."""
        results = list(results)
        if not results:
            raise InvalidArgumentError("Measured.from_results needs at least one result")
        n_max = max(r.stats.n_max for r in results)
        acc, dra = [0] * n_max, [0] * n_max
        stages: dict = {}
        for r in results:
            for i, (a, d) in enumerate(zip(r.stats.accepted_at, r.stats.drafted_at)):
                acc[i] += a
                dra[i] += d
            for k, v in r.step_timings.items():
                stages[k] = stages.get(k, 0.0) + 1e3 * v
        return cls(n_max=n_max, n_steps=sum(r.stats.n_steps for r in results),
                   n_generated=sum(r.n_generated for r in results), n_drafted=sum(r.stats.n_drafted for r in results),
                   generation_ms=1e3 * sum(r.generation_seconds for r in results), accepted_at=acc, drafted_at=dra,
                   stage_ms=stages, start=start_counts([list(zip(r.stats.draft_lengths, r.stats.acceptance_lengths))
                                                        for r in results], n_max))


def _line(x: Any, y: Any) -> tuple[float, float]:
    """Least-squares intercept and slope ≥ 0 (a negative slope is noise: then the mean, slope 0)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if len(x) < 2 or np.ptp(x) < 1e-9:
        return float(y.mean()) if len(y) else 0.0, 0.0
    slope, icept = np.polyfit(x, y, 1)
    if slope < 0:
        return float(y.mean()), 0.0
    return float(icept), float(slope)


def fit_costs(points: Any, plain: Measured | None = None, verify: VerifyCost | None = None) -> StepCosts:
    """Fit V, D and W (module docstring) from the :class:`Measured` points of one drafter.

    Args:
        points: the drafter's configurations (several n_max give the slopes).
        plain: plain decoding in the same setting: anchors V at one row.
        verify: a measured V(R) to use instead of fitting it from the runs.
    """
    points = [p for p in points if p.n_steps]
    if not points:
        raise InvalidArgumentError("fit_costs needs at least one measured point with steps")
    if verify is None:
        by_rows: dict = {}
        for p in points:
            by_rows.setdefault(round(1.0 + p.n_drafted / p.n_steps, 6), []).append(p.stage_per_step(VERIFY_STAGES))
        if plain is not None and plain.n_steps and 1.0 not in by_rows:
            by_rows[1.0] = [plain.stage_per_step(VERIFY_STAGES)]
        rows = sorted(by_rows)
        verify = VerifyCost(rows, [float(np.mean(by_rows[r])) for r in rows])
    d0, d1 = _line([p.n_drafted / p.n_steps for p in points], [p.stage_per_step(DRAFT_STAGES) for p in points])
    rest = [p.ms_per_step - p.stage_per_step(VERIFY_STAGES) - p.stage_per_step(DRAFT_STAGES) for p in points]
    w0, w1 = _line([p.tau for p in points], rest)
    return StepCosts(verify, d0, d1, w0, w1)


@dataclass
class CostModel:
    """Predictions for one drafter in one setting: :class:`StepCosts` + :class:`Acceptance`.

    Attributes:
        plain_ms_per_token: T₁, ms per token of plain decoding (for break-even τ and speed-ups), or None.
        tree_row_ms: a tree step's drafter ms beyond the chain's, per depth row: what a chain does
            not do — DFlash reads the block's logits back for each row's full softmax and top
            candidates, then builds the tree (:func:`fit_tree_row_ms`); 0 until trees are measured.
    """
    costs: StepCosts
    acceptance: Acceptance
    plain_ms_per_token: float | None = None
    tree_row_ms: float = 0.0

    @classmethod
    def fit(cls, points: Any, plain: Measured | None = None, verify: VerifyCost | None = None) -> CostModel:
        """Fit from a drafter's :class:`Measured` points (and plain decoding, when measured)."""
        points = [p for p in points if p.n_max > 0 and p.n_steps]
        plain_ms = plain.generation_ms / plain.n_generated if plain is not None and plain.n_generated else None
        return cls(fit_costs(points, plain, verify), Acceptance.pooled(points), plain_ms)

    def ms_per_step(self, n: int) -> float:
        """T(n), ms."""
        return self.costs.step_ms(self.acceptance.mean_draft(n), self.acceptance.tau(n), drafts=n > 0)

    def tok_s(self, n: int) -> float:
        """Predicted tokens/s at n_max = n (n ≤ ``acceptance.n_max``)."""
        return 1e3 * self.acceptance.tau(n) / self.ms_per_step(n)

    def tok_s_at(self, tau: float, d: float) -> float:
        """Predicted tokens/s of a drafting step that commits ``tau`` tokens (mean) and verifies ``d`` draft tokens
        (mean): the step costs alone, at a measured τ — what :meth:`tok_s` predicts less the acceptance fit's error."""
        return 1e3 * tau / self.costs.step_ms(d, tau)

    def break_even_tau(self, n: int) -> float | None:
        """τ*(n) = T(n) / T₁: the τ above which n_max = n beats plain decoding (None without T₁)."""
        return self.ms_per_step(n) / self.plain_ms_per_token if self.plain_ms_per_token else None

    def best_n_max(self, candidates: Any = None) -> int:
        """The n_max of highest predicted tok/s among ``candidates`` (default 1..``acceptance.n_max``)."""
        cands = list(candidates or range(1, self.acceptance.n_max + 1))
        if not cands:
            raise InvalidArgumentError("no n_max to choose from: the acceptance data is empty")
        return max(cands, key=self.tok_s)

    # -- token trees (module docstring, "Token trees") ---------------------------------------------
    def chain_draft_ms(self, depth: int) -> float:
        """D(d(depth)): the drafter's ms of a chain step at n_max = ``depth`` (its measured d(depth)
        where the data reaches, else ``depth`` tokens)."""
        check_int("depth", depth, min=1)
        d = self.acceptance.mean_draft(depth) if depth <= self.acceptance.n_max else float(depth)
        return self.costs.draft_call_ms + self.costs.draft_token_ms * d

    def _tree_draft_ms(self, depth: int) -> float:
        """The drafter's ms for a tree of ``depth``: one call, as the chain's, plus ``tree_row_ms`` per row."""
        return self.chain_draft_ms(depth) + self.tree_row_ms * depth

    def tree_ms_per_step(self, budget: int, tau: float, depth: int, nodes: float | None = None) -> float:
        """T_tree(B) = V(B + 1) + D(d(depth)) + tree_row_ms·depth + W0 + W1·τ, ms: a step verifying the root and
        ``budget`` nodes of a tree ``depth`` deep that commits ``tau`` tokens (mean). ``nodes``: the
        nodes a step really verifies when fewer than the budget (a tree 1 deep holds at most the
        drafter's candidates per row; a run's mean), default ``budget``.

        Raises:
            InvalidArgumentError: a budget or depth below 1.
        """
        check_int("budget", budget, min=1)
        rows = 1.0 + (float(budget) if nodes is None else min(float(nodes), float(budget)))
        return (float(self.costs.verify(rows)) + self._tree_draft_ms(depth) + self.costs.other_step_ms
                + self.costs.other_token_ms * float(tau))

    def tree_tok_s(self, budget: int, tau: float, depth: int, nodes: float | None = None) -> float:
        """Predicted tokens/s of trees of ``budget`` nodes, ``depth`` deep, committing ``tau`` per step."""
        return 1e3 * float(tau) / self.tree_ms_per_step(budget, tau, depth, nodes)

    def tree_break_even_tau(self, budget: int, tau: float, depth: int, nodes: float | None = None) -> float | None:
        """τ* = T_tree(B) / T₁ with the step costed at ``tau``: the τ trees of ``budget`` nodes need to
        match plain decoding (as :meth:`break_even_tau` for chains, which costs the step at its
        predicted τ). None without T₁."""
        if not self.plain_ms_per_token:
            return None
        return self.tree_ms_per_step(budget, tau, depth, nodes) / self.plain_ms_per_token

    def tree_predictions(self, taus: Any, depth: int) -> list[dict]:
        """Per budget: ``{"tree", "tau", "ms_per_step", "tok_s", "break_even_tau"}`` for
        ``taus = {budget: τ_tree(budget)}`` (measured, or :func:`tree_tau_from_mass`), budgets ascending."""
        return [{"tree": int(b), "tau": float(t), "ms_per_step": self.tree_ms_per_step(int(b), t, depth),
                 "tok_s": self.tree_tok_s(int(b), t, depth),
                 "break_even_tau": self.tree_break_even_tau(int(b), t, depth)}
                for b, t in sorted(dict(taus).items())]

    def best_tree_budget(self, taus: Any, depth: int) -> int:
        """The budget of highest predicted tok/s among ``taus = {budget: τ_tree(budget)}``
        (the smaller budget on a tie).

        Raises:
            InvalidArgumentError: no budgets given.
        """
        taus = dict(taus)
        if not taus:
            raise InvalidArgumentError("best_tree_budget needs {budget: tau} for at least one budget")
        return max(sorted(taus), key=lambda b: self.tree_tok_s(int(b), taus[b], depth))

    def as_dict(self) -> dict:
        ns = range(1, self.acceptance.n_max + 1)
        return {"costs": self.costs.as_dict(), "acceptance": self.acceptance.as_dict(),
                "plain_ms_per_token": self.plain_ms_per_token,
                "predicted": [{"n_max": n, "tau": self.acceptance.tau(n), "ms_per_step": self.ms_per_step(n),
                               "tok_s": self.tok_s(n), "break_even_tau": self.break_even_tau(n)} for n in ns],
                "best_n_max": self.best_n_max() if self.acceptance.n_max else None}


def fit_tree_row_ms(model: CostModel, points: Any) -> float:
    """``tree_row_ms`` from tree runs: least squares through 0 of each point's drafter ms per step
    beyond the chain's D(d(depth)) against its depth, at least 0.

    Args:
        model: the chains' model (its D and d).
        points: ``(depth, drafter ms per step)`` of tree points (the ``draft`` and ``draft_sample`` stages).
    """
    pts = [(float(check_int("depth", d, min=1)), float(ms) - model.chain_draft_ms(int(d))) for d, ms in points]
    den = sum(x * x for x, _ in pts)
    return max(0.0, sum(x * y for x, y in pts) / den) if den else 0.0


# -- τ of a token tree from the drafter's probabilities ------------------------------------------------
def tree_calibration(spine_mass: Any, n_tree_steps: int, survival: Any) -> np.ndarray:
    """Per-depth factors ``K_d = s_d / m_d`` (:func:`tree_tau_from_mass`): ``s_d`` the chain's measured
    survival at depth d + 1 (:attr:`Acceptance.survival`), ``m_d = spine_mass[d] / n_tree_steps`` the
    drafter's mean path probability of its own chain to that depth. Depths beyond the chain's data
    keep the deepest measured factor; a depth whose ``m_d`` is 0 gets 0.

    Returns:
        ``(len(spine_mass),)`` float ≥ 0.
    """
    n = check_int("n_tree_steps", n_tree_steps, min=1)
    m = np.asarray(spine_mass, dtype=np.float64) / n
    s = np.asarray(survival, dtype=np.float64)
    if not len(s):
        raise InvalidArgumentError("tree_calibration needs the chain's measured survival (a chain run of the drafter)")
    s = np.concatenate([s, np.full(max(0, len(m) - len(s)), np.nan)])[:len(m)]
    k = np.divide(s, m, out=np.zeros_like(m), where=m > 0)
    for d in range(len(k)):  # (no chain data this deep: the deepest measured factor)
        if np.isnan(s[d]):
            k[d] = k[d - 1] if d else 0.0
    return k


def tree_tau_from_mass(tree_mass: Any, spine_mass: Any, n_tree_steps: int, survival: Any) -> list[float]:
    """Predicted τ of best-first token trees of every budget ``b = 1..len(tree_mass)``, from the
    drafter's own probabilities calibrated by the chain's measured acceptance.

    A tree's expected accepted length is ``Σ_nodes P(the node's path is accepted)`` (a step accepts
    exactly the nodes of one path, and a node is on it iff its whole path is accepted; EAGLE-2
    §4, DDTree). Each node's probability is taken as ``K_d · p`` with ``p`` the drafter's path
    probability of the node and ``K_d`` (:func:`tree_calibration`) the depth's factor that turns the
    drafter's probability of its own chain into the chain's measured survival. So

        τ(b) = 1 + Σ_d K_d · M_b[d] / n_tree_steps,  M_b[d] = Σ_{j<b} tree_mass[j][d]

    (``SpecStats.tree_mass``: the first b nodes of a best-first tree are the tree of budget b, so one
    run at the largest budget gives every smaller one), at most 1 + the deepest depth.

    Assumed, not measured: (1) the drafter's per-position distributions do not depend on the tokens
    chosen above (DFlash's rows: a path's probability is the product of its rows'; DDTree's
    assumption); (2) calibration depends on depth only — a second candidate of path probability p
    is accepted as often as the chain's own path of probability p at that depth (where a drafter
    overrates its runners-up more than its top picks, this errs high; measured on SmolLM2's DFlash
    drafter: −4 … +15 %, RESULTS.md section 18); (3) the chain's
    survival, measured on the chain's steps, holds on the tree's steps (same prompts, other step
    boundaries); (4) means stand for per-step values (``K_d·p`` is never capped at 1 node by node).

    Args:
        tree_mass: ``[b][d]`` sums of drafter path probabilities per node order and depth.
        spine_mass: ``[d]`` sums of the drafter's path probability of its chain per depth.
        n_tree_steps: tree steps behind the sums (≥ 1).
        survival: the chain's ``s_d`` (:attr:`Acceptance.survival`).

    Returns:
        ``[τ(1), ..., τ(len(tree_mass))]``.

    Raises:
        InvalidArgumentError: no steps, no chain survival, or a ``tree_mass`` row longer than ``spine_mass``.
    """
    mass = np.asarray([list(r) for r in tree_mass] or np.zeros((0, 0)), dtype=np.float64)
    if mass.ndim != 2:
        raise InvalidArgumentError("tree_mass must be a list of equal-length rows (SpecStats.tree_mass)")
    if mass.shape[1] > len(spine_mass):
        raise InvalidArgumentError(f"tree_mass has {mass.shape[1]} depths, spine_mass {len(spine_mass)}: "
                                   "pass both from the same runs")
    k = tree_calibration(spine_mass, n_tree_steps, survival)[:mass.shape[1]]
    depth = mass.shape[1]
    per_node = mass @ k / n_tree_steps  # each node's calibrated chance of being accepted, summed over steps
    return [float(min(1.0 + depth, 1.0 + v)) for v in np.cumsum(per_node)]


def expected_tree_tau(parents: Any, node_prob: Any) -> float:
    """1 + Σ_nodes Π_{path} ``node_prob``: the expected tokens per step of one tree whose node i is
    the target's token with probability ``node_prob[i]`` given its parent's path accepted (siblings
    are exclusive: their ``node_prob`` should sum to ≤ 1). The identity behind
    :func:`tree_tau_from_mass`; tests check it against the tree rule itself.

    Args:
        parents: ``(n,)`` parent indices (``TreeDraft.parents``, -1 = the root).
        node_prob: ``(n,)`` conditional acceptance probabilities in [0, 1].
    """
    par = np.asarray(parents, dtype=np.int64).reshape(-1)
    q = np.asarray(node_prob, dtype=np.float64).reshape(-1)
    if par.shape != q.shape:
        raise InvalidArgumentError(f"parents and node_prob must have one entry per node, got {par.shape} and {q.shape}")
    path = np.zeros(len(q))
    for i, p in enumerate(par):
        if not -1 <= p < i:
            raise InvalidArgumentError(f"node {i}'s parent {p} is not an earlier node or -1")
        path[i] = q[i] * (path[p] if p >= 0 else 1.0)
    return 1.0 + float(path.sum())


# -- measuring V(R) directly --------------------------------------------------------------------------
def measure_verify_ms(ctx: Context, n_rows: int, tokens: Sequence[int], *, depth: int = 256,
                      layer_ids: Sequence[int] = (), reps: int = 3, keep: int = 0) -> list[float]:
    """ms of the target decoding a verify batch of R = 1..``n_rows`` rows (every row an output) after
    ``depth`` cached positions; median of ``reps`` calls after one warm-up, each ended by a sync.

    With ``keep`` = 0 it clears ``ctx``'s cache (and leaves it holding ``depth`` positions). With
    ``keep`` > 0, positions ``[0, keep)`` of sequence 0 hold a conversation that stays: the fill and
    the measured batches go after it (at ``max(depth, keep)``) and are removed again, so the cache
    holds exactly what it held before.
    Turns on the layer-input taps ``layer_ids`` (a drafter's, as the loop will). ``tokens``: ids to
    fill the cache with (repeated as needed), e.g. the prompt.

    Row counts up to 8 are all measured; beyond, every 2nd up to 16 and every 4th after that (plus
    ``n_rows``), the others interpolated linearly — a verify's cost is smooth in its rows.

    Returns:
        ``[V(1), ..., V(n_rows)]`` in ms.

    Raises:
        InvalidArgumentError: ``keep + n_rows + 1`` does not fit sequence 0's ``n_ctx_seq`` cells (nothing
            is decoded or removed then).
    """
    toks = [int(t) for t in tokens] or [0]
    keep = max(0, int(keep))
    if keep and keep + n_rows + 1 >= ctx.n_ctx_seq:
        raise InvalidArgumentError(f"keep={keep} cached positions leave no room for a verify batch of {n_rows} rows "
                                   f"in sequence 0's {ctx.n_ctx_seq} cells: keep at most {ctx.n_ctx_seq - n_rows - 2}")
    depth = max(1, keep, min(depth, ctx.n_ctx_seq - n_rows - 1))  # (sequence 0's cells: n_ctx / n_seq_max)
    fill = (toks * ((depth + n_rows) // len(toks) + 1))[:depth + n_rows]
    ctx.set_layer_inputs(list(layer_ids))
    if keep:
        ctx.memory.seq_rm(0, keep)  # (nothing after the kept conversation)
    else:
        ctx.memory.clear()
    for i in range(keep, depth, ctx.n_batch):
        chunk = fill[i:min(i + ctx.n_batch, depth)]
        ctx.decode(chunk, np.arange(i, i + len(chunk), dtype=np.int32), logits="none")
    sizes = sorted({r for r in range(1, n_rows + 1) if r <= 8 or (r <= 16 and r % 2 == 0) or r % 4 == 0} | {n_rows})
    out = []
    for r in sizes:
        ts = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            ctx.decode(fill[depth:depth + r], np.arange(depth, depth + r, dtype=np.int32), logits="all")
            ctx.synchronize()
            ts.append(time.perf_counter() - t0)
            ctx.memory.seq_rm(0, depth)
        out.append(1e3 * float(np.median(ts[1:])))
    if keep:
        ctx.memory.seq_rm(0, keep)  # the fill goes; the conversation stays
    return [float(v) for v in np.interp(np.arange(1, n_rows + 1), sizes, out)]


# -- per step: n_max="auto" ---------------------------------------------------------------------------
#: trim rules of n_max="auto": the cost model's argmax over calibrated confidences, or AdaEDL's stop
AUTO_RULES = ("cost", "adaedl")
#: stages of a step that only a drafting step has (the drafter's call and its injection)
DRAFTER_STAGES = ("draft", "draft_sample", "inject")


@dataclass
class AutoState:
    """What :class:`AutoDraftLength` learns — the confidence calibration, the acceptance per position,
    the step's other costs and the rest schedule — kept across the generations of one drafter (the
    Generator keeps one per drafter, :meth:`~pyllama_spec.Generator.auto_state`).

    Attributes:
        bin_tried, bin_accepted: per confidence bin, draft tokens verified and accepted.
        other_ms: running mean of a drafting step's time beyond its verify (ms), None before the first.
        rest_ms: running mean of a resting step's time beyond its verify (ms; no drafter call; with
            ``learn_costs`` not the ``PROBE_AFTERMATH`` steps right after a probe, which count as its loss), None
            before the first; until then estimated as ``other_ms − drafter_ms``.
        drafter_ms: running mean of a drafting step's drafter stages (``DRAFTER_STAGES``, ms).
        pos_tried, pos_accepted: acceptance per draft position of earlier generations (decayed by half
            per generation): the prior of this generation's measured acceptance.
        rest_left: resting steps left before the next probe (carried into the next generation).
        gap: the length of the last rest (steps); each probe that still finds no length paying at least doubles
            it (:func:`rest_length`: with ``learn_costs``, also at least what one probe's loss asks for).
        rule: how a proposal is cut, one of ``AUTO_RULES`` (``"cost"``: the cost model over calibrated
            confidences; ``"adaedl"``: the first row whose entropy bound on acceptance is below the
            row's break-even acceptance).
        rest: allow resting (drafting nothing) where no draft length pays; False drafts every step.
        max_rest: the longest rest (steps) before a probe.
        dormant: in a rest with more than ``DORMANT_WINDOW`` steps left the drafter skips the committed
            rows' work (``Drafter.observe_dormant``; DFlash, EAGLE-3: their features); False: it sees every row.
        taps_off_when_dormant: also turn the target's layer-input taps off (``Context.set_layer_inputs([])``)
            for the decodes whose rows go to ``observe_dormant`` — the dormant steps of a long rest and a dormant
            prefill — where the drafter says its ``observe_dormant`` reads none (``Drafter.dormant_reads_taps``
            False: DFlash, DFlash2, DSpark, EAGLE-3), and on again before the first step that is not dormant (the rest's
            last ``DORMANT_WINDOW`` steps, whose rows the probe drafts from, and every drafting step). Why: on an
            H100 (2026-12-06, SmolLM2 + DFlash) auto's resting steps cost 1.30 ms of verify against plain
            decoding's 1.19, the 3 taps' device-to-host copies (and the fusions a tapped tensor blocks) on every
            decode. Each switch re-reserved llama.cpp's compute buffers at the next decode (twice a rest; none
            while a rest goes on into the next generation, whose start keeps them off): on 2 cores of an Intel Xeon
            (2026-12-06, SmolLM2 Q4_1, ``benchmarks/decode_overhead.py --taps -ngl 0``) a switch cost +3.3 ms of
            one 10.6 ms decode and the 3 taps nothing measurable (−0.02 ms a decode). On an H100 (2026-12-06,
            ``auto_overhead.py --drafter dflash --n-max 0 auto auto-taps``, one run) a switch cost ~9 ms (the
            steps that began and ended a rest: 10.9 / 10.5 ms against 3.9 / 3.7 with the taps left on) and the
            resting steps were no faster (1.286 vs 1.207 ms a step): auto-taps 714.0 tok/s against auto's 737.2
            and plain's 805.4 (RESULTS.md 19.9). Patch 0016 (2026-12-06) cut a switch to 1–3 ms on an H200 and
            auto-taps to auto's speed there (755.7 / 788.0 against 763.9 / 766.9 tok/s), but the resting steps were
            still no faster with the taps off (RESULTS.md 19.11). So False, the default. After a generation that
            ended inside a long rest the target's taps may be off (``Context.enabled_layer_inputs``); each
            generation sets those it needs at its start.
        draw_in_graph_when_dormant: at temperature > 0 with the rejection rule (``verify="rejection"``), whose
            verify reads the target's logits and draws on the host, the dormant steps of a long rest draw in the
            target's graph as plain decoding does, through a sampler chain attached for the rest (seeded from the
            generation's random generator) and detached before its first step that is not dormant — where at
            least ``IN_GRAPH_MIN_STEPS`` dormant steps lie ahead (:meth:`AutoDraftLength.draw_in_graph`). Why: a
            resting step otherwise reads a whole logits row and draws on the host (135–165 µs a 49 152-token row
            on 2 Xeon cores) where plain decoding draws in the graph: on an H100 (2026-12-06, SmolLM2 + DFlash,
            T = 0.8, coding chat) resting steps cost 1.57–1.78 ms that way and 1.30–1.36 in the graph, auto
            +10 / +37 % tok/s (RESULTS.md 19.12; on 2 CPU cores no difference). Each switch costs a rebuilt graph
            (vendor/patches/0017: 0.3–0.7 ms on 2 CPU cores, 0.8–1.2 ms on an H100; a scheduler reserve of 3 /
            8 ms without it). Needs backend sampling (``backend_sampling`` not False); lossless either way. (The
            match rule, the default, keeps one chain attached for the whole generation at T > 0: nothing to
            switch.)
        verify_seen: per row count R (index R − 1), running mean of the verify ms the timer measured
            in this drafter's steps of R rows that kept the shape of the decode before (0 = none yet):
            the decision's V(R) where measured. A verify of a new shape is booked in ``verify_new`` only:
            the decision adds its cost, :meth:`shape_ms`, to every length that changes the shape, and
            booking it here too counted it twice (an n-gram drafter, whose lengths change from step to
            step, saw each length at its rebuilt-graph cost plus S).
        verify_scale: running mean of those same-shape readings ÷ the table's V at their row count (1
            before the first): the machine's speed now against when ``verify_ms`` was measured; the
            decision's V(R) is the table's × verify_scale at row counts not measured yet.
        verify_tried: per row count R, the verifies of R rows timed so far. The first is booked nowhere:
            it built that shape's graph and, on CUDA, captured it (patch 0015 keeps one per shape), a
            one-off that as a first reading held V(R) up for the rest of the run — a length tried once
            at ~5 ms was not tried again (RESULTS.md 19.10, suspicion (b)).
        verify_same, verify_new: per row count R, running means of the timed verify ms of R rows when the
            decode before had R rows too / another count (0 = none yet): llama.cpp reuses a decode's graph
            only for the shape of the last decode and rebuilds it otherwise — on CUDA it also captures a new
            CUDA graph — so a step whose verify changes shape pays more (:meth:`shape_ms`).
        guard: check the model's verdict against what drafting steps really gave (True; the class
            docstring of :class:`AutoDraftLength`, "The guard"); False: the cost model alone, as before
            2026-12-06.
        trial_steps, trial_tokens, trial_ms: drafting steps measured since the guard last sent the loop
            resting (or since the start), and their running means of committed tokens and wall ms a step.
        plain_step_ms: running mean of a resting step's wall ms (a plain decode through the loop; with
            ``learn_costs`` not the ``PROBE_AFTERMATH`` steps right after a probe), None before the first rest
            (:meth:`AutoDraftLength.plain_step`).
        guard_gap: the length of the last rest the guard began (steps); at least doubled each time a new trial
            loses again (:func:`rest_length`), 0 once a trial pays.
        plain_age: drafting steps booked since a resting step last measured ``plain_step_ms``.
        step_kinds: per kind of step (``"rest"``, ``"probe"``: the first drafting step after a rest,
            ``"draft"``), ``[steps, wall ms, committed tokens]`` summed over every generation (a generation's
            first step and its last one or two — whose wall is not known when the generation ends; up to
            ``REST_BOOK_EVERY`` deep in a rest, booked in batches — left out): where
            auto's time went against plain decoding's, e.g. a first use on a GPU that verified drafts at 36 of
            470 steps and lost 15 % (RESULTS.md 19.6). :meth:`step_table` reads it.
        probe_loss_ms: running mean of what a probe really lost against plain decoding — its wall ms less its
            committed tokens × the plain step (:meth:`AutoDraftLength.plain_step`), at least 0, plus what the
            ``PROBE_AFTERMATH`` resting steps after it took beyond a plain step each; None before the
            first probe was measured. On a GPU a probe pays what the model does not see: the target's graph
            rebuilt for 2 rows and again for the rest's 1, the drafter's rows deferred over the rest injected in
            one decode of their own shape.
        learn_costs: size a rest by what probes really lost (``probe_loss_ms``, where it exceeds the model's
            predicted loss) and let the guard decide a trial before ``GUARD_STEPS`` steps when it loses by far
            (:meth:`AutoDraftLength.guard_loss`); also (2026-12-07) keep every later rest at least what one
            probe's loss asks for (:func:`rest_length`'s ``floor``) and book the ``PROBE_AFTERMATH`` steps after a
            probe as its loss. False: the model's loss, ``GUARD_STEPS`` steps, rests exactly doubling and every
            resting step a plain one, as before 2026-12-06 (kept to compare the two in one run,
            ``benchmarks/auto_overhead.py``'s ``auto-old``).
        trace: None (the default), or a list to which every step is appended once its wall is known, as
            ``(kind, why, rows, wall_ms, committed, first)``: kind ``"rest"`` / ``"probe"`` / ``"draft"``; why
            :meth:`AutoDraftLength.plan` chose it (``"resting"`` inside a rest, ``"measure"`` a rest that measures
            the plain step, ``"free"`` a free drafter, ``"pays"`` the model's verdict, ``"probe"``, ``"guard"`` the
            guard's rest, ``"no gain"`` the model's rest, ``"no room"`` a ceiling of 0, ``"trim"`` a step begun by
            ``trim`` alone); rows verified; wall ms; committed tokens (None where the loop did not book the
            step); whether it was a generation's first step. It grows by one entry a step: what a user reads to
            see why auto drafted where it did.
    """
    bin_tried: np.ndarray = field(default_factory=lambda: np.zeros(10))
    bin_accepted: np.ndarray = field(default_factory=lambda: np.zeros(10))
    other_ms: float | None = None
    rest_ms: float | None = None
    drafter_ms: float | None = None
    pos_tried: np.ndarray = field(default_factory=lambda: np.zeros(0))
    pos_accepted: np.ndarray = field(default_factory=lambda: np.zeros(0))
    rest_left: int = 0
    gap: int = 0
    rule: str = "cost"
    rest: bool = True
    max_rest: int = 512
    dormant: bool = True
    taps_off_when_dormant: bool = False
    draw_in_graph_when_dormant: bool = True
    verify_seen: np.ndarray = field(default_factory=lambda: np.zeros(0))
    verify_scale: float = 1.0
    verify_same: np.ndarray = field(default_factory=lambda: np.zeros(0))
    verify_new: np.ndarray = field(default_factory=lambda: np.zeros(0))
    verify_tried: np.ndarray = field(default_factory=lambda: np.zeros(0))
    guard: bool = True
    trial_steps: int = 0
    trial_tokens: float = 0.0
    trial_ms: float = 0.0
    plain_step_ms: float | None = None
    guard_gap: int = 0
    plain_age: int = 0
    step_kinds: dict = field(default_factory=dict)
    probe_loss_ms: float | None = None
    learn_costs: bool = True
    trace: list | None = None
    _last_stats: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.rule not in AUTO_RULES:
            raise InvalidArgumentError(f"AutoState.rule must be one of {AUTO_RULES}, got {self.rule!r}")

    def shape_ms(self) -> float:
        """ms a verify costs beyond a same-shaped one when its row count differs from the decode before it
        (a rebuilt graph): the mean over the row counts measured both ways of ``verify_new − verify_same``,
        at least 0; 0 before any count was seen both ways. (The 2026-12-04 H200 bake-off: "auto" varied the
        verify rows from step to step and its verifies cost 3.0 ms against 2.1 at a fixed n_max 7 — RESULTS.md
        19.3; a rebuilt SmolLM2 drafter graph cost ≈ 0.5 ms there, 13.4. On 2 CPU cores a rebuild is a small
        part of a decode's compute.)"""
        n = min(len(self.verify_same), len(self.verify_new))
        both = (self.verify_same[:n] > 0) & (self.verify_new[:n] > 0)
        if not both.any():
            return 0.0
        return max(0.0, float(np.mean(self.verify_new[:n][both] - self.verify_same[:n][both])))

    def step_table(self) -> dict[str, dict[str, float]]:
        """``step_kinds`` as ``{kind: {"steps", "ms", "tokens", "ms_per_step", "tokens_per_ms"}}`` (ms: wall
        milliseconds summed over the kind's steps; tokens: committed tokens). A kind whose ``tokens_per_ms`` is
        below the rests' (plain decoding's) is where auto loses time."""
        out = {}
        for kind, (n, ms, tok) in self.step_kinds.items():
            out[kind] = {"steps": n, "ms": ms, "tokens": tok, "ms_per_step": ms / n if n else 0.0,
                         "tokens_per_ms": tok / ms if ms > 0 else 0.0}
        return out


#: the guess for the first position's acceptance before any draft was verified (:meth:`AutoDraftLength.
#: measured_survival`: with no data p_i = PRIOR_P0^(i+1))
PRIOR_P0 = 0.6


def _ema(old: float | None, new: float, w: float = 0.2) -> float:
    """Running mean; a sample above twice the mean (+1 ms) counts as that much: one slow step (a busy
    machine, a batch injection) must not make plain steps look dear and resting look wrong."""
    return new if old is None else (1.0 - w) * old + w * min(new, 2.0 * old + 1.0)


def adaedl_lower_bound(entropy: Any, gamma: float = 0.5) -> np.ndarray:
    """AdaEDL's entropy-based lower bound on a draft token's acceptance probability,
    ``max(0, 1 − sqrt(γ · H))``, H the drafter's entropy at that row in nats (Agrawal et al. 2024,
    "AdaEDL: Early Draft Stopping for Speculative Decoding of LLMs via an Entropy-based Lower Bound on
    Token Acceptance Probability", arXiv 2410.18351; γ a scale, 0.5 here, not tuned).

    Args:
        entropy: ``(n,)`` nats ≥ 0.

    Returns:
        ``(n,)`` in [0, 1].
    """
    h = np.maximum(np.asarray(entropy, dtype=float), 0.0)
    return np.clip(1.0 - np.sqrt(gamma * h), 0.0, 1.0)


#: resting steps before a probe whose committed rows the drafter still sees in full (``observe_deferred``);
#: earlier steps of a longer rest hand it ``observe_dormant`` (DFlash: no features): the probe's draft then
#: sees the last 64 rows and whatever preceded the rest (DFlash stages 64 deferred rows per injection anyway)
DORMANT_WINDOW = 64

#: deep in a long rest (more than ``DORMANT_WINDOW`` resting steps ahead) :meth:`AutoDraftLength.plan` books the
#: steps' costs once every this many steps, as their mean (a resting step's ``plan`` did all of ``_learn``'s
#: bookkeeping: 12–15 µs on 2 Xeon cores, 0.04–0.05 ms of an H100 host's 1.3–1.5 ms step, RESULTS.md 19.12 / 19.13)
REST_BOOK_EVERY = 8

#: dormant steps that must lie ahead before a rest attaches a sampler chain to draw in the target's graph
#: (``AutoState.draw_in_graph_when_dormant``): the chain's two switches rebuild the graph twice (0.3–0.7 ms each
#: on 2 CPU cores, 0.8–1.2 ms on an H100 with patch 0017), a step drawn in the graph saves the host's draw (0.2–0.5
#: ms a resting step on that H100, RESULTS.md 19.12)
IN_GRAPH_MIN_STEPS = 32

#: resting steps right after a probe whose time beyond a plain step counts as the probe's loss
#: (``AutoState.probe_loss_ms``) and not as a plain step: they pay the probe's shapes back — the target's graph
#: rebuilt for one row after the probe's two, the drafter's deferred rows (on an H100, 2026-12-07, SmolLM2 +
#: DFlash: a probe 4.9 ms, then 2.7 and 2.6 ms against 1.15 for a plain step; RESULTS.md 19.17)
PROBE_AFTERMATH = 2

#: a drafter whose call costs at most this fraction of a 1-row verify is *free* (the n-gram kinds: ~0.014 ms
#: against 1.12 ms on the H100, 2026-12-06): ``plan`` asks it for the ceiling at once — nothing to save by
#: resting or by asking for fewer, :meth:`AutoDraftLength.trim` still picks the prefix worth verifying — and
#: skips the per-step arithmetic, which cost 0.087 ms a step there (8 % of a SmolLM2 step; RESULTS.md 19.4)
FREE_DRAFTER = 0.05


#: drafting steps the guard measures before its first verdict on a trial (a trial: the drafting steps since the
#: start or since the guard's last rest); and the share of a drafting step's time it must lose against plain
#: decoding for the same tokens before the guard rests (below that, noise: on the H100 two runs of the same plain
#: decoding differ by ~1–2 %)
GUARD_STEPS = 16
GUARD_MARGIN = 0.03
#: the fewest drafting steps of a trial the guard judges (``AutoState.learn_costs``): after n steps, n ≥
#: GUARD_MIN_STEPS, a trial that loses more than GUARD_MARGIN × GUARD_STEPS / n of its time rests the loop —
#: a loss four times the margin is no noise after 4 steps (on an H100 a first use's drafting steps lost ~50 %)
GUARD_MIN_STEPS = 4
#: every this many drafting steps without a rest the guard rests GUARD_MEASURE steps to measure a plain step again
GUARD_REFRESH = 128
GUARD_MEASURE = 4
#: after this many drafting steps a trial's means weigh the newest step 1/GUARD_WINDOW (before: plain means)
GUARD_WINDOW = 32


def rest_length(probe_loss_ms: float, plain_ms: float, gap: int, *, loss: float = 0.02, longest: int = 512,
                floor: bool = True) -> int:
    """How many steps to rest (draft nothing) before the next probe: long enough that one probe — a drafting
    step that costs ``probe_loss_ms`` more than plain decoding would for the same tokens — loses at most
    ``loss`` of the rest's plain time (at least 4 steps); a later rest (``gap`` > 0, the last rest's length:
    the probe found nothing paying again) at least twice the last; at most ``longest``.

    Why the first rule bounds the later rests too (2026-12-07): the first rest is sized before any probe was
    measured, by the model's predicted loss (≈ 0.6 ms on an H100 with SmolLM2 + DFlash), and doubling from there
    kept probing every 9, 19, 39 … steps although each probe and the step back to one row were measured to lose
    ≈ 5–7 ms there: a conversation's first turn lost 14–20 % against plain decoding (RESULTS.md 19.17).

    Args:
        probe_loss_ms: ms a probe loses against plain decoding (≥ 0): measured, or predicted before a probe was.
        plain_ms: ms of a plain step.
        gap: the last rest's length, 0 when the last probe found drafting paying.
    """
    first = int(min(longest, max(4, np.ceil(max(probe_loss_ms, 0.0) / max(loss * plain_ms, 1e-9)))))
    if gap > 0:
        return int(min(longest, max(2 * gap, first if floor else 0)))
    return first


class AutoDraftLength:
    """Choose each step's draft length (``n_max="auto"``; module docstring, "Per step").

    Per step the loop calls :meth:`plan` before drafting (how many tokens to ask the drafter for; 0 =
    rest: no drafter call this step), then, when it drafted, :meth:`trim` with the drafter's block
    and verifies the prefix it returns. Between calls it reads the generation's :class:`SpecStats`
    (the previous step's accepted length), the wall clock (the previous step's duration) and, when
    given, the ``timer``'s drafter stages.

    **Resting.** Before each drafting step the measured acceptance per position (this generation's,
    with earlier generations' as the prior) gives the best length L and the expected tokens of a
    step, τ_L = 1 + Σ_{i<L} p_i; drafting pays while τ_L / (O + V(L+1)) ≥ 1 / (O_plain + V(1)), i.e.
    τ_L is above the break-even τ of the measured costs (O: a drafting step's other costs, drafter
    call included; O_plain: a plain step's). Where it does not, the loop rests :func:`rest_length`
    steps, then probes with a one-token drafting step (exponential back-off while probes keep failing; every
    rest at least as long as what probes were measured to lose asks for, :meth:`rest_loss`, where that exceeds the
    model's loss — the probe's own step and the ``PROBE_AFTERMATH`` resting steps after it). A
    resting step is a plain decode through the same verify; what the drafter must still see (DFlash's
    committed features) is handed to ``Drafter.observe_deferred``, so the output stays the target's. Deep in
    a long rest (:meth:`dormant`: ``DORMANT_WINDOW`` or more resting steps before the probe) the loop hands
    the rows to ``Drafter.observe_dormant`` instead, which may skip them (DFlash: no features copied or
    injected; the probe drafts from the rest's last ``DORMANT_WINDOW`` rows): on 2 CPU cores that took auto
    from ×0.986 to ×1.005 of plain decoding in one run (RESULTS.md 19.2). A *free* drafter (:meth:`free_drafter`:
    its call measured at ≤ ``FREE_DRAFTER`` of a 1-row verify, as the n-gram kinds are) is asked for the ceiling
    every step without the model's rest test, and only :meth:`trim` decides (RESULTS.md 19.4) — unless the guard
    below finds its drafting steps losing, then it rests too.

    **The guard.** The model's verdict rests on a verify table measured apart and on per-step costs booked
    by kind of step; on a GPU a run's real drafting steps cost more than that (verifies of changing shapes,
    confidences read back, the plan itself: on an H100, 2026-12-06, DFlash auto's drafting steps gave 586 tok/s
    where plain decoding gave 733 and the model still said drafting paid — RESULTS.md 19.5). So the loop also
    measures what drafting steps really give — committed tokens and wall ms a step, over a *trial* of at least
    ``GUARD_STEPS`` of them (:meth:`guard_loss`) — against a plain step's wall (measured in rests; before the
    first, V(1), :meth:`plain_step`; a trial that loses by far is judged after ``GUARD_MIN_STEPS``). When a trial
    loses more than ``GUARD_MARGIN`` of its time the loop rests,
    the same :func:`rest_length` back-off as the model's rests (at least doubled while new trials keep losing), then the
    probe starts a new trial; a free drafter rests too. The plain step it compares with goes stale (a longer
    context, a busier machine, an earlier generation's value), and a trial that pays against a stale value would
    never rest to measure it again: so every ``GUARD_REFRESH`` drafting steps without a rest the loop rests
    ``GUARD_MEASURE`` steps to measure it (3 % of the steps; ≈ 1 % of the time where drafting pays 1.5×). That
    bounds auto's loss against plain decoding by one trial a back-off, whatever the model's error. Off with
    ``AutoState(rest=False)`` (no rests at all) or ``AutoState(guard=False)``. Lossless as before: a resting
    step is a plain decode.

    Args:
        verify_ms: ``[V(1), ..., V(R)]``, ms of verify batches of 1..R rows (:func:`measure_verify_ms`);
            made non-decreasing (a dip is noise).
        stats: the generation's statistics (read only).
        state: what earlier generations of this drafter learnt (updated in place); None = fresh.
        prior: weight (in tokens) of a confidence before its bin has data / of the acceptance prior.
        timer: the generation's :class:`~pyllama_spec.speculative.timing.StageTimer` (the drafter's
            share of a step; optional).
        free: the drafter declares its call free (``Drafter.free``: the n-gram kinds' lookups) — a free
            drafter from the first step, whatever its call is measured to cost (:meth:`free_drafter`).
    """

    def __init__(self, verify_ms: Any, stats: Any, *, state: AutoState | None = None, prior: float = 4.0,
                 clock: Any = time.perf_counter, timer: Any = None, free: bool = False) -> None:
        # more rows never cost less: a measured dip is noise, and would make a sure miss look free
        vm = [float(v) for v in np.maximum.accumulate(np.asarray(verify_ms, dtype=float))]
        self.verify = VerifyCost(list(range(1, len(vm) + 1)), vm)
        self._vm = vm  # (V of a whole row count without numpy: a resting step books itself in microseconds)
        self.stats, self.prior, self.clock, self.timer = stats, prior, clock, timer
        self.free = bool(free)  # the drafter says its call is free (Drafter.free): no need to measure it
        self.state = state if state is not None else AutoState()
        self.n_bins = len(self.state.bin_tried)
        st = self.state
        if st._last_stats is not None and st._last_stats is not stats:
            # the last generation's acceptance joins the prior (older generations count half each time)
            old = st._last_stats
            n = max(len(st.pos_tried), len(old.drafted_at))
            st.pos_tried = 0.5 * np.pad(st.pos_tried, (0, n - len(st.pos_tried))) + np.pad(
                np.asarray(old.drafted_at, float), (0, n - len(old.drafted_at)))
            st.pos_accepted = 0.5 * np.pad(st.pos_accepted, (0, n - len(st.pos_accepted))) + np.pad(
                np.asarray(old.accepted_at, float), (0, n - len(old.accepted_at)))
        st._last_stats = stats
        self._t: float | None = None
        self._rows = 1
        self._conf: np.ndarray | None = None
        self._planned = False  # plan() began this step (then trim() does not learn again)
        self._first = True  # the next step booked is the generation's first
        self._prev = "none"  # what the previous step was: "draft", "probe" (after a rest) or "rest"
        self._prev_rows: int | None = None  # the rows of the last verify booked (the shape llama.cpp holds)
        self._eff_key: Any = None  # (_eff_list)
        self._eff: list[float] = []
        self._shape_key: Any = None  # (_shape_ms)
        self._shape_val = 0.0
        self._drafter_s = self._drafter_seconds()
        self.n_rest = 0  # resting steps of this generation (the report's view of it)
        self.n_probes = 0
        self.n_guard_rests = 0  # rests the guard began (this generation)
        self._n_steps = 0  # stats.n_steps when the step being timed began
        self._span = 1  # steps since the last one booked (>1 only deep in a rest: REST_BOOK_EVERY)
        self._aftermath = 0  # resting steps after a probe still to book as its loss (PROBE_AFTERMATH)
        self._probe_old: float | None = None  # AutoState.probe_loss_ms before the last probe's sample
        self._probe_sample = 0.0  # the last probe's sample so far (its own loss, then its aftermath's)
        self._why = "trim"  # why plan() chose the step being timed (AutoState.trace)

    # -- the pieces ---------------------------------------------------------------------------------
    def _drafter_seconds(self) -> tuple[float, float, float]:
        """The timer's seconds so far in the drafter's stages, in ``inject`` alone and in verify."""
        if self.timer is None:
            return 0.0, 0.0, 0.0
        # (once a step, resting steps too: plain loops, no dict or generator — 9 → 3 µs on 2 Xeon cores)
        st = self.timer.stages
        drafter = inject = verify = 0.0
        for k in DRAFTER_STAGES:
            t = st.get(k)
            if t is not None:
                drafter += t.seconds
                if k == "inject":
                    inject = t.seconds
        for k in VERIFY_STAGES:
            t = st.get(k)
            if t is not None:
                verify += t.seconds
        return drafter, inject, verify

    def _eff_list(self) -> list[float]:
        """V(1..R) in ms as the decision uses it (:meth:`_v`), as a list: the same arithmetic as :meth:`_v`'s
        table, element by element, in plain floats. (The per-step decisions read a few of 32 values: numpy's
        per-call overhead on arrays this short was most of their cost, ~70 µs a step on 2 Intel cores, against
        a SmolLM2 step of ~1.2 ms on the H200: RESULTS.md 19.4.)"""
        st = self.state
        seen_arr = np.asarray(st.verify_seen, dtype=float)
        key = (st.verify_scale, seen_arr.tobytes())  # (made again only when a step booked new measurements)
        if key == self._eff_key:
            return self._eff
        scale, seen = st.verify_scale, seen_arr.tolist()
        out: list[float] = []
        run = -np.inf
        for i, v in enumerate(self._vm):
            x = scale * v
            if i < len(seen) and seen[i] > 0:
                x = seen[i]
            run = x if x > run else run  # (np.maximum.accumulate)
            out.append(run)
        self._eff_key, self._eff = key, out
        return out

    def _shape_ms(self) -> float:
        """``AutoState.shape_ms()``, made again only when its measurements changed (a step books them once)."""
        st = self.state
        key = (np.asarray(st.verify_same).tobytes(), np.asarray(st.verify_new).tobytes())
        if key != self._shape_key:
            self._shape_key, self._shape_val = key, st.shape_ms()
        return self._shape_val

    def _v(self, rows: Any) -> Any:
        """V(rows) in ms as the decision uses it: this run's measured verify at that row count
        (``AutoState.verify_seen``), else the table's × ``verify_scale``; non-decreasing in rows."""
        # (called a few times every step: on a GPU a SmolLM2 step is ~1.2 ms, so this avoids np.pad and the
        # table's extrapolation where every row count is inside it — 2026-12-04, RESULTS.md 19.3)
        st = self.state
        table = self._eff_list()  # (the one place the table is made)
        if isinstance(rows, (int, float)) and 1 <= rows <= len(table) and rows == int(rows):
            return table[int(rows) - 1]  # (one whole row count: no arrays)
        eff = np.asarray(table)
        r = np.asarray(rows, dtype=float)
        inside = (r >= 1) & (r <= len(eff)) & (r == np.floor(r))
        if inside.all():  # (whole row counts inside the table: no extrapolation needed)
            out = eff[r.astype(int) - 1]
        else:
            i = np.clip(r.astype(int) - 1, 0, len(eff) - 1)
            out = np.where(inside, eff[i], np.maximum(st.verify_scale * self.verify(r), eff[-1]))
        return float(out) if out.ndim == 0 else out

    def _bins(self, c: np.ndarray) -> np.ndarray:
        return np.minimum((c * self.n_bins).astype(int), self.n_bins - 1)

    def calibrated(self, conf: Any) -> np.ndarray:
        """ĉ: confidences mapped to the acceptance rate seen for their bin (shrunk to c by ``prior``)."""
        c = np.clip(np.asarray(conf, dtype=float), 0.0, 1.0)
        b = self._bins(c)
        return (self.state.bin_accepted[b] + self.prior * c) / (self.state.bin_tried[b] + self.prior)

    def survival(self, draft: Any) -> np.ndarray:
        """p_i: probability that the first i + 1 tokens of ``draft`` are all accepted."""
        n = len(draft.tokens)
        if draft.confidence is not None:
            return np.cumprod(self.calibrated(np.asarray(draft.confidence)[:n]))
        return self.measured_survival(n)

    def measured_survival(self, n: int) -> np.ndarray:
        """p_i for i < n from this generation's acceptance per position, earlier generations'
        (``AutoState.pos_*``) and a guess of weight ``prior`` where few were drafted: what a draft is worth
        before its confidences are seen. p_0 is the first position's rate shrunk toward ``PRIOR_P0`` = 0.6; after
        it p_i = p_{i−1} · c_i, with c_i the conditional rate measured at position i (its accepted ÷ its tries,
        over p_{i−1}, at most 1) shrunk toward the curve's last rate r = p_{i−1} / p_{i−2} (p_0 for i = 1) — the
        measured curve continued; a position never drafted takes r whole. With no data anywhere that is
        0.6^(i+1). Before 2026-12-06 a sparsely tried position shrank toward a fixed 0.6^(i+1), far below the
        curve its first positions measured: a lookup whose drafts were cut at 4 tokens never had a 5th verified
        however sure its first four (RESULTS.md 19.8), and with positions 4+ tried a few times it kept cutting
        copies at 3 of 15 (ngram auto 0.81 × n_max 15 on the H100's coding chat, RESULTS.md 19.10). Mixing in
        conditional form keeps one lucky acceptance at a sparse position from lifting the tail to the last
        well-measured value."""
        s, st = self.stats, self.state
        # plain floats, the arithmetic of the arrays it replaced (2026-12-06: numpy's per-call cost on ≤ 32
        # values was most of auto's per-step time; RESULTS.md 19.4)
        def first(a: Any, numbers: bool) -> list[float]:  # (floats, zeros past a's end)
            a = np.asarray(a, dtype=float)[:n].tolist() if numbers else [float(x) for x in a[:n]]
            return a + [0.0] * (n - len(a))

        prior = self.prior
        out: list[float] = []
        for ag, ap, tg, tp in zip(first(s.accepted_at, False), first(st.pos_accepted, True),
                                  first(s.drafted_at, False), first(st.pos_tried, True)):
            if not out:  # p_0: the acceptance measured at the first position, shrunk toward PRIOR_P0
                x = (ag + ap + prior * PRIOR_P0) / (tg + tp + prior)
            else:
                # p_i = p_{i-1} · c_i: the conditional rate measured here (no position's data may imply more
                # than all of its drafts that reached it: acc ≤ tried · p_{i-1}) shrunk toward the curve's last
                # rate r (docstring); a position never drafted takes r whole
                last = out[-1]
                r = last / out[-2] if len(out) > 1 and out[-2] > 0 else last
                acc, tried = ag + ap, tg + tp
                x = last * r if tried == 0 else (min(acc, tried * last) + prior * last * r) / (tried + prior)
            out.append(min(x, out[-1]) if out else x)  # (c_i ≤ 1 and r ≤ 1: the clamp only absorbs rounding)
        return np.array(out, dtype=float)

    def best_length(self, p: np.ndarray, keep_rows: int | None = None) -> int:
        """L* = argmax_L (1 + Σ_{i<L} p_i) / (O + V(L + 1) + S·[L + 1 ≠ keep_rows]), the shortest on ties.

        ``keep_rows``: the row count of the last verify; every other length pays S = ``AutoState.shape_ms()``,
        what a verify of a new shape was measured to cost more (None: no such term). A token that cannot be
        accepted (p_i = 0) is never sent to keep a shape: the lengths stop before the first."""
        # plain floats (called twice a step; numpy's per-call cost was most of it), the same arithmetic as the
        # arrays: gain_L = 1 + (p_0 + ... + p_{L-1}), cost_L = (O + V(L + 1)) + S·[L + 1 ≠ keep_rows], the
        # first maximum of gain / max(cost, 1e-9)
        ps = np.asarray(p, dtype=float).tolist()
        eff = self._eff_list()
        other = self.state.other_ms or 0.0
        shape = self._shape_ms() if keep_rows is not None else 0.0
        best, best_val = 0, -np.inf
        total = 0.0
        for n in range(len(ps) + 1):
            if n:
                if keep_rows is not None and not ps[n - 1] > 0:
                    break  # the tokens before the first p_i = 0
                total += ps[n - 1]
            rows = n + 1
            cost = other + (eff[rows - 1] if rows <= len(eff) else float(self._v(float(rows))))
            if keep_rows is not None:
                cost = cost + shape * (1.0 if rows != keep_rows else 0.0)
            val = (1.0 + total) / max(cost, 1e-9)
            if val > best_val:
                best, best_val = n, val
        return best

    def budget(self, ceiling: int, margin: int = 2) -> int:
        """How many tokens to ask the drafter for this step, before its confidences are known: the
        best length under the acceptance measured so far plus ``margin`` positions a confident draft
        may still earn, at most ``ceiling``. Drafting costs rows too (a DFlash block of 16 costs
        about twice one of 2 on the H200), so drafting the ceiling at every step pays for rows that
        :meth:`trim` throws away (bake-off on the H200, 2026-11-30: auto 47 % behind n_max 1)."""
        if ceiling <= 0:
            return 0
        return int(min(ceiling, self.best_length(self.measured_survival(ceiling), self._prev_rows) + margin))

    def plain_other_ms(self) -> float:
        """O_plain: a resting step's ms beyond its verify — measured, or before the first rest the
        drafting steps' other costs less their drafter stages."""
        st = self.state
        if st.rest_ms is not None:
            return st.rest_ms
        return max(0.0, (st.other_ms or 0.0) - (st.drafter_ms or 0.0))

    def drafting_pays(self, ceiling: int) -> tuple[bool, float]:
        """Whether some draft length pays under the measured acceptance and costs (class docstring,
        "Resting"), and the ms a drafting step is predicted to lose against plain decoding for the
        same tokens (0 when it pays). True while a drafting step's costs are unmeasured."""
        if self.state.other_ms is None or ceiling <= 0:
            return True, 0.0
        p = self.measured_survival(ceiling)
        n = self.best_length(p)
        tau = 1.0 + float(p[:n].sum())
        step = self.state.other_ms + float(self._v(float(n + 1)))
        plain = self.plain_other_ms() + float(self._v(1.0))
        return tau * plain >= step, max(0.0, step - tau * plain)

    def adaedl_length(self, draft: Any) -> int:
        """AdaEDL's stop (:func:`adaedl_lower_bound`): the draft up to the first row whose lower bound
        on acceptance is below that row's break-even acceptance — the extra verify ms of one more row
        times the step's expected rate. Uses ``Draft.entropy`` (else 1 − confidence as a proxy, else
        the measured acceptance)."""
        n = len(draft.tokens)
        if n == 0:
            return 0
        ent = getattr(draft, "entropy", None)
        if ent is not None:
            lb = adaedl_lower_bound(np.asarray(ent)[:n])
        elif draft.confidence is not None:
            lb = np.clip(np.asarray(draft.confidence, float)[:n], 0.0, 1.0)
        else:
            return self.best_length(self.measured_survival(n))
        o = self.state.other_ms or 0.0
        tau, surv = 1.0, 1.0
        for i in range(n):
            # row i stays while the chance that it is accepted (all before it too) repays its extra
            # verify ms at the rate of the prefix so far; the first row that does not ends the draft
            rate = tau / max(o + float(self._v(float(i + 1))), 1e-9)
            extra = float(self._v(float(i + 2))) - float(self._v(float(i + 1)))
            surv *= float(lb[i])
            if surv <= 0.0 or surv < extra * rate:
                return i
            tau += surv
        return n

    def _book_trial(self, tokens: float, wall_ms: float) -> None:
        """Book one drafting step of the current trial: ``tokens`` committed in ``wall_ms``."""
        st = self.state
        n = st.trial_steps + 1
        w = max(1.0 / n, 1.0 / GUARD_WINDOW)
        if n > 1:  # (one slow step — a busy machine — counts at most as 2 × the mean + 1 ms, as _ema)
            wall_ms = min(wall_ms, 2.0 * st.trial_ms + 1.0)
        st.trial_tokens = (1.0 - w) * st.trial_tokens + w * tokens
        st.trial_ms = (1.0 - w) * st.trial_ms + w * wall_ms
        st.trial_steps = n

    def plain_step(self) -> float:
        """ms of a plain step through this loop, as the guard takes it: measured in rests, else V(1) alone.
        (Not the model's ``O_plain + V(1)``: where a run's real costs exceed the table's, as on a GPU whose
        verify time lands outside the verify stage, the model books the excess as "other" time that it
        assumes plain steps pay too, and would find every trial paying. V(1) is a lower bound of a plain
        step: a trial that pays against it pays; one that does not makes the loop rest, and the rest
        measures the plain step the next verdicts use.)"""
        st = self.state
        if st.plain_step_ms is not None:
            return st.plain_step_ms
        # the table's V(1) as measured, not scaled by this run's verifies: a burst of drafting steps whose verifies
        # pay rebuilt graphs scales the table up (on an H100 a first use's 17 drafting steps of 4.9 ms for 2.4
        # tokens looked paying against a V(1) scaled so, RESULTS.md 19.8) — and a lower bound must stay one
        return min(self._vm[0], float(self._v(1.0)))

    def guard_loss(self) -> float | None:
        """The guard's verdict on the current trial (class docstring, "The guard"): the ms a drafting step
        loses against plain decoding of the same tokens, ``trial_ms − trial_tokens × plain_step()``, where it
        exceeds ``GUARD_MARGIN`` of the step; None while it does not, before ``GUARD_STEPS`` drafting steps
        were measured, or with ``AutoState.guard`` off. With ``AutoState.learn_costs`` a trial of n ≥
        ``GUARD_MIN_STEPS`` steps is judged already when it loses more than ``GUARD_MARGIN × GUARD_STEPS / n`` of
        its time (12 % after 4 steps, 6 % after 8). (:meth:`plan` asks only where resting is allowed,
        ``AutoState.rest``.)"""
        st = self.state
        n = st.trial_steps
        least = GUARD_MIN_STEPS if st.learn_costs else GUARD_STEPS
        if not st.guard or n < least:
            return None
        loss = st.trial_ms - st.trial_tokens * self.plain_step()
        # (learn_costs: a short trial must lose more — the margin × GUARD_STEPS / n — to be judged before
        # GUARD_STEPS steps; from GUARD_STEPS on the margin alone)
        margin = GUARD_MARGIN * max(1.0, GUARD_STEPS / n)
        return loss if loss > margin * st.trial_ms else None

    # -- the loop's calls ----------------------------------------------------------------------------
    def _book_verify(self, rows: int, verify_ms: float, table: float) -> None:
        """Book one timed verify of ``rows`` rows (``AutoState.verify_tried`` / ``verify_seen`` /
        ``verify_scale`` / ``verify_same`` / ``verify_new`` say what goes where, and why)."""
        st = self.state
        # (once a step: Python floats for the arithmetic, numpy only to store — numpy scalars cost ~4 × as much a
        # step, a few µs that a resting step on a fast GPU, ~1.2 ms, notices)
        verify_ms, table, i = float(verify_ms), float(table), rows - 1
        if len(st.verify_tried) < rows:
            st.verify_tried = np.pad(st.verify_tried, (0, rows - len(st.verify_tried)))
        tried = float(st.verify_tried[i]) + 1.0
        st.verify_tried[i] = tried
        if tried == 1.0:  # this shape's first graph: built and (CUDA) captured, a one-off
            return
        if self._prev_rows == rows:
            # the table's shape was noisy too (V(2)/V(1) 1.02 in one table, 1.32 in the run): what
            # this run measured at a row count wins over the table there
            r, old = verify_ms / table, float(st.verify_scale)
            st.verify_scale = 0.8 * old + 0.2 * min(max(r, 0.5 * old), 2.0 * old)  # (one outlier moves it ≤ 20 %)
            if len(st.verify_seen) < rows:
                st.verify_seen = np.pad(st.verify_seen, (0, rows - len(st.verify_seen)))
            seen = float(st.verify_seen[i])
            st.verify_seen[i] = verify_ms if seen <= 0 else _ema(seen, verify_ms)
        if self._prev_rows is not None:  # the same shape as the decode before, or a new one
            name = "verify_same" if self._prev_rows == rows else "verify_new"
            arr = getattr(st, name)
            if len(arr) < rows:
                arr = np.pad(arr, (0, rows - len(arr)))
                setattr(st, name, arr)
            was = float(arr[i])
            arr[i] = verify_ms if was <= 0 else _ema(was, verify_ms)

    def _learn(self, now: float) -> None:
        """Book the previous step: its other costs (by kind of step) and its confidences' outcome."""
        st = self.state
        secs = self._drafter_seconds()
        # (m > 1: the resting steps since the last booked, REST_BOOK_EVERY — every figure below is their mean)
        m, self._span = self._span, 1
        drafter_ms, inject_ms, verify_ms = (1e3 * (a - b) / m for a, b in zip(secs, self._drafter_s))
        self._drafter_s = secs
        if self._t is None:
            return
        rows = self._rows
        table = float(self._vm[rows - 1]) if 0 < rows <= len(self._vm) else float(self.verify(float(rows)))
        # the step's verify as the timer saw it, else the table's at this machine's speed. Booking
        # wall − table instead (before 2026-12-02) let a table measured in another moment leak into
        # the other costs: on the loaded 2-core CPU the table's V(1) was 28 ms against the run's 22,
        # a resting step's other costs clipped at 0, a drafting step's vanished in the table's V(4)
        # of 49 ms against 35 measured, and auto drafted 11 % of the steps at 0.94 × plain
        # With sync_stages off the verify stage ends once the decode is queued and its GPU time lands in
        # the read after it (timing.py): that reading is no verify time, so the table stands there
        timed = self.timer is not None and getattr(self.timer, "sync", True) and verify_ms > 0
        v = verify_ms if timed else table * st.verify_scale
        wall = 1e3 * (now - self._t) / m
        other = max(0.0, wall - v)
        if not self._first and timed and table > 0:
            self._book_verify(rows, verify_ms, table)
        # the step's committed tokens, where the loop booked it (None where it did not: nothing to count; a resting
        # step commits one)
        booked = self.stats.n_steps == self._n_steps + m and self.stats.acceptance_lengths
        committed = 1.0 + float(self.stats.acceptance_lengths[-1]) if booked else None
        if st.trace is not None and self._prev in ("rest", "probe", "draft"):
            st.trace.append((self._prev, self._why, rows, round(wall, 4), committed, self._first))
        # a resting step right after a probe (PROBE_AFTERMATH) pays the probe's shapes back — the target's graph
        # rebuilt for one row, the drafter's — : what the probe lost, not a plain step (on an H100, 2026-12-07, the
        # two after a DFlash probe took 2.6-3.3 ms against 1.15 for a plain step, RESULTS.md 19.17)
        aftermath = (bool(self._aftermath) and self._prev == "rest" and m == 1 and not self._first
                     and st.learn_costs and st.rest_left > 0)  # (a rest's last step always measures a plain one)
        self._aftermath = self._aftermath - 1 if aftermath else 0
        if aftermath:  # (the whole sample through _ema: clipped as one slow step must be)
            self._probe_sample += max(0.0, wall - self.plain_step())
            st.probe_loss_ms = _ema(self._probe_old, self._probe_sample)
        if not self._first and self._prev in ("rest", "probe", "draft"):
            rec = st.step_kinds.setdefault(self._prev, [0, 0.0, 0.0])
            rec[0], rec[1], rec[2] = rec[0] + m, rec[1] + m * wall, rec[2] + m * (committed or 1.0)
            if self._prev == "probe" and committed is not None:
                # what the probe really lost, its rebuilt graphs and injection included (AutoState.probe_loss_ms);
                # the resting steps right after it add theirs below (PROBE_AFTERMATH)
                self._probe_old, self._probe_sample = st.probe_loss_ms, max(0.0, wall - committed * self.plain_step())
                st.probe_loss_ms = _ema(self._probe_old, self._probe_sample)
                self._aftermath = PROBE_AFTERMATH
        if self._first:
            # a generation's first step pays one-time costs (the drafter's first graphs: 65 ms against
            # 1 ms later on the tiny fixtures): not what a step costs
            self._first = False
        elif aftermath:
            pass  # (booked as the probe's loss above: neither a plain step nor a drafting step)
        elif self._prev == "rest":  # (less the rows it injected for the drafter: a probe's share of work)
            st.rest_ms = _ema(st.rest_ms, max(0.0, other - inject_ms))
            st.plain_step_ms = _ema(st.plain_step_ms, wall)
            st.plain_age = 0
        elif self._prev == "draft":
            st.other_ms = _ema(st.other_ms, other)
            if self.timer is not None:
                st.drafter_ms = _ema(st.drafter_ms, drafter_ms)
            if committed is not None and st.learn_costs and rows == 1 and self.free_drafter():
                # a free drafter's step that verified no draft (an n-gram lookup found nothing) is a plain step:
                # it measures one, and is no evidence about drafting. Booked in the trial, a run of them made the
                # guard judge a lookup by the noise of plain steps and rest it through the one conversation where
                # it paid (H100 bake-off, 2026-12-06: n-gram n_max 7 1.16-1.19 x plain on builtin:mixed, auto
                # 1.05, never drafting on the summary where n_max 7 ran at 2.8 x; RESULTS.md 19.8)
                st.plain_step_ms = _ema(st.plain_step_ms, wall)
                st.plain_age = 0
            elif committed is not None:
                self._book_trial(committed, wall)
                st.plain_age += 1
        elif self.timer is not None or st.other_ms is None:
            # a probe also injects the rows deferred while resting, in one decode: not a drafting
            # step's cost (left out where the timer tells it)
            st.other_ms = _ema(st.other_ms, max(0.0, other - inject_ms))
        if self._conf is not None and len(self._conf) and self.stats.acceptance_lengths:  # (none after a rest)
            k = self.stats.acceptance_lengths[-1]
            tried = self._conf[:k + 1]  # token j was tried iff all before it were accepted
            b = self._bins(tried)
            np.add.at(st.bin_tried, b, 1.0)
            np.add.at(st.bin_accepted, b[:k], 1.0)
        self._conf = None
        self._prev_rows = rows

    def plan(self, ceiling: int) -> int:
        """How many tokens to ask the drafter for this step (≤ ``ceiling``): 0 = rest (no drafter
        call; the loop verifies ``[last]`` alone), else :meth:`budget`. Called once per step, before
        drafting. Deep in a long rest it books the steps' costs once every ``REST_BOOK_EVERY`` steps, as
        their mean, and otherwise only counts the step down."""
        st = self.state
        if (self._prev == "rest" and self._why == "resting" and st.rest and st.rest_left > DORMANT_WINDOW
                and self._span < REST_BOOK_EVERY and ceiling > 0 and st.trace is None and not self._first
                and not self._aftermath):
            # deep in a long rest (its next step dormant too): nothing to decide, and the costs are booked once every
            # REST_BOOK_EVERY steps, as their mean (AutoState.trace, which lists every step, books each; the
            # generation's first step, which pays one-time costs and is left out, is booked alone; so is a rest's
            # first step — its verify is a new shape after a draft's, booked as AutoState.verify_new, which a mean
            # with 7 steps of the same shape would dilute and so change later decisions)
            st.rest_left -= 1
            self._span += 1
            self.n_rest += 1
            return 0
        now = self.clock()
        self._learn(now)
        ask = 0
        guard = None  # (the guard's verdict against drafting: None = none; asked only where a step may draft)
        if ceiling > 0 and st.rest and st.rest_left <= 0:
            guard = self.guard_loss()
            if guard is None and st.trial_steps >= GUARD_STEPS:
                st.guard_gap = 0  # (this trial pays: the next one the guard stops starts the back-off again)
        why = "no room"  # (why this step drafts or rests: AutoState.trace)
        if ceiling > 0:
            if st.rest and st.rest_left > 0:
                st.rest_left -= 1
                why = "resting"
            elif (st.rest and st.guard and st.plain_step_ms is not None and st.plain_age >= GUARD_REFRESH
                  and self._prev != "rest"):
                # a short rest that measures the plain step afresh (class docstring): its first step replaces the
                # stale value, the next ones average in
                st.rest_left = GUARD_MEASURE - 1
                st.plain_age, st.plain_step_ms = 0, None
                why = "measure"
            elif self.free_drafter() and guard is None:
                st.gap = 0
                ask = ceiling
                why = "free"
            else:
                if self.free_drafter():  # (losing, by the guard: nothing for the model to add)
                    pays, loss_ms = False, 0.0
                else:
                    pays, loss_ms = self.drafting_pays(ceiling) if st.rest else (True, 0.0)
                if guard is not None:  # what this trial's drafting steps really gave overrules the model
                    pays, loss_ms = False, max(loss_ms, guard)
                # a rest just ended (here or in the last generation): probe once, whatever the model says
                due = guard is None and (self._prev == "rest" or (self._prev == "none" and st.gap > 0))
                if pays:
                    st.gap = 0
                    ask = max(1, self.budget(ceiling))
                    why = "pays"
                elif due:  # one token: the cheapest step that measures the first position, which
                    # decides whether any length pays (CPU, SmolLM2: a probe of 3 rows cost 2.5 plain steps)
                    ask = 1
                    self.n_probes += 1
                    self._prev = "rest"  # (so this step counts as a probe)
                    why = "probe"
                elif guard is not None:  # the trial lost: rest, at least twice the guard's last rest, and
                    # start a new trial after it. With learn_costs the first such rest keeps the whole trial's
                    # loss — its drafting steps' and the probe's that began it — within 2 % of the rest: on a GPU a
                    # trial is a burst of new shapes (RESULTS.md 19.8), each step losing ~2 ms, not one probe's
                    lost = self.rest_loss(loss_ms)
                    if st.learn_costs and not self.free_drafter():
                        # (guard is the loss of the trial's last GUARD_WINDOW steps at most. A free drafter's trial
                        # costs only its failed drafts' rows, and its rests cost every lookup that would have paid:
                        # one probe's loss sizes them, as before)
                        lost = min(st.trial_steps, GUARD_WINDOW) * guard + (st.probe_loss_ms or 0.0)
                    st.guard_gap = rest_length(lost, self.plain_step(), st.guard_gap, longest=st.max_rest,
                                               floor=st.learn_costs)
                    st.gap = st.guard_gap
                    st.rest_left = st.gap - 1
                    st.trial_steps, st.trial_tokens, st.trial_ms = 0, 0.0, 0.0
                    self.n_guard_rests += 1
                    why = "guard"
                else:  # nothing pays: rest, longer after each probe that failed
                    plain = self.plain_other_ms() + float(self._v(1.0))
                    st.gap = rest_length(self.rest_loss(loss_ms), plain, st.gap, longest=st.max_rest,
                                         floor=st.learn_costs)
                    st.rest_left = st.gap - 1
                    why = "no gain"
        kind = "rest" if ask == 0 else "probe" if self._prev == "rest" else "draft"
        self.n_rest += kind == "rest"
        self._t, self._rows, self._prev, self._planned = now, 1, kind, True
        self._why = why
        self._n_steps = self.stats.n_steps
        return ask

    def rest_loss(self, loss_ms: float) -> float:
        """The loss a rest's length is sized by (:func:`rest_length`: one probe's loss ≤ 2 % of the rest): the
        model's predicted loss of a drafting step, ``loss_ms``, or — with ``AutoState.learn_costs`` — what probes
        were measured to lose (``AutoState.probe_loss_ms``) where that is more. (On an H100 a DFlash probe cost
        ≈ 4.9 ms against 1.3 for a plain step, the model predicted ≈ 0.6 ms of loss, and rests of ~23 steps made
        the probes most of a first use's 15 % loss: RESULTS.md 19.6.)"""
        st = self.state
        if st.learn_costs and st.probe_loss_ms is not None:
            return max(loss_ms, st.probe_loss_ms)
        return loss_ms

    def free_drafter(self) -> bool:
        """Whether the drafter says its call is free (``free=True``: ``Drafter.free``, the n-gram kinds) or its
        measured call (``AutoState.drafter_ms``, its drafting steps' drafter stages) costs at most
        ``FREE_DRAFTER`` of a 1-row verify: then :meth:`plan` asks for the ceiling without the model's rest test
        (the guard may still rest it). Else False until a drafting step was measured (with a timer). (Measured
        alone, an n-gram lookup of 30–60 µs on a slow host sat at the 60 µs threshold of an H100's 1.2 ms step:
        one slow lookup made it a drafter whose call costs, the model's rests took over and grew to 512 steps —
        n-gram auto 1.00–1.12 × plain on the bake-off's mixed set where n_max 7 gave 1.16–1.21, RESULTS.md 19.9.)"""
        if self.free:
            return True
        st = self.state
        return st.drafter_ms is not None and st.drafter_ms <= FREE_DRAFTER * self._v(1.0)

    def dormant(self) -> bool:
        """Whether this step (a rest, planned by :meth:`plan`) is deep inside its rest: at least
        ``DORMANT_WINDOW`` resting steps follow it before the probe, so the drafter need not see its rows."""
        st = self.state
        return st.dormant and self._prev == "rest" and st.rest_left >= DORMANT_WINDOW

    def draw_in_graph(self, attached: bool, room: int) -> bool:
        """Whether this dormant step (:meth:`dormant`, or the loop's dormant last step) draws its token in the
        target's graph (``AutoState.draw_in_graph_when_dormant``): once a rest attached its chain
        (``attached``) for the rest of its dormant steps, before that where ``IN_GRAPH_MIN_STEPS`` dormant
        steps lie ahead in this generation (``room``: the steps it may still take at most) — the switches' cost."""
        st = self.state
        ahead = min(st.rest_left - DORMANT_WINDOW, room)
        return st.draw_in_graph_when_dormant and (attached or ahead >= IN_GRAPH_MIN_STEPS)

    def dormant_prefill(self) -> bool:
        """Whether the prompt's rows may skip the drafter too: the last generation's rest goes on for at
        least ``DORMANT_WINDOW`` more steps (``AutoState.rest_left``), so the probe drafts from generated
        rows only."""
        st = self.state
        return st.dormant and st.rest and st.rest_left >= DORMANT_WINDOW

    def trim(self, draft):
        """The prefix of ``draft`` worth verifying (a :class:`~pyllama_spec.Draft`, never longer)."""
        if not self._planned:  # (used without plan(): each trim begins a step)
            now = self.clock()
            self._learn(now)
            self._t, self._prev, self._n_steps, self._why = now, "draft", self.stats.n_steps, "trim"
        self._planned = False
        n = 0
        if draft.tokens:
            if self.state.rule == "adaedl":
                n = self.adaedl_length(draft)
            else:
                n = self.best_length(self.survival(draft), self._prev_rows)
        self._rows = n + 1
        self._conf = None if draft.confidence is None else np.clip(np.asarray(draft.confidence, float)[:n], 0, 1)
        return draft if n == len(draft.tokens) else draft.prefix(n)


__all__ = ["VerifyCost", "StepCosts", "Acceptance", "Measured", "CostModel", "fit_costs", "measure_verify_ms",
           "tree_calibration", "tree_tau_from_mass", "expected_tree_tau", "fit_tree_row_ms",
           "AutoDraftLength", "AutoState", "AUTO_RULES", "DRAFT_STAGES", "DRAFTER_STAGES", "VERIFY_STAGES",
           "adaedl_lower_bound", "rest_length", "DORMANT_WINDOW", "GUARD_STEPS", "GUARD_MARGIN", "GUARD_WINDOW",
           "GUARD_REFRESH", "GUARD_MEASURE", "GUARD_MIN_STEPS", "REST_BOOK_EVERY", "PROBE_AFTERMATH"]
