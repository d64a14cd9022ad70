"""Sampling at T > 0 against greedy decoding, side by side in one run.

For plain decoding and for speculative decoding with a DFlash drafter (match and rejection
rules), at temperature 0 and ``--temperature``, with sampling inside llama.cpp's decode graph
(backend sampling, the default) and on the host (numpy): tokens/s after prefill, τ, and
tokens/s per unit τ — the speed a step runs at, whatever the acceptance (T > 0 accepts less).

    python benchmarks/sampling_speed.py [--target T.gguf --drafter D.gguf] [--temperature 0.8]
        [--top-k 0] [--top-p 1.0] [--n-max 7] [--max-tokens 256] [--runs 3] [--json out.json]

Defaults: SmolLM2-135M-Instruct, the shipped DFlash drafter, the demo's first chat turn.
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import pyllama_spec as ps

CHAT = [{"role": "user", "content": "Write a JavaScript debounce function."}]


def main() -> None:
    from pyllama_spec.assets import smollm2_dflash_path, smollm2_path

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=0)
    ap.add_argument("--top-p", type=float, default=1.0)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--json")
    a = ap.parse_args()
    gen = ps.Generator(a.target or smollm2_path(), drafters={"dflash": a.drafter or smollm2_dflash_path()},
                       n_ctx=2048, n_gpu_layers=a.n_gpu_layers)
    toks = gen.tokenize_prompt(messages=CHAT)
    gen.generate(prompt_tokens=toks, max_tokens=16)  # warm-up
    rows = []
    configs = [(None, "match"), ("dflash", "match"), ("dflash", "rejection")]
    for drafter, verify in configs:
        for backend in (True, False):
            for temp in (0.0, a.temperature):
                rates, taus = [], []
                for run in range(a.runs):
                    spec = ps.SpecConfig(drafter=drafter, n_max=a.n_max if drafter else None, verify=verify,
                                         sync_stages=False, backend_sampling=backend)
                    sp = ps.SamplingParams(temperature=temp, top_k=a.top_k if temp else 0,
                                           top_p=a.top_p if temp else 1.0, seed=run)
                    r = gen.generate(prompt_tokens=toks, max_tokens=a.max_tokens, spec=spec, sampling=sp)
                    rates.append(r.tokens_per_s)
                    taus.append(r.stats.mean_accepted_length)
                row = {"drafter": drafter, "verify": verify, "backend_sampling": backend, "temperature": temp,
                       "tok_s": statistics.median(rates), "tau": statistics.mean(taus)}
                row["tok_s_per_tau"] = row["tok_s"] / row["tau"]
                rows.append(row)
    for r in rows:
        base = next(x for x in rows if x["drafter"] == r["drafter"] and x["verify"] == r["verify"]
                    and x["backend_sampling"] == r["backend_sampling"] and x["temperature"] == 0.0)
        r["vs_greedy"] = r["tok_s"] / base["tok_s"]
        r["per_tau_vs_greedy"] = r["tok_s_per_tau"] / base["tok_s_per_tau"]
        print(f"{r['drafter'] or 'plain':<7} {r['verify']:<10} {'backend' if r['backend_sampling'] else 'host   '} "
              f"T={r['temperature']:<4} {r['tok_s']:8.1f} tok/s  τ {r['tau']:.2f}  "
              f"tok/s per τ {r['tok_s_per_tau']:7.1f}"
              f"  vs T=0: ×{r['vs_greedy']:.2f} (per τ ×{r['per_tau_vs_greedy']:.2f})", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(), "devices": ps.devices(),
                       "llama_cpp": ps._ffi.LLAMA_CPP_BUILD, "settings": vars(a), "rows": rows}, f, indent=1)
    gen.close()


if __name__ == "__main__":
    main()
