"""Writing a file so that no reader ever sees half of it: the one place that does it (a shipped drafter
unpacked into the cache, a reduced draft vocabulary written)."""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary file's name beside ``path`` (its folder created); when the block ends without an
    exception the file becomes readable as any other (``0o666`` less the umask: ``mkstemp`` makes it private, and a
    shared cache's files are read by other users) and replaces ``path`` atomically — two processes writing the
    same file at once is harmless; on an exception it is removed.

    Raises:
        OSError: the folder or the file cannot be made.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        umask = os.umask(0)  # (read by setting it and setting it back)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)  # (nothing there after the replace)


__all__ = ["atomic_file"]
