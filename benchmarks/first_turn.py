"""Why n_max="auto" loses a conversation's first turn in the bake-off (issue 25, RESULTS.md 19.15): the bake-off's
order replayed with the auto state carried over, each auto turn's steps traced.

On an H100 (2026-12-07) the coding chat's DFlash auto ran turns 2-4 at plain decoding's speed, resting, but each
conversation's first turn at 647-654 tok/s against plain's ~775, although it drafted 1 token in 128 steps in one of
them: its resting verifies cost 1.34 ms against 1.16-1.28. Between the auto point's turns nothing else runs; before its
first turn the other points of that conversation ran (other n_max, other drafters' taps, llama.cpp's program in a
subprocess after each turn with ``--native``). This replays that order (plain, fixed n_max, auto per conversation;
``--native``: llama.cpp's program after each turn of the fixed points, as the bake-off does) and prints per turn the
tok/s, the verify ms a step and, for auto, its trace (``AutoState.trace``).

    python benchmarks/first_turn.py [--native] [--n-max 2] [--conversations 2] [--turns 4] [-ngl 99] [--old-rests]
                                    [--taps-off]

``--old-rests``: the rest rule before 2026-12-07 (a later rest twice the last, whatever a probe was measured to lose;
the resting steps after a probe booked as plain steps), for a side-by-side run in separate processes.
"""
from __future__ import annotations

import argparse
import os
import time

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
from pyllama_spec.speculative.config import SpecConfig
from pyllama_spec.speculative.costmodel import AutoState
from pyllama_spec.study.prompts import load_prompts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-max", type=int, nargs="*", default=[2])
    ap.add_argument("--native", action="store_true", help="llama.cpp's program after each fixed point's turn")
    ap.add_argument("--prompts", default="builtin:coding-chat")
    ap.add_argument("--conversations", type=int, default=2)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--auto-first", action="store_true", help="auto before the fixed points in each conversation")
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--old-rests", action="store_true", help="the rest rule before 2026-12-07 (side by side)")
    ap.add_argument("--taps-off", action="store_true",
                    help="AutoState.taps_off_when_dormant: the target's layer taps off deep in a long rest")
    a = ap.parse_args()
    if a.old_rests:
        from pyllama_spec.speculative import costmodel

        new_rule = costmodel.rest_length
        costmodel.rest_length = lambda *args, **kw: new_rule(*args, **{**kw, "floor": False})
        costmodel.PROBE_AFTERMATH = 0
    target, dpath = smollm2_path(), smollm2_dflash_path()
    gen = ps.Generator(target, drafters={"dflash": dpath}, n_ctx=4096, n_gpu_layers=a.n_gpu_layers)
    gen.generate("Hello", max_tokens=8)
    gen.generate("Hello", drafter="dflash", max_tokens=8)
    st = gen.reset_auto_state("dflash", AutoState(trace=[], taps_off_when_dormant=a.taps_off))
    convs = load_prompts(a.prompts)[:a.conversations]
    points = [(None, None)] + [("dflash", n) for n in a.n_max]
    points = [("dflash", "auto")] + points if a.auto_first else points + [("dflash", "auto")]
    totals: dict[str, list[float]] = {}
    for conv in convs:
        for drafter, n_max in points:
            answers: list[str] = []
            for turn in range(min(a.turns, len(conv.turns))):
                t0 = len(st.trace)
                spec = SpecConfig(drafter=drafter, n_max=n_max, tree=0 if drafter else None)
                t = time.perf_counter()
                res = gen.generate(messages=conv.messages(answers), spec=spec, max_tokens=a.max_tokens)
                wall = time.perf_counter() - t
                answers.append(res.text)
                tot = totals.setdefault(f"{drafter} {n_max}", [0.0, 0.0, 0.0, 0.0])
                tot[0] += res.n_generated
                tot[1] += res.generation_seconds
                if turn == 0:
                    tot[2] += res.n_generated
                    tot[3] += res.generation_seconds
                tm = res.step_timings
                n = max(res.stats.n_steps, 1)
                line = (f"{conv.id[:12]:12s} {str(drafter):6s} {str(n_max):4s} turn {turn + 1}: "
                        f"{res.tokens_per_s:6.1f} tok/s, {res.stats.n_steps} steps, drafted {res.stats.n_drafted}, "
                        f"verify {1e3 * tm.get('verify', 0) / n:.3f} ms/step, "
                        f"other {1e3 * tm.get('other', 0) / n:.3f}, "
                        f"prefill {1e3 * res.prefill_seconds:.1f} ms (n_prefill {res.n_prefill}), "
                        f"call {1e3 * wall:.1f} ms")
                print(line, flush=True)
                if n_max == "auto":
                    tr = st.trace[t0:]
                    walls = [rec[3] for rec in tr]
                    kinds: dict[str, list[float]] = {}
                    for rec in tr:
                        kinds.setdefault(f"{rec[0]}/{rec[1]}", []).append(rec[3])
                    print("    first 12 steps (kind/why rows wall): " + ", ".join(
                        f"{r[0][:1]}/{r[1]}:{r[2]}:{r[3]:.2f}" for r in tr[:12]))
                    print("    by kind: "
                          + "; ".join(f"{k} {len(v)} steps {sum(v) / len(v):.3f} ms" for k, v in kinds.items())
                          + f"; steps 13-: {sum(walls[12:]) / max(len(walls[12:]), 1):.3f} ms mean")
                if a.native and drafter is not None and n_max != "auto":
                    from pyllama_spec.native import run_speculative_simple
                    text = gen.model.vocab.detokenize(res.prompt_tokens, unparse_special=True)
                    t = time.perf_counter()
                    run_speculative_simple(os.fspath(target), dpath, text, n_max=int(n_max), n_predict=a.max_tokens,
                                           n_ctx=4096, n_gpu_layers=a.n_gpu_layers, spec_type="draft-dflash")
                    print(f"    native {1e3 * (time.perf_counter() - t):.0f} ms")
                elif a.native and drafter is None:
                    from pyllama_spec.native import run_completion
                    text = gen.model.vocab.detokenize(res.prompt_tokens, unparse_special=True)
                    run_completion(os.fspath(target), text, n_predict=a.max_tokens, n_ctx=4096,
                                   n_gpu_layers=a.n_gpu_layers)

    plain = totals["None None"]
    for k, (n, secs, n1, secs1) in totals.items():
        print(f"total {k}: {n / secs:.1f} tok/s ({n / secs / (plain[0] / plain[1]):.3f} x plain), first turns "
              f"{n1 / secs1:.1f} tok/s ({n1 / secs1 / (plain[2] / plain[3]):.3f} x plain)"
              + (" [old rests]" if a.old_rests else "") + (" [taps off]" if a.taps_off else ""))


if __name__ == "__main__":
    main()
