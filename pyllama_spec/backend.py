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


__all__ = ["ensure_init", "set_llama_log_level", "last_llama_error", "recent_errors", "system_info",
           "supports_gpu_offload", "device_table", "default_offload_devices"]
