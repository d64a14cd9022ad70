"""Where the host time of a token-tree step goes (issue 22): every llama.cpp call timed by name, and the
target's verify decode split into graph compute and the rest.

    python benchmarks/tree_host_split.py [--budgets 0,4,16,32] [--n-prompts 3] [--max-tokens 48]
        [-ngl 0] [-t 1] [--no-shim] [--prefix-scaling 64,512,2048] [--json out.json]

For each budget (0 = the chain) it runs SmolLM2-135M-Instruct with its shipped DFlash drafter on the
held-out prompts of ``benchmarks/data/smollm2-selfdistill-9170.jsonl.gz`` at T = 0, stages
synchronised, and prints per step: the loop's stage times (ms), the target's ``llama_decode`` inside
``verify`` and what is left of ``verify`` around it (Python, ``seq_cp``), and the C time of the cache
metadata calls. The wrappers' ``lib`` (context.py, memory.py) is swapped for a proxy that times each
call, so the pure-Python parts can be told from the C ones (the proxy adds about 1 µs a call, which
lands in the Python parts).

Unless ``--no-shim``, a 30-line C interposer (compiled with ``cc`` into a temporary directory, the
process then re-executed under ``LD_PRELOAD``) times ``ggml_backend_sched_graph_compute_async`` and
``ggml_backend_tensor_get_async`` inside each decode: on the CPU backend the first is the graph's
compute, so ``decode − compute`` is llama.cpp's host work (batch checks, cache slots, graph build,
KQ mask, output copies), and the second is the copy of the outputs (logits) to the host, in MB per
step. On a GPU the compute call only launches kernels; read the split there with a profiler instead.

``--prefix-scaling`` times the cache metadata of one step against the committed length: branch
sequences made and emptied per step (their prefix copies grow with it) against branch sequences kept
for the whole generation (``tree_step.BranchSeqs``, the loop's way).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <time.h>
static double acc[4];  /* compute s, get s, get bytes, get calls */
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static void *real(const char *name) {  /* ggml is loaded RTLD_LOCAL by the extension: look it up there */
    void *h = dlopen("libggml-base.so", RTLD_NOW | RTLD_NOLOAD);
    void *f = h ? dlsym(h, name) : NULL;
    return f ? f : dlsym(RTLD_NEXT, name);
}
int ggml_backend_sched_graph_compute_async(void *s, void *g) {
    static int (*f)(void *, void *);
    if (!f) f = (int (*)(void *, void *))real("ggml_backend_sched_graph_compute_async");
    double t = now(); int r = f(s, g); acc[0] += now() - t; return r;
}
void ggml_backend_tensor_get_async(void *b, void *x, void *d, size_t o, size_t n) {
    static void (*f)(void *, void *, void *, size_t, size_t);
    if (!f) f = (void (*)(void *, void *, void *, size_t, size_t))real("ggml_backend_tensor_get_async");
    double t = now(); f(b, x, d, o, n); acc[1] += now() - t; acc[2] += n; acc[3] += 1;
}
void tree_host_split_read(double *out) { for (int i = 0; i < 4; i++) out[i] = acc[i]; }
"""


def _with_shim() -> None:
    """Compile the interposer and re-execute this script under LD_PRELOAD (once)."""
    if os.environ.get("TREE_HOST_SPLIT_SHIM"):
        return
    d = tempfile.mkdtemp(prefix="tree_host_split")
    with open(os.path.join(d, "shim.c"), "w") as f:
        f.write(SHIM)
    so = os.path.join(d, "shim.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", so, os.path.join(d, "shim.c"), "-ldl"], check=True)
    env = dict(os.environ, TREE_HOST_SPLIT_SHIM=so,
               LD_PRELOAD=":".join(p for p in (so, os.environ.get("LD_PRELOAD", "")) if p))
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


