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
                 "llama_context: graph reserve warmup complete",
                 "sched_reserve: reserving a graph"):
        h.emit(_record(line))
    assert h.seq == [("ev", "D"), ("ev", "R"), ("ev", "C"), ("ev", "E"), ("ev", "U"), ("ev", "F")]


def test_events_belong_to_the_decode_whose_mark_follows_them():
    gw = _module()
    target, drafter = 1, 2
    seq = [
        ("ev", "D"), ("decode", (target, 40)),  # prefill: a new shape, run directly
        ("ev", "R"), ("decode", (drafter, 8)),  # the drafter's decode: not the target's
        ("ev", "C"), ("decode", (target, 1)),  # the first step captured
        ("decode", (target, 1)),  # no event: replayed (patch 0018 logs every direct run)
        ("ev", "U"), ("ev", "C"), ("decode", (target, 3)),
    ]
    assert gw._per_decode(seq, target) == [(40, "D"), (1, "C"), (1, "."), (3, "UC")]
    assert gw._per_decode(seq, drafter) == [(8, "R")]
    assert gw._per_decode([], target) == []
