"""τ and acceptance per position of a trained drafter (DFlash, EAGLE-3 or draft model: the
file's architecture says which) on the held-out prompts of a self-distillation file, through our
loop (T = 0), with plain decoding timed alongside.

    python benchmarks/heldout_tau.py DATA.jsonl[.gz] [--drafter D.gguf] [--n-prompts 60]
        [--max-tokens 256] [--n-max 7] [-ngl 99] [--json out.json]

Defaults: SmolLM2-135M-Instruct and the drafter shipped with the package.
"""
from __future__ import annotations

import argparse
import json
import time

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
from pyllama_spec.train.features import load_sequences
from pyllama_spec.train.pipeline import evaluate_loop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--n-prompts", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--json")
    a = ap.parse_args()
    target = a.target or str(smollm2_path())
    drafter = a.drafter or str(smollm2_dflash_path())
    t0 = time.time()
    res = evaluate_loop(target, drafter, load_sequences(a.data), n_max=a.n_max, n_gpu_layers=a.n_gpu_layers,
                        max_prompts=a.n_prompts, max_tokens=a.max_tokens)
    if "skipped" in res:
        raise SystemExit(res["skipped"])
    res.update(date=time.strftime("%Y-%m-%d"), system=ps.system_info(), devices=ps.devices(), target=target,
               drafter=drafter, max_tokens=a.max_tokens, n_gpu_layers=a.n_gpu_layers, seconds=time.time() - t0)
    print(f"{res['n_prompts']} held-out prompts, {a.max_tokens} tokens, n_max {a.n_max}: τ {res['tau']:.3f}, "
          f"acceptance {100 * res['acceptance_rate']:.1f}%, per position "
          + " ".join(f"{p:.2f}" for p in res["accepted_per_position"])
          + f"; plain {res['plain_tok_s']:.1f} tok/s, {res['kind']} {res['spec_tok_s']:.1f} tok/s "
          f"(×{res['spec_tok_s'] / res['plain_tok_s']:.2f}); identical to plain: "
          f"{res['n_identical_to_plain']} of {res['n_prompts']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
