"""n_max="auto": the resting steps right after a probe count as its loss (``PROBE_AFTERMATH``) and a later rest is
at least what one probe's measured loss asks for (``rest_length``; RESULTS.md 19.17) — clipped as any sample, off
with ``AutoState.learn_costs=False`` (the rules before 2026-12-06, kept for side-by-side runs), and a rest's last
step always measures a plain one. (Cases found by a review of the first version, 2026-12-07.)"""
import numpy as np
import pytest

from pyllama_spec.speculative.costmodel import AutoDraftLength, AutoState
from pyllama_spec.speculative.drafters import Draft

from .test_auto_rest import FakeClock, _thirty_percent


def _drive(pol, stats, clock, walls, n, probe_ms=0.017, plain_ms=0.011):
    """n steps; a probe takes probe_ms, a resting step walls.get(i, plain_ms) (i: index of the step)."""
    kinds = []
    for i in range(n):
        ask = pol.plan(3)
        if ask:
            d = pol.trim(Draft(tokens=[1, 2, 3], confidence=np.array([0.3, 0.01, 0.01])))
            stats.record(len(d.tokens), 0)
            w = probe_ms
        else:
            stats.record(0, 0)
            w = walls.get(i, plain_ms) if isinstance(walls, dict) else walls(i)
        kinds.append("p" if ask else "r")
        clock.t += w
    return kinds


def test_one_slow_step_after_a_probe_is_clipped_like_any_sample():
    """_ema: one slow step (a busy machine) must not make resting look wrong — a probe's sample counts at most
    2 × the mean + 1 ms, its aftermath included: a 1 s hiccup in the step after a probe leaves probe_loss_ms
    near its 6 ms (the first version added the aftermath unclipped: 204 ms)."""
    stats, clock = _thirty_percent(), FakeClock()
    st = AutoState(other_ms=5.0, rest_ms=1.0, plain_step_ms=11.0, probe_loss_ms=6.0, rest_left=3, gap=4, trace=[])
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
    kinds = _drive(pol, stats, clock, {4: 1.0}, 8)  # the step right after the probe at step 3 takes 1 s
    assert kinds[:6] == ["r", "r", "r", "p", "r", "r"]
    # the whole sample (probe + aftermath) as _ema would take it: at most 0.8 * 6 + 0.2 * (2 * 6 + 1) = 7.4
    assert st.probe_loss_ms <= 7.4 + 1e-9, st.probe_loss_ms


def test_the_slow_step_then_sizes_every_later_rest():
    """... so the rest after the next probe doubles from 28 as before, not the 512 steps (max_rest) that an
    unclipped probe loss would ask for through the floor."""
    stats, clock = _thirty_percent(), FakeClock()
    st = AutoState(other_ms=5.0, rest_ms=1.0, plain_step_ms=11.0, probe_loss_ms=6.0, rest_left=3, gap=4, trace=[])
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
    kinds = _drive(pol, stats, clock, {4: 1.0}, 4 + 1 + 28 + 2)
    probes = [i for i, k in enumerate(kinds) if k == "p"]
    assert probes == [3, 32]
    assert st.gap <= 2 * 28 + 1, st.gap


def test_learn_costs_false_books_the_steps_after_a_probe_as_before(monkeypatch):
    """AutoState.learn_costs=False keeps the rules before 2026-12-06 (benchmarks/auto_overhead.py's auto-old,
    auto_rules.py's "auto cost+rest old"): the steps after a probe are plain steps there, as without
    PROBE_AFTERMATH (whose probe_loss_ms learn_costs=False never reads)."""
    from pyllama_spec.speculative import costmodel

    def run():
        stats, clock = _thirty_percent(), FakeClock()
        st = AutoState(other_ms=5.0, rest_ms=1.0, rest_left=3, gap=4, trace=[], learn_costs=False)
        pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
        _drive(pol, stats, clock, {4: 0.014, 5: 0.013}, 12)
        assert [k for k, *_ in st.trace[:6]] == ["rest", "rest", "rest", "probe", "rest", "rest"]
        return st.plain_step_ms, st.rest_ms

    now = run()
    monkeypatch.setattr(costmodel, "PROBE_AFTERMATH", 0)  # the bookkeeping without it
    before = run()
    assert now == pytest.approx(before)


def test_learn_costs_false_keeps_the_plain_doubling():
    """Same flag, the rest floor: with learn_costs=False a later rest is exactly twice the last (19.6's rules),
    not max(2 × gap, the length a probe's loss asks for: 13 here)."""
    stats, clock = _thirty_percent(), FakeClock()
    st = AutoState(other_ms=5.0, rest_ms=1.0, rest_left=1, gap=4, learn_costs=False)
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
    kinds = _drive(pol, stats, clock, {}, 4)
    assert kinds[:3] == ["r", "p", "r"]
    assert st.gap == 8


def test_short_rests_still_measure_the_plain_step():
    """A rest's last step measures a plain step even where the rest is no longer than PROBE_AFTERMATH (max_rest 2):
    the machine slows from 11 to 15 ms a plain step after the first probe, and plain_step_ms follows (the first
    version kept 11 ms and booked every step's 4 ms as probe loss)."""
    stats, clock = _thirty_percent(), FakeClock()
    st = AutoState(other_ms=5.0, rest_ms=1.0, rest_left=2, gap=2, max_rest=2, trace=[])
    pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
    kinds = _drive(pol, stats, clock, lambda i: 0.011 if i < 3 else 0.015, 60)
    assert kinds[:6] == ["r", "r", "p", "r", "r", "p"]
    assert st.plain_step_ms > 13.0, (st.plain_step_ms, st.probe_loss_ms)


def test_trace_on_and_off_book_the_aftermath_alike():
    """A long rest deep enough for the fast path: the aftermath is booked the same with the trace on (every step
    booked) and off (REST_BOOK_EVERY batches)."""
    out = []
    for tr in (False, True):
        stats, clock = _thirty_percent(), FakeClock()
        st = AutoState(other_ms=5.0, rest_ms=1.0, plain_step_ms=11.0, probe_loss_ms=6.0, rest_left=3, gap=100,
                       trace=[] if tr else None)
        pol = AutoDraftLength([10, 12, 14, 16], stats, state=st, clock=clock)
        _drive(pol, stats, clock, {4: 0.014, 5: 0.013}, 120)
        out.append((st.probe_loss_ms, st.plain_step_ms, st.gap, pol.n_rest, pol.n_probes))
    assert out[0][0] == pytest.approx(out[1][0]) and out[0][2:] == out[1][2:]
