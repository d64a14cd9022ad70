"""Which decodes run without a CUDA graph: ggml-cuda's warm-up events per decode of a generation (issue 25,
RESULTS.md 19.17).

ggml-cuda (``ggml_backend_cuda_graph_compute``, pinned tree) runs a graph it has not seen, or whose node properties
changed, *directly*, launch by launch, captures and instantiates it at the next call with unchanged properties
("warmup complete"), and replays it from then on. 19.17 found each generation's first two steps and the two steps
after a probe 2-4 ms dearer than a replayed 1.15 ms step and guessed this pattern; this counts it. llama.cpp's debug
log is routed to Python logging (``set_llama_log_level(DEBUG)``), each line falls between two decodes, and a wrapper
on ``Context._after_decode`` marks where each decode ends, so every event belongs to one decode of one context.
Upstream logs a direct run only after a warm graph's properties changed ("warmup reset"); patch 0018 also logs every
direct run of a warm-up ("warmup direct run", "(new shape)" at a key's first call), so with it a decode without an
event is a replay.

Per generation it prints the target's first ``--show`` decodes as ``rows:events`` (``D`` a direct run during a
warm-up, ``R`` a warm graph's reset (a direct run too), ``C`` a capture, ``E`` a capture at a shape's first call
(patch 0018, ``GGML_CUDA_GRAPH_EAGER=1``), ``U`` the same graph object reused, ``F`` an executable update that
failed (debug builds of llama.cpp only), ``.`` none of these: a replay; patch 0018 adds a reset's cause in brackets
before it: ``[flags]`` a layer tap switched, ``[data]`` / ``[src]`` a new allocation plan moved a buffer, ``[op]``
new op parameters such as sampling settings, ``[shape]``), the counts over the generation, and the
dear decodes (more than twice the generation's median time between decode marks) with their index, events and
milliseconds, for plain decoding, DFlash n_max 2 and DFlash auto, each over ``--turns`` turns of ``--conversations``
conversations (the bake-off's order). Auto's one-time calibration (``Generator.verify_ms``: ~30 target decodes of
1-8 rows) runs before the log is read and its learnt state is reset, so auto's first turn shows its generation only.
Only a CUDA build prints events; on the CPU every decode shows ``.``.

    python benchmarks/graph_warmup.py [-ngl 99] [--conversations 1] [--turns 3] [-n 128] [--show 8] [--temperature 0]
"""
from __future__ import annotations

import argparse
import logging
import re
import time
from collections import Counter

import numpy as np

import pyllama_spec as ps
from pyllama_spec.assets import smollm2_dflash_path, smollm2_path
from pyllama_spec.backend import set_llama_log_level
from pyllama_spec.context import Context
from pyllama_spec.speculative.config import SpecConfig
from pyllama_spec.speculative.costmodel import AutoState
from pyllama_spec.study.prompts import load_prompts

# (first match wins: patch 0018's eager capture logs "warmup complete (eager)")
_CODES = (("(eager)", "E"), ("warmup direct run", "D"), ("warmup reset", "R"), ("warmup complete", "C"),
          ("reused", "U"), ("update failed", "F"))
# patch 0018's "CUDA graph node I (NAME) changed: WHAT": a reset's cause, shown in brackets before its code
_CHANGED = re.compile(r"CUDA graph node \d+ \(.*\) changed: (\w+)")
# such a cause as it stands in a decode's events string
_CAUSE = re.compile(r"\[(\w*)\]")


def _codes(events: str) -> str:
    """The one-letter codes of a decode's events, without the bracketed causes."""
    return _CAUSE.sub("", events)


