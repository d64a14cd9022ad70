"""The README demo: where does the time of speculative decoding go?

A real model (fetched through pip on first use) answers a four-turn JavaScript coding chat — like
the task of the study that motivated this project (docs/study.md) — once with plain decoding and once
with a drafter, and prints the per-stage timing and acceptance table of each turn, then the memory
of the target and the drafter.

    python examples/stage_timing.py [--model smollm2|qwen2.5-coder-0.5b|gemma3-270m]
        [--drafter PATH] [--n-max 4] [--max-tokens 128] [--no-sync]

Models (``pyllama_spec.assets``): ``smollm2`` (SmolLM2-135M-Instruct, the default),
``qwen2.5-coder-0.5b`` (Qwen2.5-Coder-0.5B-Instruct; its own chat template) and ``gemma3-270m``
(Gemma-3-270M, a base model: each turn is a raw code prefix to complete, no chat template).
The drafter is a DFlash drafter: --drafter, else the one shipped for that model (SmolLM2 has
one), else, for SmolLM2 only, a random one of its shape (never right: the cost of speculation).
A model without a DFlash drafter runs plain + n-gram speculation (``--spec-type ngram``).
"""
from __future__ import annotations

import argparse

import pyllama_spec as ps
from pyllama_spec.assets import MODELS, asset, model_path, random_dflash_for_smollm2, shipped_dflash_path

TURNS = [
    "Write a JavaScript debounce function.",
    "Add a `leading` option so the first call can fire immediately.",
    "Write Jest tests for it.",
    "Now convert the function to TypeScript with proper types.",
]
# the same four tasks as code prefixes, for a base model (raw completion: no chat template)
COMPLETIONS = [
    "// debounce.js: call `fn` once `wait` ms have passed without another call\nfunction debounce(fn, wait) {\n",
    "// debounce with a `leading` option: the first call can fire immediately\n"
    "function debounce(fn, wait, { leading = false } = {}) {\n",
    "// debounce.test.js: Jest tests for debounce\nconst debounce = require('./debounce');\n\n"
    "jest.useFakeTimers();\n\ntest('calls the function once after the wait', () => {\n",
    "// debounce.ts: a typed debounce\nexport function debounce<A extends unknown[]>(\n"
    "  fn: (...args: A) => void,\n  wait: number,\n",
]


def pick_drafter(name: str, given: str | None) -> tuple[str, str | None, str]:
    """(drafter name for generate(), DFlash path or None, description)."""
    if given:
        return "dflash", given, "given on the command line"
    try:
        shipped = shipped_dflash_path(name)
    except ps.ModelLoadError:  # an installation without its data files
        shipped = None
        if name == "smollm2":
            return "dflash", str(random_dflash_for_smollm2()), "random weights (never right)"
    if shipped is not None:
        return "dflash", str(shipped), "trained by pyllama_spec.train, shipped with the package"
    return "ngram", None, f"no DFlash drafter ships for {name}: n-gram speculation (prompt lookup)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2", choices=list(MODELS), help="the target (default: smollm2)")
    ap.add_argument("--drafter", help="a DFlash drafter .gguf for the chosen model")
    ap.add_argument("--n-max", type=int, default=4, help="draft tokens per step (the article used 4)")
    ap.add_argument("--max-tokens", type=int, default=128, help="tokens per answer")
    ap.add_argument("--no-sync", action="store_true", help="let the loop run free (no per-stage sync)")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    a = ap.parse_args()
    target = model_path(a.model, progress=True)
    chat = asset(a.model).chat
    spec_name, dflash, kind = pick_drafter(a.model, a.drafter)
    print(f"target : {target} ({'chat' if chat else 'base model: raw completion'})\n"
          f"drafter: {dflash or spec_name} ({kind})\nsystem : {ps.system_info()}\n")
    drafters = {"dflash": dflash} if dflash else {"ngram": "ngram"}
    gen = ps.Generator(target, drafters=drafters, n_ctx=4096, n_gpu_layers=a.n_gpu_layers)
    for name in (None, spec_name):
        messages = [{"role": "system", "content": "You are a helpful coding assistant."}]
        print("=" * 72)
        print(f"drafter = {name}")
        for i, question in enumerate(TURNS, 1):
            if chat:
                messages.append({"role": "user", "content": question})
                res = gen.generate(messages=messages, drafter=name, max_tokens=a.max_tokens, n_max=a.n_max,
                                   sync_stages=not a.no_sync)
                messages.append({"role": "assistant", "content": res.text})
            else:
                res = gen.generate(COMPLETIONS[i - 1], drafter=name, max_tokens=a.max_tokens, n_max=a.n_max,
                                   sync_stages=not a.no_sync)
            print(f"\n--- turn {i}: {question}")
            print(res.text[:200].rstrip() + (" …" if len(res.text) > 200 else ""))
            print(res.report())
    print("=" * 72)
    mem = gen.memory_report()
    for who, m in [("target", mem["target"]), *mem["drafters"].items()]:
        if not m:  # the n-gram drafter has no model
            continue
        print(f"{who:<7} weights {m['weights_mib']:8.1f} MiB   KV cache {m['kv_cache_mib']:8.1f} MiB   "
              f"compute {m['compute_mib']:8.1f} MiB")
    gen.close()


if __name__ == "__main__":
    main()
