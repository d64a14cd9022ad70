"""Where ``n_max="auto"`` loses time against a fixed n_max (issue 25): the same conversations with one
drafter at fixed n_max values and at "auto", the stage table of each (ms per step) and a profile of the
"auto" generations (Python functions by their own time, cffi calls included), side by side in one run.

Why: on the H200 (2026-12-04, RESULTS.md 19.3) "auto" spent 0.4–1.1 ms a step in ``other`` (wall less
every timed stage) with the n-gram kinds and DFlash, against 0.02–0.1 ms at fixed n_max; on 2 CPU cores
the same bake-off rows show +0.07 ms. This shows which calls make that time, and how often the target's decode graph was
reused (llama.cpp rebuilds it, and on CUDA re-captures its CUDA graph, whenever a decode's
shape differs from the last one: "auto" varies the verify batch from step to step).

    python benchmarks/auto_overhead.py [--drafter dflash|draft|eagle3|ngram-map-k|...]
        [--n-max 0 2 auto-old auto auto-taps auto-awake]
        [-ngl 99] [--temperature 0.8 [--verify rejection]]

(n_max 0 is plain decoding, the baseline auto must not fall below. Each "auto" pass starts from a fresh
``AutoState`` — a first use —; ``auto-old`` is auto with ``AutoState(learn_costs=False)``, the rest sizes and
the guard before 2026-12-06's second change, side by side with today's; ``auto-taps`` is auto with
``AutoState(taps_off_when_dormant=True)``: the target's layer-input taps off for the dormant steps of a long rest
(DFlash; on an H100 a resting step's verify cost 1.30 ms against plain decoding's 1.19 with the 3 taps on);
``auto-host`` is auto with ``AutoState(draw_in_graph_when_dormant=False)`` (with ``--verify rejection
--temperature 0.8``: every resting step reads its logits row and draws on the host, as before 2026-12-06);
``auto-awake`` is auto with ``AutoState(dormant=False)``: the drafter sees every resting row (DFlash and EAGLE-3
then inject all of them at the probe instead of drafting from the rest's last window: what the window costs in τ
against what skipping the rows saves a step). The
profiled pass goes on from the state the ``auto`` pass left: auto used again.)
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import time

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_draft_path, smollm2_eagle3_path, smollm2_path
from pyllama_spec.speculative.costmodel import AutoState
from pyllama_spec.study.prompts import load_prompts


class GCClock:
    """Seconds the garbage collector ran (gc.callbacks), and how many collections of the oldest generation."""

    def __init__(self) -> None:
        self.seconds, self.full, self._t = 0.0, 0, 0.0
        gc.callbacks.append(self)

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._t
            self.full += info.get("generation") == 2


def _ms16(a) -> str:
    """The first 16 values of a per-row-count array, '-' where none was measured."""
    return " ".join(f"{v:.2f}" if v > 0 else "-" for v in list(a)[:16])


def trace_runs(trace: list) -> str:
    """``AutoState.trace`` in runs: consecutive steps of one kind, reason and row count as
    ``kind/why:rows x n (ms, ms, ...)`` — rests' times summarised as their mean."""
    out: list[str] = []
    run: list = []

    def flush() -> None:
        if not run:
            return
        kind, why, rows = run[0][:3]
        ms = [w for _, _, _, w, _, _ in run]
        first = "!" if any(f for *_, f in run) else ""
        times = f"{sum(ms) / len(ms):.2f} mean" if kind == "rest" else ", ".join(f"{w:.2f}" for w in ms)
        out.append(f"{first}{kind}/{why}:{rows}x{len(run)} ({times})")

    for rec in trace:
        if run and (rec[0], rec[1], rec[2]) != (run[0][0], run[0][1], run[0][2]) or rec[5]:
            flush()
            run = []
        run.append(rec)
    flush()
    return " | ".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", default="dflash",
                    help="dflash (the shipped SmolLM2 drafter), draft (the shipped draft model), eagle3 (the shipped "
                         "EAGLE-3 head) or an n-gram kind")
    ap.add_argument("--n-max", nargs="+", default=["2", "auto"])
    ap.add_argument("--prompts", default="builtin:coding-chat")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--top", type=int, default=30, help="profile rows to print")
    ap.add_argument("--temperature", type=float, default=0.0, help="T (> 0: seeded per turn)")
    ap.add_argument("--verify", choices=["match", "rejection"], default="match")
    a = ap.parse_args()
    spec = {"dflash": smollm2_dflash_path, "draft": smollm2_draft_path,
            "eagle3": smollm2_eagle3_path}.get(a.drafter, lambda: a.drafter)()
    gen = ps.Generator(smollm2_path(), drafters={"d": spec}, n_ctx=4096, n_gpu_layers=a.n_gpu_layers)
    convs = load_prompts(a.prompts)
    gen.generate("Hello", drafter="d", max_tokens=8)  # warm-up (first graphs)
    vt = gen.verify_ms(32, drafter="d")  # the table "auto" reads, measured before any timed generation
    print("verify table V(1..16), ms: " + " ".join(f"{v:.3f}" for v in list(vt)[:16]))
    # "auto" runs twice: timed without the profiler (cProfile roughly doubles the host time of every Python
    # call: on the H200, 2026-12-06, the profiled auto pass showed 0.60 ms of "other" a step, much of it the
    # profiler's), then profiled, untimed
    runs = [(n, False) for n in a.n_max] + [(n, True) for n in a.n_max if n == "auto"]
    warm = None  # the state the timed "auto" pass left (the profiled pass goes on from it)
    for n_max, profiled in runs:
        auto = n_max in ("auto", "auto-old", "auto-taps", "auto-host", "auto-awake")
        nm = "auto" if auto else int(n_max)
        if auto and not profiled:  # a first use: a fresh state, its steps traced
            st = gen.reset_auto_state("d", AutoState(learn_costs=n_max != "auto-old",
                                                     taps_off_when_dormant=n_max == "auto-taps",
                                                     draw_in_graph_when_dormant=n_max != "auto-host",
                                                     dormant=n_max != "auto-awake", trace=[]))
            if n_max == "auto":
                warm = st
        elif auto and warm is not None:
            gen.reset_auto_state("d", warm)
        prof = cProfile.Profile() if profiled else None
        stages: dict[str, float] = {}
        steps = toks = ngen = 0
        lengths: dict[int, int] = {}  # verified draft tokens per step (0: a plain step, rest or empty draft)
        secs = 0.0
        gen.ctx.reset_perf()  # llama.cpp's counters: how many of the target's decodes reused their graph
        if auto:  # (the step table of this pass only)
            gen.auto_state("d").step_kinds.clear()
        gcc = GCClock()
        for conv in convs:
            answers: list[str] = []
            for turn in range(min(a.turns, len(conv.turns))):
                if prof is not None:
                    prof.enable()
                t = time.perf_counter()
                r = gen.generate(messages=conv.messages(answers), drafter="d", n_max=nm, max_tokens=a.max_tokens,
                                 verify=a.verify, temperature=a.temperature,
                                 seed=1000 + turn if a.temperature > 0 else None)
                secs += time.perf_counter() - t
                if prof is not None:
                    prof.disable()
                answers.append(r.text)
                steps += r.stats.n_steps
                ngen += 1
                toks += r.n_generated
                for n in r.stats.draft_lengths:
                    lengths[n] = lengths.get(n, 0) + 1
                for k, v in r.timings.items():
                    stages[k] = stages.get(k, 0.0) + v["seconds"]
        per = {k: 1e3 * v / max(steps, 1) for k, v in stages.items() if v > 0}
        perf = gen.ctx.perf()
        tag = " (profiled: times inflated)" if profiled else ""
        print(f"n_max={n_max}{tag}: {toks} tokens, {steps} steps, {toks / secs:.1f} tok/s (whole calls), target graphs "
              f"reused {perf['n_reused']} times over {steps} steps and {ngen} prefills, garbage collection "
              f"{1e3 * gcc.seconds / max(steps, 1):.3f} ms/step ({gcc.full} full), ms/step: "
              + "  ".join(f"{k} {v:.3f}" for k, v in sorted(per.items())))
        print("  draft tokens verified per step: " + ", ".join(f"{n}: {c}" for n, c in sorted(lengths.items())))
        if auto:
            st = gen.auto_state("d")
            print(f"  auto state: plain step {st.plain_step_ms} ms (measured in rests), trial {st.trial_steps} "
                  f"steps of {st.trial_tokens:.2f} tokens in {st.trial_ms:.3f} ms, guard gap {st.guard_gap}, "
                  f"other {st.other_ms}, rest other {st.rest_ms}, drafter {st.drafter_ms}, verify scale "
                  f"{st.verify_scale:.3f}, probe loss {st.probe_loss_ms}")
            # the verify readings auto decides with (AutoState.verify_seen: same-shape verifies, a row count's first
            # one left out) beside the table and the readings after a decode of the same / another row count
            print(f"  V(1..16) seen {_ms16(st.verify_seen)} | table {_ms16(vt)} | same {_ms16(st.verify_same)} | "
                  f"new {_ms16(st.verify_new)} | tried {_ms16(st.verify_tried)}")
            if st.trace and not profiled:
                print("  trace (kind/why: rows x steps, wall ms each; !: a generation's first step): "
                      + trace_runs(st.trace))
            print("  auto steps by kind (this pass; each generation's first step and last one or two left out): "
                  + "; ".join(
                f"{k} {v['steps']} steps, {v['ms_per_step']:.3f} ms a step, {v['tokens_per_ms']:.3f} tokens a ms"
                for k, v in sorted(st.step_table().items())))
        gc.callbacks.remove(gcc)
        if prof is not None:
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(a.top)
            print(out.getvalue())


if __name__ == "__main__":
    main()
