"""What machine and build a bake-off ran on (recorded with every result)."""
from __future__ import annotations

import os
import platform
import sys
import time


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def machine_info() -> dict:
    """``{"date", "host", "platform", "python", "cpu", "n_cpus", "load_avg", "memory_gib", "devices",
    "gpu", "system_info", "llama_cpp_build", "llama_cpp_commit", "pyllama_spec"}``; ``gpu`` names the
    GPUs llama.cpp sees (None on a CPU-only build), ``load_avg`` the 1-minute load when the run began
    (a busy machine's numbers are not final)."""
    from .. import _ffi
    from .._version import __version__
    from ..backend import cpu_name, system_info
    from ..placement import devices

    devs = devices()
    gpus = [d["description"] for d in devs if d["type"] == "gpu"]
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "host": platform.node(), "platform": platform.platform(),
            "python": sys.version.split()[0], "cpu": cpu_name(), "n_cpus": os.cpu_count(), "load_avg": load,
            "memory_gib": _memory_gib(), "devices": devs, "gpu": ", ".join(gpus) or None,
            "system_info": system_info(), "llama_cpp_build": _ffi.LLAMA_CPP_BUILD,
            "llama_cpp_commit": _ffi.LLAMA_CPP_COMMIT, "pyllama_spec": __version__}


def machine_label(m: dict) -> str:
    """A short name for titles: the GPU when there is one, else the CPU (``backend.cpu_name``,
    without the ™ marks) and its core count, e.g. ``"AMD EPYC (Zen 4), 2 cores"``."""
    if m.get("gpu"):
        return m["gpu"]
    cpu = m.get("cpu") or "CPU"
    for junk in ("(R)", "(TM)", " CPU", " Processor", "  "):
        cpu = cpu.replace(junk, " " if junk == "  " else "")
    n = m.get("n_cpus")
    return f"{' '.join(cpu.split())}, {n} core{'' if n == 1 else 's'}"


def target_label(model: dict) -> str:
    """The target's name for titles: the GGUF's ``general.name`` and weight type (``Model.label``),
    or llama.cpp's description for results written before that was recorded."""
    return model.get("target_label") or model["target_desc"]


__all__ = ["machine_info", "machine_label", "target_label"]
