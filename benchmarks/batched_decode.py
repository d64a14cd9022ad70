"""The cost of one batched decode step as answer regeneration runs it: S KV-cache streams, one new token
each, on a target context sized as ``train.data.answer_batched`` sizes it — per-stream KV (``kv_unified``
False, the default there) against one shared buffer, beside one sequence decoding S rows (the same
matmul shapes, one stream), with and without greedy backend samplers on every stream.

Why: on the H200 the llama regen engine's greedy group decoded 45 rows a step in 53.5 ms (RESULTS.md 15.2)
— 20–40 × what a decode of that many rows of a 135M model costs — so the decode of many streams itself,
not sampling or Python, holds regeneration to ~300 tok/s there. This splits it by configuration.

Configurations per S: one sequence of S rows; S streams with per-stream KV (without and with greedy
samplers); S streams in one unified buffer; S streams that are every other one of 2S (per-stream KV).

    python benchmarks/batched_decode.py TARGET.gguf [--streams 1 16 64 256] [--depth 256] [--per-seq 1792]
        [--reps 10] [-ngl 99] [--profile] [--json out.json]

Prints ms per decode (median of --reps after two warm-ups) per configuration; ``--profile`` adds the
GPU kernels of the slowest configuration (torch.profiler; CUDA only).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

import pyllama_spec as ps
from pyllama_spec.sampler import SamplerChain


def one(model, S, *, unified, streams, samplers, depth, per_seq, reps, n_threads, gaps=False):
    """ms per decode of S rows (median): ``streams`` = S sequences at ``depth`` positions each, else one sequence;
    ``gaps``: the S streams are every other one of 2S (the rest idle), as answer_batched's rows were
    before its fill_gaps (llama.cpp puts only consecutive sequence ids in one ubatch)."""
    n_seq = (2 * S if gaps else S) if streams else 1
    ids = np.arange(0, 2 * S, 2) if gaps else np.arange(S)
    ctx = ps.Context(model, n_ctx=max(n_seq * per_seq, 512), n_batch=max(2048, S), n_ubatch=512,
                     n_seq_max=n_seq, kv_unified=unified, n_threads=n_threads, n_threads_batch=n_threads)
    try:
        if samplers:
            for k in range(n_seq):
                ctx.set_sampler(SamplerChain(), k)
        if streams:  # every stream holds `depth` positions (prefilled a few streams per decode)
            per = max(1, 2048 // depth)
            for k0 in range(0, S, per):
                ks = ids[k0:k0 + per]
                ctx.decode([1] * (depth * len(ks)), np.tile(np.arange(depth), len(ks)),
                           seq_id=np.repeat(ks, depth), logits="none")
        else:
            ctx.decode([1] * depth, np.arange(depth), logits="none")
        ts = []
        for r in range(reps + 2):
            if streams:
                pos, seq = np.full(S, depth + r), ids
            else:
                pos, seq = np.arange(depth + r * S, depth + (r + 1) * S), np.zeros(S, dtype=int)
            t = time.perf_counter()
            ctx.decode([1] * S, pos, seq_id=seq, logits="all")
            if samplers:
                ctx.sampled_tokens()
            else:
                ctx.logits()
            ctx.synchronize()
            ts.append(1e3 * (time.perf_counter() - t))
        return statistics.median(ts[2:])
    finally:
        ctx.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 16, 64, 256])
    ap.add_argument("--depth", type=int, default=256, help="positions each stream holds before the timed decodes")
    ap.add_argument("--per-seq", type=int, default=1792, help="KV cells per stream (answer_batched: prompt + answer)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("-t", "--threads", type=int)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    model = ps.Model(a.target, n_gpu_layers=a.n_gpu_layers)
    rows = []
    worst = None
    for S in a.streams:
        for label, kw in (("one sequence", dict(unified=False, streams=False, samplers=False)),
                          ("streams, per-stream KV", dict(unified=False, streams=True, samplers=False)),
                          ("streams, per-stream KV, greedy samplers", dict(unified=False, streams=True, samplers=True)),
                          ("streams, unified KV", dict(unified=True, streams=True, samplers=False)),
                          ("streams, per-stream KV, every other one idle",
                           dict(unified=False, streams=True, samplers=False, gaps=True))):
            if S == 1 and kw["streams"] and (kw["unified"] or kw.get("gaps")):
                continue
            ms = one(model, S, depth=a.depth, per_seq=a.per_seq, reps=a.reps, n_threads=a.threads, **kw)
            rows.append({"rows": S, "config": label, "ms": ms, "tok_s": 1e3 * S / ms})
            print(f"S={S:4d}  {label:42s} {ms:8.2f} ms per decode  {1e3 * S / ms:9.0f} tok/s", flush=True)
            if kw["streams"] and (worst is None or ms / S > worst[0]):
                worst = (ms / S, S, kw)
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "host": platform.node(), "devices": ps.devices(),
           "target": a.target, "depth": a.depth, "per_seq": a.per_seq, "rows": rows}
    if a.profile and worst is not None:
        import torch  # after pyllama_spec (README: import order on the H200 image)
        from torch.profiler import ProfilerActivity, profile

        if torch.cuda.is_available():
            _, S, kw = worst
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                one(model, S, depth=a.depth, per_seq=a.per_seq, reps=3, n_threads=a.threads, **kw)
            table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
            print(f"\nprofile of S={S} {kw} (3 reps + set-up):\n{table}")
            out["profile"] = table
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
