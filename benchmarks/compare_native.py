"""Our Python loop vs llama.cpp's native ``llama-speculative-simple`` on the same files, prompt
and n_max, in alternating runs; and plain decoding vs ``llama-completion``.

Prints, per configuration, the generation speed of each (tokens/s after prefill, median of
--runs), their ratio, and whether the tokens are identical. Needs the package built with
``-C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON``.

    python benchmarks/compare_native.py [--target T.gguf --drafter D.gguf] [--n-max 1 4 7]
        [--max-tokens 128] [--runs 3] [-ngl 99] [--json out.json]

Defaults: SmolLM2-135M-Instruct and a random DFlash drafter of its shape (block 8).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import pyllama_spec as ps
from pyllama_spec.assets import random_dflash_for_smollm2, smollm2_path
from pyllama_spec.native import run_completion, run_speculative_simple

CHAT = [{"role": "user", "content": "Write a JavaScript debounce function."}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--n-max", type=int, nargs="+", default=[1, 4, 7])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("-c", "--n-ctx", type=int, default=2048)
    ap.add_argument("--json", help="also write the numbers here")
    a = ap.parse_args()
    target = a.target or str(smollm2_path())
    drafter = a.drafter or str(random_dflash_for_smollm2())
    gen = ps.Generator(target, drafters={"dflash": drafter}, n_ctx=a.n_ctx, n_gpu_layers=a.n_gpu_layers)
    prompt_text = gen.model.vocab.detokenize(gen.tokenize_prompt(messages=CHAT), unparse_special=True)
    vocab = gen.model.vocab
    gen.generate(messages=CHAT, max_tokens=16)  # warm-up

    def pieces(tokens):
        return b"".join(vocab.token_to_piece(t, special=True) for t in tokens)

    rows = []
    configs = [0, *a.n_max]
    for n_max in configs:
        ours_free, ours_sync, native = [], [], []
        same = True
        for _ in range(a.runs):
            if n_max == 0:
                nat = run_completion(target, prompt_text, n_predict=a.max_tokens, n_ctx=a.n_ctx,
                                     n_gpu_layers=a.n_gpu_layers)
            else:
                nat = run_speculative_simple(target, drafter, prompt_text, n_max=n_max, n_predict=a.max_tokens,
                                             n_ctx=a.n_ctx, n_gpu_layers=a.n_gpu_layers)
            native.append(nat.decode_tokens_per_s)
            name = None if n_max == 0 else "dflash"
            r = gen.generate(messages=CHAT, drafter=name, n_max=n_max or None, max_tokens=a.max_tokens,
                             sync_stages=False)
            ours_free.append(r.tokens_per_s)
            rs = gen.generate(messages=CHAT, drafter=name, n_max=n_max or None, max_tokens=a.max_tokens,
                              sync_stages=True)
            ours_sync.append(rs.tokens_per_s)
            ours_bytes = pieces(r.tokens) if n_max == 0 else pieces(r.prompt_tokens) + pieces(r.tokens)
            out = nat.stdout if n_max == 0 else nat.stdout.lstrip(b"\n")
            same &= out.startswith(ours_bytes) and r.tokens == rs.tokens
        row = {"n_max": n_max, "native_tok_s": statistics.median(native),
               "ours_tok_s": statistics.median(ours_free), "ours_sync_tok_s": statistics.median(ours_sync),
               "acceptance": r.stats.acceptance_rate, "tau": r.stats.mean_accepted_length, "identical": same}
        row["ratio"] = row["ours_tok_s"] / row["native_tok_s"]
        rows.append(row)
        print(f"n_max={n_max:<3} native {row['native_tok_s']:8.1f} tok/s   ours {row['ours_tok_s']:8.1f} tok/s "
              f"(sync {row['ours_sync_tok_s']:8.1f})   ours/native {row['ratio']:.3f}   "
              f"τ {row['tau']:.2f}   identical tokens: {same}", flush=True)
    info = {"date": time.strftime("%Y-%m-%d"), "host": platform.node(), "system": ps.system_info(),
            "devices": ps.devices(), "target": target, "drafter": drafter, "max_tokens": a.max_tokens,
            "runs": a.runs, "n_gpu_layers": a.n_gpu_layers, "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(info, f, indent=2)
    gen.close()


if __name__ == "__main__":
    main()
