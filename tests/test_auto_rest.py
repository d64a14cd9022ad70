"""n_max="auto" that never loses to plain decoding (speculative/costmodel.py, "Resting"): the rest
rule and its back-off, AdaEDL's stop rule, with numbers; on the tiny fixtures, a cost model where no
draft length pays makes no drafter calls but its probes, and the output is plain decoding's."""
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec.speculative.costmodel import (
    DORMANT_WINDOW,
    GUARD_MIN_STEPS,
    GUARD_STEPS,
    PROBE_AFTERMATH,
    REST_BOOK_EVERY,
    AutoDraftLength,
    AutoState,
    adaedl_lower_bound,
    rest_length,
)
from pyllama_spec.speculative.drafters import Draft
from pyllama_spec.speculative.stats import SpecStats

from .conftest import EXACT


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_rest_length_bounds_a_probes_loss_then_doubles():
    # a probe loses 7 ms where plain steps take 10 ms: 2 % of 35 plain steps
    assert rest_length(7.0, 10.0, 0) == 35
    assert rest_length(0.1, 10.0, 0) == 4  # never fewer than 4 steps
    assert rest_length(7.0, 10.0, 35) == 70  # the probe failed: twice the last rest
    # ... but never shorter than a probe's loss asks for: a first rest sized by a loss predicted too low (on an
    # H100 doubling from 9 steps probed every 9, 19, 39 steps at ~7 ms a probe; RESULTS.md 19.17)
    assert rest_length(7.0, 10.0, 10) == 35
    assert rest_length(7.0, 10.0, 400) == 512
    assert rest_length(1e6, 10.0, 0, longest=16) == 16


def test_adaedl_lower_bound_is_one_minus_root_of_scaled_entropy():
    np.testing.assert_allclose(adaedl_lower_bound([0.0, 0.5, 2.0, 8.0]), [1.0, 0.5, 0.0, 0.0])
    np.testing.assert_allclose(adaedl_lower_bound([0.08], gamma=2.0), [0.6])


def _thirty_percent(n_max=3, steps=1000):
    """Statistics where position 0 is accepted 30 % of the time and nothing after it."""
    stats = SpecStats(n_max=n_max)
    for i in range(steps):
        stats.record(n_max, 1 if i % 10 < 3 else 0)
    return stats


def test_drafting_pays_compares_tau_with_the_break_even_of_measured_costs():
    stats = _thirty_percent()
    # p_0 = (300 + 4·0.6) / 1004, p_1 = 4·p_0² / 1004 (the guess continues the curve); V = 10, 12, 14, 16 ms
    p0 = 302.4 / 1004
    p1 = 4 * p0 * p0 / 1004
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=AutoState(other_ms=5.0, rest_ms=1.0))
    np.testing.assert_allclose(pol.measured_survival(3)[:2], [p0, p1])
    # best L = 1: τ = 1 + p0 for 5 + V(2) = 17 ms, against plain 1 + V(1) = 11 ms per token
    pays, loss = pol.drafting_pays(3)
    assert not pays and loss == pytest.approx(17 - 11 * (1 + p0))
    cheap = AutoDraftLength([10, 12, 14, 16], stats, state=AutoState(other_ms=0.5, rest_ms=0.0))
    assert cheap.drafting_pays(3) == (True, 0.0)  # 12.5 ms for 1.30 tokens beats 10 ms for 1
    # before the first rest, a plain step's other costs are the drafting step's less its drafter stages
    est = AutoDraftLength([10, 12, 14, 16], stats, state=AutoState(other_ms=5.0, drafter_ms=3.0))
    assert est.plain_other_ms() == pytest.approx(2.0)
    # unmeasured costs: draft, to measure them
    assert AutoDraftLength([10, 12], stats).drafting_pays(1) == (True, 0.0)


def test_plan_rests_probes_and_backs_off():
    stats = _thirty_percent()
    clock = FakeClock()
    st = AutoState(other_ms=5.0, rest_ms=1.0)
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
    loss = pol.drafting_pays(3)[1]
    first = rest_length(loss, 11.0, 0)
    assert first == 13
    # the probe lost 17 ms less the 1 token × the 11 ms plain step its rest measured: 6 ms, so the next rest is
    # not twice 13 but what keeps 6 ms within 2 % of it
    second = rest_length(6.0, 11.0, first)
    assert second == 28 > 2 * first
    asks = []
    for _ in range(first + 1 + second + 1):
        ask = pol.plan(3)
        asks.append(ask)
        if ask:
            d = pol.trim(Draft(tokens=[1, 2, 3], confidence=np.array([0.3, 0.01, 0.01])))
            stats.record(len(d.tokens), 0)
            clock.t += 0.017
        else:
            stats.record(0, 0)
            clock.t += 0.011  # V(1) + 1 ms
    probes = [i for i, a in enumerate(asks) if a]
    # 13 resting steps, a probe, 28 resting steps (the probe failed: at least twice as long, and long enough for
    # what it lost), a probe; a probe drafts one token, the cheapest step that measures the first position
    assert probes == [first, first + 1 + second] and {asks[i] for i in probes} == {1}
    assert pol.n_probes == 2 and pol.n_rest == len(asks) - 2
    assert st.rest_ms == pytest.approx(1.0) and st.other_ms == 5.0  # a probe's time is not a drafting step's
    assert st.gap == second
    # each probe lost its 17 ms less the 1 token × the 11 ms plain step its rest measured
    assert st.probe_loss_ms == pytest.approx(6.0)


def test_the_steps_right_after_a_probe_count_as_its_loss_not_as_plain_steps():
    """On a GPU the two resting steps after a probe pay its shapes back (the target's graph rebuilt for one row):
    their time beyond a plain step is the probe's loss (PROBE_AFTERMATH), and the plain step the guard compares
    with does not take it in."""
    stats = _thirty_percent()
    clock = FakeClock()
    st = AutoState(other_ms=5.0, rest_ms=1.0, rest_left=3, gap=4, trace=[])
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
    walls = []
    for i in range(12):
        ask = pol.plan(3)
        if ask:
            d = pol.trim(Draft(tokens=[1, 2, 3], confidence=np.array([0.3, 0.01, 0.01])))
            stats.record(len(d.tokens), 0)
            w = 0.017
        else:
            stats.record(0, 0)
            # the two steps after the probe at step 3 take 3 and 2 ms more than a plain step
            w = {4: 0.014, 5: 0.013}.get(i, 0.011)
        walls.append(w)
        clock.t += w
    assert [k for k, *_ in st.trace[:6]] == ["rest", "rest", "rest", "probe", "rest", "rest"]
    assert PROBE_AFTERMATH == 2
    # 17 − 11 for the probe itself, then + 3 + 2: the first sample of the mean, weight 1
    assert st.probe_loss_ms == pytest.approx(6.0 + 3.0 + 2.0)
    assert st.plain_step_ms == pytest.approx(11.0)  # the 14 and 13 ms steps are not plain steps
    # the rest after the probe was sized by the probe alone (its aftermath comes later): 6 ms within 2 % of 11 ms
    # steps; the next one takes all 11 ms in (50 steps) and still doubles: 56
    assert st.gap == rest_length(6.0, 11.0, 4) == 28
    assert rest_length(pol.rest_loss(0.0), pol.plain_step(), 28) == 56


def test_a_rest_is_sized_by_what_probes_really_lost():
    """The model predicts a drafting step loses ~1.9 ms (13 resting steps keep a probe's loss at 2 % of the
    rest), but probes were measured to lose 7 ms each (on a GPU: graphs rebuilt for the probe's 2 rows and the
    rest's 1, the deferred rows injected; RESULTS.md 19.6): the rest is sized by the 7 ms — unless
    ``learn_costs`` is off."""
    for learn, loss in ((True, 7.0), (False, None)):
        st = AutoState(other_ms=5.0, rest_ms=1.0, probe_loss_ms=7.0, learn_costs=learn)
        pol = AutoDraftLength([10, 12, 14, 16], _thirty_percent(), state=st)
        model_loss = pol.drafting_pays(3)[1]
        assert model_loss < 7.0
        assert pol.rest_loss(model_loss) == (loss if loss is not None else model_loss)
        assert pol.plan(3) == 0
        assert st.gap == rest_length(loss if loss is not None else model_loss, 11.0, 0) == st.rest_left + 1
    assert st.gap == 13 and rest_length(7.0, 11.0, 0) == 32


