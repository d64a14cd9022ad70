"""A chat that grows turn by turn: each call keeps the caches' common prefix with the new history
(``reuse_prefix``, the default) and prefills only the new tokens — against the same chat from empty
caches. Then the conversation is saved, replaced, and continued from the saved state.

    python examples/chat_reuse.py [--target T.gguf] [--drafter D.gguf] [--max-tokens 64] [-ngl 99]

Defaults: SmolLM2-135M-Instruct and its shipped DFlash drafter. Prints, per turn, the prompt length,
the tokens kept and prefilled, the prefill time with and without reuse, and whether both give the
same answer (T = 0; see the note the script prints about why they may not, and ``--n-ubatch``).
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pyllama_spec as ps

QUESTIONS = ["Write a Python function that checks whether a number is prime.",
             "Now make it faster for large numbers.",
             "Add type annotations and a docstring.",
             "Write three unit tests for it.",
             "Explain the complexity of the fast version in two sentences.",
             "Rewrite the function in JavaScript."]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--n-ubatch", type=int, default=512,
                    help="≤ 63 makes the CPU backend compute every batch with the kernels of the verify steps "
                         "(see the note at the end)")
    a = ap.parse_args()
    from pyllama_spec.assets import smollm2_dflash_path, smollm2_path

    target = a.target or str(smollm2_path())
    drafters = {"dflash": a.drafter or str(smollm2_dflash_path())}
    gen = ps.Generator(target, drafters=drafters, n_ctx=4096, n_ubatch=a.n_ubatch, n_gpu_layers=a.n_gpu_layers)
    msgs: list = []
    state = None
    total = {"prompt": 0, "reused": 0, "warm_s": 0.0, "cold_s": 0.0}
    print(f"{'turn':>4}{'prompt':>8}{'kept':>7}{'prefilled':>11}{'prefill ms':>12}{'cold ms':>9}  same answer")
    for i, q in enumerate(QUESTIONS, 1):
        msgs.append({"role": "user", "content": q})
        if state is not None:  # the last cold run replaced the caches: put the conversation back
            gen.load_state(state)
        warm = gen.generate(messages=msgs, drafter="dflash", max_tokens=a.max_tokens)
        state = gen.save_state()
        # the same prompt from empty caches (after the warm run: turn 1's warm run starts empty too)
        cold = gen.generate(messages=msgs, drafter="dflash", max_tokens=a.max_tokens, reuse_prefix=False)
        print(f"{i:>4}{warm.n_prompt:>8}{warm.n_reused:>7}{warm.n_prefill:>11}{1e3 * warm.prefill_seconds:>12.1f}"
              f"{1e3 * cold.prefill_seconds:>9.1f}  {warm.tokens == cold.tokens}")
        total["prompt"] += warm.n_prompt
        total["reused"] += warm.n_reused
        total["warm_s"] += warm.prefill_seconds
        total["cold_s"] += cold.prefill_seconds
        msgs.append({"role": "assistant", "content": warm.text})
    print(f"{len(QUESTIONS)} turns: {total['reused']} of {total['prompt']} prompt tokens kept "
          f"({100 * total['reused'] / total['prompt']:.0f}%); prefill {1e3 * total['warm_s']:.1f} ms instead of "
          f"{1e3 * total['cold_s']:.1f} ms")
    print("(a kept prefix was computed by the last turn's verify steps, a cold prompt by one large batch; llama.cpp "
          "computes them with different kernels — on the CPU, flash attention is tiled from 64 tokens per ubatch — "
          "so a near-tie can go the other way, as with llama.cpp's own prompt cache. --n-ubatch 32 on the CPU: equal)")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "chat.npz"
        state.save(path)
        gen.generate("Something else entirely.", max_tokens=8)  # the caches now hold another text
        gen.load_state(ps.ConversationState.load(path))
        msgs.append({"role": "user", "content": "Thanks! One more test, please."})
        r = gen.generate(messages=msgs, drafter="dflash", max_tokens=a.max_tokens)
        print(f"continued from a saved state ({path.stat().st_size / 2**20:.1f} MiB on disk): {r.n_reused} of "
              f"{r.n_prompt} prompt tokens kept, {r.n_prefill} prefilled")
    gen.close()


if __name__ == "__main__":
    main()
