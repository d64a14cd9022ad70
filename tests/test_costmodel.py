"""The cost model (speculative/costmodel.py): exact on synthetic measurements made from known
costs, τ predicted from the measured acceptance of a synthetic drafter with a known error rate,
and the per-step choice of n_max="auto" (lossless, never longer than the ceiling)."""
import numpy as np
import pytest

from pyllama_spec.speculative.costmodel import (
    Acceptance,
    AutoDraftLength,
    CostModel,
    Measured,
    VerifyCost,
    fit_costs,
    start_counts,
)
from pyllama_spec.speculative.drafters import Draft, Drafter
from pyllama_spec.speculative.stats import SpecStats

from .conftest import EXACT, assert_same_tokens

# a known machine: V(R) = 2 + 0.5 R, D(d) = 1 + 0.2 d, W(τ) = 0.3 + 0.1 τ (ms); survival 0.8^(i+1)
V = lambda r: 2.0 + 0.5 * r  # noqa: E731
D = lambda d: 1.0 + 0.2 * d  # noqa: E731
W = lambda t: 0.3 + 0.1 * t  # noqa: E731
STEPS = 100_000


def synthetic(n: int) -> Measured:
    acc = [round(STEPS * 0.8 ** (i + 1)) for i in range(n)]
    tau = 1 + sum(acc) / STEPS
    step_ms = V(n + 1) + D(n) + W(tau)
    return Measured(n_max=n, n_steps=STEPS, n_generated=STEPS + sum(acc), n_drafted=STEPS * n,
                    generation_ms=STEPS * step_ms, accepted_at=acc, drafted_at=[STEPS] * n,
                    stage_ms={"verify": STEPS * V(n + 1), "draft": STEPS * D(n) * 0.75,
                              "draft_sample": STEPS * D(n) * 0.25, "accept": STEPS * W(tau) / 2,
                              "other": STEPS * W(tau) / 2})


def plain_synthetic() -> Measured:
    ms = V(1) + W(1.0) - 0.1  # plain has no drafter and no injection
    return Measured(0, STEPS, STEPS, 0, STEPS * ms, [], [], {"verify": STEPS * V(1), "other": STEPS * (ms - V(1))})


def test_fit_recovers_known_costs_and_predicts_exactly():
    pts = [synthetic(n) for n in (1, 2, 4, 8)]
    plain = plain_synthetic()
    model = CostModel.fit(pts, plain)
    c = model.costs
    assert c.draft_call_ms == pytest.approx(1.0, abs=1e-6) and c.draft_token_ms == pytest.approx(0.2, abs=1e-6)
    assert c.other_step_ms == pytest.approx(0.3, abs=1e-6) and c.other_token_ms == pytest.approx(0.1, abs=1e-6)
    for n in (2, 3, 5, 8):  # V is fitted through the measured rows; linear between them
        assert c.verify(n + 0.5) == pytest.approx(V(n + 0.5), abs=1e-9)
    for p in pts:
        assert model.tok_s(p.n_max) == pytest.approx(p.tok_s, rel=1e-9)
        assert model.acceptance.tau(p.n_max) == pytest.approx(p.tau, rel=1e-9)
    # n_max never measured: the closed form with the same survival
    for n in (3, 5, 6, 7):
        tau = 1 + sum(round(STEPS * 0.8 ** (i + 1)) for i in range(n)) / STEPS
        assert model.tok_s(n) == pytest.approx(1e3 * tau / (V(n + 1) + D(n) + W(tau)), rel=1e-9)
    def tok_s(n):
        return 1e3 * model.acceptance.tau(n) / (V(n + 1) + D(n) + W(model.acceptance.tau(n)))
    best = max(range(1, 9), key=tok_s)
    assert model.best_n_max() == best
    t1 = plain.generation_ms / plain.n_generated
    assert model.break_even_tau(4) == pytest.approx((V(5) + D(4) + W(model.acceptance.tau(4))) / t1, rel=1e-9)
    assert model.break_even_tau(4) > 1.0
    d = model.as_dict()
    assert [r["n_max"] for r in d["predicted"]] == list(range(1, 9)) and d["best_n_max"] == best