class _Events(logging.Handler):
    """Collects the CUDA-graph lines of llama.cpp's debug log and the decode marks, in order."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.seq: list[tuple[str, object]] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "CUDA graph" not in msg and "CUDA Graph" not in msg:
            return
        m = _CHANGED.search(msg)
        if m:  # (patch 0018: what changed in a cached graph's nodes, logged before the reset it causes)
            self.seq.append(("ev", f"[{m.group(1)}]"))
            return
        for text, code in _CODES:
            if text in msg:
                self.seq.append(("ev", code))
                return


def _per_decode(seq: list[tuple[str, object]], ctx_id: int) -> list[tuple[int, str, float]]:
    """``[(rows, events, ms)]`` of one context's decodes: the events logged since the previous decode mark (of any
    context: a decode's events are logged inside it, before its mark) and the milliseconds since that mark (0 for
    the first: the prefill's clock starts outside) — for consecutive target decodes a step's wall, so a dear decode
    shows beside its events."""
    out: list[tuple[int, str, float]] = []
    pending = ""
    t_prev: float | None = None
    for kind, val in seq:
        if kind == "ev":
            pending += str(val)
        else:
            cid, rows, t = val  # type: ignore[misc]
            if cid == ctx_id:
                out.append((rows, pending or ".", 0.0 if t_prev is None else 1e3 * (t - t_prev)))
            pending = ""
            t_prev = t
    return out


def _dear(dec: list[tuple[int, str, float]], factor: float = 2.0) -> tuple[list[tuple[int, int, str, float]], float]:
    """``([(index, rows, events, ms)], median)``: the decodes (after the first) that took more than ``factor`` ×
    the median of those after the first, and that median — where a generation's time went beyond its replayed
    steps. Fewer than 3 decodes: none, median 0."""
    if len(dec) < 3:
        return [], 0.0
    med = float(np.median([ms for _, _, ms in dec[1:]]))
    return [(i, r, ev, ms) for i, (r, ev, ms) in enumerate(dec) if i > 0 and ms > factor * med], med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=99)
    ap.add_argument("--prompts", default="builtin:coding-chat")
    ap.add_argument("--conversations", type=int, default=1)
    ap.add_argument("--turns", type=int, default=3)
    # (128 as the bake-off: a second turn then starts past 256 cached rows, a new KV extent and so a new graph shape)
    ap.add_argument("-n", "--max-tokens", type=int, default=128)
    ap.add_argument("--show", type=int, default=8, help="decodes shown per generation")
    # (T > 0 attaches a backend sampler chain to each generation — more graph nodes, and a new chain each time)
    ap.add_argument("--temperature", type=float, default=0.0)
    a = ap.parse_args()
    handler = _Events()
    llama_log = logging.getLogger("pyllama_spec.llama_cpp")
    level = llama_log.level
    orig = Context._after_decode

    def marked(self, rc, n, n_out, what, flags=None):  # noqa: ANN001 - the wrapped method's signature
        handler.seq.append(("decode", (id(self), n, time.perf_counter())))
        return orig(self, rc, n, n_out, what, flags)

    gen = ps.Generator(smollm2_path(), drafters={"dflash": smollm2_dflash_path()}, n_ctx=4096,
                       n_gpu_layers=a.n_gpu_layers)
    gen.generate("Hello", max_tokens=8)
    gen.generate("Hello", drafter="dflash", max_tokens=8)
    # auto's one-time verify calibration (Generator.verify_ms) here, then a first use again
    gen.generate("Hello", spec=SpecConfig(drafter="dflash", n_max="auto", tree=0), max_tokens=8)
    gen.reset_auto_state("dflash", AutoState())
    tid = id(gen.ctx)
    convs = load_prompts(a.prompts)[:a.conversations]
    llama_log.addHandler(handler)
    Context._after_decode = marked  # type: ignore[method-assign]
    set_llama_log_level(logging.DEBUG)  # from here on: the loads' thousands of lines are not wanted
    try:
        for conv in convs:
            for drafter, n_max in ((None, None), ("dflash", 2), ("dflash", "auto")):
                answers: list[str] = []
                for turn in range(min(a.turns, len(conv.turns))):
                    handler.seq.clear()
                    spec = SpecConfig(drafter=drafter, n_max=n_max, tree=0 if drafter else None)
                    t = time.perf_counter()
                    res = gen.generate(messages=conv.messages(answers), spec=spec, max_tokens=a.max_tokens,
                                       temperature=a.temperature, seed=turn)
                    wall = time.perf_counter() - t
                    answers.append(res.text)
                    dec = _per_decode(handler.seq, tid)
                    counts = Counter(c for _, ev, _ in dec for c in _codes(ev))
                    causes = Counter(m for _, ev, _ in dec for m in _CAUSE.findall(ev))
                    shown = " ".join(f"{r}:{ev}" for r, ev, _ in dec[:a.show])
                    print(f"{conv.id[:12]:12s} {str(drafter):6s} {str(n_max):4s} turn {turn + 1}: "
                          f"{res.tokens_per_s:6.1f} tok/s, {len(dec)} target decodes ({1e3 * wall:.0f} ms), "
                          f"events {dict(counts)}{f', reset causes {dict(causes)}' if causes else ''}, "
                          f"first: {shown}", flush=True)
                    # the dear ones, with their place in the generation (#index) and the time since the previous
                    # decode of any context: a direct run or a capture of a new shape (a KV extent past a 256-row
                    # boundary, a new block width) shows here with its events
                    dear, med = _dear(dec)
                    if dear:
                        print("    dear target decodes (#i rows:events ms): " + ", ".join(
                            f"#{i} {r}:{ev} {ms:.2f}" for i, r, ev, ms in dear[:a.show]) + f"; median {med:.2f} ms",
                              flush=True)
    finally:
        set_llama_log_level(level)
        Context._after_decode = orig  # type: ignore[method-assign]
        llama_log.removeHandler(handler)


if __name__ == "__main__":
    main()
