"""Soak test: many generations back to back on one Generator; does anything grow?

Mixes everything a long-running server would do with one Generator: plain decoding and every
drafter given, greedy and T = 0.8 (match and rejection verification), prompts of every length up
to n_ctx (some run into the context limit), stop strings, and streams that are abandoned after a
piece or two (the next call cuts them off). Every ``--every`` generations it records the process's
resident memory (RSS, /proc/self/statm), the count of live Python objects after a full
collection, and, on GPU builds, the device memory in use (ggml's device query). The first
``--warmup`` generations are not judged (caches and buffers reach their size there).

Verdict: ``grows = true`` when RSS after the warm-up rose by more than ``--tolerance-mib``, or the
live objects by more than 1 %, or device memory by more than ``--tolerance-mib``.

    python benchmarks/soak.py --fixtures -n 2000 -t 1       # tiny models: minutes on a CPU core
    python benchmarks/soak.py -n 2000                       # SmolLM2 + the shipped DFlash drafter
    python benchmarks/soak.py TARGET.gguf -d dflash=DRAFTER.gguf -n 2000 --json out.json
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import pyllama_spec as ps

WORDS = ("the quick brown fox jumps over a lazy dog while seven small robots write python code "
         "about binary search trees and debounce functions in javascript").split()


def rss_mib() -> float:
    """Resident memory of this process in MiB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def gpu_used_mib() -> float | None:
    """Device memory in use on the GPUs, MiB (None without one)."""
    gpus = [d for d in ps.devices() if d["type"] == "gpu"]
    return sum(d["total_mib"] - d["free_mib"] for d in gpus) if gpus else None


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            name = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        name = platform.machine()
    return f"{name}, {os.cpu_count()} cores"


def live_objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def make_prompt(gen: ps.Generator, rng: np.random.Generator, n_tokens: int) -> list[int]:
    """Exactly ``n_tokens`` prompt tokens of English-like text."""
    toks: list[int] = []
    while len(toks) < n_tokens:
        toks += gen.model.vocab.tokenize(" ".join(rng.choice(WORDS, size=64)), add_special=False)
    return toks[:n_tokens]


def one(gen: ps.Generator, rng: np.random.Generator, i: int, drafters: list[str | None], n_ctx: int,
        max_tokens: int, counts: dict[str, int]) -> None:
    """One generation of a kind chosen by ``i`` and ``rng``."""
    drafter = drafters[i % len(drafters)]
    kind = i % 10
    # prompt lengths spread up to the context; kind 9 runs into the context limit, kind 8 is too long
    n_prompt = {9: n_ctx - max_tokens // 2, 8: n_ctx + 8}.get(kind, int(rng.integers(1, n_ctx // 2)))
    prompt: dict = {"prompt_tokens": make_prompt(gen, rng, n_prompt)}
    if kind == 3:
        prompt = {"messages": [{"role": "user", "content": " ".join(rng.choice(WORDS, size=12))}]}
    kw: dict = {"drafter": drafter, "max_tokens": max_tokens, **prompt}
    if kind in (1, 4, 7):
        kw.update(temperature=0.8, seed=int(rng.integers(1 << 30)), verify="rejection" if kind == 4 else "match")
    if kind == 5:
        kw["stop"] = [" the", "\n"]
    try:
        if kind in (2, 6):  # a stream, abandoned after a piece or two
            s = gen.generate(stream=True, **kw)
            for _, _piece in zip(range(1 + kind % 2), s):
                pass
            counts["abandoned"] += 1
            return
        r = gen.generate(**kw)
        counts[r.finish_reason] = counts.get(r.finish_reason, 0) + 1
    except ps.PromptTooLongError:
        counts["too_long"] += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", nargs="?", help="target .gguf (default: SmolLM2-135M-Instruct)")
    ap.add_argument("-d", "--add-drafter", action="append", metavar="NAME=PATH",
                    help="a drafter (default: the shipped SmolLM2 DFlash drafter); 'ngram' is always added")
    ap.add_argument("--fixtures", action="store_true", help="use the tiny random fixtures (fast, for the CPU)")
    ap.add_argument("-n", "--generations", type=int, default=2000)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("-c", "--n-ctx", type=int, default=512)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--tolerance-mib", type=float, default=8.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: all cores)")
    ap.add_argument("--json", type=Path, help="write the result here")
    a = ap.parse_args(argv)

    tmp = None
    if a.fixtures:
        tmp = tempfile.TemporaryDirectory()
        target = Path(tmp.name) / "target.gguf"
        ps.fixtures.write_tiny_target(target, n_layer=4, n_embd=64, seed=1)
        drafters = {"dflash": Path(tmp.name) / "dflash.gguf"}
        ps.fixtures.write_dflash_drafter(drafters["dflash"], target=target, n_layer=2, block_size=8, seed=2)
    elif a.target:
        target = Path(a.target)
        drafters = dict(item.partition("=")[::2] for item in (a.add_drafter or []))
    else:
        target = ps.assets.smollm2_path()
        drafters = {"dflash": ps.assets.smollm2_dflash_path()}
    specs: dict = {**drafters, "ngram": "ngram"}
    gen = ps.Generator(target, drafters=specs, n_ctx=a.n_ctx, n_batch=256, n_threads=a.threads)
    names: list[str | None] = [None, *gen.drafters]
    rng = np.random.default_rng(a.seed)
    counts = {"abandoned": 0, "too_long": 0}
    samples = []
    t0 = time.perf_counter()
    for i in range(a.generations):
        one(gen, rng, i, names, gen.ctx.n_ctx, a.max_tokens, counts)
        if (i + 1) % a.every == 0 or i + 1 == a.warmup:
            samples.append({"generations": i + 1, "seconds": round(time.perf_counter() - t0, 2),
                            "rss_mib": round(rss_mib(), 2), "live_objects": live_objects(),
                            "gpu_used_mib": gpu_used_mib()})
            print(json.dumps(samples[-1]), flush=True)
    gen.close()

    base = next(s for s in samples if s["generations"] >= min(a.warmup, a.generations))
    last = samples[-1]
    d_rss = last["rss_mib"] - base["rss_mib"]
    d_obj = (last["live_objects"] - base["live_objects"]) / base["live_objects"]
    d_gpu = (last["gpu_used_mib"] - base["gpu_used_mib"]) if base["gpu_used_mib"] is not None else None
    grows = d_rss > a.tolerance_mib or d_obj > 0.01 or (d_gpu is not None and d_gpu > a.tolerance_mib)
    result = {
        "machine": platform.node(), "cpu": cpu_name(),
        "date": time.strftime("%Y-%m-%d %H:%M"), "target": target.name if not a.fixtures else "tiny fixture",
        "drafters": [n or "none" for n in names], "generations": a.generations, "max_tokens": a.max_tokens,
        "n_ctx": gen.ctx.n_ctx, "threads": gen.ctx.n_threads, "warmup": a.warmup, "finish": counts,
        "samples": samples,
        "rss_growth_mib": round(d_rss, 2), "live_objects_growth": round(d_obj, 4),
        "gpu_growth_mib": d_gpu, "grows": grows, "gpu": ps.supports_gpu_offload(),
    }
    print(f"{a.generations} generations in {last['seconds']:.0f} s; after the warm-up RSS {d_rss:+.2f} MiB, "
          f"live objects {100 * d_obj:+.2f} %" + (f", GPU {d_gpu:+.1f} MiB" if d_gpu is not None else "")
          + f"; finish reasons {counts}; grows: {grows}")
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    if tmp is not None:
        tmp.cleanup()
    return 1 if grows else 0


if __name__ == "__main__":
    sys.exit(main())