class _TimedLib:
    """``lib`` with every llama_* / pyls_* call timed into ``acc[name]`` = [seconds, calls]; decodes are
    keyed by context (T = the target) and the loop stage they ran in."""

    def __init__(self, lib, stage: list[str], shim) -> None:
        self._lib, self._stage, self._shim = lib, stage, shim
        self.acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        self.target = None
        self._buf = (ctypes.c_double * 4)()

    def _split(self) -> list[float]:
        if self._shim is None:
            return [0.0] * 4
        self._shim.tree_host_split_read(self._buf)
        return list(self._buf)

    def __getattr__(self, name: str):
        f = getattr(self._lib, name)
        if not callable(f) or not name.startswith(("llama_", "pyls_")):
            return f
        acc = self.acc

        def timed(*args):
            key = name
            if name in ("llama_decode", "llama_process"):
                key = f"{name}[{'T' if args[0] == self.target else 'D'}:{self._stage[0] or '-'}]"
            c0 = self._split()
            t = time.perf_counter()
            r = f(*args)
            acc[key][0] += time.perf_counter() - t
            acc[key][1] += 1
            if key.startswith("llama_decode["):
                c1 = self._split()
                for i, part in enumerate(("compute", "get", "get_bytes")):
                    acc[f"{key}.{part}"][0] += c1[i] - c0[i]
            return r
        return timed


