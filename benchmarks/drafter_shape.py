"""The DFlash drafter's fused decode at one shape per n_max (``DFlashDrafter.constant_shape``) against
the shape that follows each step's acceptance, and the two-decode path, side by side in one run:
tokens/s, drafter ms per call, how often llama.cpp reused the drafter's graph, DFlash ÷ plain.

Why: a fused draft decode holds the rows the last step committed (1..n_max+1) before the block, so
its shape changes with acceptance; llama.cpp then rebuilds the drafter's graph and, on CUDA, cannot
replay it as a CUDA graph (ggml-cuda resets its warm-up when a graph's shape changes).
``constant_shape`` injects the committed rows before them again so that every call has n_max + 1.

    python benchmarks/drafter_shape.py [--target T.gguf --drafter D.gguf] [--prompts ANSWERS.jsonl.gz]
        [--n-prompts 16] [--max-tokens 256] [--n-max 3 7] [-ngl 99] [--json out.json]

Defaults: SmolLM2-135M-Instruct, the shipped drafter, the held-out greedy answers of
``benchmarks/data/issue20-h200-torch`` (their prompts). For each n_max, each prompt runs plain decoding
and every variant in turn (so drift hits all alike); tokens/s are means over prompts, wall clock after
the prefill.
"""
from __future__ import annotations

import argparse
import gzip
import json
import platform
import statistics
import time
from pathlib import Path

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
from pyllama_spec.speculative.drafters.dflash import DFlashDrafter

HELD = Path(__file__).parent / "data" / "issue20-h200-torch" / "heldout-greedy.jsonl.gz"
VARIANTS = ("constant", "varying", "split")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--prompts", default=str(HELD))
    ap.add_argument("--n-prompts", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--n-max", type=int, nargs="+", default=[3, 7])
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--json")
    a = ap.parse_args()
    target = a.target or str(smollm2_path())
    drafter = a.drafter or str(smollm2_dflash_path())
    gen = ps.Generator(target, n_ctx=2048, n_gpu_layers=a.n_gpu_layers)
    for v in VARIANTS:
        d = DFlashDrafter(gen.ctx, drafter, fused_inject=v != "split", n_gpu_layers=a.n_gpu_layers)
        d.constant_shape = v == "constant"
        gen.add_drafter(v, d)
    with gzip.open(a.prompts, "rt") as f:
        prompts = [json.loads(x)["prompt_tokens"] for x in f][:a.n_prompts]
    gen.generate(prompt_tokens=prompts[0], max_tokens=16)  # warm-up
    rows = []
    plain_rates = []
    for n_max in a.n_max:
        acc: dict[str, dict[str, list]] = {v: {"tok_s": [], "draft_ms": [], "reused": [], "tau": [], "same": []}
                                           for v in VARIANTS}
        plain: list[float] = []
        for toks in prompts:
            # plain decoding in the same rotation as the variants, so that ×plain is side by side too
            p = gen.generate(prompt_tokens=toks, max_tokens=a.max_tokens, sync_stages=False, reuse_prefix=False)
            plain.append(p.tokens_per_s)
            for v in VARIANTS:
                d = gen.drafters[v]
                d.ctx.reset_perf()
                r = gen.generate(prompt_tokens=toks, drafter=v, n_max=n_max, max_tokens=a.max_tokens,
                                 sync_stages=False, reuse_prefix=False)
                reused = d.ctx.perf()["n_reused"]
                # the drafter's own time per call, from a run with its stages synchronised
                rs = gen.generate(prompt_tokens=toks, drafter=v, n_max=n_max, max_tokens=a.max_tokens,
                                  sync_stages=True, reuse_prefix=False)
                t = rs.timings
                calls = t["draft"]["count"] or 1
                acc[v]["tok_s"].append(r.tokens_per_s)
                acc[v]["draft_ms"].append(1e3 * (t["draft"]["seconds"] + t.get("inject", {}).get("seconds", 0.0))
                                          / calls)
                acc[v]["reused"].append(reused / max(r.stats.n_steps, 1))
                acc[v]["tau"].append(r.stats.mean_accepted_length)
                acc[v]["same"].append(r.tokens == p.tokens)
        plain_rate = statistics.mean(plain)
        plain_rates.append(plain_rate)
        print(f"n_max={n_max} plain     {plain_rate:8.1f} tok/s", flush=True)
        for v in VARIANTS:
            x = acc[v]
            row = {"n_max": n_max, "variant": v, "tok_s": statistics.mean(x["tok_s"]), "plain_tok_s": plain_rate,
                   "vs_plain": statistics.mean(x["tok_s"]) / plain_rate,
                   "draft_plus_inject_ms_per_call": statistics.mean(x["draft_ms"]),
                   "graph_reused_per_step": statistics.mean(x["reused"]), "tau": statistics.mean(x["tau"]),
                   "identical_to_plain": int(sum(x["same"])), "n_prompts": len(prompts)}
            rows.append(row)
            print(f"n_max={n_max} {v:9s} {row['tok_s']:8.1f} tok/s  ×plain {row['vs_plain']:.3f}  "
                  f"drafter {row['draft_plus_inject_ms_per_call']:.3f} ms/call  graph reused "
                  f"{100 * row['graph_reused_per_step']:.0f} % of steps  τ {row['tau']:.2f}  "
                  f"identical {row['identical_to_plain']}/{len(prompts)}", flush=True)
        c = next(r for r in rows if r["n_max"] == n_max and r["variant"] == "constant")
        vr = next(r for r in rows if r["n_max"] == n_max and r["variant"] == "varying")
        print(f"n_max={n_max}: constant ÷ varying shape = {c['tok_s'] / vr['tok_s']:.3f}", flush=True)
    info = {"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "system": ps.system_info(),
            "devices": ps.devices(), "target": target, "drafter": drafter, "prompts": a.prompts,
            "max_tokens": a.max_tokens, "n_gpu_layers": a.n_gpu_layers, "plain_tok_s": statistics.mean(plain_rates),
            "rows": rows}
    if a.json:
        Path(a.json).write_text(json.dumps(info, indent=2))
    gen.close()


if __name__ == "__main__":
    main()
