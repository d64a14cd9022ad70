"""The programs installed with the package in ``pyllama_spec/bin`` (llama.cpp's reference programs,
``ggml-rpc-server``): found by path, with one message naming the build option when one is missing."""
from __future__ import annotations

import os
from pathlib import Path

from .errors import UnsupportedError

#: the folder(s) of the package (one, unless it is spread over several paths)
_PACKAGE_DIRS = (Path(__file__).resolve().parent,)


def find_program(name: str) -> Path:
    """Path of a program installed with the package (``pyllama_spec/bin/<name>``).

    Raises:
        UnsupportedError: not built; reinstall with ``-C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON``.
    """
    for d in _PACKAGE_DIRS:
        p = d / "bin" / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
    raise UnsupportedError(f"{name} is not installed: reinstall with "
                           "`pip install . -C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON`")


__all__ = ["find_program"]
