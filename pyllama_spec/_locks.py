"""The thread contract of the wrappers, in one place.

llama.cpp's objects are not thread-safe: two threads decoding on one ``llama_context``, or
one thread freeing a model while another tokenizes with it, corrupt memory or abort the
process. pyllama_spec therefore **serialises** the calls on each object with a re-entrant lock:

* a :class:`~pyllama_spec.Model` and its :class:`~pyllama_spec.Vocab` share the model's lock;
* a :class:`~pyllama_spec.Context` and its :class:`~pyllama_spec.Memory` share the context's
  lock, and contexts linked with ``ctx_other`` (a drafter and its target) share one lock, since
  a drafter's decode reads its target's buffers;
* a :class:`~pyllama_spec.Generator` holds its own lock for a whole ``generate()`` call and,
  for a stream, while it computes each next piece.

So sharing any of these objects between threads is safe: calls wait for each other (objects of
different models or generators still run in parallel, and llama.cpp releases the GIL while it
computes). Locks are always taken in the order generator → context → model, never the reverse,
so they cannot deadlock.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def locked(method: F) -> F:
    """Run ``method`` holding ``self._lock`` (a ``threading.RLock``)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return wrapper  # type: ignore[return-value]


__all__ = ["locked"]
