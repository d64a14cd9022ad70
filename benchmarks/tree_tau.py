"""τ and tok/s of token-tree verification against the chain, side by side, on the held-out prompts of a
self-distillation file (the 10 % of its templated prompts held out of the shipped drafter's training), T = 0.

    python benchmarks/tree_tau.py [DATA.jsonl.gz] [--budgets 4,8,16,32] [--n-prompts 30]
        [--max-tokens 128] [--n-max 7] [-ngl 99] [-t THREADS] [--sync-stages] [--split heldout|all] [--json out.json]

For every prompt: plain decoding, the chain (n_max) and each tree budget (depth n_max) run one after
the other on one Generator (``tree`` = the largest budget, so every run uses the same target
context), so ratios are measured side by side even on a loaded machine. Every stage's ms per step is
recorded; with ``--sync-stages`` each stage waits for its GPU work, so the split is true on a GPU (and
the tok/s a little lower); without it GPU time lands in whichever stage reads first. Defaults: SmolLM2-135M-Instruct,
its shipped DFlash drafter, ``benchmarks/data/smollm2-selfdistill-9170.jsonl.gz``.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
from pyllama_spec.train.features import load_sequences

DATA = os.path.join(os.path.dirname(__file__), "data", "smollm2-selfdistill-9170.jsonl.gz")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", nargs="?", default=DATA)
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--budgets", default="4,8,16,32")
    ap.add_argument("--n-prompts", type=int, default=30)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--sync-stages", action="store_true", help="wait for the GPU at every stage boundary")
    ap.add_argument("--split", choices=["heldout", "all"], default="heldout",
                    help="all: every prompt of DATA (a set the drafter was not trained on: issue 20's natural prompts)")
    ap.add_argument("--host-softmax-too", action="store_true",
                    help="also run each budget with the trees ranked on the host (DFlashDrafter."
                         "tree_logprobs_in_graph = False: the rows' logits copied and normalised by numpy), side by "
                         "side (issue 22, patch 0011)")
    ap.add_argument("--json")
    a = ap.parse_args()
    budgets = [int(b) for b in a.budgets.split(",") if b]
    target = a.target or str(smollm2_path())
    drafter = a.drafter or str(smollm2_dflash_path())
    held = [s for s in load_sequences(a.data) if a.split == "all" or s["split"] == "heldout"][:a.n_prompts]
    gen = ps.Generator(target, drafters={"dflash": drafter}, n_ctx=4096, n_gpu_layers=a.n_gpu_layers,
                       tree=max(budgets), n_threads=a.threads)
    runs = {"plain": None, "chain": 0, **{f"tree{b}": b for b in budgets}}
    if a.host_softmax_too:
        runs.update({f"tree{b}-host": b for b in budgets})
    d = gen.drafters["dflash"]
    in_graph = d.tree_logprobs_in_graph  # (the default: on a GPU, in the graph)
    acc = {name: {"stats": ps.SpecStats(n_max=a.n_max), "s": 0.0, "n": 0, "same": True, "stages": {}}
           for name in runs}
    t0 = time.time()
    for i, s in enumerate(held):
        toks = s["tokens"][:s["n_prompt"]]
        ref = None
        for name, budget in runs.items():
            if budget is None:
                r = gen.generate(prompt_tokens=toks, max_tokens=a.max_tokens, sync_stages=a.sync_stages)
                ref = r.tokens
            else:
                spec = ps.SpecConfig(drafter="dflash", n_max=a.n_max, tree=budget, sync_stages=a.sync_stages)
                d.tree_logprobs_in_graph = in_graph and not name.endswith("-host")
                r = gen.generate(prompt_tokens=toks, max_tokens=a.max_tokens, spec=spec)
                acc[name]["stats"].merge(r.stats)
            acc[name]["s"] += r.generation_seconds
            acc[name]["n"] += r.n_generated
            acc[name]["same"] &= r.tokens == ref
            for stage, t in r.timings.items():
                acc[name]["stages"][stage] = acc[name]["stages"].get(stage, 0.0) + 1e3 * t.get("seconds", 0.0)
        taus = " ".join(f"{k} {v['stats'].mean_accepted_length:.2f}" for k, v in acc.items() if k != "plain")
        print(f"[{i + 1}/{len(held)}] τ so far: {taus}", flush=True)
    gen.close()
    out: dict = {"n_prompts": len(held), "n_max": a.n_max, "max_tokens": a.max_tokens, "runs": {}}
    plain_tok_s = acc["plain"]["n"] / acc["plain"]["s"]
    chain_tau = acc["chain"]["stats"].mean_accepted_length
    for name, v in acc.items():
        st = v["stats"]
        row = {"tok_s": v["n"] / v["s"], "speedup_vs_plain": v["n"] / v["s"] / plain_tok_s,
               "identical_to_plain": bool(v["same"])}
        if name != "plain":
            row.update(tau=st.mean_accepted_length, tau_vs_chain=st.mean_accepted_length / chain_tau,
                       n_steps=st.n_steps, verify_ms_per_step=v["stages"].get("verify", 0.0) / max(1, st.n_steps),
                       stage_ms_per_step={k: ms / max(1, st.n_steps) for k, ms in sorted(v["stages"].items())},
                       accepted_per_position=st.accepted_per_position)
        out["runs"][name] = row
        print(f"{name:8s} {row['tok_s']:7.1f} tok/s (×{row['speedup_vs_plain']:.2f} plain)"
              + (f"  τ {row['tau']:.3f} (×{row['tau_vs_chain']:.2f} chain), verify {row['verify_ms_per_step']:.2f} "
                 f"ms/step" if name != "plain" else "") + f"  identical: {row['identical_to_plain']}")
        if name != "plain":
            print("         ms/step: " + "  ".join(f"{k} {ms:.2f}" for k, ms in row["stage_ms_per_step"].items()))
    out.update(date=time.strftime("%Y-%m-%d"), system=ps.system_info(), devices=ps.devices(), target=target,
               drafter=drafter, n_gpu_layers=a.n_gpu_layers, n_threads=a.threads, sync_stages=a.sync_stages,
               data=os.path.relpath(a.data) if a.data else None, split=a.split,
               seconds=time.time() - t0,
               budgets=budgets)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
