"""What our Python adds to a one-token decode (issue 19: draft-simple's loop at 0.90–0.94 × llama-speculative-simple
and plain decoding at 0.90–0.96 × llama-completion's eval-only rate on an H100, RESULTS.md 13.11): the same
single-token decodes of one model timed five ways, side by side, in one process.

    bare      lib.llama_decode on a batch filled once (only the token and position change): llama.cpp's own cost
    bare+tok  bare, then the shim's one-call read of the sampled token (a backend sampler attached)
    decode    Context.decode([tok], [pos]) — argument checks, batch fill, output bookkeeping
    decode+tok  Context.decode, then Context.sampled_tokens(1)   (draft-simple's greedy draft, the loop's plain step)
    decode+argmax  Context.decode without a sampler, then the logits row's numpy argmax   (the host's draw)

Each mode decodes ``--n`` tokens at consecutive positions after a short prompt (cut back to it every 64 tokens), in
``--rounds`` interleaved rounds; µs per decode (median of the rounds). The gaps between rows are our Python.

    python benchmarks/decode_overhead.py [--model M.gguf] [-n 512] [--rounds 5] [-ngl 99] [--generate]

``--generate`` adds plain decoding through ``Generator.generate`` (a chat prompt, ``-n`` tokens): its µs per token
above ``bare+tok`` is everything our loop adds to a plain step.

    python benchmarks/decode_overhead.py --taps [--tap-layers 2,15,28] [-ngl 0]

    python benchmarks/decode_overhead.py --sampler [-ngl 0]

``--sampler`` (issue 25) times the first decode after a sampler chain is attached / detached
(``Context.set_sampler``, what ``AutoState.draw_in_graph_when_dormant`` pays twice a rest; patch 0017, and
``LLAMA_SAMPLER_RESERVE=1`` in its own process for upstream's reserve).

``--taps`` (issue 25) times instead what the target's layer-input taps cost: ``bare`` decodes with the taps of
``--tap-layers`` on (default: the shipped SmolLM2 DFlash drafter's 3 layers) against none, in interleaved rounds,
and the first decode after switching them (``Context.set_layer_inputs``: llama.cpp re-reserves its compute buffers
and builds the graph again at that decode) against the next one — what ``AutoState.taps_off_when_dormant`` pays
twice a rest. Default model there: SmolLM2 alone.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np

import pyllama_spec as ps
from pyllama_spec._ffi import ffi, lib
from pyllama_spec.assets import smollm2_draft_path, smollm2_path
from pyllama_spec.sampler import SamplerChain

WINDOW = 64


def measure(path: str, a: argparse.Namespace, out: dict) -> None:
    """One model: the five modes, printed and put into ``out["models"]``."""
    model = ps.Model(path, n_gpu_layers=a.n_gpu_layers)
    ctx = ps.Context(model, n_ctx=1024, n_batch=64, n_ubatch=64, n_outputs_max=1, n_outputs_max_per_seq=1)
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    n0 = len(prompt)
    tok = 28

    def reset() -> None:
        ctx.memory.seq_rm(0, n0)

    def prefill() -> None:
        ctx.memory.clear()
        ctx.decode(prompt, np.arange(n0, dtype=np.int32), logits="none")

    # the bare loop's batch: one token, sequence 0, an output row; only token and position change
    batch = lib.llama_batch_init(1, 0, 1)
    batch.n_tokens = 1
    batch.n_seq_id[0] = 1
    batch.seq_id[0][0] = 0
    batch.logits[0] = 1
    idx = np.zeros(1, dtype=np.int32)
    buf = np.zeros(1, dtype=np.int32)
    idx_p = ffi.cast("const int32_t *", idx.ctypes.data)
    buf_p = ffi.cast("int32_t *", buf.ctypes.data)

    def bare(read: bool) -> float:
        t = time.perf_counter()
        for i in range(a.n):
            if i % WINDOW == 0:
                reset()
            batch.token[0] = tok
            batch.pos[0] = n0 + i % WINDOW
            if lib.llama_decode(ctx.ptr, batch) != 0:
                raise RuntimeError("llama_decode failed")
            if read:
                lib.pyls_get_sampled_tokens(ctx.ptr, idx_p, 1, buf_p)
            else:
                lib.llama_synchronize(ctx.ptr)
        return 1e6 * (time.perf_counter() - t) / a.n

    def ours(read: str) -> float:
        t = time.perf_counter()
        for i in range(a.n):
            if i % WINDOW == 0:
                reset()
            ctx.decode([tok], [n0 + i % WINDOW], logits="last")
            if read == "tok":
                ctx.sampled_tokens(1)
            elif read == "argmax":
                int(np.argmax(ctx.logits()[0]))
            else:
                lib.llama_synchronize(ctx.ptr)
        return 1e6 * (time.perf_counter() - t) / a.n

    modes = {"bare": lambda: bare(False), "decode": lambda: ours("none"),
             "decode+argmax": lambda: ours("argmax")}
    sampled = {"bare+tok": lambda: bare(True), "decode+tok": lambda: ours("tok")}
    res: dict[str, list[float]] = {m: [] for m in [*modes, *sampled]}
    for r in range(a.rounds + 1):  # (round 0 warms every shape up and is not kept)
        ctx.set_sampler(None)
        prefill()
        for m, f in modes.items():
            v = f()
            if r:
                res[m].append(v)
        ctx.set_sampler(SamplerChain())  # (a chain is set up for one attachment)
        prefill()
        for m, f in sampled.items():
            v = f()
            if r:
                res[m].append(v)
    ctx.set_sampler(None)
    lib.llama_batch_free(batch)
    med = {m: statistics.median(v) for m, v in res.items()}
    name = model.path.name
    out["models"][name] = {"us_per_decode": med, "all": res}
    print(f"{name}: µs per one-token decode, median of {a.rounds} rounds × {a.n}")
    for m in ("bare", "decode", "decode+argmax", "bare+tok", "decode+tok"):
        print(f"  {m:<14} {med[m]:8.1f}")
    print(f"  our Python on a decode: {med['decode'] - med['bare']:.1f} µs; on a decode + sampled token: "
          f"{med['decode+tok'] - med['bare+tok']:.1f} µs; the host's argmax vs the graph's draw: "
          f"{med['decode+argmax'] - med['decode+tok']:+.1f} µs")
    if a.generate:  # the whole loop: plain decoding through Generator.generate, µs per generated token
        gen = ps.Generator(path, n_ctx=1024, n_gpu_layers=a.n_gpu_layers)
        msgs = [{"role": "user", "content": "Write a long story about a lighthouse keeper, in many chapters."}]
        per = []
        for r in range(a.rounds + 1):
            res = gen.generate(messages=msgs, max_tokens=a.n)
            if r:
                per.append(1e6 / res.tokens_per_s)
        gen.close()
        med["generate"] = statistics.median(per)
        print(f"  generate (plain, {res.n_generated} tokens) {med['generate']:8.1f} µs a token: "
              f"{med['generate'] - med['bare+tok']:.1f} µs above a bare decode + sampled token")
    ctx.close()
    model.close()


class BareDecoder:
    """Bare one-token decodes of a fresh one-row context after a short prompt (the next position each; the cache cut
    back every WINDOW tokens, untimed): ``one()`` → wall and this thread's CPU µs (``time.thread_time``: llama.cpp
    builds and reserves its graphs in that thread; a number that other processes on a shared machine barely move).
    ``close()`` frees the batch, the context and the model."""

    def __init__(self, path: str, n_gpu_layers: int) -> None:
        self.model = ps.Model(path, n_gpu_layers=n_gpu_layers)
        self.ctx = ps.Context(self.model, n_ctx=1024, n_batch=64, n_ubatch=64, n_outputs_max=1,
                              n_outputs_max_per_seq=1)
        prompt = [1, 2, 3, 4, 5, 6, 7, 8]
        self.n0 = len(prompt)
        self.batch = lib.llama_batch_init(1, 0, 1)
        self.batch.n_tokens = 1
        self.batch.n_seq_id[0] = 1
        self.batch.seq_id[0][0] = 0
        self.batch.logits[0] = 1
        self.i = 0
        self.ctx.decode(prompt, np.arange(self.n0, dtype=np.int32), logits="none")

    def one(self) -> tuple[float, float]:
        i, self.i = self.i, self.i + 1
        if i % WINDOW == 0:
            self.ctx.memory.seq_rm(0, self.n0)
        self.batch.token[0] = 28
        self.batch.pos[0] = self.n0 + i % WINDOW
        t, c = time.perf_counter(), time.thread_time()
        if lib.llama_decode(self.ctx.ptr, self.batch) != 0:
            raise RuntimeError("llama_decode failed")
        lib.llama_synchronize(self.ctx.ptr)
        return 1e6 * (time.perf_counter() - t), 1e6 * (time.thread_time() - c)

    def close(self) -> None:
        lib.llama_batch_free(self.batch)
        self.ctx.close()
        self.model.close()


def measure_taps(path: str, a: argparse.Namespace, out: dict) -> None:
    """One model: bare one-token decodes with the taps on / off, and the first decode after a switch. Each is
    timed as wall µs and as the calling thread's CPU µs (``time.thread_time``: llama.cpp builds and reserves its
    graphs in that thread; a number that other processes on a shared machine barely move)."""
    layers = [int(x) for x in a.tap_layers.split(",")]
    bd = BareDecoder(path, a.n_gpu_layers)
    ctx, one = bd.ctx, bd.one
    res: dict[str, list[tuple[float, float]]] = {"taps off": [], "taps on": []}
    # the first decode after a switch less the median of the two decodes before it and the two after
    extra: dict[str, list[tuple[float, float]]] = {"switch on": [], "switch off": []}
    for r in range(a.rounds + 1):  # (round 0 warms both graphs up and is not kept)
        for name, want in (("taps on", layers), ("taps off", [])):
            ctx.set_layer_inputs(want)
            one()  # (the switch's decode: timed apart below)
            ts = [one() for _ in range(a.n)]
            if r:
                res[name].append((statistics.median(w for w, _ in ts), statistics.median(c for _, c in ts)))
    for _ in range(a.toggles):
        for name, want in (("switch on", layers), ("switch off", [])):
            before = [one(), one()]
            ctx.set_layer_inputs(want)
            sw = one()
            near = before + [one(), one()]
            extra[name].append((sw[0] - statistics.median(w for w, _ in near),
                                sw[1] - statistics.median(c for _, c in near)))
    med = {m: [statistics.median(x[j] for x in v) for j in (0, 1)] for m, v in res.items()}
    sw = {m: [statistics.median(x[j] for x in v) for j in (0, 1)] for m, v in extra.items()}
    name = bd.model.path.name
    out["models"][name] = {"taps": layers, "us_per_decode": med, "us_switch_extra": sw, "all": res,
                           "all_switch": extra, "columns": ["wall us", "thread cpu us"]}
    print(f"{name}: bare one-token decodes, taps {layers} on vs off (µs, median of {a.rounds} rounds' medians of "
          f"{a.n}); a switch: its first decode less the median of the 2 decodes before and 2 after (median of "
          f"{a.toggles}). wall / this thread's CPU time")
    for m in ("taps off", "taps on"):
        print(f"  {m:<11} {med[m][0]:9.1f} {med[m][1]:9.1f}")
    print(f"  on − off    {med['taps on'][0] - med['taps off'][0]:+9.1f} {med['taps on'][1] - med['taps off'][1]:+9.1f}"
          "   (a decode)")
    for m in ("switch on", "switch off"):
        print(f"  {m:<11} {sw[m][0]:+9.1f} {sw[m][1]:+9.1f}   (extra of the first decode after it)")
    bd.close()


def measure_sampler(path: str, a: argparse.Namespace, out: dict) -> None:
    """One model: the first bare one-token decode after attaching a sampler chain (a new one each time: a chain
    attaches once) and after detaching it, each less the median of the two decodes before and the two after —
    what ``AutoState.draw_in_graph_when_dormant`` pays twice a rest (patch 0017; ``LLAMA_SAMPLER_RESERVE=1`` for
    upstream's scheduler reserve, in its own process). Wall and this thread's CPU µs."""
    bd = BareDecoder(path, a.n_gpu_layers)
    ctx, one = bd.ctx, bd.one
    extra: dict[str, list[tuple[float, float]]] = {"attach": [], "detach": []}
    for r in range(a.toggles + 1):  # (the first round warms both graphs up and is not kept)
        for name in ("attach", "detach"):
            before = [one(), one()]
            ctx.set_sampler(SamplerChain(temperature=0.8, seed=r) if name == "attach" else None)
            sw = one()
            near = before + [one(), one()]
            if r:
                extra[name].append((sw[0] - statistics.median(w for w, _ in near),
                                    sw[1] - statistics.median(c for _, c in near)))
    sw = {m: [statistics.median(x[j] for x in v) for j in (0, 1)] for m, v in extra.items()}
    name = bd.model.path.name
    out["models"][name] = {"us_switch_extra": sw, "all_switch": extra, "columns": ["wall us", "thread cpu us"]}
    print(f"{name}: a sampler chain (T 0.8) attached / detached: the first bare decode after it less the median of the"
          f" 2 decodes before and 2 after (µs, median of {a.toggles}); wall / this thread's CPU time")
    for m in ("attach", "detach"):
        print(f"  {m:<11} {sw[m][0]:+9.1f} {sw[m][1]:+9.1f}")
    bd.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append",
                    help="a .gguf (repeatable; default: SmolLM2 and its shipped draft model)")
    ap.add_argument("-n", type=int, default=512, help="decodes per mode and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--generate", action="store_true",
                    help="also time plain decoding through Generator.generate (µs per generated token)")
    ap.add_argument("--taps", action="store_true",
                    help="time the layer-input taps instead: bare decodes with them on / off, and a switch")
    ap.add_argument("--tap-layers", default="2,15,28",
                    help="the layers --taps turns on (default: the shipped SmolLM2 DFlash drafter's)")
    ap.add_argument("--toggles", type=int, default=50, help="switches timed each way (--taps)")
    ap.add_argument("--sampler", action="store_true",
                    help="time a sampler chain's attach / detach instead (patch 0017; LLAMA_SAMPLER_RESERVE=1: "
                         "upstream's reserve)")
    ap.add_argument("--json", help="write the numbers here")
    a = ap.parse_args()
    out = {"system": ps.system_info(), "n": a.n, "rounds": a.rounds, "models": {}}
    if a.taps or a.sampler:
        for path in a.model or [str(smollm2_path())]:
            (measure_taps if a.taps else measure_sampler)(path, a, out)
    else:
        for path in a.model or [str(smollm2_path()), str(smollm2_draft_path())]:
            measure(path, a, out)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
