"""The compiled cffi extension: ``ffi`` and ``lib``, plus a check that it matches this package.

Everything above this module talks to llama.cpp only through ``lib``; the
declarations live in ``_native/decl/*.h`` (real C, compiled in API mode, so
struct layouts come from the pinned ``llama.h``, never from a hand-copy).
"""
from __future__ import annotations

from . import _pin

try:
    from ._llama import ffi, lib
except ImportError as exc:  # pragma: no cover - only on a broken install
    raise ImportError(
        "pyllama_spec's native extension is missing or failed to load. Install the package with "
        "`pip install .` (which compiles llama.cpp) rather than importing it from the source tree; "
        f"original error: {exc}"
    ) from exc

#: llama.cpp commit this package is built and tested against (``_pin.py``).
LLAMA_CPP_COMMIT = _pin.LLAMA_CPP_COMMIT
#: what the extension was compiled from: ``"<commit>+<patch>+..."`` (the tree's marker, baked in by CMake).
LLAMA_CPP_BUILD = ffi.string(lib.pyls_llama_cpp_commit()).decode()


def _verify_build(built: str, expected: str) -> None:
    """Raise ImportError when the extension was compiled from another llama.cpp or patch set than
    the Python sources pin (a stale build under a newer checkout, or the reverse)."""
    if built != expected:
        raise ImportError(
            f"pyllama_spec's sources pin llama.cpp {expected!r} (pyllama_spec/_pin.py) but its compiled "
            f"extension was built from {built!r}; rebuild with `pip install --force-reinstall .`")


_verify_build(LLAMA_CPP_BUILD, _pin.marker())

__all__ = ["ffi", "lib", "LLAMA_CPP_COMMIT", "LLAMA_CPP_BUILD"]
