"""Answer throughput of the ``torch`` regen engine (``train/static_kv.py``) on a GPU, without the compiled
package: a SmolLM2-shaped llama (random weights, or a GGUF loaded by transformers) answers synthetic
prompts; prints tok/s, ms per decode step and rows per step by slot count, and how far its greedy
answers agree with transformers' one-prompt ``generate`` (bf16: kernels round differently, so
answers part at near-ties; float32: equal).

    python benchmarks/regen_engine_speed.py [--gguf SmolLM2.gguf] [--slots 256 512 1024] [--prompts 2048]
        [--max-tokens 512] [--dtype bfloat16] [--json out.json]

Runs from a source checkout where the native extension is not built (the H200 before our wheel is
installed): ``pyllama_spec.train.static_kv`` needs only torch, so the package's ``__init__`` (which loads
llama.cpp) is bypassed when it cannot be imported.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path


def _import_engine():
    try:
        from pyllama_spec.train.static_kv import StaticKVGenerator
    except ImportError:  # no compiled extension: load the pure-torch module alone
        root = Path(__file__).resolve().parents[1] / "pyllama_spec"
        for name, path in (("pyllama_spec", root), ("pyllama_spec.train", root / "train")):
            mod = types.ModuleType(name)
            mod.__path__ = [str(path)]
            sys.modules[name] = mod
        from pyllama_spec.train.static_kv import StaticKVGenerator
    return StaticKVGenerator


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gguf", help="a llama-family GGUF (default: random SmolLM2-135M-shaped weights)")
    ap.add_argument("--slots", type=int, nargs="+", default=[512])
    ap.add_argument("--prompts", type=int, default=2048)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--n-ctx", type=int, default=1536)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--sampled", action="store_true", help="T = 0.7 (Gumbel-max in the graph) instead of greedy")
    ap.add_argument("--check", type=int, default=4, help="prompts compared with transformers generate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    a = ap.parse_args()

    import numpy as np
    import torch
    import transformers

    StaticKVGenerator = _import_engine()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = getattr(torch, a.dtype)
    torch.manual_seed(a.seed)
    t0 = time.time()
    if a.gguf:
        p = Path(a.gguf)
        model = transformers.AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, dtype=dtype)
    else:
        cfg = transformers.LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                                       num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
                                       rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
        model = transformers.AutoModelForCausalLM.from_config(cfg).to(dtype)
    model = model.to(dev).eval()
    load_s = time.time() - t0
    rng = np.random.default_rng(a.seed)
    V = model.config.vocab_size
    lens = np.clip(rng.lognormal(np.log(120), 0.7, a.prompts).astype(int), 8, a.n_ctx - a.max_tokens)
    prompts = [rng.integers(2, V, n).tolist() for n in lens]
    # a random model rarely says EOG: 64 ids act as ends, so answers end at varied lengths as real ones do
    eog = [int(x) for x in rng.choice(V, 64, replace=False)]
    out = {"device": torch.cuda.get_device_name() if dev == "cuda" else "cpu", "torch": torch.__version__,
           "transformers": transformers.__version__, "dtype": a.dtype, "load_s": load_s, "runs": []}
    temps = [0.7] * len(prompts) if a.sampled else None
    for S in a.slots:
        gen = StaticKVGenerator(model, n_slots=S, n_ctx=a.n_ctx, prefill_tokens=max(16384, a.n_ctx))
        warm = dict(gen.generate(prompts[:S], max_tokens=8, eog=eog, temperatures=temps and temps[:S]))  # graphs
        assert len(warm) == S
        tm: dict = {}
        torch.cuda.synchronize() if dev == "cuda" else None
        t1 = time.time()
        n_tok = n_ans = 0
        for _, ans in gen.generate(prompts, max_tokens=a.max_tokens, eog=eog, temperatures=temps, timing=tm):
            n_tok += len(ans)
            n_ans += 1
        secs = time.time() - t1
        steps = max(tm.get("steps", 1), 1)
        r = {"slots": S, "answers": n_ans, "answer_tokens": n_tok, "seconds": secs, "tok_s": n_tok / secs,
             "steps": tm.get("steps", 0), "rows_per_step": tm.get("rows", 0) / steps,
             "decode_ms": 1e3 * tm.get("decode_s", 0) / steps, "host_ms": 1e3 * tm.get("host_s", 0) / steps,
             "prefill_s": tm.get("prefill_s", 0), "graphs": len(gen._graphs),
             "gpu_mem_gib": torch.cuda.max_memory_allocated() / 2**30 if dev == "cuda" else None}
        out["runs"].append(r)
        print(f"slots {S}: {n_ans} answers, {n_tok} tokens in {secs:.1f} s = {r['tok_s']:.0f} tok/s; "
              f"{r['steps']} steps of {r['rows_per_step']:.0f} rows, decode {r['decode_ms']:.2f} ms, host "
              f"{r['host_ms']:.2f} ms a step, prefill {r['prefill_s']:.1f} s; {r['graphs']} graphs; "
              f"max GPU memory {r['gpu_mem_gib'] or 0:.1f} GiB", flush=True)
        del gen
        if dev == "cuda":
            torch.cuda.empty_cache()
    if a.check:
        gen = StaticKVGenerator(model, n_slots=a.check, n_ctx=a.n_ctx, prefill_tokens=max(16384, a.n_ctx))
        mine = dict(gen.generate(prompts[:a.check], max_tokens=64, eog=eog))
        agree = []
        for i in range(a.check):
            ids = torch.tensor([prompts[i]], device=dev)
            with torch.no_grad():
                g = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=64,
                                   do_sample=False, eos_token_id=eog, pad_token_id=eog[0])
            ref = g[0, ids.shape[1]:].tolist()
            n = next((j for j, (x, y) in enumerate(zip(mine[i], ref)) if x != y), min(len(mine[i]), len(ref)))
            agree.append(n)
        out["check"] = {"tokens_equal_before_first_difference": agree, "of": 64}
        print(f"greedy answers equal to transformers generate for the first {agree} of 64 tokens", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
