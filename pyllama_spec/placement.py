"""Where a model's layers go: llama.cpp's device list, split mode, tensor split and main GPU,
checked in Python before llama.cpp sees them (a bad index or split makes it fail obscurely or
abort).

llama.cpp's model: the CPU always holds what is not offloaded; ``n_gpu_layers`` of the model's
last layers are offloaded to the *devices* (GPUs, and RPC servers — another machine's CPU or
GPUs, see ``pyllama_spec.rpc``). With ``split_mode="layer"`` (default) the offloaded layers are
divided among the devices in proportion to ``tensor_split`` (default: their free memory), each
layer's KV cache with it; ``"row"`` also splits each weight matrix by rows across CUDA GPUs;
``"none"`` puts everything on device ``main_gpu``. The device list defaults to llama.cpp's
(RPC servers first, then the GPUs; ``src/llama.cpp`` ``llama_prepare_model_devices``), or is
given by name (:func:`devices` lists the names: ``"CUDA0"``, ``"RPC0"``; ``"CPU"`` alone
means no offload).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from . import backend
from ._ffi import ffi, lib
from .errors import InvalidArgumentError, UnsupportedError
from .rpc import reachable

SPLIT_MODES = {"none": lib.LLAMA_SPLIT_MODE_NONE, "layer": lib.LLAMA_SPLIT_MODE_LAYER,
               "row": lib.LLAMA_SPLIT_MODE_ROW}


@dataclass(frozen=True)
class Placement:
    """Where a model's weights (and its contexts' KV caches) go.

    Attributes:
        n_gpu_layers: layers offloaded to the devices (-1 = all, 0 = none: CPU only).
        split_mode: ``"layer"`` | ``"row"`` (CUDA GPUs only) | ``"none"`` (one device: ``main_gpu``).
        tensor_split: the share of each device, in device-list order (any non-negative numbers,
            normalised by llama.cpp); None: in proportion to free memory.
        main_gpu: index in the device list of the device used with ``split_mode="none"`` (and for
            the intermediate results of ``"row"``).
        devices: device names (:func:`devices`), in order; None: llama.cpp's default list;
            ``("CPU",)``: no offload.

    Raises:
        InvalidArgumentError: a value of the wrong type or range (the message names it).
    """
    n_gpu_layers: int = -1
    split_mode: str = "layer"
    tensor_split: Sequence[float] | None = None
    main_gpu: int = 0
    devices: Sequence[str] | None = None

    def __post_init__(self):
        if not isinstance(self.n_gpu_layers, int) or isinstance(self.n_gpu_layers, bool) or self.n_gpu_layers < -1:
            raise InvalidArgumentError(f"n_gpu_layers must be an int ≥ -1 (-1 = all layers), got {self.n_gpu_layers!r}")
        if self.split_mode not in SPLIT_MODES:
            raise InvalidArgumentError(f"split_mode must be one of {sorted(SPLIT_MODES)}, got {self.split_mode!r}")
        if not isinstance(self.main_gpu, int) or isinstance(self.main_gpu, bool) or self.main_gpu < 0:
            raise InvalidArgumentError(f"main_gpu must be an int ≥ 0 (an index in the device list), got "
                                       f"{self.main_gpu!r}")
        if self.devices is not None:
            if isinstance(self.devices, str) or not all(isinstance(d, str) and d for d in self.devices):
                raise InvalidArgumentError(f"devices must be a list of device names (see pyllama_spec.devices()), "
                                           f"got {self.devices!r}")
            object.__setattr__(self, "devices", tuple(self.devices))
        if self.tensor_split is not None:
            ts = self.tensor_split
            if isinstance(ts, (str, bytes)) or not hasattr(ts, "__len__"):
                raise InvalidArgumentError(f"tensor_split must be a list of numbers, one per device, got {ts!r}")
            vals = []
            for v in ts:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                    raise InvalidArgumentError(f"tensor_split holds shares ≥ 0 (one per device), got {list(ts)!r}")
                vals.append(float(v))
            if not vals or sum(vals) <= 0:
                raise InvalidArgumentError(f"tensor_split needs a positive share for at least one device, got "
                                           f"{list(ts)!r}")
            object.__setattr__(self, "tensor_split", tuple(vals))

    def resolve(self) -> tuple[list | None, list[str]]:
        """The device handles to pass to llama.cpp (None: its default list) and their names,
        checked against this machine's devices.

        Raises:
            InvalidArgumentError: an unknown device name, a split or main_gpu that does not fit the
                device list.
            UnsupportedError: ``split_mode="row"`` without CUDA GPUs.
        """
        table = backend.device_table()
        by_name = {d["name"]: d for d in table}
        if self.devices is not None:
            unknown = [n for n in self.devices if n not in by_name]
            if unknown:
                raise InvalidArgumentError(f"unknown device(s) {unknown}; this machine has: "
                                           f"{', '.join(by_name) or 'none'} (RPC servers appear once added)")
            chosen = [by_name[n] for n in self.devices if by_name[n]["type"] != "cpu"]
            explicit = True
        else:
            chosen = backend.default_offload_devices(table)
            # llama.cpp's own default would also take every RPC server any model of this process
            # registered: name the list whenever one is registered
            explicit = any(d["backend"] == "RPC" for d in table)
        names = [d["name"] for d in chosen]
        n = len(chosen)
        if self.tensor_split is not None:
            if n == 0:
                raise InvalidArgumentError(f"tensor_split={list(self.tensor_split)} but the model has no device to "
                                           "split over (CPU only); drop tensor_split or add devices")
            if len(self.tensor_split) > n:
                raise InvalidArgumentError(f"tensor_split has {len(self.tensor_split)} shares but there are {n} "
                                           f"devices ({', '.join(names)}): give at most one share per device")
            if len(self.tensor_split) > lib.llama_max_devices():
                raise InvalidArgumentError(f"tensor_split has more shares than llama.cpp's {lib.llama_max_devices()} "
                                           "devices")
        if self.main_gpu >= max(1, n):
            raise InvalidArgumentError(f"main_gpu={self.main_gpu} but the device list has {n} device(s) "
                                       f"({', '.join(names) or 'CPU only'}); main_gpu indexes that list")
        if self.split_mode == "row" and not any(d["backend"] == "CUDA" for d in chosen):
            raise UnsupportedError("split_mode='row' splits matrices across CUDA GPUs; the device list has none "
                                   f"({', '.join(names) or 'CPU only'}): use split_mode='layer'")
        return ([d["handle"] for d in chosen] if explicit else None), names

    def apply(self, params: Any) -> tuple:
        """Fill ``llama_model_params`` with this placement; returns the C arrays that must stay
        alive until the model is loaded.

        Raises:
            InvalidArgumentError, UnsupportedError: as :meth:`resolve`.
        """
        handles, _ = self.resolve()
        keep = []
        params.n_gpu_layers = self.n_gpu_layers
        params.split_mode = SPLIT_MODES[self.split_mode]
        params.main_gpu = self.main_gpu
        if handles is not None:
            arr = ffi.new("ggml_backend_dev_t[]", len(handles) + 1)  # NULL-terminated
            for i, h in enumerate(handles):
                arr[i] = h
            params.devices = arr
            keep.append(arr)
        if self.tensor_split is not None:
            ts = ffi.new("float[]", max(lib.llama_max_devices(), len(self.tensor_split)))
            for i, v in enumerate(self.tensor_split):
                ts[i] = v
            params.tensor_split = ts
            keep.append(ts)
        return tuple(keep)


def devices() -> list[dict]:
    """The ggml backend devices: ``[{"name", "description", "type", "backend", "free_mib",
    "total_mib"}]`` (``type``: ``"cpu"``, ``"gpu"``, ``"igpu"``, ``"accel"``; ``backend``: ``"CPU"``,
    ``"CUDA"``, ``"RPC"`` …). The names are what ``devices=`` / ``drafter_device=`` take. An RPC
    server that no longer answers is listed with NaN memory (asking it would abort the process)."""
    free = ffi.new("size_t *")
    total = ffi.new("size_t *")
    out = []
    for d in backend.device_table():
        if d["backend"] == "RPC":
            if not reachable(d["description"]):  # asking a server that is gone would abort the process
                out.append({"name": d["name"], "description": d["description"], "type": d["type"],
                            "backend": d["backend"], "free_mib": float("nan"), "total_mib": float("nan")})
                continue
        lib.ggml_backend_dev_memory(d["handle"], free, total)
        out.append({"name": d["name"], "description": d["description"], "type": d["type"],
                    "backend": d["backend"], "free_mib": free[0] / 2**20, "total_mib": total[0] / 2**20})
    return out


__all__ = ["Placement", "SPLIT_MODES", "devices"]