def test_plan_drafts_while_it_pays_and_never_rests_with_rest_off():
    stats = _thirty_percent()
    pol = AutoDraftLength([10, 10.1, 10.2, 10.3], stats, state=AutoState(other_ms=0.5, rest_ms=0.0))
    assert pol.plan(3) == min(3, pol.best_length(pol.measured_survival(3)) + 2)
    off = AutoDraftLength([10, 12, 14, 16], stats, state=AutoState(other_ms=5.0, rest_ms=1.0, rest=False))
    assert all(off.plan(3) > 0 for _ in range(5))
    assert off.plan(0) == 0


def test_the_next_generation_keeps_resting_and_learns_from_the_last():
    st = AutoState(other_ms=5.0, rest_ms=1.0)
    first = _thirty_percent()
    pol = AutoDraftLength([10, 12, 14, 16], first, state=st)
    assert pol.plan(3) == 0 and st.rest_left == 12
    second = SpecStats(n_max=3)
    nxt = AutoDraftLength([10, 12, 14, 16], second, state=st)
    # the first generation's acceptance is now the prior of the second's
    assert list(st.pos_tried) == [1000, 1000, 1000] and list(st.pos_accepted) == [300, 0, 0]
    np.testing.assert_allclose(nxt.measured_survival(1), [302.4 / 1004])
    assert nxt.plan(3) == 0 and st.rest_left == 11
    st.rest_left = 0
    third = AutoDraftLength([10, 12, 14, 16], SpecStats(n_max=3), state=st)
    assert third.plan(3) > 0 and third.n_probes == 1  # a rest that ended with the last generation: probe


def test_adaedl_stops_at_the_first_row_whose_bound_does_not_pay():
    stats = SpecStats(n_max=4)
    ent = np.array([0.0, 0.0, 0.5, 8.0])  # bounds 1, 1, 0.5, 0
    flat = AutoDraftLength([10] * 5, stats, state=AutoState(rule="adaedl"))
    assert flat.adaedl_length(Draft(tokens=[1, 2, 3, 4], entropy=ent)) == 3  # free rows: up to the sure miss
    steep = AutoDraftLength([10, 20, 30, 40, 50], stats, state=AutoState(rule="adaedl", other_ms=0.0))
    # each row costs a plain step: only sure rows pay
    assert steep.adaedl_length(Draft(tokens=[1, 2, 3, 4], entropy=ent)) == 2
    d = steep.trim(Draft(tokens=[1, 2, 3, 4], confidence=np.ones(4), entropy=ent))
    assert d.tokens == [1, 2] and list(d.entropy) == [0.0, 0.0]
    with pytest.raises(ValueError, match="rule must be one of"):
        AutoState(rule="nope")


# -- on the tiny fixtures -----------------------------------------------------------------------------------
PROMPTS = ["def add(a, b):\n    return", "Once upon a time " * 4]


def _auto_with_probes(gen, prompt, deferred=True, name="dflash", max_rest=8, max_tokens=48):
    """An n_max="auto" generation whose cost model says a drafting step costs 1000 s (nothing pays),
    resting at most ``max_rest`` steps: returns the result and each drafter call's (n_past, draft tokens)."""
    d = gen.drafters[name]
    calls = []
    orig = d.propose

    def counting(last, n_past, n_max, sp, rng, timer):
        out = orig(last, n_past, n_max, sp, rng, timer)
        calls.append((n_past, list(out.tokens)))
        return out

    d.propose = counting
    if not deferred:
        d.observe_deferred = d.observe  # inject every resting step's rows at once
    gen._auto_state.pop(name, None)
    st = gen.auto_state(name)
    st.other_ms, st.rest_ms, st.max_rest = 1e6, 0.0, max_rest
    try:
        r = gen.generate(prompt, drafter=name, n_max="auto", max_tokens=max_tokens, reuse_prefix=False)
    finally:
        del d.propose
        if not deferred:
            del d.observe_deferred
        gen._auto_state.pop(name, None)
    return r, calls


@pytest.mark.parametrize("prompt", PROMPTS)
def test_auto_rests_where_nothing_pays_and_equals_plain(tiny_gen, prompt):
    ref = tiny_gen.generate(prompt, max_tokens=48, reuse_prefix=False)
    r, calls = _auto_with_probes(tiny_gen, prompt)
    assert r.tokens == ref.tokens  # lossless
    # 8 resting steps (one token each) then one probe, over and over: the drafter ran only to probe
    steps = r.stats.draft_lengths
    assert 3 <= len(calls) <= len(r.tokens) // 8
    probes = [i for i, n in enumerate(steps) if n > 0]
    assert len(probes) <= len(calls) and all(steps[i] == 0 for i in range(8))
    assert [n for n, _ in calls][0] == len(tiny_gen.tokenize_prompt(prompt)) - 1 + 8


def test_deferred_injection_gives_the_drafts_of_injection_every_step(tiny_gen):
    """A probe after a rest drafts from every committed row's features: injecting the rested rows in
    one decode at the probe gives the same drafts as injecting each step's row as it came."""
    r1, deferred = _auto_with_probes(tiny_gen, PROMPTS[0])
    r2, each = _auto_with_probes(tiny_gen, PROMPTS[0], deferred=False)
    assert r1.tokens == r2.tokens and [n for n, _ in deferred] == [n for n, _ in each]
    same = [a == b for (_, a), (_, b) in zip(deferred, each)]
    assert all(same) if EXACT else np.mean(same) >= 0.5


@pytest.mark.parametrize("max_rest", [3, 12])
def test_fused_injection_takes_the_deferred_rows_too(tiny, max_rest):
    """With fused injection (patch 0006) a short rest's rows go into the probe's own draft decode and a
    longer one's (more than a block) into a decode before it: the drafts are those of the two-decode
    path either way."""
    from pyllama_spec.speculative.drafters.dflash import DFlashDrafter

    gen = ps.Generator(tiny["target"], n_ctx=1024, n_batch=64, n_ubatch=32)
    try:
        gen.add_drafter("sep", DFlashDrafter(gen.ctx, tiny["dflash"], fused_inject=False))
        gen.add_drafter("fused", DFlashDrafter(gen.ctx, tiny["dflash"], fused_inject=True))
        ref = gen.generate(PROMPTS[0], max_tokens=48, reuse_prefix=False)
        r1, sep = _auto_with_probes(gen, PROMPTS[0], name="sep", max_rest=max_rest)
        r2, fused = _auto_with_probes(gen, PROMPTS[0], name="fused", max_rest=max_rest)
    finally:
        gen.close()
    assert r1.tokens == r2.tokens == ref.tokens and len(sep) >= 2
    same = [a == b for a, b in zip(sep, fused)]
    assert len(sep) == len(fused) and (all(same) if EXACT else np.mean(same) >= 0.5)


class _Stage:
    def __init__(self):
        self.seconds = 0.0


class FakeTimer:
    """The stages AutoDraftLength reads (StageTimer.stages[name].seconds)."""

    def __init__(self, sync: bool = True):
        self.stages = {k: _Stage() for k in ("draft", "draft_sample", "inject", "verify")}
        self.sync = sync


def test_costs_are_booked_against_the_verifies_this_run_measured():
    """The verify table was measured in another moment of a loaded machine (V(1) 30, V(2) 31 ms) while
    this run verifies 1 row in 20 ms and 2 in 27, a drafting step also calling the drafter for 10 ms;
    position 0 is accepted half the time. Drafting costs 38 ms for 1.5 tokens against 21 ms for 1: it
    does not pay. Booked as wall − table (the 2026-12-02 CPU bake-off), a drafting step's other
    costs shrank (38 − 31), a resting step's vanished (21 − 30 < 0), and drafting looked as if it
    paid (7 + 31 ≤ 1.5 · 30); the table scaled by one factor keeps its flat V(2)/V(1) and pays too."""
    stats = SpecStats(n_max=1)
    for i in range(400):
        stats.record(1, i % 2)
    clock, timer = FakeClock(), FakeTimer()
    st = AutoState()
    pol = AutoDraftLength([30.0, 31.0], stats, state=st, clock=clock, timer=timer)
    for i in range(30):  # drafting steps: the drafter 10 ms, a 2-row verify 27 ms, 1 ms of glue
        assert pol.plan(1) == 1 or i > 1  # (unmeasured costs: it drafts, to measure them)
        pol.trim(Draft(tokens=[5], confidence=np.array([0.5])))
        timer.stages["draft"].seconds += 0.010
        timer.stages["verify"].seconds += 0.027
        clock.t += 0.038
    st.rest_left = 0
    assert st.other_ms == pytest.approx(11.0, abs=0.05)  # the drafter and the glue, not 38 − 31
    assert st.verify_scale == pytest.approx(27 / 31, rel=0.02) and list(st.verify_seen) == [0.0, pytest.approx(27.0)]
    # what a resting step costs: verify 20 ms (= 30 × the scale 2/3 of 1-row steps) and 1 ms
    st2 = AutoState(other_ms=st.other_ms)
    rest = AutoDraftLength([30.0, 31.0], stats, state=st2, clock=clock, timer=timer)
    for _ in range(40):
        st2.rest_left = 5  # (rest whatever the model says: this measures resting steps)
        assert rest.plan(1) == 0
        timer.stages["verify"].seconds += 0.020
        clock.t += 0.021
    assert st2.rest_ms == pytest.approx(1.0, abs=0.05) and st2.verify_scale == pytest.approx(20 / 30, rel=0.02)
    st2.verify_seen = np.array([st2.verify_seen[0], 27.0])  # (the drafting steps' 2-row verifies, as in st)
    np.testing.assert_allclose(rest._v(np.array([1.0, 2.0])), [20.0, 27.0], rtol=1e-3)
    pays, loss = rest.drafting_pays(1)
    # 11 + 27 = 38 ms for 1.5 tokens against 1 + 20 = 21 ms for one
    assert not pays and loss == pytest.approx(38.0 - 1.5 * 21.0, abs=0.3)


