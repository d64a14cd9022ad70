"""benchmarks/graph_warmup.py: its reading of ggml-cuda's CUDA-graph log lines and the per-decode split."""
from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("graph_warmup", ROOT / "benchmarks" / "graph_warmup.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _record(msg: str) -> logging.LogRecord:
    return logging.LogRecord("pyllama_spec.llama_cpp", logging.DEBUG, __file__, 0, msg, None, None)


def test_the_log_lines_of_ggml_cuda_map_to_one_code_each():
    gw = _module()
    h = gw._Events()
    # the lines of the pinned tree's ggml-cuda.cu (ggml_backend_cuda_graph_compute, ggml_cuda_graph_update_required)
    # and of patch 0018's eager capture; anything else is not an event
    for line in ("ggml_backend_cuda_graph_compute: CUDA graph warmup direct run (new shape)",
                 "ggml_backend_cuda_graph_compute: CUDA graph warmup reset",
                 "ggml_backend_cuda_graph_compute: CUDA graph warmup complete",
                 "ggml_backend_cuda_graph_compute: CUDA graph warmup complete (eager)",
                 "CUDA Graph id 42 reused",
                 "ggml_cuda_graph_update_executable: CUDA graph update failed",
                 "ggml_cuda_graph_log_change: CUDA graph node 12 (norm-0 (copy)) changed: flags",
                 "llama_context: graph reserve warmup complete",
                 "sched_reserve: reserving a graph"):
        h.emit(_record(line))
    assert h.seq == [("ev", "D"), ("ev", "R"), ("ev", "C"), ("ev", "E"), ("ev", "U"), ("ev", "F"), ("ev", "[flags]")]
    # a cause stays out of the code counts
    assert gw._codes("[flags]R") == "R" and gw._codes("[data]RUC") == "RUC" and gw._codes(".") == "."


def test_events_belong_to_the_decode_whose_mark_follows_them():
    gw = _module()
    target, drafter = 1, 2
    seq = [
        ("ev", "D"), ("decode", (target, 40, 10.0)),  # prefill: a new shape, run directly
        ("ev", "R"), ("decode", (drafter, 8, 10.002)),  # the drafter's decode: not the target's
        ("ev", "C"), ("decode", (target, 1, 10.005)),  # the first step captured
        ("decode", (target, 1, 10.006)),  # no event: replayed (patch 0018 logs every direct run)
        ("ev", "U"), ("ev", "C"), ("decode", (target, 3, 10.0085)),
    ]
    got = gw._per_decode(seq, target)
    assert [(r, ev) for r, ev, _ in got] == [(40, "D"), (1, "C"), (1, "."), (3, "UC")]
    # milliseconds since the previous mark of any context (the first decode has none before it: 0)
    assert [round(ms, 6) for _, _, ms in got] == [0.0, 3.0, 1.0, 2.5]
    assert [(r, ev) for r, ev, _ in gw._per_decode(seq, drafter)] == [(8, "R")]
    assert gw._per_decode([], target) == []


def test_dear_decodes_are_those_over_twice_the_median_after_the_first():
    gw = _module()
    dec = [(41, "D", 0.0), (1, "D", 4.6), (1, "C", 6.5), (1, ".", 1.2), (1, ".", 1.1), (1, ".", 1.2), (1, "U", 2.5)]
    # median of the 6 after the prefill: 1.85 -> over 3.7: #1, #2 (2.5 is not)
    dear, med = gw._dear(dec)
    assert dear == [(1, 1, "D", 4.6), (2, 1, "C", 6.5)] and abs(med - 1.85) < 1e-9
    assert gw._dear(dec[:2]) == ([], 0.0)
