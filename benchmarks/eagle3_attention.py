"""EAGLE-3's training-time test, its attention paths side by side (issue 20): the unrolled forward and backward of a
SmolLM2-shaped head (576 wide, 9 heads, 7 steps) with ``Eagle3Model.attention`` = ``"explicit"`` (the scores written
out, the default), ``"sdpa"`` (one fused attention call a step) and ``"sdpa-no-cudnn"`` (the same without cuDNN's
kernel), plus the peak GPU memory of each.

    python benchmarks/eagle3_attention.py [--batch 8] [--seq 1024 …] [--reps 5] [--dtype bf16] [--modes …]
    python benchmarks/eagle3_attention.py --from-data ANSWERS.jsonl.gz [--batch 32] [--batches 12] [--pad-multiple 1 64]

One shape (``--seq 1024``, the default) measured on 2026-12-06 on one H100 80GB HBM3: sdpa the faster (batch 32: 90.3
vs 178.2 ms, peak 10.86 vs 22.75 GiB), yet EAGLE-3 online training ran 2.6 × slower with it (1.3 vs 3.36 steps/s).
A training batch is as long as its longest sequence: ``--from-data`` takes the lengths of real batches (as the trainer
draws them: ``--batch`` sequences of the file's training split, cut at ``--max-len``, T = the longest, rounded up to
each ``--pad-multiple``) and runs each once per mode (pass 1: shapes new to the process, where kernels that plan per
shape — cuDNN's attention — pay for their plans), then ``--reps − 1`` more passes over the same shapes (warm). The
printout names the kernel torch picks for each step's SDPA call and the torch / cuDNN versions.

On the CPU machine every mode runs torch's CPU kernels (no plans, nothing to compare): the GPU is where they differ.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from pyllama_spec.train.eagle3 import ATTENTION, Eagle3Config, Eagle3Model
from pyllama_spec.train.objectives import padded_len


def batch_lengths(path: str, batch: int, n: int, *, max_len: int = 1024, seed: int = 0) -> list[int]:
    """The sequence length T of ``n`` training batches of ``batch`` sequences of the answers file ``path``, drawn
    as :func:`pyllama_spec.train.trainer.train` draws them (``rng.choice`` without replacement from the training
    split, ``numpy.random.default_rng(seed)``): each batch's longest sequence, cut at ``max_len``."""
    from pyllama_spec.train.features import load_sequences

    seqs = load_sequences(path, max_len=max_len)
    lens = np.array([len(s["tokens"]) for s in seqs])
    train = [i for i, s in enumerate(seqs) if s["split"] == "train"]
    rng = np.random.default_rng(seed)
    return [int(lens[rng.choice(train, size=min(batch, len(train)), replace=False)].max()) for _ in range(n)]