def test_a_shapes_first_verify_and_new_shape_verifies_stay_out_of_v():
    """A drafter whose lengths change from step to step (n-gram lookups): each row count's first verify built and
    captured its graph (15 ms here, once), a verify after another shape rebuilt it (+4 ms), one after the same
    shape costs the table's (10 ms). V(R) must be the same-shape cost — the decision adds S = shape_ms() for a
    change of shape itself — and neither the one-off first reading nor the rebuilt ones may hold it up
    (RESULTS.md 19.10: n-gram auto verified 3 of the 15 tokens a lookup proposed)."""
    stats = SpecStats(n_max=7)
    for i in range(200):
        stats.record(7, i % 8)
    clock, timer = FakeClock(), FakeTimer()
    st = AutoState(rest=False)
    pol = AutoDraftLength([10.0] * 8, stats, state=st, clock=clock, timer=timer)
    seen: set = set()
    prev = None
    for n in [3, 3, 5, 7, 7, 3, 5, 5, 7, 3, 5, 7, 7, 3, 3, 5, 5, 7, 7] * 3:
        pol.plan(7)  # (books the step before)
        pol.trim(Draft(tokens=[5] * n))
        pol._rows = n + 1  # (this step verifies n + 1 rows, whatever the cut)
        ms = 15.0 if n + 1 not in seen else 10.0 if prev == n + 1 else 14.0
        seen.add(n + 1)
        prev = n + 1
        timer.stages["verify"].seconds += ms / 1e3
        clock.t += (ms + 1.0) / 1e3
    for r in (4, 6, 8):
        assert st.verify_tried[r - 1] >= 15
        assert st.verify_seen[r - 1] == pytest.approx(10.0, abs=0.01)  # same-shape readings only
        assert st.verify_same[r - 1] == pytest.approx(10.0, abs=0.01)
        assert st.verify_new[r - 1] == pytest.approx(14.0, abs=0.01)  # the first, 15 ms, booked nowhere
        assert pol._v(r) == pytest.approx(10.0, abs=0.01)
    assert st.verify_scale == pytest.approx(1.0, abs=0.01) and st.shape_ms() == pytest.approx(4.0, abs=0.02)


def test_an_unsynchronized_verify_reading_is_not_taken_for_the_verify():
    """With sync_stages off the timer's verify stage holds only the decode's launch (the GPU time lands in
    the read after it): booking it as the verify would make verifies look free. The table stands then."""
    stats = SpecStats(n_max=1)
    for i in range(400):
        stats.record(1, i % 2)
    clock, timer = FakeClock(), FakeTimer(sync=False)
    st = AutoState()
    pol = AutoDraftLength([30.0, 31.0], stats, state=st, clock=clock, timer=timer)
    for _ in range(30):  # drafting steps: 0.1 ms of verify launch seen, 38 ms of wall time
        pol.plan(1)
        pol.trim(Draft(tokens=[5], confidence=np.array([0.5])))
        timer.stages["draft"].seconds += 0.010
        timer.stages["verify"].seconds += 0.0001
        clock.t += 0.038
    assert st.verify_scale == 1.0 and not np.any(st.verify_seen > 0)
    assert st.other_ms == pytest.approx(38.0 - 31.0, abs=0.05)  # wall − the table's V(2)


def test_dormant_is_the_part_of_a_long_rest_before_its_last_window():
    from pyllama_spec.speculative.costmodel import DORMANT_WINDOW

    stats = _thirty_percent()
    st = AutoState(other_ms=1e6, rest_ms=1.0, max_rest=DORMANT_WINDOW + 10)
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=FakeClock())
    flags = []
    for _ in range(DORMANT_WINDOW + 10 + 1):  # one whole rest (the first is max_rest long here), then the probe
        ask = pol.plan(3)
        flags.append((ask, pol.dormant()))
        stats.record(ask, 0)
    # 74 resting steps: the first 10 have ≥ 64 more before the probe, the last 64 do not; the probe drafts
    assert [d for _, d in flags] == [True] * 10 + [False] * (DORMANT_WINDOW + 1)
    assert [a for a, _ in flags] == [0] * (DORMANT_WINDOW + 10) + [1]
    off = AutoDraftLength([10, 12, 14, 16], _thirty_percent(), state=AutoState(other_ms=1e6, rest_ms=1.0,
                                                                                  max_rest=200, dormant=False))
    assert off.plan(3) == 0 and not off.dormant()


@pytest.mark.parametrize("dormant", [True, False])
def test_a_long_rest_skips_the_features_of_all_but_its_last_window(tiny_gen, dormant):
    """A rest of 80 steps: DFlash is handed its first 16 rows with observe_dormant (no features: those positions
    are never injected, a gap in its cache) and the last 64 with observe_deferred (injected at the probe); the
    output is plain decoding's either way. dormant=False: every resting row is deferred and injected."""
    from pyllama_spec.speculative.costmodel import DORMANT_WINDOW

    d = tiny_gen.drafters["dflash"]
    seen = {"dormant": [], "deferred": [], "injected": set()}
    orig_dormant, orig_deferred, orig_decode = d.observe_dormant, d.observe_deferred, d.ctx.decode_embd

    def dormant_call(tokens, positions, n_commit, timer):
        seen["dormant"] += [int(p) for p in positions[:n_commit]]
        return orig_dormant(tokens, positions, n_commit, timer)

    def deferred_call(tokens, positions, n_commit, timer):
        seen["deferred"] += [int(p) for p in positions[:n_commit]]
        return orig_deferred(tokens, positions, n_commit, timer)

    def decode_embd(feats, pos):
        seen["injected"].update(int(p) for p in pos)
        return orig_decode(feats, pos)

    prompt, n_tok = PROMPTS[1], 90
    ref = tiny_gen.generate(prompt, max_tokens=n_tok, reuse_prefix=False)
    if len(ref.tokens) < n_tok:
        pytest.skip("the tiny target ends this prompt early")
    d.observe_dormant, d.observe_deferred, d.ctx.decode_embd = dormant_call, deferred_call, decode_embd
    tiny_gen._auto_state.pop("dflash", None)
    st = tiny_gen.auto_state("dflash")
    st.other_ms, st.rest_ms, st.max_rest, st.dormant = 1e6, 0.0, DORMANT_WINDOW + 16, dormant
    try:
        r = tiny_gen.generate(prompt, drafter="dflash", n_max="auto", max_tokens=n_tok, reuse_prefix=False)
    finally:
        del d.observe_dormant, d.observe_deferred
        d.ctx.decode_embd = orig_decode
        tiny_gen._auto_state.pop("dflash", None)
    assert r.tokens == ref.tokens  # lossless
    # nothing measured says drafting pays: the first step starts a rest of 80 steps (the last prompt token's
    # position p0 onwards), a one-token probe follows, then the next rest begins (its first 16 steps dormant)
    p0 = len(tiny_gen.tokenize_prompt(prompt)) - 1
    first_rest = list(range(p0, p0 + DORMANT_WINDOW + 16))
    if dormant:
        assert seen["dormant"][:16] == first_rest[:16] and len(seen["dormant"]) > 16
        assert seen["deferred"] == first_rest[16:]
        assert not seen["injected"] & set(seen["dormant"])  # the gap: never injected
        assert set(first_rest[16:]) <= seen["injected"]  # the window: injected (at the probe)
    else:
        assert seen["dormant"] == [] and seen["deferred"][:len(first_rest)] == first_rest
        assert set(first_rest) <= seen["injected"]