def test_held_out_points_are_predicted():
    pts = [synthetic(n) for n in (1, 2, 4, 8)]
    for i, p in enumerate(pts[:-1]):
        others = pts[:i] + pts[i + 1:]
        assert CostModel.fit(others, plain_synthetic()).tok_s(p.n_max) == pytest.approx(p.tok_s, rel=1e-6)


def test_acceptance_pools_positions_over_runs():
    a = Measured(2, 10, 0, 20, 1.0, [6, 3], [10, 10], {})
    b = Measured(4, 30, 0, 90, 1.0, [12, 6, 3, 1], [30, 30, 20, 10], {})
    acc = Acceptance.pooled([a, b])
    assert acc.survival == pytest.approx([18 / 40, 9 / 40, 3 / 30, 1 / 30])
    assert acc.drafted == pytest.approx([1.0, 1.0, 20 / 30, 10 / 30])
    assert acc.steps == [40, 40, 30, 30]
    assert acc.tau(2) == pytest.approx(1 + 27 / 40) and acc.mean_draft(3) == pytest.approx(2 + 2 / 3)
    with pytest.raises(ValueError, match="up to n_max=4"):
        acc.tau(5)


def test_start_counts_split_the_steps_by_how_they_began():
    """A step right after one that took its whole (non-empty) draft is an "F" start; the others "R"."""
    c = start_counts([[(3, 3), (3, 1), (3, 3), (3, 3), (3, 0)], [(0, 0), (2, 2), (3, 0)]], 3)
    # generation 1: R (whole), F, R (whole), F (whole), F; generation 2: R (empty: not whole), R (a short whole
    # draft), F
    assert c["R"] == [4, [3, 3, 2], [3, 3, 2], [0, 1, 2]]
    assert c["F"] == [4, [2, 1, 1], [4, 4, 4], [0, 0, 1]]


def _accepted(rng, d, p):
    """Draft tokens of a ``d``-token draft accepted when each is taken with probability ``p`` (up to the first miss)."""
    a = 0
    while a < d and rng.random() < p:
        a += 1
    return a


def _from_steps(seq, n):
    """A :class:`Measured` point of one generation's ``(drafted, accepted)`` steps at n_max = n, with its start
    counts."""
    c = start_counts([seq], n)
    return Measured(n_max=n, n_steps=len(seq), n_generated=len(seq) + sum(a for _, a in seq),
                    n_drafted=sum(d for d, _ in seq), generation_ms=1.0,
                    accepted_at=[c["R"][1][i] + c["F"][1][i] for i in range(n)],
                    drafted_at=[c["R"][2][i] + c["F"][2][i] for i in range(n)], stage_ms={}, start=c)


def _two_state_points(rng, n_values, p_r=0.45, p_f=0.8, steps=20000):
    """Measured points of a drafter whose steps accept each next token with probability ``p_r`` after a partly
    rejected draft and ``p_f`` right after a whole one (easy stretches run on): its first tokens' acceptance at
    n_max = n depends on how often steps begin after a whole draft, which falls with n."""
    pts, taus = [], {}
    for n in n_values:
        seq, whole = [], False
        for _ in range(steps):
            a = _accepted(rng, n, p_f if whole else p_r)
            seq.append((n, a))
            whole = a == n
        pts.append(_from_steps(seq, n))
        taus[n] = 1.0 + sum(a for _, a in seq) / steps
    return pts, taus


def test_two_start_states_predict_tau_where_pooling_cannot():
    """Pooled per-position survival takes position i's rate over every n_max's steps, but steps of a short n_max
    more often begin right after a whole draft (higher acceptance): pooled, τ(15) is overrated by > 5 %. The two
    start states with their stationary mix predict every n_max's τ within 2 %, and the mix is the measured one."""
    rng = np.random.default_rng(0)
    pts, taus = _two_state_points(rng, [1, 2, 3, 4, 7, 15])
    acc = Acceptance.pooled(pts)
    assert set(acc.by_start) == {"R", "F"}
    for n, tau in taus.items():
        assert acc.tau(n) == pytest.approx(tau, rel=0.02), n
        assert acc.mean_draft(n) == pytest.approx(n, rel=1e-9)
        p = next(p for p in pts if p.n_max == n)
        assert acc.start_mix(n)[1] == pytest.approx(p.start["F"][0] / p.n_steps, abs=0.02)
    plain = Acceptance.pooled([Measured(**{**p.__dict__, "start": None}) for p in pts])
    assert not plain.by_start and plain.tau(15) > 1.05 * taus[15]
    assert Acceptance.pooled(pts[:1] + [Measured(**{**pts[1].__dict__, "start": None})]).by_start == {}


