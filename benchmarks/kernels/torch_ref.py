"""cuBLAS through torch beside the sbmm kernels: ``F.linear(x_f16[n, k], W_f16[m, k])`` per shape and n.

Same method as ``sbmm_bench``: CUDA events around each call, median of ``--reps`` calls, each call reading a
different copy of the weights (copies >= 4x the L2 in total), so the weights come from HBM. This is the
"cuBLAS streams f16 weights at 3.27 TB/s for 1..16 rows" reference of issue 19, and it stands in for the
harness's own cuBLAS rows where the device's toolkit lacks the cuBLAS headers.

usage (device): python benchmarks/kernels/torch_ref.py [--shapes 4096x14336,...] [--ncols 1,2,4,8,16]
                [--reps 200] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

SHAPES = "4096x14336,4096x4096,1024x4096,14336x4096,151936x4096"


def time_linear(ws: list[torch.Tensor], x: torch.Tensor, reps: int, warmup: int) -> list[float]:
    """Microseconds per call of F.linear(x, ws[i % len(ws)]), one event pair per call."""
    for i in range(warmup):
        F.linear(x, ws[i % len(ws)])
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for i, (a, b) in enumerate(ev):
        a.record()
        F.linear(x, ws[(warmup + i) % len(ws)])
        b.record()
    torch.cuda.synchronize()
    return [a.elapsed_time(b) * 1e3 for a, b in ev]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="m x k pairs, comma separated")
    ap.add_argument("--ncols", default="1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16")
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--json", default="", help="write the records here")
    args = ap.parse_args()
    dev = torch.device("cuda")
    l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 50 << 20)
    records = []
    for shape in args.shapes.split(","):
        m, k = (int(v) for v in shape.split("x"))
        nbytes = 2 * m * k
        ncopies = max(1, min(64, -(-4 * l2 // nbytes)))
        ws = [(torch.randn(m, k, device=dev) * 0.05).half() for _ in range(ncopies)]
        for n in (int(v) for v in args.ncols.split(",")):
            x = torch.randn(n, k, device=dev).half()
            us = time_linear(ws, x, args.reps, args.warmup)
            med = statistics.median(us)
            q = statistics.quantiles(us, n=10)
            rec = {"m": m, "k": k, "type": "f16", "ncols": n, "kernel": "torch_linear_f16", "us": round(med, 2),
                   "us_p10": round(q[0], 2), "us_p90": round(q[-1], 2), "quant_us": 0,
                   "tbps": round(nbytes / (med * 1e-6) / 1e12, 3), "ok": True}
            records.append(rec)
            tbps = rec["tbps"]
            print(f"f16   m={m:6d} k={k:5d} n={n:2d} torch_linear_f16 {med:8.2f} us  {tbps:.2f} TB/s", flush=True)
        del ws
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "records": records}, f,
                      indent=1)


if __name__ == "__main__":
    main()