def test_a_rest_that_goes_on_into_the_next_generation_skips_its_prompt_too(tiny_gen):
    """The first generation starts a rest of 512 steps and ends after 24 of them: the next one's prompt
    rows and steps all go to observe_dormant (nothing injected into the drafter); outputs are plain's."""
    d = tiny_gen.drafters["dflash"]
    injected = []
    orig_decode = d.ctx.decode_embd

    def decode_embd(feats, pos):
        injected.append((int(pos[0]), len(pos)))
        return orig_decode(feats, pos)

    refs = [tiny_gen.generate(p, max_tokens=24, reuse_prefix=False).tokens for p in PROMPTS]
    tiny_gen._auto_state.pop("dflash", None)
    st = tiny_gen.auto_state("dflash")
    st.other_ms, st.rest_ms, st.max_rest = 1e6, 0.0, 512
    try:
        r1 = tiny_gen.generate(PROMPTS[0], drafter="dflash", n_max="auto", max_tokens=24, reuse_prefix=False)
        left = st.rest_left
        d.ctx.decode_embd = decode_embd
        r2 = tiny_gen.generate(PROMPTS[1], drafter="dflash", n_max="auto", max_tokens=24, reuse_prefix=False)
    finally:
        d.ctx.decode_embd = orig_decode
        tiny_gen._auto_state.pop("dflash", None)
    assert [r1.tokens, r2.tokens] == refs
    assert left >= 64 and injected == []  # no row of the second generation reached the drafter
    assert sum(r2.stats.draft_lengths) == 0