def test_start_states_of_a_lookup_whose_short_drafts_are_surer():
    """An n-gram-like drafter: each step finds nothing (an empty draft) a third of the time, else a match of 1 to 8
    tokens and drafts its first n_max, and a short match is surer (a 1-token match is taken 90 % of the time, a
    longer one's tokens at 0.6 each after a whole draft, 0.35 otherwise): the whole drafts that decide the start
    states are counted by length, not read off the survival curves (which would credit a 1-token draft with a long
    one's rate), so τ, d(n) and the share of F starts hold within 3 %."""
    rng = np.random.default_rng(1)
    pts, taus, drafted, share = [], {}, {}, {}
    for n in (1, 2, 4, 8):
        seq, whole = [], False
        for _ in range(20000):
            if rng.random() < 1 / 3:
                seq.append((0, 0))
                whole = False
                continue
            m = int(rng.integers(1, 9))  # the match's length, whatever n_max is; the draft is its first n
            d = min(m, n)
            a = _accepted(rng, d, 0.9 if m == 1 else (0.6 if whole else 0.35))
            seq.append((d, a))
            whole = a == d
        pts.append(_from_steps(seq, n))
        c = pts[-1].start
        taus[n] = 1.0 + sum(a for _, a in seq) / len(seq)
        drafted[n] = sum(d for d, _ in seq) / len(seq)
        share[n] = c["F"][0] / len(seq)
    acc = Acceptance.pooled(pts)
    for n in taus:
        assert acc.tau(n) == pytest.approx(taus[n], rel=0.03), n
        assert acc.mean_draft(n) == pytest.approx(drafted[n], rel=0.03), n
        assert acc.start_mix(n)[1] == pytest.approx(share[n], abs=0.03), n
        mix = acc.mixed_survival(n)
        assert 1.0 + sum(mix) == pytest.approx(acc.tau(n)) and len(mix) == n


def test_verify_cost_extrapolates_linearly():
    v = VerifyCost([3, 1, 2], [5.0, 1.0, 2.0])  # sorted on construction
    assert v.rows == [1, 2, 3]
    assert v(1.5) == pytest.approx(1.5) and v(5) == pytest.approx(11.0) and v(0) == pytest.approx(0.0)
    assert VerifyCost([2], [4.0])(9) == 4.0
    with pytest.raises(ValueError):
        VerifyCost([1, 2], [1.0])


def test_verify_cost_extends_over_half_a_row_at_least():
    """A bake-off fits V through runs' mean rows: two runs of a lookup drafter 0.003 rows apart made a slope of 84 ms
    a row beyond them, and the prediction at n_max 7 3.6 × too slow (H100, 2026-12-06; RESULTS.md 19.9). The slopes
    beyond the points now span ≥ EXTEND_SPAN rows, and never fall above the last point."""
    rows = [1.0, 1.2625, 1.284542, 1.379167, 1.37931, 1.568027, 1.571429]
    ms = [1.3434, 1.9546, 1.7073, 1.7056, 1.6333, 1.6274, 1.9128]
    v = VerifyCost(rows, ms)
    slope = (1.9128 - 1.3434) / (1.571429 - 1.0)  # from the last point to the nearest ≥ 0.5 rows below it: the first
    assert v(1.62) == pytest.approx(1.9128 + slope * (1.62 - 1.571429))
    assert v(1.4) == pytest.approx(float(np.interp(1.4, rows, ms)))  # (between the points: as before)
    assert VerifyCost([1, 1.1, 1.2], [2.0, 1.0, 0.5])(3) == pytest.approx(0.5)  # (a falling end: flat)
    assert VerifyCost([1, 1.1, 1.2], [2.0, 3.0, 4.0])(0.8) == pytest.approx(0.0)  # (only 0.2 rows: the farthest)


def test_fit_needs_points():
    with pytest.raises(ValueError, match="at least one"):
        fit_costs([])


