"""Replay the speculative loop in torch with the draft model (loaded by transformers from its GGUF) on the stored
greedy answers of the first 60 held-out code prompts, 128 answer tokens each: tau = tokens / steps."""
import gzip, json, sys, time
import torch
from transformers import AutoModelForCausalLM
torch.set_num_threads(2)
m = AutoModelForCausalLM.from_pretrained("/tmp/rp", gguf_file="draft.gguf", dtype=torch.float32).eval()
rows = [json.loads(l) for l in gzip.open(sys.argv[1], "rt")][:60]
N, NMAX = 128, 7
tot_tok = tot_steps = 0
acc_at = [0] * NMAX; tried_at = [0] * NMAX
t0 = time.time()
with torch.no_grad():
    for r in rows:
        p, a = r["prompt_tokens"], r["answer_tokens"][:N]
        pos = 0
        while pos < len(a):
            ctx = torch.tensor([p + a[:pos]])
            out = m(ctx, use_cache=True)
            past, nxt = out.past_key_values, int(out.logits[0, -1].argmax())
            drafts = [nxt]
            for _ in range(NMAX - 1):
                o = m(torch.tensor([[drafts[-1]]]), past_key_values=past, use_cache=True)
                past = o.past_key_values
                drafts.append(int(o.logits[0, -1].argmax()))
            k = 0
            while k < NMAX and pos + k < len(a) and drafts[k] == a[pos + k]:
                k += 1
            for i in range(min(NMAX, k + 1)):
                tried_at[i] += 1
            for i in range(k):
                acc_at[i] += 1
            n = min(k + 1, len(a) - pos)
            pos += n; tot_tok += n; tot_steps += 1
print(f"replay tau {tot_tok / tot_steps:.3f} ({tot_steps} steps, {time.time() - t0:.0f} s); per position",
      " ".join(f"{acc_at[i] / max(tried_at[0], 1):.2f}" for i in range(NMAX)))
