"""What one speculative step costs, stage by stage, against one plain decode.

For a target + DFlash drafter pair it measures, on the machine at hand:

* **verify**: the target decoding a batch of R rows (every row an output) at a fixed depth,
  for R in ``--rows`` (R = 1 is a plain decode), with the drafter's layer-input taps off and on,
  and with the logits read back and argmax'ed on the host (what greedy verification costs);
* **drafter**: one DFlash draft call (``propose``) per ``--n-max``, one feature injection of k rows,
  and the two alternating as the loop runs them;
* **loop**: whole generations — plain decoding and speculation at each ``--n-max`` — with
  ``sync_stages`` on (per-stage ms per step) and off (the speed a user gets); the *step ratio*
  is ms per speculative step ÷ ms per plain token (what τ must exceed to break even);
* with ``--profile``: the GPU kernels of each verify size and drafter call (torch.profiler;
  the process imports torch after pyllama_spec).

    python benchmarks/step_cost.py [--target T.gguf --drafter D.gguf] [--label NAME]
        [--n-max 1 3 7 15] [--rows 1 2 4 8 12 16] [--depth 256] [--reps 40] [--max-tokens 128]
        [--sections verify,drafter,loop] [--profile] [--dump-logits L.npz] [--json out.json]
    python benchmarks/step_cost.py --compare-logits A.npz B.npz

Defaults: SmolLM2-135M-Instruct and the DFlash drafter shipped with the package. For a large
random pair: ``python -m pyllama_spec.fixtures big DIR --dtype f16`` (Qwen3-8B-shaped).
Timings are medians over ``--reps`` calls after warm-up, in milliseconds, each call ended by
``llama_synchronize`` (so GPU work is inside it). Environment variables that change llama.cpp's
kernel choice (``GGML_CUDA_MMVF_MAX_COLS`` … of vendor/patches/0001, ``GGML_CUDA_DISABLE_GRAPHS``)
are recorded with the results.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

import pyllama_spec as ps
from pyllama_spec.speculative.sampling import SamplingParams
from pyllama_spec.speculative.timing import StageTimer

ENV_KNOBS = ("GGML_CUDA_MMVF_MAX_COLS", "GGML_CUDA_DISABLE_MMF", "GGML_CUDA_MMVQ_MAX_COLS", "GGML_CUDA_DISABLE_GRAPHS",
             "GGML_CUDA_FORCE_MMQ", "GGML_CUDA_FORCE_CUBLAS", "GGML_CUDA_SBMM", "GGML_CUDA_SBMM_MIN_COLS",
             "GGML_CUDA_SBMM_MAX_COLS", "GGML_CUDA_SBMM_STAGE", "GGML_CUDA_SBMM_F16_HALF", "GGML_CUDA_SBMM_FUSE",
             "GGML_CUDA_TOPK_SMALL", "GGML_CUDA_FATTN_VEC_MAX_ROWS", "GGML_CUDA_FATTN_VEC_MAX_KV",
             "GGML_CUDA_SBMM_SEQ", "GGML_SCHED_ASYNC_INPUTS")


def _ms(fn, reps: int, warmup: int = 5) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(ts)


class Bench:
    def __init__(self, a):
        from pyllama_spec.assets import smollm2_dflash_path, smollm2_path

        self.a = a
        self.target = a.target or str(smollm2_path())
        self.drafter_path = a.drafter or str(smollm2_dflash_path())
        self.gen = ps.Generator(self.target, drafters={"dflash": self.drafter_path}, n_ctx=a.n_ctx,
                                n_batch=max(512, a.depth), n_gpu_layers=a.n_gpu_layers)
        self.ctx = self.gen.ctx
        self.dft = self.gen.drafters["dflash"]
        self.fused_default = getattr(self.dft, "fused_inject", False)
        if hasattr(self.dft, "backend_sampling"):
            self.dft.backend_sampling = a.drafter_backend == "on"
        n_vocab = self.gen.model.n_vocab
        rng = np.random.default_rng(0)
        # a fixed "prompt" of ordinary ids (fixtures' big targets have filler tokens beyond 264)
        lo = 300 if n_vocab > 600 else 3  # (tiny fixtures: 264 tokens)
        self.prompt = [int(t) for t in rng.integers(lo, min(n_vocab, 20000), a.depth + 1)]
        self.timer = StageTimer(sync=True)

    # -- the target ------------------------------------------------------------------------------
    def _fill(self, taps: bool) -> None:
        """Target (and drafter) caches hold positions [0, depth)."""
        self.ctx.set_layer_inputs(self.dft.target_layer_ids if taps else [])
        self.ctx.memory.clear()
        self.dft.ctx.memory.clear()
        self.ctx.decode(self.prompt[:self.a.depth], np.arange(self.a.depth, dtype=np.int32), logits="none")
        if taps:
            self.dft.observe(self.prompt[:self.a.depth], np.arange(self.a.depth, dtype=np.int32), self.a.depth,
                             self.timer)
        self.ctx.synchronize()

    def verify_rows(self) -> list[dict]:
        P = self.a.depth
        out = []
        for taps in (False, True):
            self._fill(taps)
            for R in self.a.rows:
                toks = self.prompt[P - R + 1:P + 1] if R <= P else [self.prompt[-1]] * R
                pos = np.arange(P, P + R, dtype=np.int32)

                def decode(read=False):
                    self.ctx.decode(toks, pos, logits="all")
                    if read:
                        np.argmax(self.ctx.logits(), axis=1)
                    self.ctx.synchronize()
                    self.ctx.memory.seq_rm(0, P)

                row = {"rows": R, "taps": taps, "decode_ms": _ms(decode, self.a.reps),
                       "decode_argmax_ms": _ms(lambda: decode(True), self.a.reps)}
                out.append(row)
                print(f"verify R={R:<3} taps={'on ' if taps else 'off'} decode {row['decode_ms']:7.3f} ms   "
                      f"+ logits argmax {row['decode_argmax_ms']:7.3f} ms", flush=True)
        if self.a.dump_logits:
            self.dump_logits(self.a.dump_logits)
        base = next(r for r in out if r["rows"] == 1 and not r["taps"])["decode_argmax_ms"]
        for r in out:
            r["vs_plain"] = r["decode_argmax_ms"] / base
        return out

    def dump_logits(self, path: str) -> None:
        """Writes the logits of one verify batch per row count (taps off) to ``path`` (npz, ``R<rows>``:
        float32 [R, n_vocab]), to compare two dispatch variants of the same build (``--compare-logits``)."""
        P = self.a.depth
        self._fill(False)
        arrays = {}
        for R in self.a.rows:
            toks = self.prompt[P - R + 1:P + 1] if R <= P else [self.prompt[-1]] * R
            self.ctx.decode(toks, np.arange(P, P + R, dtype=np.int32), logits="all")
            arrays[f"R{R}"] = np.array(self.ctx.logits(), dtype=np.float32)
            self.ctx.memory.seq_rm(0, P)
        np.savez_compressed(path, **arrays)

    # -- the drafter -----------------------------------------------------------------------------
    def drafter_calls(self) -> list[dict]:
        P = self.a.depth
        self._fill(True)
        sp = SamplingParams()
        rng = np.random.default_rng(0)
        out = []
        t = StageTimer(sync=True)
        fused_modes = (False, True) if hasattr(self.dft, "fused_inject") else (False,)
        for n_max, fused in [(n, f) for n in self.a.n_max for f in fused_modes]:
            n_max = min(n_max, self.dft.n_max_limit)
            self.dft.fused_inject = fused

            def propose():
                self.dft.propose(self.prompt[P], P, n_max, sp, rng, t)
                self.dft.ctx.synchronize()

            # the target's last decode must have produced the rows observe() reads
            toks = self.prompt[P - n_max:P + 1]
            pos = np.arange(P, P + n_max + 1, dtype=np.int32)
            self.ctx.decode(toks, pos, logits="all")
            self.ctx.synchronize()

            def inject(k):
                self.dft.observe(toks, pos, k, t)
                if fused:
                    self.dft.flush(t)  # staged rows decoded alone: the unfused cost
                self.dft.ctx.synchronize()
                self.dft.ctx.memory.seq_rm(0, P)

            def step(k):
                inject_keep = k
                self.dft.observe(toks, pos, inject_keep, t)
                self.dft.propose(toks[k - 1], P + k, n_max, sp, rng, t)
                self.dft.ctx.synchronize()
                self.dft.ctx.memory.seq_rm(0, P)

            ks = list(range(1, n_max + 2))
            it = iter(ks * 1000)
            row = {"n_max": n_max, "fused_inject": fused, "propose_ms": _ms(propose, self.a.reps),
                   "inject_1_ms": _ms(lambda: inject(1), self.a.reps),
                   "inject_all_ms": _ms(lambda: inject(n_max + 1), self.a.reps),
                   "inject_1_propose_ms": _ms(lambda: step(1), self.a.reps),
                   "inject_varying_propose_ms": _ms(lambda: step(next(it)), self.a.reps)}
            self.ctx.memory.seq_rm(0, P)
            out.append(row)
            print(f"drafter n_max={n_max:<3} {'fused' if fused else 'split'} propose {row['propose_ms']:7.3f} ms   "
                  f"inject 1 row {row['inject_1_ms']:7.3f}"
                  f"   inject {n_max + 1} rows {row['inject_all_ms']:7.3f}   inject 1 + propose "
                  f"{row['inject_1_propose_ms']:7.3f}   inject 1..{n_max + 1} (cycling) + propose "
                  f"{row['inject_varying_propose_ms']:7.3f} ms", flush=True)
        if hasattr(self.dft, "fused_inject"):
            self.dft.fused_inject = self.fused_default
        return out

    # -- whole generations -------------------------------------------------------------------------
    def loop(self) -> list[dict]:
        kw = dict(prompt_tokens=self.prompt[:self.a.depth], max_tokens=self.a.max_tokens)
        backend = {"auto": "auto", "on": True, "off": False}[self.a.backend_sampling]
        out = []
        # the DFlash drafter with its injection fused into the draft decode (patch 0006) — with the committed
        # rows injected again to one shape per n_max (constant_shape, the default) or the shape following
        # acceptance ("fused-var") — and split (its own decode)
        inject = (("fused", True, True), ("fused-var", True, False), ("split", False, True))
        modes = inject if hasattr(self.dft, "fused_inject") else inject[2:]
        configs = [(None, 0, inject[2])] + [("dflash", n, m) for n in self.a.n_max for m in modes]
        shape_default = getattr(self.dft, "constant_shape", True)
        for sync in (True, False):
            for drafter, n_max, (label, fused, shape) in configs:
                if hasattr(self.dft, "fused_inject"):
                    self.dft.fused_inject = fused
                    self.dft.constant_shape = shape
                spec = ps.SpecConfig(drafter=drafter, n_max=n_max or None, sync_stages=sync, backend_sampling=backend)
                self.gen.generate(spec=spec, **kw)  # warm-up
                rs = [self.gen.generate(spec=spec, **kw)
                      for _ in range(self.a.runs)]
                r = min(rs, key=lambda x: x.generation_seconds)
                steps = max(1, r.stats.n_steps)
                row = {"drafter": drafter, "n_max": r.n_max, "fused_inject": fused, "constant_shape": shape,
                       "inject": label, "sync": sync,
                       "tok_s": r.tokens_per_s,
                       "ms_per_step": 1e3 * r.generation_seconds / steps, "tau": r.stats.mean_accepted_length,
                       "acceptance": r.stats.acceptance_rate, "n_steps": r.stats.n_steps,
                       "stages_ms_per_step": {k: 1e3 * v["seconds"] / steps for k, v in r.timings.items()
                                              if k not in ("wall", "tokenize", "prefill") and v["count"]}}
                out.append(row)
        for sync in (True, False):
            plain = next(r for r in out if r["drafter"] is None and r["sync"] == sync)
            for r in out:
                if r["sync"] == sync:
                    r["step_vs_plain"] = r["ms_per_step"] / plain["ms_per_step"]
                    r["speed_vs_plain"] = r["tok_s"] / plain["tok_s"]
        for r in out:
            stages = "  ".join(f"{k} {v:.3f}" for k, v in r["stages_ms_per_step"].items() if v > 0.005)
            print(f"loop {'sync' if r['sync'] else 'free'} {r['drafter'] or 'plain':<7} n_max={r['n_max']:<3} "
                  f"{r['inject']:<9} "
                  f"{r['tok_s']:8.1f} tok/s  {r['ms_per_step']:7.3f} ms/step  step/plain {r['step_vs_plain']:5.2f}  "
                  f"τ {r['tau']:.2f}  speed/plain {r['speed_vs_plain']:.2f}"
                  + (f"\n      [{stages}]" if r["sync"] else ""),
                  flush=True)
        if hasattr(self.dft, "fused_inject"):
            self.dft.fused_inject = self.fused_default
            self.dft.constant_shape = shape_default
        return out

    # -- kernels -------------------------------------------------------------------------------------
    def profile(self) -> dict:
        import torch  # after pyllama_spec (README: import order on the H200 image)
        from torch.profiler import ProfilerActivity, profile

        if not torch.cuda.is_available():
            print("--profile: torch sees no CUDA device; skipped", flush=True)
            return {}

        P = self.a.depth
        out = {}
        sp = SamplingParams()
        rng = np.random.default_rng(0)
        t = StageTimer(sync=True)
        self._fill(True)
        cases = [(f"verify_{R}", R) for R in sorted({1, 8, 16} & set(self.a.rows) | {1, 8})]
        cases += [(f"propose_{n}", -n) for n in self.a.n_max]
        for name, R in cases:
            if R > 0:
                toks = [self.prompt[P]] * R
                pos = np.arange(P, P + R, dtype=np.int32)

                def call():
                    self.ctx.decode(toks, pos, logits="all")
                    self.ctx.synchronize()
                    self.ctx.memory.seq_rm(0, P)
            else:
                n_max = min(-R, self.dft.n_max_limit)

                def call():
                    self.dft.propose(self.prompt[P], P, n_max, sp, rng, t)
                    self.dft.ctx.synchronize()
            for _ in range(5):
                call()
            n = 10
            # the wall time of a call without the profiler: GPU busy below it is idle time (launches,
            # host work); above it, the profiler's own cost (it turns CUDA graphs into kernels)
            t0 = time.perf_counter()
            for _ in range(n):
                call()
            wall_us = (time.perf_counter() - t0) / n * 1e6
            # CPU activity too: the CUDA runtime calls per call say whether llama.cpp replayed a CUDA
            # graph (cudaGraphLaunch) or launched every kernel (cudaLaunchKernel), and how often it
            # captured / re-instantiated one (cudaStreamBeginCapture, cudaGraphInstantiate, ...ExecUpdate)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(n):
                    call()
                torch.cuda.synchronize()
            rows = []
            runtime: dict[str, float] = {}
            for e in prof.key_averages():
                dev_us = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
                if e.key.startswith("cuda") and e.key[4:5].isupper():
                    runtime[e.key] = e.count / n
                elif dev_us:
                    rows.append({"kernel": e.key[:90], "calls_per_step": e.count / n, "us_per_step": dev_us / n})
            rows.sort(key=lambda r: -r["us_per_step"])
            total = sum(r["us_per_step"] for r in rows)
            # device activities per call (kernels, memsets, copies): inside a CUDA graph each still starts
            # after the one before it, ~1-2 µs apart, so idle GPU time grows with their count
            n_act = sum(r["calls_per_step"] for r in rows)
            out[name] = {"gpu_us_total": total, "wall_us": wall_us, "runtime_calls_per_step": runtime,
                         "device_activities_per_call": n_act, "kernels": rows[:25]}
            rt = ", ".join(f"{k} {v:g}" for k, v in sorted(runtime.items(), key=lambda kv: -kv[1])[:8])
            print(f"\nkernels of {name}: GPU busy {total:.0f} µs per call, wall {wall_us:.0f} µs unprofiled, "
                  f"{n_act:.0f} device activities per call; runtime calls per call: {rt}", flush=True)
            for r in rows[:12]:
                print(f"  {r['us_per_step']:9.1f} µs  {r['calls_per_step']:6.1f}×  {r['kernel']}")
        return out


def compare_logits(a_path: str, b_path: str) -> list[dict]:
    """Per row count of two ``--dump-logits`` files: the largest |difference| of the logits, relative to the
    largest |logit|, and how many rows have the same argmax (greedy verification's token)."""
    a, b = np.load(a_path), np.load(b_path)
    out = []
    for key in sorted(a.files, key=lambda k: int(k[1:])):
        x, y = a[key], b[key]
        same = int((np.argmax(x, axis=1) == np.argmax(y, axis=1)).sum())
        row = {"rows": int(key[1:]), "max_abs_diff": float(np.abs(x - y).max()), "max_abs": float(np.abs(x).max()),
               "argmax_same": same}
        out.append(row)
        print(f"R={row['rows']:<3} max |a-b| {row['max_abs_diff']:.3e} (max |a| {row['max_abs']:.3e}, "
              f"relative {row['max_abs_diff'] / max(row['max_abs'], 1e-30):.2e}); argmax equal in {same} of "
              f"{row['rows']} rows", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target")
    ap.add_argument("--drafter")
    ap.add_argument("--label", default="")
    ap.add_argument("--n-max", type=int, nargs="+", default=[1, 3, 7, 15])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 4, 8, 12, 16])
    ap.add_argument("--depth", type=int, default=256, help="positions in the cache before the measured calls")
    ap.add_argument("--reps", type=int, default=40)
    ap.add_argument("--runs", type=int, default=2, help="generations per loop configuration (best is kept)")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("-c", "--n-ctx", type=int, default=2048)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--sections", default="verify,drafter,loop")
    ap.add_argument("--profile", action="store_true", help="GPU kernel tables (needs torch with CUDA)")
    ap.add_argument("--backend-sampling", choices=["auto", "on", "off"], default="auto",
                    help="the target's greedy tokens drawn in the decode graph (on) or by the host (off, auto)")
    ap.add_argument("--drafter-backend", choices=["on", "off"], default="on",
                    help="the DFlash drafter's greedy draft drawn in its decode graph (on) or by the host's argmax")
    ap.add_argument("--dump-logits", help="npz: the verify logits of every --rows count (taps off)")
    ap.add_argument("--compare-logits", nargs=2, metavar=("A", "B"),
                    help="compare two --dump-logits files (no model is loaded)")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.compare_logits:
        res = compare_logits(*a.compare_logits)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
        return
    b = Bench(a)
    dft_n_max = b.dft.n_max_limit
    a.n_max = sorted({min(n, dft_n_max) for n in a.n_max})
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "label": a.label, "host": platform.node(),
           "cpu": platform.processor(), "devices": ps.devices(), "system": ps.system_info(),
           "llama_cpp": ps._ffi.LLAMA_CPP_BUILD, "target": b.target, "drafter": b.drafter_path,
           "target_desc": b.gen.model.description, "n_vocab": b.gen.model.n_vocab,
           "settings": {k: getattr(a, k) for k in ("n_max", "rows", "depth", "reps", "runs", "max_tokens", "n_ctx")},
           "env": {k: os.environ[k] for k in ENV_KNOBS if k in os.environ}}
    print(f"# step cost: {b.gen.model.description} + {b.dft.model.description} ({a.label}) env={res['env']}",
          flush=True)
    sections = a.sections.split(",")
    if "verify" in sections:
        res["verify"] = b.verify_rows()
    if "drafter" in sections:
        res["drafter"] = b.drafter_calls()
    if "loop" in sections:
        res["loop"] = b.loop()
    if a.profile:
        res["kernels"] = b.profile()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    b.gen.close()


if __name__ == "__main__":
    main()