# -- n_max="auto": the per-step rule ----------------------------------------------------------------------
class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_best_length_is_the_argmax_of_tokens_per_ms():
    stats = SpecStats(n_max=6)
    pol = AutoDraftLength([10, 11, 12, 13, 14, 15, 16], stats)
    p = np.array([0.9, 0.8, 0.5, 0.1, 0.05, 0.01])
    ratios = [(1 + p[:L].sum()) / (10 + L) for L in range(7)]
    assert pol.best_length(p) == int(np.argmax(ratios)) == 3
    steep = AutoDraftLength([10, 20, 30, 40, 50, 60, 70], stats)
    assert steep.best_length(p) == 0  # each row costs as much as a plain step: never worth it
    flat = AutoDraftLength([10] * 7, stats)
    assert flat.best_length(p) == 6  # rows for free: keep every token with p > 0
    assert flat.best_length(np.array([1.0, 1.0, 0.0, 0.0])) == 2  # a sure miss is never sent


def test_budget_drafts_what_the_measured_acceptance_can_pay_for():
    """n_max="auto" asks the drafter for the best length under the acceptance measured so far plus a
    margin: few positions when the first ones are rarely accepted, the ceiling when all are."""
    stats = SpecStats(n_max=15)
    pol = AutoDraftLength([10 + i for i in range(16)], stats)
    for _ in range(40):  # position 1 accepted 1 time in 4, nothing after it
        stats.record(15, 1 if _ % 4 == 0 else 0)
    p = pol.measured_survival(15)
    assert pol.budget(15) == min(15, pol.best_length(p) + 2) <= 3
    assert pol.budget(1) == 1 and pol.budget(0) == 0
    good = SpecStats(n_max=15)
    gpol = AutoDraftLength([10] * 16, good)
    for _ in range(40):
        good.record(15, 15)
    assert gpol.budget(15) == 15


def test_trim_calibrates_confidence_and_learns_step_time():
    stats = SpecStats(n_max=4)
    clock = FakeClock()
    pol = AutoDraftLength([1.0, 1.1, 1.2, 1.3, 1.4], stats, clock=clock)
    d = pol.trim(Draft(tokens=[5, 6, 7, 8], confidence=np.array([0.95, 0.95, 0.95, 0.05])))
    assert d.tokens == [5, 6, 7] and len(d.confidence) == 3
    stats.record(3, 1)  # the loop verified 3, the target accepted 1
    clock.t = 0.005  # 5 ms later; a generation's first step is not booked (one-time costs)
    pol.trim(Draft(tokens=[1], confidence=np.array([0.5])))
    assert pol.state.other_ms is None
    assert pol.state.bin_tried[9] == 2 and pol.state.bin_accepted[9] == 1  # tokens 0 and 1 were tried, 0 accepted
    stats.record(1, 0)
    clock.t = 0.010  # 5 ms later: other costs = 5 − V(2) = 3.9 ms
    pol.trim(Draft(tokens=[1], confidence=np.array([0.5])))
    assert pol.state.other_ms == pytest.approx(3.9)
    assert pol.calibrated([0.95])[0] == pytest.approx((1 + 4 * 0.95) / (2 + 4))


def test_trim_without_confidence_uses_measured_acceptance():
    stats = SpecStats(n_max=3)
    for _ in range(50):
        stats.record(3, 1)  # position 0 always accepted, position 1 never
    pol = AutoDraftLength([1.0, 1.5, 2.0, 2.5], stats)
    assert pol.trim(Draft(tokens=[1, 2, 3])).tokens == [1]


