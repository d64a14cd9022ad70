"""The speculative loop replayed in torch with the shipped draft model (transformers loading its GGUF) on the
stored greedy answers of the first 60 held-out prompts, 128 answer tokens each: τ = tokens / steps, and the
acceptance per position (RESULTS.md 15.9: against the loop's τ on the same prompts).

    python replay_draft_hf.py benchmarks/data/issue20-h200-torch/heldout-greedy.jsonl.gz \\
        pyllama_spec/data/smollm2-135m-instruct-draft-q8_0.gguf
"""
import gzip
import json
import sys
import time
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM

N_PROMPTS, N_TOKENS, N_MAX = 60, 128, 7

torch.set_num_threads(2)
gguf = Path(sys.argv[2]).resolve()
m = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32).eval()
with gzip.open(sys.argv[1], "rt") as fh:
    rows = [json.loads(line) for line in fh][:N_PROMPTS]
n_tokens = n_steps = 0
accepted_at, t0 = [0] * N_MAX, time.time()
with torch.no_grad():
    for r in rows:
        prompt, answer = r["prompt_tokens"], r["answer_tokens"][:N_TOKENS]
        pos = 0
        while pos < len(answer):
            out = m(torch.tensor([prompt + answer[:pos]]), use_cache=True)
            past, drafts = out.past_key_values, [int(out.logits[0, -1].argmax())]
            for _ in range(N_MAX - 1):
                out = m(torch.tensor([[drafts[-1]]]), past_key_values=past, use_cache=True)
                past = out.past_key_values
                drafts.append(int(out.logits[0, -1].argmax()))
            k = 0
            while k < N_MAX and pos + k < len(answer) and drafts[k] == answer[pos + k]:
                k += 1
            for i in range(k):
                accepted_at[i] += 1
            n = min(k + 1, len(answer) - pos)
            pos, n_tokens, n_steps = pos + n, n_tokens + n, n_steps + 1
print(f"replay tau {n_tokens / n_steps:.3f} ({n_steps} steps, {time.time() - t0:.0f} s); per position",
      " ".join(f"{a / n_steps:.2f}" for a in accepted_at))
