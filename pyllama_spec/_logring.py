"""The most recent warning/error lines llama.cpp logged, kept for error messages.

A ring of strings and nothing else, so that both the log callback (``backend.py``, which fills it)
and the exception tree (``errors.py``, which quotes it in decode errors) can sit on it without
importing each other.
"""
from __future__ import annotations

import collections

#: the most recent warning/error lines from llama.cpp (oldest first, at most 16)
recent_errors: collections.deque[str] = collections.deque(maxlen=16)


def last_llama_error(default: str = "") -> str:
    """The last warning/error line logged by llama.cpp, or ``default``."""
    return recent_errors[-1] if recent_errors else default


def recent_reason() -> str:
    """The recent warning/error lines joined into one ``" | "``-separated string ("" if none)."""
    return " | ".join(line.strip() for line in recent_errors if line.strip())


__all__ = ["recent_errors", "last_llama_error", "recent_reason"]
