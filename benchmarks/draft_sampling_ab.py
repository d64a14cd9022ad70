"""draft-simple's greedy drafts drawn in the draft model's decode graph (``backend_sampling``, the default since
2026-12-06) against the host's argmax over each draft token's logits, side by side in one run: tok/s of each, their
ratio and whether the outputs are the same (they must be).

Why: with the shipped SmolLM2 draft model our loop ran at 0.94–0.97 × ``llama-speculative-simple`` on an H100
(RESULTS.md 15.9), when every draft token's 49 152 logits came back to the host; on 2 CPU cores the two ways were
equal (31.6 vs 31.8 tok/s, 6 prompts × 64 tokens, n_max 7). Alternating per prompt, the order reversed every
other round.

    python benchmarks/draft_sampling_ab.py [--n-prompts 8] [--max-tokens 128] [--n-max 7] [-ngl 99] [--rounds 2]
"""
from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_draft_path, smollm2_path

HELD = Path(__file__).parent / "data" / "issue20-h200-torch" / "heldout-greedy.jsonl.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", help="a draft model .gguf (default: the shipped SmolLM2 one)")
    ap.add_argument("--prompts", default=str(HELD), help="held-out answers (JSON lines with prompt_tokens)")
    ap.add_argument("--n-prompts", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    gen = ps.Generator(smollm2_path(), drafters={"draft": a.drafter or smollm2_draft_path()}, n_ctx=4096,
                       n_gpu_layers=a.n_gpu_layers)
    with gzip.open(a.prompts, "rt") as fh:
        prompts = [json.loads(line)["prompt_tokens"] for line in fh][:a.n_prompts]
    d = gen.drafters["draft"]
    gen.generate("Hello", drafter="draft", n_max=a.n_max, max_tokens=8)  # (first graphs)
    tokens = {True: 0, False: 0}
    secs = {True: 0.0, False: 0.0}
    same = True
    for rnd in range(a.rounds):
        for p in prompts:
            out = {}
            for flag in ((True, False) if rnd % 2 == 0 else (False, True)):
                d.backend_sampling = flag
                t = time.perf_counter()
                r = gen.generate(prompt_tokens=p, drafter="draft", n_max=a.n_max, max_tokens=a.max_tokens)
                secs[flag] += time.perf_counter() - t
                tokens[flag] += len(r.tokens)
                out[flag] = r.tokens
            same &= out[True] == out[False]
    d.backend_sampling = True
    rate = {k: tokens[k] / secs[k] for k in tokens}
    print(f"draft-simple, n_max {a.n_max}, {len(prompts)} prompts × {a.max_tokens} tokens × {a.rounds} rounds: "
          f"drawn in the graph {rate[True]:.1f} tok/s, host argmax {rate[False]:.1f} tok/s, "
          f"graph ÷ host {rate[True] / rate[False]:.3f}; identical outputs: {same}")
    if a.json:
        Path(a.json).write_text(json.dumps({"graph_tok_s": rate[True], "host_tok_s": rate[False], "identical": same,
                                            "settings": vars(a), "system": ps.system_info()}, indent=1))


if __name__ == "__main__":
    main()
