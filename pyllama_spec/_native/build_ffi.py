"""Emit the C source of the cffi extension ``pyllama_spec._llama`` (API, out-of-line mode).

cffi only writes C here; CMake compiles and links it against libllama (see the
top-level CMakeLists.txt). The declarations are real C, one header per area,
read in the order below because later headers use types of earlier ones.

Usage: ``python build_ffi.py OUT.c``
"""
import sys
from pathlib import Path

import cffi

HERE = Path(__file__).resolve().parent
DECL_ORDER = ["types.h", "backend.h", "model.h", "vocab.h", "context.h", "batch.h",
              "memory.h", "sampler.h", "taps.h"]


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    for name in DECL_ORDER:
        ffi.cdef((HERE / "decl" / name).read_text())
    ffi.set_source("pyllama_spec._llama", '#include "llama.h"\n#include "ggml-backend.h"\n#include "shim.h"\n')
    return ffi


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.parent.mkdir(parents=True, exist_ok=True)
    make_ffi().emit_c_code(str(out))
