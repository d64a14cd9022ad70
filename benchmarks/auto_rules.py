"""n_max="auto" side by side with plain decoding and fixed n_max, its rules as rows of one run
(issue 25): the cost rule (calibrated confidences, ``AutoState.rule="cost"``) against AdaEDL's entropy
stop rule (``"adaedl"``), each with and without resting where no draft length pays, and resting with
the drafter awake in long rests (``AutoState.dormant=False``: it sees every row).

    python benchmarks/auto_rules.py [--prompts builtin:mixed] [-n 64] [--rounds 2] [--n-max 1,3,7]
        [-ngl 0] [--only NAME,NAME] [--json out.json]

Every prompt runs every configuration in turn (round-robin, so a loaded machine slows all alike);
tok/s counts the tokens after prefill over the time after prefill, pooled over prompts and rounds.
Defaults: SmolLM2-135M-Instruct and the DFlash drafter shipped with the package, first turns only.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
from pyllama_spec.study.prompts import load_prompts

#: (name, drafter entry, n_max, AutoState settings)
AUTO = [("auto cost+rest", "dflash", {"rule": "cost", "rest": True}),
        # deep in a long rest the drafter sees no rows (observe_dormant, the default) vs every row
        ("auto cost+rest awake", "dflash-awake", {"rule": "cost", "rest": True, "dormant": False}),
        ("auto cost+rest noguard", "dflash-noguard", {"rule": "cost", "rest": True, "guard": False}),
        # the rest sizes and guard before 2026-12-06's learnt costs (AutoState.learn_costs, RESULTS.md 19.8)
        ("auto cost+rest old", "dflash-old", {"rule": "cost", "rest": True, "learn_costs": False}),
        ("auto adaedl+rest", "dflash-adaedl", {"rule": "adaedl", "rest": True}),
        ("auto cost", "dflash-norest", {"rule": "cost", "rest": False}),
        ("auto adaedl", "dflash-adaedl-norest", {"rule": "adaedl", "rest": False})]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--prompts", default="builtin:mixed")
    ap.add_argument("-n", "--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--n-max", default="1,3,7")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0)
    ap.add_argument("--only", help="comma-separated configuration names to run (default: all), e.g. "
                    "'plain,auto cost+rest,auto cost+rest awake'")
    ap.add_argument("--json")
    a = ap.parse_args()
    target = a.target or str(smollm2_path())
    drafter = a.drafter or str(smollm2_dflash_path())
    gen = ps.Generator(target, drafters={"dflash": drafter}, n_gpu_layers=a.n_gpu_layers, n_ctx=2048)
    d = gen.drafters["dflash"]
    for _, name, settings in AUTO:  # one drafter, an n_max="auto" state (rule, rest schedule) per entry
        gen.drafters[name] = d
        for k, v in settings.items():
            setattr(gen.auto_state(name), k, v)
    configs: list[tuple[str, str | None, int | str | None]] = [("plain", None, None)]
    configs += [(f"n_max {n}", "dflash", int(n)) for n in a.n_max.split(",")]
    configs += [(label, name, "auto") for label, name, _ in AUTO]
    if a.only:
        keep = {c.strip() for c in a.only.split(",")} | {"plain"}
        configs = [c for c in configs if c[0] in keep]
    convs = load_prompts(a.prompts)
    gen.verify_ms(gen.resolve_n_max("dflash", "auto") + 1, drafter="dflash")  # (measured once, not timed)
    pooled = {c[0]: {"tokens": 0, "seconds": 0.0, "steps": 0, "rest_steps": 0, "same_as_plain": 0, "runs": 0}
              for c in configs}
    t0 = time.time()
    for rnd in range(a.rounds):
        for conv in convs:
            msgs = ([{"role": "system", "content": conv.system}] if conv.system else []) + [
                {"role": "user", "content": conv.turns[0]}]
            tokens = {}
            for label, name, n_max in configs if rnd % 2 == 0 else configs[::-1]:  # (drift cancels over rounds)
                r = gen.generate(messages=msgs, drafter=name, n_max=n_max, max_tokens=a.max_tokens)
                p = pooled[label]
                p["tokens"] += r.n_generated
                p["seconds"] += r.generation_seconds
                p["steps"] += r.stats.n_steps
                p["rest_steps"] += sum(1 for x in r.stats.draft_lengths if x == 0) if name else r.stats.n_steps
                p["runs"] += 1
                tokens[label] = r.tokens
            for label in tokens:
                pooled[label]["same_as_plain"] += tokens[label] == tokens["plain"]
        print(f"round {rnd + 1}/{a.rounds} done in {time.time() - t0:.0f} s", flush=True)
    plain = pooled["plain"]["tokens"] / pooled["plain"]["seconds"]
    print(f"\n{'configuration':<20} {'tok/s':>7} {'÷ plain':>8} {'τ':>5} {'rest':>6} {'= plain':>8}")
    rows = []
    for label, _, _ in configs:
        p = pooled[label]
        tok_s = p["tokens"] / p["seconds"]
        row = dict(config=label, tok_s=tok_s, vs_plain=tok_s / plain, tau=p["tokens"] / max(p["steps"], 1),
                   rest_share=p["rest_steps"] / max(p["steps"], 1), same_as_plain=p["same_as_plain"] / p["runs"])
        rows.append(row)
        print(f"{label:<20} {tok_s:7.1f} {row['vs_plain']:8.3f} {row['tau']:5.2f} {row['rest_share']:6.2f} "
              f"{row['same_as_plain']:8.2f}")
    states = {name: {k: getattr(gen.auto_state(name), k) for k in ("other_ms", "rest_ms", "drafter_ms", "gap")}
              for _, name, _ in AUTO}
    print("auto states:", states)
    if a.json:
        out = dict(date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), system=ps.system_info(),
                   load_avg=os.getloadavg(), target=target, drafter=drafter, prompts=a.prompts,
                   max_tokens=a.max_tokens, rounds=a.rounds, n_gpu_layers=a.n_gpu_layers, rows=rows,
                   verify_ms=gen.verify_ms(gen.resolve_n_max("dflash", "auto") + 1, drafter="dflash"),
                   auto_states=states)
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    for _, name, _ in AUTO:
        if name != "dflash":
            del gen.drafters[name]  # (one drafter under several names: closed once)
    gen.close()


if __name__ == "__main__":
    main()