# -- on the tiny fixtures -----------------------------------------------------------------------------------
def greedy_continuation(model, tokens, n):
    """The target's own greedy continuation of ``tokens`` (``n`` tokens), decoded in a context of its
    own with the tiny Generator's batch sizes (prompt chunks of 32, then one token at a time)."""
    from pyllama_spec import Context

    ctx = Context(model, n_ctx=256 * (1 + (len(tokens) + n) // 256), n_batch=64, n_ubatch=32)
    try:
        for i in range(0, len(tokens), 32):
            ctx.decode(list(tokens[i:i + 32]), logits="last")
        out = []
        for _ in range(n):
            out.append(int(np.argmax(ctx.logits()[-1])))
            ctx.decode([out[-1]], logits="last")
        return out
    finally:
        ctx.close()


class NoisyOracle(Drafter):
    """Proposes the target's continuation of what the run has committed; output index j is wrong with
    probability eps (fixed per index, so a step accepts up to the first wrong index: s_i = (1 − eps)^(i+1)).

    The continuation starts as ``reference`` (the plain run's). Where the run's committed tokens part
    from it — on a GPU a near-tie of the tiny random target can flip under the verify batch's shape —
    the oracle continues from the run's own tokens (greedy, in a context of its own), so that it keeps
    proposing the target's continuation and the acceptance it gives does not depend on the backend.
    ``n_resync`` counts those restarts."""
    kind = "noisy-oracle-test"
    n_max_limit = 16
    n_max_default = 6

    def __init__(self, target, reference, n_prompt, eps, seed=0, confident=False):
        super().__init__(target)
        self.ref, self.n_prompt = list(reference), n_prompt
        self.wrong = np.random.default_rng(seed).random(len(reference) + 64) < eps
        self.confident = confident
        self.prompt: list[int] = []
        self.committed: dict[int, int] = {}  # position -> committed token
        self.n_resync = 0

    def begin(self, prompt, n_keep=0):
        self.prompt, self.committed = list(prompt), {}

    def observe(self, tokens, positions, n_commit, timer):
        for t, p in zip(tokens[:n_commit], positions[:n_commit]):
            self.committed[int(p)] = int(t)

    def propose(self, last_token, n_past, n_max, sp, rng, timer):
        start = n_past + 1 - self.n_prompt  # output index of the first draft
        # the run's tokens so far: what begin() got (the prompt but its last token), those committed
        # since, and last_token at position n_past
        seq = self.prompt + [self.committed[q] for q in range(len(self.prompt), n_past)] + [int(last_token)]
        if seq[self.n_prompt:] != self.ref[:start]:
            self.n_resync += 1
            self.ref = seq[self.n_prompt:] + greedy_continuation(self.target.model, seq,
                                                                 max(0, len(self.ref) - start) + n_max)
        idx = range(start, min(start + n_max, len(self.ref)))
        toks = [(self.ref[j] + 1) % 256 if self.wrong[j] else self.ref[j] for j in idx]
        conf = np.array([0.0 if self.wrong[j] else 1.0 for j in idx]) if self.confident else None
        return Draft(tokens=toks, confidence=conf)


PROMPTS = ["def add(a, b):\n    return", "hello there, how are you", "Once upon a time " * 4]


@pytest.fixture(scope="module")
def references(tiny_gen):
    return {p: (tiny_gen.generate(p, max_tokens=160).tokens, len(tiny_gen.tokenize_prompt(p))) for p in PROMPTS}


def _runs(tiny_gen, references, n_max, eps, rest=True, **kw):
    out = []
    for i, p in enumerate(PROMPTS):
        ref, n_prompt = references[p]
        tiny_gen.drafters["oracle"] = NoisyOracle(tiny_gen.ctx, ref, n_prompt, eps, seed=i, **kw)
        tiny_gen.auto_state("oracle").rest = rest
        try:
            r = tiny_gen.generate(p, drafter="oracle", n_max=n_max, max_tokens=160)
        finally:
            del tiny_gen.drafters["oracle"]
        assert_same_tokens(r.tokens, ref)  # lossless whatever the drafter proposes (GPU: conftest)
        out.append(r)
    return out


def test_noisy_oracle_follows_the_run_where_it_parts_from_the_reference(tiny_gen, references):
    """The oracle's claim on every backend: given a reference that is wrong from index 20 on (what a
    flipped near-tie does to the plain run's tokens), it proposes the run's own continuation after the
    first miss, so every later draft is accepted."""
    p = PROMPTS[0]
    ref, n_prompt = references[p]
    bent = ref[:20] + [(t + 7) % 256 for t in ref[20:]]
    oracle = NoisyOracle(tiny_gen.ctx, bent, n_prompt, eps=0.0)
    tiny_gen.drafters["oracle"] = oracle
    try:
        r = tiny_gen.generate(p, drafter="oracle", n_max=6, max_tokens=160)
    finally:
        del tiny_gen.drafters["oracle"]
    assert_same_tokens(r.tokens, ref)
    # one restart where the bent tail begins (on a GPU maybe one more per flipped near-tie), each
    # costing at most the block drafted from the stale continuation
    assert oracle.n_resync >= 1 and (oracle.n_resync == 1 or not EXACT)
    assert r.stats.n_drafted - r.stats.n_accepted <= 6 * oracle.n_resync


def test_tau_predicted_from_a_synthetic_drafter(tiny_gen, references):
    eps = 0.2
    long = Measured.from_results(_runs(tiny_gen, references, 6, eps))
    acc = Acceptance.pooled([long])
    # the measured survival follows the known error rate
    np.testing.assert_allclose(acc.survival, [(1 - eps) ** (i + 1) for i in range(6)], atol=0.08)
    for n in (1, 2, 4):
        short = Measured.from_results(_runs(tiny_gen, references, n, eps))
        assert acc.tau(n) == pytest.approx(short.tau, abs=0.12), n
        assert acc.tau(n) == pytest.approx(sum((1 - eps) ** i for i in range(n + 1)), abs=0.15)


def test_auto_is_lossless_and_cuts_before_sure_misses(tiny_gen, references):
    # never resting: whether resting pays depends on this machine's timings (on a loaded CPU auto rested
    # on every step and drafted nothing, 2 of 5 runs); what this checks is the cut, which does not
    rs = _runs(tiny_gen, references, "auto", 0.25, rest=False, confident=True)
    for r in rs:
        assert r.n_max_auto and r.n_max == 16 and max(r.stats.draft_lengths) <= 16
        assert r.stats.n_drafted > 0 and r.stats.acceptance_rate == 1.0  # confidence 0 = never sent
        assert r.stats.n_steps == len(r.stats.draft_lengths)


@pytest.mark.parametrize("drafter", ["dflash", "ngram"])
def test_auto_matches_plain_decoding(tiny_gen, drafter):
    for p in PROMPTS:
        ref = tiny_gen.generate(p, max_tokens=48)
        r = tiny_gen.generate(p, drafter=drafter, n_max="auto", max_tokens=48)
        assert r.tokens == ref.tokens
        limit = tiny_gen.drafters[drafter].n_max_limit
        assert r.n_max == min(limit, 31) and all(0 <= n <= r.n_max for n in r.stats.draft_lengths)
        assert "auto" in r.report()


def test_dflash_confidence_backend_and_host_agree(tiny_gen):
    from pyllama_spec.speculative.sampling import SamplingParams
    from pyllama_spec.speculative.timing import StageTimer

    d = tiny_gen.drafters["dflash"]
    toks = tiny_gen.tokenize_prompt(PROMPTS[0])
    out = {}
    for backend, want in ((True, True), (False, True), (True, False)):
        d.backend_sampling = backend
        try:
            tiny_gen.generate(prompt_tokens=toks, drafter="dflash", n_max=7, max_tokens=1)  # fills the drafter
            d.rollback(len(toks) - 1)  # back to the prompt: the block goes at position len − 1
            d.want_confidence = want  # (the loop sets it: n_max="auto" reads confidences)
            out[backend, want] = d.propose(toks[-1], len(toks) - 1, 7, SamplingParams(), np.random.default_rng(0),
                                           StageTimer())
        finally:
            d.backend_sampling = True
    a, b = out[True, True], out[False, True]
    # without confidences asked for, the backend draws the argmax alone: the same tokens, no confidence
    assert out[True, False].tokens == a.tokens and out[True, False].confidence is None
    assert a.tokens == b.tokens and len(a.confidence) == len(a.tokens) == 7
    assert np.all((b.confidence > 0) & (b.confidence <= 1))
    # over the 10 best candidates the top probability is at least the full softmax's
    assert np.all(a.confidence >= b.confidence - 1e-5)
    np.testing.assert_allclose(a.confidence, b.confidence, rtol=0.5)


def test_verify_ms_is_measured_once_and_cached(tiny_gen):
    a = tiny_gen.verify_ms(5, drafter="dflash", reps=1)
    assert len(a) == 5 and all(x > 0 for x in a)
    assert tiny_gen.verify_ms(3, drafter="dflash") == a[:3]  # a larger table serves a smaller ask
    with pytest.raises(ValueError, match="unknown drafter 'nope'"):
        tiny_gen.verify_ms(3, drafter="nope")
    assert tiny_gen.resolve_n_max("dflash", "auto") == 7 and tiny_gen.resolve_n_max("dflash") == 7
    assert tiny_gen.resolve_n_max(None, "auto") == 0 and tiny_gen.resolve_n_max("ngram", 3) == 3


def test_verify_ms_interpolates_between_measured_row_counts(tiny_gen):
    # rows 1..8 are measured, then every 2nd up to 16 and every 4th: row 9 sits halfway between 8 and 10,
    # row 17 a quarter of the way from 16 to 20
    v = tiny_gen.verify_ms(20, reps=1)
    assert len(v) == 20 and all(x > 0 for x in v)
    assert v[8] == pytest.approx((v[7] + v[9]) / 2)
    assert v[16] == pytest.approx(0.75 * v[15] + 0.25 * v[19])


# -- token trees: τ from the drafter's probabilities, costs, the budget picked -------------------------------
def test_expected_tree_tau_is_the_tree_rule_in_expectation():
    """Σ_nodes P(path accepted) equals the mean accepted length of the tree rule itself, enumerated over
    every target outcome (each depth's token drawn independently, as the calibration assumes)."""
    import itertools

    from pyllama_spec.speculative.costmodel import expected_tree_tau
    from pyllama_spec.speculative.tree import TreeDraft
    from pyllama_spec.speculative.tree_verify import tree_accept

    # root → a (0), b (1); a → c (2), d (3); c → e (4)   tokens: a=0 b=1 c=2 d=0 e=1
    tree = TreeDraft(tokens=[0, 1, 2, 0, 1], parents=np.array([-1, -1, 0, 0, 2]))
    p_depth = np.array([[0.5, 0.3, 0.2], [0.4, 0.1, 0.5], [0.2, 0.7, 0.1]])  # the target's token per depth
    node_prob = [p_depth[d - 1, t] for d, t in zip(tree.depths, tree.tokens)]
    # by hand: 1 + (.5 + .3) + .5·(.5 + .4) + .5·.5·.7
    assert expected_tree_tau(tree.parents, node_prob) == pytest.approx(1 + 0.8 + 0.45 + 0.175)
    mean = 0.0
    for xs in itertools.product(range(3), repeat=3):  # the target's token at depths 1, 2, 3
        rows = [xs[0]] + [xs[d] if d < 3 else 0 for d in tree.depths]  # row i + 1 follows node i (depth d → d + 1)
        path, _ = tree_accept(rows, tree)
        mean += np.prod([p_depth[d, x] for d, x in enumerate(xs)]) * (1 + len(path))
    assert mean == pytest.approx(1 + 0.8 + 0.45 + 0.175)
    with pytest.raises(ValueError, match="earlier node"):
        expected_tree_tau([1, -1], [0.5, 0.5])


def test_tree_tau_from_mass_by_hand():
    """Two tree steps recorded through SpecStats.record_tree, calibrated by a chain's survival: the
    numbers of the formula worked out by hand."""
    from pyllama_spec.speculative.costmodel import tree_calibration, tree_tau_from_mass

    st = SpecStats(n_max=2)
    # step 1: nodes (best first) at depths 1, 2, 1 with path probabilities .6, .3, .2; the chain's path .6, .3
    st.record_tree([0.6, 0.3, 0.2], [1, 2, 1], [0.6, 0.3])
    other = SpecStats(n_max=2)
    other.record_tree([0.8, 0.1, 0.4], [1, 1, 2], [0.8, 0.4])
    st.merge(other)
    assert st.n_tree_steps == 2 and st.n_tree_nodes == 6
    assert np.asarray(st.tree_mass) == pytest.approx(np.array([[1.4, 0.0], [0.1, 0.3], [0.2, 0.4]]))
    assert st.spine_mass == pytest.approx([1.4, 0.7])
    survival = [0.7, 0.21]  # the chain's: K_1 = .7 / (1.4 / 2) = 1, K_2 = .21 / (.7 / 2) = .6
    assert tree_calibration(st.spine_mass, 2, survival) == pytest.approx([1.0, 0.6])
    taus = tree_tau_from_mass(st.tree_mass, st.spine_mass, 2, survival)
    # τ(1) = 1 + 1.4/2; τ(2) = τ(1) + (.1 + .6·.3)/2; τ(3) = τ(2) + (.2 + .6·.4)/2
    assert taus == pytest.approx([1.7, 1.84, 2.06])
    # a tree that is the chain's own path is predicted at exactly the chain's τ
    assert tree_tau_from_mass([[1.4, 0.0], [0.0, 0.7]], [1.4, 0.7], 2, survival)[-1] == pytest.approx(1 + 0.7 + 0.21)
    # deeper than the chain's data: the deepest factor carries on
    assert tree_calibration([1.0, 0.5, 0.2], 1, [0.5, 0.2]) == pytest.approx([0.5, 0.4, 0.4])
    with pytest.raises(ValueError, match="survival"):
        tree_tau_from_mass(st.tree_mass, st.spine_mass, 2, [])
    with pytest.raises(ValueError, match="same runs"):
        tree_tau_from_mass([[0.1, 0.2, 0.3]], [0.1, 0.2], 1, survival)


def test_tree_records_its_path_and_chain_probabilities():
    from pyllama_spec.speculative.tree import build_tree

    lp = np.log(np.array([[0.6, 0.25], [0.5, 0.4]]))
    tree = build_tree(np.array([[10, 11], [20, 21]]), lp, budget=3)
    # best first: 10 (.6), then 10→20 (.6·.5 = .3), then 11 (.25)
    assert tree.tokens == [10, 20, 11] and tree.parents.tolist() == [-1, 0, -1]
    assert np.exp(tree.path_logp()) == pytest.approx([0.6, 0.3, 0.25])
    assert np.exp(tree.top_logp) == pytest.approx([0.6, 0.5])
    assert build_tree(np.array([[10, 11], [20, 21]]), lp, budget=3).tokens[:2] == build_tree(
        np.array([[10, 11], [20, 21]]), lp, budget=2).tokens  # the first b nodes are the tree of budget b


def test_tree_costs_and_the_budget_picked_by_hand():
    model = CostModel.fit([synthetic(n) for n in (1, 2, 4, 8)], plain_synthetic())
    # a tree 4 deep: one drafter call as the chain's at n_max 4 (d = 4), V of budget + 1 rows
    assert model.tree_ms_per_step(8, 2.5, 4) == pytest.approx(V(9) + D(4) + W(2.5))
    assert model.tree_ms_per_step(8, 2.5, 4, nodes=6) == pytest.approx(V(7) + D(4) + W(2.5))
    assert model.tree_tok_s(4, 2.3, 4) == pytest.approx(2300 / (V(5) + D(4) + W(2.3)))
    t1 = plain_synthetic().generation_ms / STEPS
    # break-even: the step costed at its τ, divided by plain decoding's ms per token (as for chains)
    assert model.tree_break_even_tau(8, 2.5, 4) == pytest.approx((V(9) + D(4) + W(2.5)) / t1)
    assert model.tree_break_even_tau(8, 2.5, 4, nodes=6) == pytest.approx((V(7) + D(4) + W(2.5)) / t1)
    # 8 nodes commit more per step (2.5 vs 2.3) but 4 are faster: 2300 / 6.83 ms > 2500 / 8.85 ms
    taus = {4: 2.3, 8: 2.5}
    assert model.best_tree_budget(taus, 4) == 4
    assert model.best_tree_budget({4: 2.3, 8: 3.0}, 4) == 8  # 3000 / 8.9 ms > 336.7
    preds = model.tree_predictions(taus, 4)
    assert [p["tree"] for p in preds] == [4, 8] and preds[1]["tok_s"] == pytest.approx(2500 / (V(9) + D(4) + W(2.5)))
    # a tree's drafter call costs more than the chain's per depth row: fitted through 0 from tree points
    from pyllama_spec.speculative.costmodel import fit_tree_row_ms

    # depth 2: D(2) + 1.0 ms, depth 4: D(4) + 1.8 ms → (2·1 + 4·1.8) / (4 + 16) = .46 ms per row
    assert fit_tree_row_ms(model, [(2, D(2) + 1.0), (4, D(4) + 1.8)]) == pytest.approx(0.46)
    assert fit_tree_row_ms(model, [(2, D(2) - 1.0)]) == 0.0 and fit_tree_row_ms(model, []) == 0.0
    model.tree_row_ms = 0.46
    assert model.tree_ms_per_step(8, 2.5, 4) == pytest.approx(V(9) + D(4) + 0.46 * 4 + W(2.5))
    with pytest.raises(ValueError, match="at least one"):
        model.best_tree_budget({}, 4)
    with pytest.raises(ValueError, match="budget"):
        model.tree_ms_per_step(0, 2.0, 4)