def _prefix_scaling(gen, n_pasts: list[int], budget: int) -> list[dict]:
    """A tree step's cell metadata calls against the committed length, ms (best of 5 steps), for one
    tree of ``budget`` nodes (a best-first-like shape: a spine of 7 with siblings) accepted to depth 3:

    - ``per_step``: the same calls with the branch sequences made and emptied in every step (what the
      loop did until 2026-12-02: the prefix copied into each branch, stripped again after the verify;
      the removed code used ``seq_keep`` for the strip, this emulation ``seq_rm``) — grows with
      ``n_past × branches`` in llama.cpp's per-sequence position maps;
    - ``kept``: the branches mirror sequence 0 for the whole generation (``tree_step.BranchSeqs``); a
      step copies the accepted path into them and removes the rest — its cost grows with ``n_ctx``
      (one pass over the cells a call), not with what is cached.

    The verify decode between the two halves is not timed."""
    import numpy as np

    from pyllama_spec.speculative.tree import TreeDraft
    from pyllama_spec.speculative.tree_step import BranchSeqs

    parents = [-1, 0, 1, 2, 3, 4, 5]  # the spine, then siblings
    parents += [-1, -1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 5, 7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18]
    parents = parents[:budget]
    tree = TreeDraft(tokens=[300 + i for i in range(len(parents))], parents=np.array(parents))
    leaves, sets = tree.seq_sets()
    n_seq = len(leaves)
    accepted = tree.path(2)  # depth 3 on the spine
    s_acc = sets[accepted[-1]][0]
    ctx, mem, rows = gen.ctx, gen.ctx.memory, []
    mem.clear()
    n = 0
    for n_past in sorted(n_pasts):
        while n < n_past:
            k = min(ctx.n_batch, n_past - n)
            ctx.decode(list(range(100, 100 + k)), np.arange(n, n + k), logits="none")
            n += k
        pos = n_past + np.concatenate([[0], tree.depths])
        row = {"n_past": n_past, "branches": n_seq, "nodes": len(tree)}
        for mode in ("per_step", "kept"):
            br = BranchSeqs()
            if mode == "kept":
                br.ensure(mem, n_seq)  # once a generation: not a step's cost
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                step = BranchSeqs() if mode == "per_step" else br
                step.ensure(mem, n_seq)
                t1 = time.perf_counter()
                ctx.decode_seq_sets([5] + tree.tokens, pos, [list(range(n_seq))] + sets, logits="none")
                t2 = time.perf_counter()
                step.commit(mem, s_acc, n_seq, n_past, len(accepted))
                if mode == "per_step":
                    step.release(mem)
                t3 = time.perf_counter()
                times.append((t1 - t0) + (t3 - t2))
                step.truncate(mem, n_past)  # back to the prefix for the next repeat
                assert mem.pos_max(0) == n_past - 1
            br.release(mem)
            row[f"{mode}_ms"] = 1e3 * min(times)
        rows.append(row)
        print(f"n_past {n_past:5d}, {n_seq} branches: cell metadata per step {row['per_step_ms']:.3f} ms made "
              f"per step, {row['kept_ms']:.3f} ms kept")
    mem.clear()
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budgets", default="0,4,16,32")
    ap.add_argument("--n-prompts", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=0)
    ap.add_argument("-t", "--threads", type=int, default=1)
    ap.add_argument("--no-shim", action="store_true", help="no LD_PRELOAD interposer (no compute / copy split)")
    ap.add_argument("--prefix-scaling", metavar="N_PAST,...",
                    help="also time a step's cache metadata calls (branch sequences made per step against kept "
                         "for the generation) with these many committed positions")
    ap.add_argument("--scaling-budget", type=int, default=32, help="the tree's nodes for --prefix-scaling")
    ap.add_argument("--json")
    a = ap.parse_args()
    if not a.no_shim:
        _with_shim()
    import pyllama_spec as ps
    import pyllama_spec.context as pc
    import pyllama_spec.memory as pm
    import pyllama_spec.speculative.timing as tm
    from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
    from pyllama_spec.train.features import load_sequences

    stage = [""]
    enter, leave = tm.StageTimer.__enter__, tm.StageTimer.__exit__

    def enter_(self):
        stage[0] = self._name
        return enter(self)

    def leave_(self, *exc):
        r = leave(self, *exc)
        stage[0] = ""
        return r
    tm.StageTimer.__enter__, tm.StageTimer.__exit__ = enter_, leave_  # type: ignore[method-assign]
    shim = ctypes.CDLL(os.environ["TREE_HOST_SPLIT_SHIM"]) if os.environ.get("TREE_HOST_SPLIT_SHIM") else None
    lib = _TimedLib(pc.lib, stage, shim)
    pc.lib = pm.lib = lib  # type: ignore[assignment]

    budgets = [int(b) for b in a.budgets.split(",") if b]
    data = os.path.join(os.path.dirname(__file__), "data", "smollm2-selfdistill-9170.jsonl.gz")
    held = [s for s in load_sequences(data) if s["split"] == "heldout"][:a.n_prompts]
    gen = ps.Generator(str(smollm2_path()), drafters={"dflash": str(smollm2_dflash_path())}, n_ctx=4096,
                       n_gpu_layers=a.n_gpu_layers, tree=max(budgets + [1]), n_threads=a.threads)
    lib.target = gen.ctx.ptr
    out: dict = {"budgets": {}, "n_prompts": len(held), "max_tokens": a.max_tokens, "n_max": a.n_max,
                 "n_gpu_layers": a.n_gpu_layers, "n_threads": a.threads, "system": ps.system_info()}
    for b in budgets:
        lib.acc.clear()
        stages: dict[str, float] = defaultdict(float)
        steps = 0
        for s in held:
            spec = ps.SpecConfig(drafter="dflash", n_max=a.n_max, tree=b, sync_stages=True)
            r = gen.generate(prompt_tokens=s["tokens"][:s["n_prompt"]], max_tokens=a.max_tokens, spec=spec)
            steps += r.stats.n_steps
            for k, v in r.timings.items():
                stages[k] += v["seconds"]
        ms = {k: 1e3 * v / steps for k, v in stages.items()}
        c = {k: 1e3 * v[0] / steps for k, v in lib.acc.items()}
        calls = {k: v[1] / steps for k, v in lib.acc.items() if v[1]}
        dec = "llama_decode[T:verify]"
        row = {"steps": steps, "stage_ms": ms, "c_ms": c, "c_calls_per_step": calls,
               "verify_decode_ms": c.get(dec, 0.0), "verify_rest_ms": ms.get("verify", 0.0) - c.get(dec, 0.0)}
        if shim is not None:
            row.update(verify_compute_ms=c.get(dec + ".compute", 0.0),
                       verify_noncompute_ms=c.get(dec, 0.0) - c.get(dec + ".compute", 0.0),
                       verify_copy_ms=c.get(dec + ".get", 0.0), verify_copy_mb=c.get(dec + ".get_bytes", 0.0) / 1e9)
        out["budgets"][b] = row
        name = "chain" if b == 0 else f"tree{b}"
        print(f"{name:7s} {steps} steps, ms/step: " + "  ".join(
            f"{k} {ms.get(k, 0.0):.3f}" for k in ("draft", "draft_sample", "verify", "accept", "rollback", "other")))
        line = f"        verify = decode {row['verify_decode_ms']:.3f} + rest {row['verify_rest_ms']:.3f}"
        if shim is not None:
            line += (f"; decode = compute {row['verify_compute_ms']:.3f} + llama.cpp host "
                     f"{row['verify_noncompute_ms']:.3f} (of it the output copy {row['verify_copy_ms']:.3f} ms, "
                     f"{row['verify_copy_mb']:.2f} MB)")
        print(line)
        print("        cache metadata (C): " + "  ".join(
            f"{k.removeprefix('llama_memory_')} {c[k]:.3f} ({calls.get(k, 0):.1f}×)" for k in sorted(c)
            if k.startswith("llama_memory_seq")))
    if a.prefix_scaling:
        out["prefix_scaling"] = _prefix_scaling(gen, [int(x) for x in a.prefix_scaling.split(",")], a.scaling_budget)
    gen.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
