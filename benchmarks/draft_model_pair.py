"""A draft-model pair (``draft-simple``) on a few chat prompts: τ, acceptance and speed against
plain decoding of the same target.

Default pair (the only real pair available here, an honest stand-in): the target is
SmolLM2-135M-Instruct with f16 weights dequantized from the Q4_1 file with gguf-py
(``pyllama_spec.assets.smollm2_f16_path``), the drafter the Q4_1 file itself. Both hold the
same rounded values, so the drafter disagrees only where Q4_1 × Q8_1 arithmetic flips the
argmax: an upper bound on what a real small drafter of the family would reach.

    python benchmarks/draft_model_pair.py [--target T.gguf --drafter D.gguf] [--n-max 3 5]
        [--max-tokens 96] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_f16_path, smollm2_path
from pyllama_spec.speculative.stats import SpecStats

PROMPTS = ["Write a JavaScript debounce function.", "What is the capital of France? Answer in one sentence.",
           "Explain what a hash map is to a beginner.", "List three tips for writing clear emails.",
           "Write a Python function that reverses a string."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--n-max", type=int, nargs="+", default=[3, 5])
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("-c", "--n-ctx", type=int, default=2048)
    ap.add_argument("--json")
    a = ap.parse_args()
    target = a.target or str(smollm2_f16_path())
    drafter = a.drafter or str(smollm2_path())
    gen = ps.Generator(target, drafters={"draft": drafter}, n_ctx=a.n_ctx, n_gpu_layers=0)
    chats = [[{"role": "user", "content": p}] for p in PROMPTS]
    gen.generate(messages=chats[0], max_tokens=8)  # warm-up
    plain = [gen.generate(messages=m, max_tokens=a.max_tokens, sync_stages=False) for m in chats]
    base = sum(len(r.tokens) for r in plain) / sum(r.timings["wall"]["seconds"] for r in plain)
    rows = [{"n_max": 0, "tok_s": base}]
    print(f"plain            {base:7.1f} tok/s")
    for n_max in a.n_max:
        stats, n_tok, secs, same = SpecStats(n_max=n_max), 0, 0.0, 0
        for m, ref in zip(chats, plain):
            r = gen.generate(messages=m, drafter="draft", n_max=n_max, max_tokens=a.max_tokens, sync_stages=False)
            stats.merge(r.stats)
            n_tok += len(r.tokens)
            secs += r.timings["wall"]["seconds"]
            same += r.tokens == ref.tokens
        row = {"n_max": n_max, "tok_s": n_tok / secs, "tau": stats.mean_accepted_length,
               "acceptance": stats.acceptance_rate, "accepted_per_position": stats.accepted_per_position,
               "identical_prompts": same}
        rows.append(row)
        print(f"draft n_max={n_max:<2}  {row['tok_s']:7.1f} tok/s  ×{row['tok_s'] / base:.2f}  τ {row['tau']:.2f}  "
              f"acceptance {100 * row['acceptance']:.1f}%  same tokens as plain: {same}/{len(chats)}")
    mem = gen.memory_report()
    print(f"memory (MiB): target {mem['target']}, drafter {mem['drafters']['draft']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "system": ps.system_info(),
                       "target": target, "drafter": drafter, "max_tokens": a.max_tokens, "prompts": PROMPTS,
                       "rows": rows, "memory": mem}, f, indent=2)
    gen.close()


if __name__ == "__main__":
    main()