def test_a_verify_of_a_new_shape_is_booked_apart_and_priced_into_the_length():
    """llama.cpp rebuilds the target's graph (on CUDA: captures a new CUDA graph) whenever a decode's shape
    differs from the last one. Steps alternate 2-row and 3-row verifies at 20 ms after a same-shaped
    decode and 26 ms after another shape (booked as verify_same / verify_new); the 6 ms difference is
    what keeping the last shape saves (AutoState.shape_ms), and trim() then keeps a length that the
    drafter's confidences alone would change."""
    stats = SpecStats(n_max=3)
    for i in range(200):
        stats.record(3, i % 3)
    clock, timer = FakeClock(), FakeTimer()
    st = AutoState(rest=False)
    pol = AutoDraftLength([20.0, 20.0, 20.0, 20.0], stats, state=st, clock=clock, timer=timer)
    rows_before = None
    for i in range(60):  # 2, 2, 3, 3, 2, 2, ... rows: half the verifies follow their own shape
        n = 1 if (i // 2) % 2 == 0 else 2
        pol.plan(3)  # (books the step before: its verify ms against the rows of the one before that)
        pol.trim(Draft(tokens=[5] * n))
        pol._rows = n + 1  # (this step verifies n + 1 rows, whatever the cut)
        ms = 20.0 if rows_before == n + 1 else 26.0
        rows_before = n + 1
        timer.stages["verify"].seconds += ms / 1e3
        clock.t += (ms + 1.0) / 1e3
    assert st.verify_same[1] == pytest.approx(20.0, abs=0.1) and st.verify_new[1] == pytest.approx(26.0, abs=0.1)
    assert st.verify_same[2] == pytest.approx(20.0, abs=0.1) and st.verify_new[2] == pytest.approx(26.0, abs=0.1)
    assert st.shape_ms() == pytest.approx(6.0, abs=0.2)
    # confidences that make 2 tokens the best length by a little (survival 0.9, 0.72, 0.216; O 1 ms; V 20, 21,
    # 22, 30 ms: rates 1.9/22, 2.62/23, 2.836/31): after a 4-row verify the 6 ms of a new shape tip it to 3
    # tokens, the last shape (2.836/31 against 2.62/29); without that cost it stays 2
    p = np.array([0.9, 0.72, 0.216])
    st3 = AutoState(other_ms=1.0, verify_same=np.array([0.0, 20.0, 20.0]), verify_new=np.array([0.0, 26.0, 26.0]))
    pol3 = AutoDraftLength([20.0, 21.0, 22.0, 30.0], stats, state=st3, clock=clock)
    assert st3.shape_ms() == pytest.approx(6.0)
    assert pol3.best_length(p) == 2 and pol3.best_length(p, 3) == 2 and pol3.best_length(p, 4) == 3
    fresh = AutoDraftLength([20.0, 21.0, 22.0, 30.0], stats, state=AutoState(other_ms=1.0), clock=clock)
    assert fresh.state.shape_ms() == 0.0 and fresh.best_length(p, 4) == 2
    # a token that cannot be accepted is never sent to keep a shape
    assert pol3.best_length(np.array([0.9, 0.0, 0.0]), 4) == 1
    # and trim() cuts a confident draft to the kept shape where that pays: the last verify had 4 rows
    pol3._prev_rows, pol3._planned = 4, True
    assert len(pol3.trim(Draft(tokens=[5, 6, 7], confidence=np.array([0.9, 0.8, 0.3]))).tokens) == 3


def _array_survival(pol, n):
    """measured_survival in conditional-rate form (the implementation mixes counts): the reference of the next
    test."""
    s, st = pol.stats, pol.state

    def first(a):
        a = np.asarray(a, float)[:n]
        out = np.zeros(n)
        out[:len(a)] = a
        return out

    acc = first(s.accepted_at) + first(st.pos_accepted)
    tried = first(s.drafted_at) + first(st.pos_tried)
    k = pol.prior
    # p_0 shrunk toward 0.6; then p_i = p_{i-1} · c_i with c_i = (min(acc/p_{i-1}, tried) + k·r) / (tried + k), r the
    # curve's last rate (p_0 for i = 1), r itself where nothing was tried — written as rates, then multiplied out
    p = [(acc[0] + k * 0.6) / (tried[0] + k)] if n else []
    for i in range(1, n):
        r = p[-1] / p[-2] if i > 1 and p[-2] > 0 else p[-1]
        c = r if tried[i] == 0 else (min(acc[i] / p[-1] if p[-1] > 0 else tried[i], tried[i]) + k * r) / (tried[i] + k)
        p.append(min(p[-1], p[-1] * c))
    return np.array(p)


def _array_v(pol, rows):
    """V at whole row counts inside the table, as numpy arrays (_v's code before 2026-12-06)."""
    st = pol.state
    eff = st.verify_scale * np.asarray(pol._vm, dtype=float)
    m = min(len(eff), len(st.verify_seen))
    if m:
        seen = st.verify_seen[:m]
        eff[:m] = np.where(seen > 0, seen, eff[:m])
    np.maximum.accumulate(eff, out=eff)
    return eff[np.asarray(rows, dtype=int) - 1]


def _array_best_length(pol, p, keep_rows):
    """best_length as numpy arrays (its code before 2026-12-06)."""
    p = np.asarray(p, dtype=float)
    gain = 1.0 + np.concatenate([[0.0], np.cumsum(p)])
    rows = np.arange(1, len(p) + 2, dtype=float)
    cost = (pol.state.other_ms or 0.0) + pol._v(rows)  # (outside the table too: extrapolated)
    if keep_rows is not None:
        cost = cost + pol.state.shape_ms() * (rows != keep_rows)
        sure = int(np.count_nonzero(np.cumprod(p > 0)))
        gain, cost = gain[:sure + 1], cost[:sure + 1]
    return int(np.argmax(gain / np.maximum(cost, 1e-9)))


def test_per_step_decisions_in_plain_floats_equal_the_array_formulas():
    """Since 2026-12-06 ``measured_survival``, ``best_length`` and a whole row count's ``_v`` run on plain
    floats (numpy's per-call cost on ≤ 32 values was most of auto's ~70 µs a step on 2 Intel cores, against a
    SmolLM2 step of ~1.2 ms on the H200): the same decisions as the array code, exactly, and the same survival
    as its conditional-rate form (to rounding) on random states — measured and table verify costs, dips, shape
    costs, zeros in p, lengths past the table."""
    rng = np.random.default_rng(7)
    for trial in range(300):
        R = int(rng.integers(2, 33))
        vm = rng.uniform(1.0, 3.0, R).cumsum() / R + rng.uniform(-0.05, 0.05, R)  # (dips: made non-decreasing)
        stats = SpecStats(n_max=R)
        for _ in range(int(rng.integers(0, 60))):
            d = int(rng.integers(0, R + 1))
            stats.record(d, int(rng.integers(0, d + 1)))
        m = int(rng.integers(0, R + 1))
        st = AutoState(other_ms=None if trial % 7 == 0 else float(rng.uniform(0, 2)),
                       verify_scale=float(rng.uniform(0.5, 1.5)),
                       verify_seen=np.where(rng.random(m) < 0.5, rng.uniform(0.5, 4, m), 0.0),
                       verify_same=rng.uniform(0, 3, m) * (rng.random(m) < 0.6),
                       verify_new=rng.uniform(0, 3, m) * (rng.random(m) < 0.6),
                       pos_tried=rng.uniform(0, 50, m), pos_accepted=rng.uniform(0, 20, m))
        pol = AutoDraftLength(vm, stats, state=st)
        n = int(rng.integers(1, R + 3))  # (past the table now and then: V extrapolated)
        np.testing.assert_allclose(pol.measured_survival(n), _array_survival(pol, n), rtol=1e-12, atol=1e-15)
        rows = np.arange(1, R + 1, dtype=float)
        assert [pol._v(float(r)) for r in rows] == pol._v(rows).tolist() == _array_v(pol, rows).tolist()
        p = pol.measured_survival(n) * (rng.random(n) < 0.9)  # (a p_i of 0 ends the sure lengths)
        for keep in (None, int(rng.integers(1, n + 2))):
            assert pol.best_length(p, keep) == _array_best_length(pol, p, keep), (trial, keep)


@pytest.mark.parametrize("drafter_ms, declared, free", [(0.01, False, True), (0.4, False, False), (0.4, True, True)])
def test_a_free_drafter_is_asked_for_the_ceiling_and_never_rests(drafter_ms, declared, free):
    """An n-gram lookup costs ~0.014 ms against a 1.12 ms verify (H100, 2026-12-06): resting or asking for
    fewer tokens saves nothing, and the per-step arithmetic cost 0.087 ms. Once a drafting step measured the
    drafter at ≤ FREE_DRAFTER of V(1), plan asks for the ceiling without it, even where nothing is accepted
    (a drafter that costs 40 % of V(1) rests there); trim still keeps only the prefix worth verifying. A
    drafter that declares itself free (``Drafter.free``, ``free=True``: the n-gram kinds) is free whatever its
    calls measure — on a slow GPU host a lookup's noise crossed the threshold and auto rested it (RESULTS.md
    19.9). (The model's rule alone: the guard, tested below, is off here.)"""
    stats = SpecStats(n_max=7)
    clock, timer = FakeClock(), FakeTimer()
    st = AutoState(guard=False)
    pol = AutoDraftLength([1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35], stats, state=st, clock=clock, timer=timer,
                          free=declared)
    asks, kept = [], []
    for _ in range(200):
        ask = pol.plan(7)
        asks.append(ask)
        n = 0
        if ask:
            d = pol.trim(Draft(tokens=[1] * ask))  # (no confidences: the measured acceptance decides)
            n = len(d.tokens)
            timer.stages["draft"].seconds += drafter_ms / 1e3
            kept.append(n)
        stats.record(n, 0)  # nothing is ever accepted
        timer.stages["verify"].seconds += (1.0 + 0.05 * n) / 1e3
        clock.t += (1.05 + 0.05 * n + (drafter_ms if ask else 0.0)) / 1e3
    assert pol.free_drafter() is free
    if free:
        assert asks[5:] == [7] * 195 and pol.n_rest == 0
        assert kept[-1] == 0  # nothing is accepted: the draft is not verified (a plain step)
    else:
        assert pol.n_rest > 150


def _guarded_run(n_steps, *, draft_ms, accepted, guard=True, drafter_ms=0.3, plain_ms=1.0, rest_plain_ms=None,
                 state=None):
    """``n_steps`` steps of a policy whose verify table says 8 rows cost what 1 does (the model: drafting
    confident positions pays), while on the fake clock a drafting step really costs ``draft_ms`` (whatever its
    length) and commits ``1 + accepted`` tokens, and a resting step ``rest_plain_ms`` (default ``plain_ms``,
    the table's V(1)); ``state``: the AutoState to start from (default a fresh one). Returns the policy and
    each step's ask."""
    stats = SpecStats(n_max=7)
    clock, timer = FakeClock(), FakeTimer(sync=False)  # (a GPU run: the verify stage is no measurement)
    st = AutoState(guard=guard) if state is None else state
    pol = AutoDraftLength([plain_ms] * 8, stats, state=st, clock=clock, timer=timer)
    asks = []
    for _ in range(n_steps):
        ask = pol.plan(7)
        asks.append(ask)
        if ask:
            n = len(pol.trim(Draft(tokens=[1] * ask, confidence=[0.9] * ask)).tokens)
            timer.stages["draft"].seconds += drafter_ms / 1e3
            stats.record(n, min(accepted, n))
            clock.t += draft_ms / 1e3
        else:
            stats.record(0, 0)
            clock.t += (rest_plain_ms or plain_ms) / 1e3
    return pol, asks


def _rests(asks):
    """The lengths of the runs of resting steps (ask 0), in order."""
    out, run = [], 0
    for a in asks:
        if a == 0:
            run += 1
        elif run:
            out.append(run)
            run = 0
    return out + ([run] if run else [])


def test_the_guard_rests_where_drafting_steps_really_lose():
    """The model says drafting pays (its table: every row count costs V(1)), but each drafting step takes
    2.5 ms for 2 tokens where a plain step takes 1.0 ms for 1 (a GPU run whose real verifies and reads cost
    more than the table: RESULTS.md 19.5). Without the guard auto drafts every step, at 0.8 × plain; with it,
    the first trial of GUARD_STEPS drafting steps loses and the loop rests. That rest measures what a plain
    step costs (the model had booked the drafting steps' unexplained 1.5 ms as "other" time a plain step pays
    too), so from then on the model itself finds that no length pays, and its probes back off: the rests
    double, over 600 steps most are plain ones, and the tokens per ms approach plain decoding's."""
    off, asks_off = _guarded_run(600, draft_ms=2.5, accepted=1, guard=False)
    assert off.n_rest == 0 and all(a > 0 for a in asks_off)
    old, old_asks = _guarded_run(600, draft_ms=2.5, accepted=1, state=AutoState(learn_costs=False))
    assert old_asks.index(0) == GUARD_STEPS + 1  # (the generation's first step is not part of a trial)
    pol, asks = _guarded_run(600, draft_ms=2.5, accepted=1)
    first_rest = asks.index(0)
    # a loss of 20 % of a drafting step is judged after GUARD_MIN_STEPS steps (learn_costs, the default)
    assert first_rest == GUARD_MIN_STEPS + 1
    rests = _rests(asks)
    assert pol.n_guard_rests == 1 and len(rests) >= 3
    # the guard's rest keeps the whole trial's loss — 4 steps losing 0.5 ms each — within 2 % of the rest; the
    # model's own rests after it double (the old rule: sized by one step's loss, 26 steps, then doubling)
    assert abs(rests[0] - rest_length(GUARD_MIN_STEPS * 0.5, 1.0, 0)) <= 1 and rests[1] == 2 * rests[0], rests
    old_rests = _rests(old_asks)
    assert old_rests[:4] == [old_rests[0], 2 * old_rests[0], 4 * old_rests[0], 8 * old_rests[0]], old_rests
    assert old_rests[0] < rests[0] / 3
    assert pol.state.rest_ms == pytest.approx(0.0) and pol.plain_other_ms() == pytest.approx(0.0)
    assert pol.n_rest > 450
    drafting = sum(1 for a in asks if a)
    tokens, ms = 2 * drafting + (600 - drafting), 2.5 * drafting + 1.0 * (600 - drafting)
    assert tokens / ms > 0.93  # plain decoding: 1 token a ms; drafting every step: 0.8


def test_the_step_table_sums_each_kind_of_step():
    """``AutoState.step_kinds`` books every step but a generation's first by kind — rests (1 token), probes (the
    first drafting step after a rest) and drafting steps — with the wall ms the clock gave and the tokens they
    committed: in the losing run above, the drafting steps' 2 tokens in 2.5 ms, the rests' 1 in 1.0 ms."""
    pol, asks = _guarded_run(600, draft_ms=2.5, accepted=1)
    t = pol.state.step_table()
    assert set(t) == {"rest", "probe", "draft"}
    n_rest, n_drafting = sum(a == 0 for a in asks), sum(a > 0 for a in asks)
    # (the first step is a drafting step and not booked; the last step's wall is not known yet, nor — deep in a rest,
    # booked once every REST_BOOK_EVERY steps — those since the last booked: pol._span of them)
    assert 1 <= pol._span <= REST_BOOK_EVERY
    assert t["rest"]["steps"] + pol._span * (asks[-1] == 0) == n_rest
    assert t["probe"]["steps"] + t["draft"]["steps"] + 1 + (asks[-1] > 0) == n_drafting
    assert t["probe"]["steps"] == len(_rests(asks)) - (asks[-1] == 0)
    assert t["rest"]["ms_per_step"] == pytest.approx(1.0) and t["rest"]["tokens_per_ms"] == pytest.approx(1.0)
    assert t["draft"]["ms_per_step"] == pytest.approx(2.5) and t["draft"]["tokens"] == 2 * t["draft"]["steps"]
    assert t["probe"]["tokens_per_ms"] == pytest.approx(2 / 2.5)


def test_deep_in_a_rest_the_costs_are_booked_once_every_few_steps_as_their_mean(monkeypatch):
    """Deep in a long rest (more than DORMANT_WINDOW resting steps ahead) ``plan`` books the steps' costs once every
    REST_BOOK_EVERY steps, as their mean: resting steps that alternate 1.0 and 3.0 ms book a plain step of 2.0 ms,
    the step table counts every step, and the asks are those of a policy that books each step (``AutoState.trace``
    on, which lists every step)."""
    def run(trace):
        stats, clock, timer = SpecStats(n_max=7), FakeClock(), FakeTimer(sync=False)
        st = AutoState(trace=[] if trace else None)
        st.other_ms, st.rest_ms, st.max_rest = 1e6, 0.0, 512  # (the model: a drafting step costs 1000 s)
        pol = AutoDraftLength([1.0] * 8, stats, state=st, clock=clock, timer=timer)
        learnt, asks = [0], []
        learn = pol._learn

        def counting(now):
            learnt[0] += 1
            return learn(now)

        monkeypatch.setattr(pol, "_learn", counting)
        for i in range(300):
            ask = pol.plan(7)
            asks.append(ask)
            stats.record(min(ask, 1), 0)
            if ask:  # (a probe after a rest: a draft that fails)
                pol.trim(Draft(tokens=[1], confidence=[0.1]))
            clock.t += (1.0 if i % 2 else 3.0) / 1e3
        return pol, asks, learnt[0]

    light, asks, n_learnt = run(trace=False)
    every, asks_every, n_every = run(trace=True)
    assert asks == asks_every and asks.count(0) >= 290
    assert n_every == 300 and n_learnt < 300 / REST_BOOK_EVERY + DORMANT_WINDOW + 8
    assert light.state.plain_step_ms == pytest.approx(2.0) and light.state.rest_ms == pytest.approx(1.0, rel=0.01)
    t = light.state.step_table()["rest"]
    # (the generation's first step is not booked, nor the last light._span)
    assert t["steps"] + 1 + light._span == asks.count(0) and t["ms_per_step"] == pytest.approx(2.0, rel=0.01)
    assert t["tokens_per_ms"] == pytest.approx(0.5, rel=0.01)


def test_the_rests_booked_in_batches_learn_the_verify_shapes_as_booking_each_step_does():
    """With a synced timer each verify is booked (AutoState.verify_same / verify_new): a 1-row verify costs 1.0 ms,
    2.0 ms more right after a verify of another shape (a rest's first step, after a drafting step's). A rest's first
    step is booked alone: in a mean with 7 steps of the same shape its extra would read as 0.25 ms instead of 2.0, and
    shape_ms — and with it later trims and rests — would differ from a policy that books each step (a review found
    asks differing at 19–40 of 2 000 steps so)."""
    out = []
    for trace in (None, []):
        st = AutoState(trace=trace, max_rest=512)
        st.other_ms = 1e3  # (drafting never pays: probe, rest, probe, rest …, the rests growing to 512 steps)
        stats, clock, timer = SpecStats(n_max=7), FakeClock(), FakeTimer(sync=True)
        pol = AutoDraftLength([1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8, 3.1], stats, state=st, clock=clock, timer=timer)
        asks, prev = [], None
        for _ in range(2000):
            ask = pol.plan(7)
            asks.append(ask)
            nd = len(pol.trim(Draft(tokens=[1] * ask, confidence=[0.05] * ask)).tokens) if ask else 0
            v = 1.0 + 0.3 * nd + (2.0 if nd + 1 != prev else 0.0)
            prev = nd + 1
            timer.stages["verify"].seconds += v / 1e3
            timer.stages["draft"].seconds += (0.5 if ask else 0.0) / 1e3  # (a drafter call that costs: not free)
            stats.record(nd, 0)
            clock.t += (v + 0.2 + (0.5 if ask else 0.0)) / 1e3
        out.append((asks, st.verify_same[0], st.verify_new[0], st.shape_ms()))
    (light, *lv), (every, *ev) = out
    assert light == every and max(_rests(light)) > DORMANT_WINDOW + 2 * REST_BOOK_EVERY  # (a rest booked in batches)
    assert lv == pytest.approx(ev) and lv == pytest.approx([1.0, 3.0, 2.0])


def test_the_step_table_books_each_steps_own_tokens_across_generations():
    """Random acceptance over three generations (three policies) sharing one AutoState: the tokens booked equal
    the tokens each booked step committed — a drafting step its own 1 + accepted, a rest 1 — summed over all
    steps but each generation's first and last; nothing leaks from one generation into the next."""
    rng = np.random.default_rng(5)
    st = AutoState(learn_costs=False)  # (short rests: probes inside the 180 steps)
    want_tokens, want_steps = 0.0, 0
    for g in range(3):  # (the first generation's drafts pay; then nothing is accepted and drafting steps cost
        # 3 ms: the model rests and probes)
        stats, clock, timer = SpecStats(n_max=7), FakeClock(), FakeTimer(sync=False)
        pol = AutoDraftLength([1.0] + [1.2] * 7, stats, state=st, clock=clock, timer=timer)
        committed = []
        for _ in range(60):
            ask = pol.plan(7)
            if ask:
                n = len(pol.trim(Draft(tokens=[1] * ask, confidence=[0.9] * ask)).tokens)
                k = int(rng.integers(0, n + 1)) if g == 0 else int(rng.random() < 0.1)
                stats.record(n, min(k, n))
                committed.append(1 + min(k, n))
                timer.stages["draft"].seconds += 0.2e-3
                clock.t += 1.5e-3 if g == 0 else 3.0e-3
            else:
                stats.record(0, 0)
                committed.append(1)
                clock.t += 1.0e-3
        want_tokens += sum(committed[1:-1])
        want_steps += len(committed) - 2
    booked = st.step_table()
    assert set(booked) == {"draft", "probe", "rest"}, booked  # (the model rests and probes on this table)
    assert sum(v["steps"] for v in booked.values()) == want_steps
    assert sum(v["tokens"] for v in booked.values()) == pytest.approx(want_tokens)


def test_the_guard_leaves_a_paying_trial_drafting():
    """Drafting steps of 1.5 ms for 3 tokens against plain steps of 1.0 ms for 1: the trial pays, the guard
    never rests."""
    pol, asks = _guarded_run(300, draft_ms=1.5, accepted=2)
    assert pol.n_rest == 0 and pol.n_guard_rests == 0 and all(a > 0 for a in asks)
    assert pol.guard_loss() is None and pol.state.trial_steps == 298  # (not the first step, nor the last: unbooked)
    assert pol.state.trial_tokens == pytest.approx(3.0) and pol.state.trial_ms == pytest.approx(1.5)


def test_the_guard_compares_with_the_plain_steps_its_rests_measured():
    """Before its first rest the guard compares with the model's plain step (the table's V(1), 1.0 ms); the
    rest then measures plain steps at 1.8 ms (a busy machine), against which drafting steps of 2.5 ms for 2
    tokens pay: one rest, then the loop drafts on (but for its short measuring rests, GUARD_MEASURE steps every
    GUARD_REFRESH drafting steps), and the back-off is cleared."""
    from pyllama_spec.speculative.costmodel import GUARD_MEASURE, GUARD_REFRESH

    pol, asks = _guarded_run(300, draft_ms=2.5, accepted=1, rest_plain_ms=1.8)
    assert pol.n_guard_rests == 1 and pol.state.plain_step_ms == pytest.approx(1.8)
    later = _rests(asks)[1:]  # after the guard's one rest: only the measuring rests, one per GUARD_REFRESH steps
    assert later and all(r == GUARD_MEASURE for r in later) and len(later) <= 300 // GUARD_REFRESH
    assert pol.state.guard_gap == 0


def test_the_guard_measures_a_stale_plain_step_again():
    """A plain step remembered at 1.6 ms (an earlier generation on a busier machine) while plain steps now
    take 1.0: drafting steps of 2.3 ms for 2 tokens pay against the stale value, lose against the true one.
    Every GUARD_REFRESH drafting steps the loop rests GUARD_MEASURE steps to measure it afresh; then the
    guard sees the loss and rests, and over the run the tokens per ms come near plain decoding's (a fresh
    AutoState does the same from its first trial)."""
    from pyllama_spec.speculative.costmodel import GUARD_MEASURE, GUARD_REFRESH

    def run(st, n=2000):
        pol, asks = _guarded_run(n, draft_ms=2.3, accepted=1, state=st)
        drafting = sum(1 for a in asks if a)
        return pol, asks, (2 * drafting + n - drafting) / (2.3 * drafting + 1.0 * (n - drafting))

    stale = AutoState(plain_step_ms=1.6)
    pol, asks, rate = run(stale)
    first_rest = asks.index(0)
    assert GUARD_REFRESH <= first_rest <= GUARD_REFRESH + 2  # the measuring rest, not a verdict of the trial
    assert asks[first_rest:first_rest + GUARD_MEASURE] == [0] * GUARD_MEASURE
    assert stale.plain_step_ms == pytest.approx(1.0)
    assert pol.n_guard_rests >= 1 and rate > 0.95
    _, _, fresh_rate = run(AutoState())
    assert fresh_rate > 0.95
    # (without the refresh the stale value hid the loss for good: 0.87 tokens a ms over the whole run)


def test_the_trace_says_why_each_step_drafted_or_rested():
    """``AutoState(trace=[])`` records every step once its wall is known: in the losing run above, the first
    step (a generation's first, drafting because nothing is measured yet), drafting steps the model finds paying,
    the guard's rest after GUARD_MIN_STEPS of them, the resting steps, then the probe — each with its rows, wall
    ms and committed tokens."""
    st = AutoState(trace=[])
    pol, asks = _guarded_run(300, draft_ms=2.5, accepted=1, state=st)
    tr = st.trace
    assert len(tr) == len(asks) - 1  # (the last step's wall is not known yet)
    kinds = [(k, why) for k, why, *_ in tr]
    assert tr[0][5] is True and not any(rec[5] for rec in tr[1:])
    assert kinds[:GUARD_MIN_STEPS + 1] == [("draft", "pays")] * (GUARD_MIN_STEPS + 1)
    assert kinds[GUARD_MIN_STEPS + 1] == ("rest", "guard")
    # 7 draft rows + the last token (a flat table: all kept), 1 accepted + the bonus
    assert all(rec[2:5] == (8, 2.5, 2.0) for rec in tr[1:GUARD_MIN_STEPS + 1])
    rest = [rec for rec in tr if rec[0] == "rest"]
    assert {r[1] for r in rest} <= {"guard", "resting", "no gain"} and all(r[2:5] == (1, 1.0, 1.0) for r in rest)
    probe = next(i for i, rec in enumerate(tr) if rec[0] == "probe")
    assert tr[probe][1] == "probe" and tr[probe - 1][0] == "rest"
    assert [a > 0 for a in asks[:-1]] == [rec[0] != "rest" for rec in tr]


def test_reset_auto_state_starts_a_drafter_afresh(tiny_gen):
    """``Generator.reset_auto_state`` forgets what auto learnt (a first use again), takes a given AutoState, and
    refuses an unknown drafter or anything but an AutoState, leaving the old state in place."""
    name = next(iter(tiny_gen.drafters))
    old = tiny_gen.auto_state(name)
    old.other_ms = 5.0
    fresh = tiny_gen.reset_auto_state(name)
    assert fresh is tiny_gen.auto_state(name) and fresh is not old and fresh.other_ms is None
    mine = AutoState(learn_costs=False, trace=[])
    assert tiny_gen.reset_auto_state(name, mine) is mine and tiny_gen.auto_state(name) is mine
    with pytest.raises(ps.InvalidArgumentError, match="unknown drafter"):
        tiny_gen.reset_auto_state("nope")
    with pytest.raises(ps.InvalidArgumentError, match="AutoState"):
        tiny_gen.reset_auto_state(name, {"rule": "cost"})
    assert tiny_gen.auto_state(name) is mine
    r = tiny_gen.generate(PROMPTS[0], drafter=name, n_max="auto", max_tokens=12, reuse_prefix=False)
    assert len(mine.trace) >= len(r.stats.draft_lengths) - 2  # (it was the state in use)
    tiny_gen.reset_auto_state(name)


def test_the_guards_rest_counts_only_the_trials_recent_steps():
    """A trial that paid for 100 drafting steps (1.5 ms for 2 tokens against plain 1.0 for 1) and then loses (2.3 ms
    for 2 tokens): the guard's verdict is the loss of its last GUARD_WINDOW steps at most, and so is the rest it
    begins — not 100+ steps × the recent loss (a review, 2026-12-06: 470 resting steps after a trial that had
    gained time overall)."""
    from pyllama_spec.speculative.costmodel import GUARD_WINDOW

    stats = SpecStats(n_max=7)
    clock, timer = FakeClock(), FakeTimer(sync=False)
    st = AutoState(max_rest=4096)  # (no cap: the rest's own size shows)
    pol = AutoDraftLength([1.0] * 8, stats, state=st, clock=clock, timer=timer)
    asks = []
    for i in range(400):
        ask = pol.plan(7)
        asks.append(ask)
        if ask:
            n = len(pol.trim(Draft(tokens=[1] * ask, confidence=[0.9] * ask)).tokens)
            timer.stages["draft"].seconds += 0.3e-3
            stats.record(n, min(1, n))
            clock.t += (1.5e-3 if i < 100 else 2.3e-3)
        else:
            stats.record(0, 0)
            clock.t += 1.0e-3
    first = asks.index(0)
    assert first > 100 and pol.n_guard_rests >= 1
    rest = _rests(asks)[0]
    # at most GUARD_WINDOW steps' loss (≤ 0.3 ms each by then) within 2 % of a 1 ms plain step — not the 100+ steps
    # of the trial times that loss (≥ 1 500 steps)
    assert rest <= rest_length(GUARD_WINDOW * 0.3, 1.0, 0, longest=4096) + 1 < 1500


def _lookup_run(state, seed=3):
    """A free drafter (an n-gram lookup: 0.01 ms a call) over 500 steps: for 400 it finds nothing (an empty draft, a
    plain step of 1.0 ms ± 6 % noise, 1.03 ms with the lookup), then 100 steps copy a passage — 7 tokens drafted,
    all accepted, verified in 1.3 ms. Returns the policy and each step's verified draft length."""
    rng = np.random.default_rng(seed)
    stats = SpecStats(n_max=7)
    clock, timer = FakeClock(), FakeTimer(sync=False)
    pol = AutoDraftLength([1.0, 1.05, 1.1, 1.15, 1.2, 1.25, 1.3, 1.35], stats, state=state, clock=clock, timer=timer)
    kept = []
    for i in range(500):
        ask = pol.plan(7)
        copying = i >= 400
        n = 0
        if ask:
            d = pol.trim(Draft(tokens=[1] * ask if copying else []))
            n = len(d.tokens)
            timer.stages["draft"].seconds += 0.01e-3
        stats.record(n, n)
        kept.append(n)
        clock.t += ((1.3 if n else 1.0) * (1 + 0.06 * rng.standard_normal()) + (0.03 if ask else 0.0)) / 1e3
    return pol, kept


def test_a_lookup_that_finds_nothing_is_not_judged_and_drafts_where_it_copies():
    """A free drafter's empty drafts are plain steps, not a trial (learn_costs): with 400 of them the guard never
    rests it, and when the text starts copying a passage auto drafts at once — as n_max 7 does (the H100 bake-off
    of 2026-12-06: the old rule rested n-gram auto through the one conversation where n_max 7 ran at 2.8 x plain)."""
    pol, kept = _lookup_run(AutoState())
    assert pol.n_guard_rests == 0
    # it drafts at every copying step, all 7 tokens once the first copy was verified: positions never drafted
    # continue the measured curve (measured_survival) instead of the 0.6^(i+1) prior, which stopped it at 4
    assert sum(1 for n in kept[400:] if n == 7) >= 95
    assert pol.state.plain_step_ms == pytest.approx(1.03, rel=0.05)  # measured by the empty drafts


def test_positions_never_drafted_continue_the_measured_curve():
    """With no data anywhere the guesses are the 0.6^(i+1) prior; where the first positions were measured (a lookup
    verified 4-token drafts, all accepted) the untried ones go on at the measured conditional rate instead of
    falling to the prior (which made trim stop at 4 for good)."""
    pol = AutoDraftLength([1.0] * 8, SpecStats(n_max=7))
    np.testing.assert_allclose(pol.measured_survival(5), 0.6 ** np.arange(1, 6))
    stats = SpecStats(n_max=7)
    for _ in range(50):
        stats.record(4, 4)
    pol = AutoDraftLength([1.0] * 8, stats)
    p = pol.measured_survival(7)
    want = [(50 + 4 * 0.6) / 54]
    for _ in range(3):  # (each position: its measured conditional rate 1 shrunk toward the curve's last rate)
        r = want[-1] / want[-2] if len(want) > 1 else want[-1]
        want.append(want[-1] * (50 + 4 * r) / 54)
    np.testing.assert_allclose(p[:4], want)
    np.testing.assert_allclose(p[4:], p[3] * (p[3] / p[2]) ** np.arange(1, 4))
    assert p[6] > 0.9 > 0.6 ** 7


def test_deferred_rows_join_cut_and_say_when_a_batch_waits():
    """``DeferredRows``: rows added over resting steps come back joined in order; a rollback cuts those at or past
    n_past; ``add`` says when ``limit`` rows wait; rows without a per-row array (a draft model's) come back None."""
    from pyllama_spec.speculative.drafters.base import DeferredRows

    d = DeferredRows(4)
    assert not d and d.add([5], np.array([10]), np.ones((1, 2))) is False
    assert d.add([6, 7], np.array([11, 12]), np.full((2, 2), 2.0)) is False and d.n == 3
    d.cut(12)  # (position 12 is gone)
    assert d.n == 2 and d.add([8, 9], np.array([12, 13]), np.full((2, 2), 3.0)) is True
    toks, pos, rows = d.take()
    assert toks == [5, 6, 8, 9] and pos.tolist() == [10, 11, 12, 13] and not d and d.n == 0
    np.testing.assert_array_equal(rows[:, 0], [1.0, 2.0, 3.0, 3.0])
    plain = DeferredRows(8)
    plain.add([1, 2], [0, 1])
    plain.cut(1)
    assert plain.take()[0] == [1] and plain.n == 0
    plain.add([3], [5])
    assert plain.take()[2] is None


def test_a_resting_step_tells_the_drafter_nothing(tiny_gen, monkeypatch):
    """A resting step asks the drafter for nothing, so ``on_accept`` does not follow it: llama.cpp's accept follows
    a draft call (which resets an n-gram kind's per-draft state first), and after a rest that state is the last
    real draft's — accept(0) once per resting step cut ngram-map's value for that key to 0 tokens and counted
    low-acceptance streaks against ngram-mod's table. Every other step still reaches on_accept; the output is
    plain decoding's."""
    gen = tiny_gen
    d = gen.drafters["ngram"]
    assert type(d).free  # (the n-gram kinds declare their lookups free)
    calls = {"plan": 0, "rest": 0, "trimmed away": 0}
    orig_plan, orig_trim = AutoDraftLength.plan, AutoDraftLength.trim

    def trim(self, draft):  # (a proposal trim keeps none of is not followed by on_accept either: the next test)
        out = orig_trim(self, draft)
        calls["trimmed away"] += bool(draft.tokens) and not out.tokens
        return out

    def every_other_step_rests(self, ceiling):
        ask = orig_plan(self, ceiling)
        calls["plan"] += 1
        if calls["plan"] % 2:
            calls["rest"] += 1
            return 0
        return ask

    seen = []
    orig_accept = d.on_accept
    monkeypatch.setattr(AutoDraftLength, "plan", every_other_step_rests)
    monkeypatch.setattr(AutoDraftLength, "trim", trim)
    monkeypatch.setattr(d, "on_accept", lambda n_d, k: (seen.append((n_d, k)), orig_accept(n_d, k)))
    gen._auto_state.pop("ngram", None)
    try:
        r = gen.generate(PROMPTS[1], drafter="ngram", n_max="auto", max_tokens=32, reuse_prefix=False)
    finally:
        gen._auto_state.pop("ngram", None)
    ref = gen.generate(PROMPTS[1], max_tokens=32, reuse_prefix=False)
    assert r.tokens == ref.tokens
    assert calls["rest"] >= 10
    assert len(seen) == r.stats.n_steps - calls["rest"] - calls["trimmed away"]


def test_a_proposal_trimmed_to_nothing_tells_the_drafter_nothing(tiny, monkeypatch):
    """n_max="auto"'s trim may keep none of a proposal (a free n-gram drafter is asked for the ceiling every step
    and trim alone decides): nothing of it was verified, so on_accept does not follow, as after a rest. Before,
    accept(0) set the ngram-map key's value to 0 tokens — that key stayed silent for the rest of the generation —
    and counted ngram-mod low-acceptance steps until its table was cleared, on no evidence from the target."""
    gen = ps.Generator(tiny["target"], drafters={"mk": ("ngram-map-k", {"size_n": 2, "size_m": 8}),
                                                 "mod": ("ngram-mod", {"n_match": 2, "n_max": 16, "n_min": 1})},
                       n_ctx=1024, n_batch=64, n_ubatch=32)
    try:
        prompt = PROMPTS[1]
        # (fixed n_max: a lookup finds something on this prompt)
        assert gen.generate(prompt, drafter="mk", n_max=8, max_tokens=64, reuse_prefix=False).stats.n_drafted
        mk, mod = gen.drafters["mk"], gen.drafters["mod"]
        orig_trim = AutoDraftLength.trim
        seen = []  # per proposal: its length, and the drafters' state the steps before it left

        def keep_nothing(self, draft):
            seen.append((len(draft.tokens), [k.values[0][2] for k in mk.keys], mod.n_low, len(mod.table)))
            return orig_trim(self, draft).prefix(0)

        monkeypatch.setattr(AutoDraftLength, "trim", keep_nothing)
        ref = gen.generate(prompt, max_tokens=64, reuse_prefix=False)
        for name in ("mk", "mod"):
            seen.clear()
            r = gen.generate(prompt, drafter=name, n_max="auto", max_tokens=64, reuse_prefix=False)
            assert r.tokens == ref.tokens and r.stats.n_drafted == 0
            assert sum(1 for n, *_ in seen if n) >= 5, name  # (proposals the trim threw away)
            if name == "mk":
                assert any(v for _, v, _, _ in seen)
                assert all(x == 8 for _, v, _, _ in seen for x in v)  # no key silenced (size_m = 8)
            else:
                assert all(low == 0 and size > 0 for _, _, low, size in seen)  # no streak, no table cleared
    finally:
        gen.close()


def test_a_sparsely_tried_tail_shrinks_toward_the_measured_curve():
    """Positions tried a few times shrink toward the curve the first positions measured, not toward 0.6^(i+1): a
    lookup on copied text whose 3-token drafts were taken 90 % of the time, and whose 4th–7th tokens (tried three
    times) were all taken, keeps p_i ≈ 0.89 to the ceiling (the fixed guess gave p_3..p_6 0.50..0.45 and p_14 0.37,
    and verified 7 tokens), so on the H100's verify table it verifies all 15 (RESULTS.md 19.10: ngram auto verified
    3–6 of the 15 tokens proposed on the coding chat, 0.81 × n_max 15)."""
    stats = SpecStats(n_max=15)
    for i in range(100):
        stats.record(3, 3 if i % 10 else 0)
    for _ in range(3):
        stats.record(7, 7)
    pol = AutoDraftLength(_H100_V, stats, state=AutoState(other_ms=0.05))
    p = pol.measured_survival(15)
    assert p[0] == pytest.approx((93 + 4 * 0.6) / 107) and p[14] > 0.87  # (every rate measured ≈ 1)
    assert pol.best_length(p) == 15


def test_one_lucky_acceptance_does_not_lift_a_falling_tail():
    """Where acceptance falls with position (a DFlash-like curve 0.75 / 0.55 / 0.41, measured over 1 000 steps) one
    7-token draft taken whole moves positions 3–6 only part of the way (conditional rates shrunk toward the curve's
    last one), and the positions past it keep falling: the tail stays below p_2 and the best length stays short."""
    stats = SpecStats(n_max=15)
    rng = np.random.default_rng(3)
    for _ in range(1000):
        u = rng.random()
        stats.record(3, 3 if u < 0.41 else 2 if u < 0.55 else 1 if u < 0.75 else 0)
    stats.record(7, 7)
    pol = AutoDraftLength(_H100_V, stats, state=AutoState(other_ms=1.7))
    p = pol.measured_survival(15)
    r = p[2] / p[1]
    assert p[3] == pytest.approx(p[2] * (0.2 + 0.8 * r)) and p[6] < 0.25 and p[14] < 0.1  # (one try of 5 weights)
    assert np.all(np.diff(p) < 0)  # (it keeps falling: no flat tail at the last well-measured value)
    assert pol.best_length(p) <= 7


_H100_V = [1.194, 1.393, 1.428, 1.474, 1.529, 1.604, 1.623, 1.700, 2.487, 3.275, 3.287, 3.298, 3.328, 3.357,
           3.371, 3.385]  # ms a verify of 1..16 rows, SmolLM2 Q4_1 + DFlash taps on an H100 (auto_overhead, 2026-12-06)
