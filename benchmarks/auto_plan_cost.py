"""Host time of ``n_max="auto"``'s own decisions (``AutoDraftLength.plan`` + ``trim``) per step, on synthetic
steps (no model): this checkout's cost model beside the one of another git revision, in one run.

Why: on a GPU a SmolLM2 step is ~1.2 ms, and auto's per-step arithmetic was 0.087 ms of it with an n-gram
drafter on the H100 (2026-12-06, RESULTS.md 19.4: the "plan" stage of ``benchmarks/auto_overhead.py``). The
patterns: a free drafter (n-gram: 0.014 ms a call, drafts of 0..2 or 15 tokens, no confidences) and a DFlash-like
one (0.4 ms a call, confidences), with resting on and off.

    python benchmarks/auto_plan_cost.py [--against ca83d13~1] [--steps 2000] [--reps 5]
"""
from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from pyllama_spec.speculative.drafters import Draft
from pyllama_spec.speculative.stats import SpecStats
from pyllama_spec.speculative.timing import StageTime

ROOT = Path(__file__).resolve().parents[1]
COSTMODEL = "pyllama_spec/speculative/costmodel.py"


def load(path: Path, tag: str):
    """A costmodel.py as a module of its own (its dataclasses need it in sys.modules)."""
    spec = importlib.util.spec_from_file_location(f"pyllama_spec.speculative._costmodel_{tag}", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class FakeTimer:
    """The stages AutoDraftLength reads."""
    sync = True

    def __init__(self) -> None:
        self.stages = {k: StageTime() for k in ("draft", "draft_sample", "inject", "verify")}


def us_per_step(cm, drafter_s: float, draft_len, conf: bool, rest: bool, steps: int) -> float:
    """µs of plan() + trim() per step over ``steps`` synthetic steps (verify 1.2 ms, 0.1 ms of glue)."""
    stats, timer, clock = SpecStats(n_max=31), FakeTimer(), [0.0]
    pol = cm.AutoDraftLength(list(np.linspace(1.2, 2.0, 32)), stats, state=cm.AutoState(rest=rest),
                             clock=lambda: clock[0], timer=timer)
    rng = np.random.default_rng(0)
    spent = 0.0
    for i in range(steps):
        t0 = time.perf_counter()
        ask = pol.plan(15)
        spent += time.perf_counter() - t0
        if ask:
            n = draft_len(i, ask)
            d = Draft(tokens=[1] * n, confidence=rng.random(n) if conf else None)
            t0 = time.perf_counter()
            d = pol.trim(d)
            spent += time.perf_counter() - t0
            stats.record(len(d.tokens), min(len(d.tokens), int(rng.integers(0, 3))))
            timer.stages["draft"].seconds += drafter_s
        else:
            stats.record(0, 0)
        timer.stages["verify"].seconds += 0.0012
        clock[0] += 0.0013 + (drafter_s if ask else 0.0)
    return 1e6 * spent / steps


CASES = {
    "n-gram-like: free, drafts of 0..2": (0.000014, lambda i, a: min(a, i % 3), False, True),
    "n-gram-like: free, 15-token drafts": (0.000014, lambda i, a: a, False, True),
    "DFlash-like: 0.4 ms, confidences, rests on": (0.0004, lambda i, a: a, True, True),
    "DFlash-like: rests off": (0.0004, lambda i, a: a, True, False),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--against", default="ca83d13~1", help="git revision whose costmodel.py runs beside this one")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=5, help="best of this many runs")
    a = ap.parse_args()
    old = subprocess.run(["git", "-C", str(ROOT), "show", f"{a.against}:{COSTMODEL}"], check=True,
                         capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "costmodel_old.py"
        p.write_text(old)
        mods = {a.against: load(p, "old"), "this checkout": load(ROOT / COSTMODEL, "new")}
        print(f"plan() + trim() per step, µs (best of {a.reps} runs of {a.steps} steps)")
        for name, case in CASES.items():
            cells = [f"{tag} {min(us_per_step(m, *case, a.steps) for _ in range(a.reps)):.1f}"
                     for tag, m in mods.items()]
            print(f"  {name:45s} " + "   ".join(cells))


if __name__ == "__main__":
    main()
