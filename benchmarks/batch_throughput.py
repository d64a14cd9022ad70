"""Throughput of batched generation with and without speculation, for N concurrent sequences.

For each N in ``--n`` the first N prompts run through ``Generator.generate_batch`` (one target
decode per step for all of them; DFlash drafts every sequence's block in one decode), plain
and with each drafter of ``--modes``. Per run: aggregate throughput (tokens committed by all
sequences / seconds after the batch's prefill), per-sequence speed (its tokens / seconds until it
ended; mean and slowest), τ, acceptance, and the speedup over plain decoding at the same N. The
question (issue 14): public reports see DFlash's speedup fall to 1.0× at 8 concurrent sequences;
where does ours stand, and why (``--stages`` prints where the time of a step goes).

    python benchmarks/batch_throughput.py [--target T.gguf --drafter D.gguf] [--prompts DATA.jsonl.gz]
        [--n 1 2 4 8 16 32] [--max-tokens 128] [--n-max 7] [--modes plain,dflash,ngram]
        [-ngl 99] [--reps 1] [--stages] [--json out.json]

Defaults: SmolLM2-135M-Instruct with the DFlash drafter shipped with the package, the held-out
prompts of ``benchmarks/data/smollm2-selfdistill-9170.jsonl.gz``. The loop runs free
(``sync_stages=False``) unless ``--stages`` is given. Every sequence is checked against its own
single run at the largest N (T = 0): ``same_as_alone`` counts the sequences that agree token for
token (all of them on the CPU; on a GPU near-ties may flip, as for speculative vs. plain decoding).
CPU numbers measured on a shared machine are not results: run it on a quiet one.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import pyllama_spec as ps

HERE = Path(__file__).resolve().parent


def load_prompts(path, n: int, max_prompt: int) -> list[list[int]]:
    """Token-id prompts: the held-out prompts of a self-distillation file (cut to ``max_prompt``)."""
    from pyllama_spec.train.features import load_sequences

    seqs = load_sequences(path)
    held = [s for s in seqs if s["split"] == "heldout"] or seqs
    out = [s["tokens"][:min(s["n_prompt"], max_prompt)] for s in held]
    if len(out) < n:
        out = (out * (n // max(1, len(out)) + 1))[:n]
    return out[:n]


def run_one(gen, prompts, mode: str, a) -> dict:
    drafter = None if mode == "plain" else mode
    best = None
    for _ in range(a.reps):
        t0 = time.perf_counter()
        res = gen.generate_batch(prompt_tokens=prompts, drafter=drafter, max_tokens=a.max_tokens,
                                 n_max=None if drafter is None else a.n_max, sync_stages=a.stages)
        wall = time.perf_counter() - t0
        if best is None or res.tokens_per_s > best[0].tokens_per_s:
            best = (res, wall)
    res, wall = best
    per_seq = [r.tokens_per_s for r in res.results]
    st = res.stats
    row = {"mode": mode, "n": len(prompts), "tokens": res.n_generated, "wall_s": wall,
           "prefill_s": res.marks["prefill_done"] - res.marks["prefill_start"],
           "generation_s": res.generation_seconds, "throughput_tok_s": res.tokens_per_s,
           "per_seq_mean_tok_s": statistics.fmean(per_seq), "per_seq_min_tok_s": min(per_seq),
           "steps": max(r.stats.n_steps for r in res.results), "tau": st.mean_accepted_length,
           "acceptance": st.acceptance_rate, "tokens_by_seq": [r.tokens for r in res.results]}
    if a.stages:
        steps = max(1, row["steps"])
        row["ms_per_step"] = {k: 1e3 * v["seconds"] / steps for k, v in res.timings.items()
                              if v["count"] and k not in ("wall", "tokenize", "detokenize")}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter", help="DFlash drafter .gguf (default: the shipped SmolLM2 drafter)")
    ap.add_argument("--prompts", default=str(HERE / "data" / "smollm2-selfdistill-9170.jsonl.gz"))
    ap.add_argument("--n", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--max-prompt", type=int, default=256, help="prompts are cut to this many tokens")
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("--modes", default="plain,dflash", help="comma list of plain, dflash, ngram")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--n-ctx", type=int, default=0, help="per sequence (default: prompt + max_tokens, rounded)")
    ap.add_argument("--reps", type=int, default=1, help="runs per cell (the fastest is kept)")
    ap.add_argument("--stages", action="store_true", help="synchronize at stage boundaries; print ms per step")
    ap.add_argument("--check", action="store_true", help="compare every sequence with its single run (largest N)")
    ap.add_argument("--json")
    a = ap.parse_args()
    from pyllama_spec.assets import smollm2_dflash_path, smollm2_path

    target = a.target or str(smollm2_path())
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    drafters = {}
    if "dflash" in modes:
        drafters["dflash"] = a.drafter or str(smollm2_dflash_path())
    if "ngram" in modes:
        drafters["ngram"] = "ngram"
    n_big = max(a.n)
    prompts = load_prompts(a.prompts, n_big, a.max_prompt)
    n_ctx = a.n_ctx or -(-(max(len(p) for p in prompts) + a.max_tokens + 16) // 256) * 256
    n_batch = max(512, n_big * (a.n_max + 1), max(len(p) for p in prompts))
    t_load = time.perf_counter()
    gen = ps.Generator(target, drafters=drafters, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=min(n_batch, 512),
                       n_parallel=n_big, n_gpu_layers=a.n_gpu_layers)
    t_load = time.perf_counter() - t_load
    print(f"{Path(target).name} + {', '.join(f'{k}={Path(v).name}' for k, v in drafters.items()) or 'no drafter'}; "
          f"{ps.devices()[0]['description'] if ps.devices() else ''}; n_ctx {n_ctx}/seq, n_batch {n_batch}, "
          f"max_tokens {a.max_tokens}, n_max {a.n_max}; loaded in {t_load:.1f} s", flush=True)
    gen.generate_batch(prompt_tokens=prompts[:2], max_tokens=8)  # warm-up (graph reservation, caches)
    rows = []
    hdr = f"{'N':>4} {'mode':<7}{'tok/s':>10}{'×plain':>8}{'per-seq':>9}{'slowest':>9}{'τ':>6}{'accept':>8}{'steps':>7}"
    print(hdr)
    for n in a.n:
        plain = None
        for mode in modes:
            row = run_one(gen, prompts[:n], mode, a)
            if mode == "plain":
                plain = row["throughput_tok_s"]
            row["speedup"] = row["throughput_tok_s"] / plain if plain else None
            rows.append(row)
            sp = f"{row['speedup']:.2f}" if row["speedup"] else "–"
            print(f"{n:>4} {mode:<7}{row['throughput_tok_s']:>10.1f}{sp:>8}{row['per_seq_mean_tok_s']:>9.1f}"
                  f"{row['per_seq_min_tok_s']:>9.1f}{row['tau']:>6.2f}{100 * row['acceptance']:>7.1f}%"
                  f"{row['steps']:>7}", flush=True)
            if a.stages:
                print("      ms/step: " + "  ".join(f"{k} {v:.2f}" for k, v in row["ms_per_step"].items()))
    check = None
    if a.check:
        check = {}
        for mode in modes:
            big = next(r for r in rows if r["n"] == n_big and r["mode"] == mode)
            d = None if mode == "plain" else mode
            same = 0
            for p, toks in zip(prompts, big["tokens_by_seq"]):
                alone = gen.generate(prompt_tokens=p, drafter=d, max_tokens=a.max_tokens, reuse_prefix=False,
                                     n_max=None if d is None else a.n_max)
                same += alone.tokens == toks
            check[mode] = same
            print(f"{mode}: {same}/{n_big} sequences of the N={n_big} batch equal their single runs")
    for r in rows:
        del r["tokens_by_seq"]
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(), "system": ps.system_info(),
                       "devices": ps.devices(), "target": target, "drafters": drafters, "max_tokens": a.max_tokens,
                       "n_max": a.n_max, "n_ctx": n_ctx, "n_batch": n_batch, "stages": a.stages,
                       "env": {k: v for k, v in os.environ.items() if k.startswith("GGML_")},
                       "same_as_alone": check, "rows": rows}, f, indent=2)
    gen.close()


if __name__ == "__main__":
    main()