def sdpa_kernels(T: int, steps: int, dev: torch.device, dtype: torch.dtype) -> list[str]:
    """The kernel torch would pick for each unrolled step's SDPA call of ``"sdpa"`` at T rows (batch 1, 9 heads of
    64: the checks do not depend on the batch), as ``torch._fused_sdp_choice`` names it."""
    names = {int(v.value): k for k, v in torch.nn.attention.SDPBackend.__members__.items()}
    q = torch.zeros(1, 9, T, 64, device=dev, dtype=dtype, requires_grad=True)
    causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
    eye = torch.eye(T, dtype=torch.bool, device=dev)
    out = []
    for k in range(steps):
        kv = torch.zeros(1, 9, T * (k + 1), 64, device=dev, dtype=dtype)
        mask = torch.cat([causal] + [eye] * k, dim=-1)
        try:
            out.append(names.get(int(torch._fused_sdp_choice(q, kv, kv, attn_mask=mask)), "?"))
        except (RuntimeError, TypeError) as exc:  # a private function: its signature may change
            out.append(f"? ({exc})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, nargs="+", default=[1024], help="row counts T, one batch each (a pass)")
    ap.add_argument("--from-data", metavar="FILE", help="answers file (.jsonl.gz): T of real batches instead of --seq")
    ap.add_argument("--batches", type=int, default=12, help="with --from-data: batches a pass")
    ap.add_argument("--max-len", type=int, default=1024, help="with --from-data: sequences cut at this many tokens")
    ap.add_argument("--pad-multiple", type=int, nargs="+", default=[1],
                    help="round each T up to a multiple of this (TrainConfig.pad_multiple); several: one run each, "
                         "in order (shapes an earlier one met are no longer new)")
    ap.add_argument("--steps", type=int, default=7)
    ap.add_argument("--reps", type=int, default=None,
                    help="passes over the shapes (default: 5 with one --seq, else 2); with one --seq a warm-up pass "
                         "comes first and is not kept")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f32"])
    ap.add_argument("--modes", nargs="+", default=list(ATTENTION), choices=list(ATTENTION))
    a = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if a.dtype == "bf16" and dev.type == "cuda" else torch.float32
    cudnn = torch.backends.cudnn.version() if dev.type == "cuda" else None
    print(f"torch {torch.__version__}, cuDNN {cudnn}, {torch.cuda.get_device_name(0) if dev.type == 'cuda' else 'cpu'}")
    torch.manual_seed(0)
    c = Eagle3Config(n_embd=576, n_head=9, n_head_kv=3, head_dim=64, n_ff=1536, n_vocab=49152,
                     target_layer_ids=[2, 15, 27], n_steps=a.steps)
    m = Eagle3Model(c, torch.randn(49152, 576) * 0.02, torch.randn(49152, 576) * 0.02).to(dev)
    raw = batch_lengths(a.from_data, a.batch, a.batches, max_len=a.max_len) if a.from_data else list(a.seq)
    one_shape = not a.from_data and len(set(raw)) == 1
    reps = a.reps or (5 if one_shape else 2)
    if a.from_data:
        print(f"{a.from_data}: T of {len(raw)} batches of {a.batch}: {raw} (median {statistics.median(raw):.0f})")

    def unroll(how: str, T: int) -> tuple[float, float]:
        """Seconds of one forward + backward at T rows (synchronised) and the peak GiB allocated."""
        f = torch.randn(a.batch, T, 3 * 576, device=dev)
        tok = torch.randint(0, 49152, (a.batch, T + a.steps), device=dev)
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
        dt = time.perf_counter() - t
        return dt, torch.cuda.max_memory_allocated() / 2**30 if dev.type == "cuda" else 0.0

    if not one_shape:  # each mode's first call (CUDA context, handles, kernel loading) at a shape not in the list
        for how in a.modes:
            unroll(how, 40)
    for pad in a.pad_multiple:
        Ts = [padded_len(t, pad) for t in raw]
        if dev.type == "cuda":
            kinds = {T: sdpa_kernels(T, a.steps, dev, dtype) for T in sorted(set(Ts))}
            seen = sorted({k for v in kinds.values() for k in v})
            print(f"pad {pad}: {len(set(Ts))} distinct T; \"sdpa\" steps run on {', '.join(seen)}"
                  + (f" (T = {Ts[0]}: {kinds[Ts[0]]})" if len(seen) > 1 else ""))
        times: dict[str, list[list[float]]] = {how: [] for how in a.modes}
        peak: dict[str, float] = dict.fromkeys(a.modes, 0.0)
        for r in range(reps + (1 if one_shape else 0)):
            for how in a.modes:
                times[how].append([])
            for i, T in enumerate(Ts):
                order = a.modes if (r + i) % 2 == 0 else a.modes[::-1]  # alternate: no mode always runs first
                for how in order:
                    dt, gib = unroll(how, T)
                    times[how][-1].append(dt)
                    peak[how] = max(peak[how], gib)
        if one_shape:
            med = {how: statistics.median([x for p in v[1:] for x in p]) for how, v in times.items()}
            print(f"EAGLE-3 unroll forward + backward, batch {a.batch} × {Ts[0]} rows × {a.steps} steps, {dtype}, "
                  f"{dev}: " + ", ".join(f"{k} {1e3 * v:.1f} ms" + (f" (peak {peak[k]:.2f} GiB)" if dev.type == "cuda"
                                                                     else "") for k, v in med.items())
                  + "; " + ", ".join(f"{k} ÷ explicit {v / med['explicit']:.2f}" for k, v in med.items()
                                     if k != "explicit" and "explicit" in med))
            continue
        print(f"EAGLE-3 unroll forward + backward, batch {a.batch}, {len(Ts)} batches of T {min(Ts)}–{max(Ts)} "
              f"(pad {pad}), {a.steps} steps, {dtype}, {dev}:")
        for how, passes in times.items():
            warm = [x for p in passes[1:] for x in p]
            first = passes[0]
            print(f"  {how:14s} pass 1 (new shapes) {sum(first):6.2f} s, {1e3 * statistics.mean(first):7.1f} ms "
                  f"a batch" + (f"; later passes {1e3 * statistics.mean(warm):7.1f} ms a batch" if warm else "")
                  + (f"; peak {peak[how]:.2f} GiB" if dev.type == "cuda" else ""))


if __name__ == "__main__":
    main()
