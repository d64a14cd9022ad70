"""Process-wide llama.cpp set-up: one-time backend init, log routing, device list.

llama.cpp's log output goes to the Python logger ``pyllama_spec.llama_cpp``.
It is quiet by default (warnings and errors only); call
``set_llama_log_level(logging.INFO)`` or configure that logger to see more.
The last error lines are kept (``_logring.recent_errors``) so that a failed load can quote them.
"""
from __future__ import annotations

import logging
import threading

from ._ffi import ffi, lib
from ._logring import last_llama_error, recent_errors

log = logging.getLogger("pyllama_spec.llama_cpp")
log.setLevel(logging.WARNING)

_LEVELS = {
    lib.GGML_LOG_LEVEL_DEBUG: logging.DEBUG,
    lib.GGML_LOG_LEVEL_INFO: logging.INFO,
    lib.GGML_LOG_LEVEL_WARN: logging.WARNING,
    lib.GGML_LOG_LEVEL_ERROR: logging.ERROR,
}
_init_lock = threading.Lock()
_initialized = False
_pending: list[str] = []
_pending_level = logging.INFO


@ffi.def_extern()
def _pyls_log_callback(level, text, user_data):  # noqa: ARG001 - signature fixed by ggml
    global _pending_level
    if level != lib.GGML_LOG_LEVEL_CONT:
        _pending_level = _LEVELS.get(level, logging.INFO)
    if text == ffi.NULL:
        return
    if _pending_level < logging.WARNING and not log.isEnabledFor(_pending_level):
        # a line nobody reads (and not kept for errors): not even copied out of C. Each graph reservation
        # prints ~200 debug lines in ~3 fragments each (llama_graph_n_input_tensors), whose joining cost
        # ~1-2 ms per reservation when they were all joined and then dropped
        return
    # llama.cpp emits a line in fragments; join them so each record is one line.
    _pending.append(ffi.string(text).decode("utf-8", "replace"))
    if not _pending[-1].endswith("\n"):
        return
    line = "".join(_pending).rstrip("\n")
    _pending.clear()
    if _pending_level >= logging.WARNING:
        recent_errors.append(line)
    if log.isEnabledFor(_pending_level):
        log.log(_pending_level, "%s", line)


def ensure_init() -> None:
    """Initialise llama.cpp's backends once per process and route its log to ``logging``."""
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        lib.llama_log_set(lib._pyls_log_callback, ffi.NULL)
        lib.llama_backend_init()
        _initialized = True


def set_llama_log_level(level: int) -> None:
    """Set the level of llama.cpp's log lines that reach Python logging (e.g. ``logging.INFO``)."""
    log.setLevel(level)


def system_info() -> str:
    """llama.cpp's one-line description of the CPU features and backends compiled in."""
    ensure_init()
    return ffi.string(lib.llama_print_system_info()).decode()


# CPU microarchitectures by (vendor, family, model range), for CPUs whose brand string a hypervisor
# shortened ("AMD EPYC", "Intel(R) Xeon(R) Processor"): from the vendors' family/model tables
# (AMD's Processor Programming References, Intel's SDM vol. 4 "Processor signatures")
_MICROARCH = (
    ("AuthenticAMD", 23, range(0x00, 0x30), "Zen/Zen+"), ("AuthenticAMD", 23, range(0x30, 0x100), "Zen 2"),
    ("AuthenticAMD", 25, range(0x00, 0x10), "Zen 3"), ("AuthenticAMD", 25, range(0x10, 0x20), "Zen 4"),
    ("AuthenticAMD", 25, range(0x20, 0x60), "Zen 3"), ("AuthenticAMD", 25, range(0x60, 0xb0), "Zen 4"),
    ("AuthenticAMD", 26, range(0x00, 0x100), "Zen 5"),
    ("GenuineIntel", 6, range(85, 86), "Skylake-SP/Cascade Lake"), ("GenuineIntel", 6, range(106, 107), "Ice Lake-SP"),
    ("GenuineIntel", 6, range(108, 109), "Ice Lake-SP"), ("GenuineIntel", 6, range(143, 144), "Sapphire Rapids"),
    ("GenuineIntel", 6, range(207, 208), "Emerald Rapids"), ("GenuineIntel", 6, range(173, 175), "Granite Rapids"),
)


def cpu_name(cpuinfo: str | None = None) -> str:
    """The CPU's model name as the OS reports it (``/proc/cpuinfo``'s ``model name``, the cpuid
    brand string llama.cpp's CPU device also shows), with its microarchitecture added from the
    family/model numbers when known (a hypervisor often shortens the brand to "AMD EPYC"), e.g.
    ``"AMD EPYC (Zen 4)"``. The one source of the CPU's name for reports and titles.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo`` (default: read it; tests pass their own).
    """
    import platform

    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor's block is enough
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    try:
        vendor, family, model = fields.get("vendor_id"), int(fields["cpu family"]), int(fields["model"])
    except (KeyError, ValueError):
        return name
    arch = next((a for v, fam, models, a in _MICROARCH if v == vendor and fam == family and model in models), None)
    if arch and arch.split("/")[0] not in name:
        return f"{name} ({arch})"
    return name if arch else f"{name} (family {family}, model {model})"


def supports_gpu_offload() -> bool:
    """True when this build has a GPU backend (CUDA) and a device is visible on this machine.
    (``llama_supports_gpu_offload`` also says True for any build with the RPC backend, GPU or not.)"""
    return any(d["type"] in ("gpu", "igpu") and d["backend"] != "RPC" for d in device_table())


def device_table() -> list[dict]:
    """Like :func:`pyllama_spec.placement.devices`, plus each device's ``handle`` (``ggml_backend_dev_t``) and its
    ``backend`` (registry name: ``"CPU"``, ``"CUDA"``, ``"RPC"``). Free memory is not asked (an RPC
    device would ask its server over the network)."""
    ensure_init()
    kinds = {lib.GGML_BACKEND_DEVICE_TYPE_CPU: "cpu", lib.GGML_BACKEND_DEVICE_TYPE_GPU: "gpu",
             lib.GGML_BACKEND_DEVICE_TYPE_IGPU: "igpu", lib.GGML_BACKEND_DEVICE_TYPE_ACCEL: "accel"}
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        out.append({
            "index": i,
            "name": ffi.string(lib.ggml_backend_dev_name(dev)).decode(),
            "description": ffi.string(lib.ggml_backend_dev_description(dev)).decode(),
            "type": kinds.get(lib.ggml_backend_dev_type(dev), "other"),
            "backend": ffi.string(lib.ggml_backend_reg_name(lib.ggml_backend_dev_backend_reg(dev))).decode(),
            "handle": dev,
        })
    return out


def default_offload_devices(table: list[dict] | None = None) -> list[dict]:
    """The devices a model offloads to when none are named: the local GPUs (integrated GPUs only
    when there is no discrete one), as llama.cpp chooses them — but never an RPC server, which a
    model gets only by asking for it (``rpc_servers=`` or its name in ``devices=``)."""
    table = device_table() if table is None else table
    gpus = [d for d in table if d["type"] == "gpu" and d["backend"] != "RPC"]
    return gpus or [d for d in table if d["type"] == "igpu"]


__all__ = ["ensure_init", "set_llama_log_level", "last_llama_error", "recent_errors", "system_info", "cpu_name",
           "supports_gpu_offload", "device_table", "default_offload_devices"]
