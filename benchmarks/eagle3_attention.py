"""EAGLE-3's training-time test, its two attention paths side by side (issue 20): the unrolled forward and backward
of a SmolLM2-shaped head (576 wide, 9 heads, 7 steps) with ``Eagle3Model.attention = "explicit"`` (the scores written
out, as EAGLE-3 trained at 2.9 steps a second on an H100, RESULTS.md 15.9) and ``"sdpa"`` (one fused attention call
a step, the default since 2026-12-06), alternating, plus the peak GPU memory of each.

    python benchmarks/eagle3_attention.py [--batch 8] [--seq 1024] [--reps 5] [--dtype bf16]

On the CPU machine both run torch's math path (the same work): the GPU is where they differ.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from pyllama_spec.train.eagle3 import Eagle3Config, Eagle3Model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if a.dtype == "bf16" and dev.type == "cuda" else torch.float32
    torch.manual_seed(0)
    c = Eagle3Config(n_embd=576, n_head=9, n_head_kv=3, head_dim=64, n_ff=1536, n_vocab=49152,
                     target_layer_ids=[2, 15, 27], n_steps=a.steps)
    m = Eagle3Model(c, torch.randn(49152, 576) * 0.02, torch.randn(49152, 576) * 0.02).to(dev)
    f = torch.randn(a.batch, a.seq, 3 * 576, device=dev)
    tok = torch.randint(0, 49152, (a.batch, a.seq + a.steps), device=dev)
    times: dict[str, list[float]] = {"explicit": [], "sdpa": []}
    peak: dict[str, float] = {}
    for r in range(a.reps + 1):  # (round 0 warms up and is not kept)
        for how in ("explicit", "sdpa") if r % 2 == 0 else ("sdpa", "explicit"):
            m.attention = how
            m.zero_grad(set_to_none=True)
            if dev.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            t = time.perf_counter()
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
                hs = m.unroll(f, tok, a.steps)
                loss = sum(h.float().square().mean() for h in hs)
            loss.backward()  # type: ignore[union-attr]
            if dev.type == "cuda":
                torch.cuda.synchronize()
                peak[how] = torch.cuda.max_memory_allocated() / 2**30
            if r:
                times[how].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"EAGLE-3 unroll forward + backward, batch {a.batch} × {a.seq} rows × {a.steps} steps, {dtype}, {dev}: "
          + ", ".join(f"{k} {1e3 * v:.1f} ms" + (f" (peak {peak[k]:.2f} GiB)" if k in peak else "")
                      for k, v in med.items())
          + f"; explicit ÷ sdpa {med['explicit'] / med['sdpa']:.2f}")


if __name__ == "__main__":
    main()
