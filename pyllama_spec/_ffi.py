"""The compiled cffi extension: ``ffi`` and ``lib``, plus a check that it matches this package.

Everything above this module talks to llama.cpp only through ``lib``; the
declarations live in ``_native/decl/*.h`` (real C, compiled in API mode, so
struct layouts come from the pinned ``llama.h``, never from a hand-copy).
"""
from __future__ import annotations

try:
    from ._llama import ffi, lib
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        "pyllama_spec's native extension is missing or failed to load. Install the package with "
        "`pip install .` (which compiles llama.cpp) rather than importing it from the source tree; "
        f"original error: {exc}"
    ) from exc

#: llama.cpp commit this package is built and tested against.
LLAMA_CPP_COMMIT = "0c1e570"

_built_commit = ffi.string(lib.pyls_llama_cpp_commit()).decode()
if _built_commit != LLAMA_CPP_COMMIT:  # pragma: no cover
    raise ImportError(
        f"pyllama_spec expects llama.cpp {LLAMA_CPP_COMMIT} but its extension was built against "
        f"{_built_commit}; rebuild with `pip install --force-reinstall .`"
    )

__all__ = ["ffi", "lib", "LLAMA_CPP_COMMIT"]
