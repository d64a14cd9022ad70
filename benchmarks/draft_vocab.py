#!/usr/bin/env python3
"""A DFlash drafter with a reduced draft vocabulary (FR-Spec): τ, drafter-call time and tok/s against its full head.

For each ``--keep`` (rows of the drafter's own head; ``full`` = the target's borrowed head) the reduced drafter is
made from the shipped (or given) one by :mod:`pyllama_spec.draft_vocab`, its tokens ranked by their count in
the train split of the answer files, then every variant and plain decoding answer the same held-out prompts (the
answer files' ``heldout`` split) and, with ``--humaneval N``, the first N HumanEval problems as chat requests,
interleaved per prompt (a shared machine drifts), T = 0, one Generator. Printed per variant: τ, acceptance,
the drafter call (``draft`` stage, ms a call), the verify (ms a step), tok/s and ÷ plain, prompts whose tokens equal
plain decoding's, and the kept set's coverage of the held-out answers' tokens (the share of target tokens a draft
could still name).

    python benchmarks/draft_vocab.py ANSWERS.jsonl.gz [...] [--keep full,32768,16384,8192,4096] [--n-max 7]
        [--n-prompts 24] [--humaneval 0] [--max-tokens 128] [-ngl 0] [--drafter D.gguf] [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import pyllama_spec as ps
from pyllama_spec.assets import humaneval_problems, smollm2_dflash_path, smollm2_path
from pyllama_spec.draft_vocab import eog_ids, head_shape, kept_tokens, token_counts, write_reduced_vocab
from pyllama_spec.train.features import load_sequences


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("answers", nargs="+", help="regen answer files: ranking (train split) and prompts (heldout)")
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--keep", default="full,32768,16384,8192,4096")
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("--n-prompts", type=int, default=24)
    ap.add_argument("--humaneval", type=int, default=0)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0)
    ap.add_argument("--out-dir", help="where the reduced drafters go (default: a temporary folder)")
    ap.add_argument("--json")
    a = ap.parse_args()
    target = a.target or str(smollm2_path())
    drafter = a.drafter or str(smollm2_dflash_path())
    n_vocab = head_shape(target)[2]
    counts = token_counts(a.answers, n_vocab, split="train")
    held_counts = token_counts(a.answers, n_vocab, split="heldout")
    out_dir = Path(a.out_dir or tempfile.mkdtemp(prefix="draft_vocab-"))
    variants: dict[str, str] = {}
    cover: dict[str, float] = {}
    for k in a.keep.split(","):
        if k == "full":
            variants[k], cover[k] = drafter, 1.0
            continue
        ids = kept_tokens(counts, int(k), always=eog_ids(target))
        variants[k] = str(write_reduced_vocab(drafter, target, ids, out_dir / f"dflash-v{k}.gguf"))
        cover[k] = float(held_counts[ids].sum() / max(1, held_counts.sum()))

    prompts: list[dict] = []
    seqs = [s for f in a.answers for s in load_sequences(f) if s["split"] == "heldout"][:a.n_prompts]
    prompts += [{"prompt_tokens": s["tokens"][:s["n_prompt"]]} for s in seqs]
    prompts += [{"messages": [{"role": "user", "content": "Complete the following Python function:\n\n" + p["prompt"]}]}
                for p in humaneval_problems(a.humaneval)] if a.humaneval else []

    gen = ps.Generator(target, drafters={f"v{k}": v for k, v in variants.items()}, n_ctx=4096,
                       n_gpu_layers=a.n_gpu_layers)
    acc = {k: {"stats": ps.SpecStats(n_max=a.n_max), "draft_s": 0.0, "draft_n": 0, "verify_s": 0.0, "verify_n": 0,
               "gen_s": 0.0, "tokens": 0, "same": 0} for k in ["plain", *variants]}
    t0 = time.time()
    for kw in prompts:
        r0 = gen.generate(**kw, max_tokens=a.max_tokens)
        acc["plain"]["gen_s"] += r0.generation_seconds
        acc["plain"]["tokens"] += r0.n_generated
        for k in variants:
            r = gen.generate(**kw, drafter=f"v{k}", n_max=a.n_max, max_tokens=a.max_tokens)
            d = acc[k]
            d["stats"].merge(r.stats)
            d["draft_s"] += r.timings["draft"]["seconds"]
            d["draft_n"] += r.timings["draft"]["count"]
            d["verify_s"] += r.timings["verify"]["seconds"]
            d["verify_n"] += r.timings["verify"]["count"]
            d["gen_s"] += r.generation_seconds
            d["tokens"] += r.n_generated
            d["same"] += r.tokens == r0.tokens
    gen.close()
    plain_tps = acc["plain"]["tokens"] / acc["plain"]["gen_s"]
    rows = []
    for k in variants:
        d = acc[k]
        st = d["stats"]
        tps = d["tokens"] / d["gen_s"]
        rows.append({"keep": k, "coverage_heldout": round(cover[k], 4), "tau": round(st.mean_accepted_length, 3),
                     "acceptance": round(st.acceptance_rate, 4),
                     "accepted_per_position": [round(x, 3) for x in st.accepted_per_position],
                     "draft_ms": round(1e3 * d["draft_s"] / max(1, d["draft_n"]), 3),
                     "verify_ms": round(1e3 * d["verify_s"] / max(1, d["verify_n"]), 3),
                     "tok_s": round(tps, 2), "vs_plain": round(tps / plain_tps, 3),
                     "identical_to_plain": f"{d['same']}/{len(prompts)}",
                     "file_mb": round(os.path.getsize(variants[k]) / 2**20, 2)})
    print(f"{len(prompts)} prompts ({len(seqs)} held-out, {a.humaneval} HumanEval chat), n_max {a.n_max}, "
          f"{a.max_tokens} tokens, T = 0; plain {plain_tps:.1f} tok/s; {time.time() - t0:.0f} s")
    print("| keep | coverage | τ | acceptance | drafter call ms | verify ms | tok/s | ÷ plain | identical | MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['keep']} | {r['coverage_heldout']:.4f} | {r['tau']:.2f} | {100 * r['acceptance']:.1f} % | "
              f"{r['draft_ms']:.2f} | {r['verify_ms']:.2f} | {r['tok_s']:.1f} | {r['vs_plain']:.3f} | "
              f"{r['identical_to_plain']} | {r['file_mb']} |")
    if a.json:
        Path(a.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "system": ps.system_info(),
                                            "devices": ps.devices(), "target": target, "drafter": drafter,
                                            "n_max": a.n_max, "max_tokens": a.max_tokens,
                                            "n_heldout": len(seqs), "n_humaneval": a.humaneval,
                                            "plain_tok_s": plain_tps, "rows": rows,
                                            "answers": [str(p) for p in a.answers]}, indent=1))


if __name__ == "__main__":
    main()
