"""Emit the C source of the cffi extension ``pyllama_spec._llama`` (API, out-of-line mode).

cffi only writes C here; CMake compiles and links it against libllama (see the
top-level CMakeLists.txt). The declarations are real C, one header per area,
read in the order below because later headers use types of earlier ones; the
last one is our shim's own header, ``shim.h``, read as it is compiled (its
preprocessor lines and ``extern "C"`` guard dropped), so the two cannot drift.

Usage: ``python build_ffi.py OUT.c``
"""
from __future__ import annotations

import sys
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
DECL_ORDER = ["types.h", "backend.h", "model.h", "vocab.h", "context.h", "batch.h",
              "memory.h", "sampler.h"]
SHIM_HEADER = HERE / "shim.h"


def shim_cdef(text: str) -> str:
    """The declarations of ``shim.h`` as cffi reads them: every preprocessor line is dropped,
    and with it the ``extern "C" {`` / ``}`` pair that sits inside ``#ifdef __cplusplus``."""
    out, skipping = [], False
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#ifdef __cplusplus"):
            skipping = True
        elif s.startswith("#endif") and skipping:
            skipping = False
        elif not skipping and not s.startswith("#"):
            out.append(line)
    return "\n".join(out) + "\n"


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    for name in DECL_ORDER:
        ffi.cdef((HERE / "decl" / name).read_text())
    ffi.cdef(shim_cdef(SHIM_HEADER.read_text()))
    ffi.set_source("pyllama_spec._llama", '#include "llama.h"\n#include "ggml-backend.h"\n#include "shim.h"\n')
    return ffi


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    make_ffi().emit_c_code(str(out))
