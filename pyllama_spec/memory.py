"""``Memory``: a context's KV cache (``llama_memory_t``, borrowed from its ``Context``)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ._check import check_bool, check_int
from ._ffi import ffi, lib
from ._locks import locked
from .errors import InvalidArgumentError, InvalidTypeError, UnsupportedError

if TYPE_CHECKING:
    import threading

    from .context import Context


def _partial_rm_error(seq_id: int, p0: int, p1: int) -> UnsupportedError:
    return UnsupportedError(f"this model's memory cannot remove positions [{p0}, {p1}) of sequence {seq_id} "
                            "(recurrent state); save and restore the state instead")


class Memory:
    """The KV cache of a :class:`~pyllama_spec.Context` (calls share the context's lock).

    Positions are token positions (ints); a range ``[p0, p1)`` with ``p1 = -1`` means "to the end".
    Every method checks the sequence id first: llama.cpp aborts on an out-of-range one.
    """

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx  # keeps the context (and so the cache) alive

    @property
    def _lock(self) -> threading.RLock:
        return self._ctx._lock

    @property
    def _mem(self) -> Any:
        return lib.llama_get_memory(self._ctx.ptr)

    def _seq(self, seq_id: int) -> int:
        n = self._ctx.n_seq_max
        return check_int("seq_id", seq_id, min=0, max=n - 1,
                         what=f"in [0, {n}): this context has n_seq_max={n} (create it with a larger n_seq_max)")

    @staticmethod
    def _range(p0: int, p1: int) -> tuple[int, int]:
        return check_int("p0", p0, min=-1), check_int("p1", p1, min=-1)

    @locked
    def clear(self, data: bool = True) -> None:
        """Remove every cell (``data=True`` also zeroes the buffers)."""
        data = check_bool("data", data)
        self._ctx._touch_cache()
        lib.llama_memory_clear(self._mem, data)

    @locked
    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> None:
        """Remove positions ``[p0, p1)`` of ``seq_id`` (the rollback of speculative decoding).

        Raises:
            UnsupportedError: the cache cannot remove part of a sequence (recurrent models).
        """
        p0, p1 = self._range(p0, p1)
        seq_id = self._seq(seq_id)
        self._ctx._touch_cache()
        if not lib.llama_memory_seq_rm(self._mem, seq_id, p0, p1):
            raise _partial_rm_error(seq_id, p0, p1)

    @locked
    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        """Make positions ``[p0, p1)`` of ``src`` also belong to ``dst``.

        Raises:
            UnsupportedError: a partial range between separate per-sequence buffers (llama.cpp
                would abort); create the context with ``kv_unified=True``.
        """
        p0, p1 = self._range(p0, p1)
        src, dst = self._seq(src), self._seq(dst)
        if src != dst and not self._ctx.kv_unified and self._ctx.n_seq_max > 1 and (p0 > 0 or p1 >= 0):
            raise UnsupportedError("copying part of a sequence needs a unified KV cache: create the context "
                                   "with kv_unified=True (or copy the whole sequence with p0=p1=-1)")
        self._ctx._touch_cache()
        lib.llama_memory_seq_cp(self._mem, src, dst, p0, p1)

    def _seq_list(self, seqs: Iterable[int]) -> list[int]:
        """``seqs`` as a list, each id checked as :meth:`_seq` does (raising before anything changes)."""
        ids = list(seqs)
        n = self._ctx.n_seq_max
        if not all(type(d) is int and 0 <= d < n for d in ids):  # (the per-id check only to word the error)
            ids = [self._seq(d) for d in ids]
        return ids

    @locked
    def seq_cp_many(self, src: int, dsts: Iterable[int], p0: int = -1, p1: int = -1) -> None:
        """Make positions ``[p0, p1)`` of ``src`` also belong to each sequence of ``dsts`` (:meth:`seq_cp`
        for each, checked once): a token tree's branch sequences get the committed prefix, or the accepted
        path's cells.

        Each destination is still one pass over every cell of the cache in llama.cpp (its cost grows with
        ``n_ctx``, and with the cells in the range that ``src`` holds); what goes is the per-call Python
        checks, lock and handle. A destination must not already hold a cell of the range that ``src``
        holds (llama.cpp would count it twice in its position map).

        Raises:
            InvalidTypeError, InvalidArgumentError: a sequence id that is not an int in ``[0, n_seq_max)``,
                or a negative position other than -1 (nothing is copied then).
            UnsupportedError: a partial range between separate per-sequence buffers (see :meth:`seq_cp`).
        """
        p0, p1 = self._range(p0, p1)
        src = self._seq(src)
        dst = self._seq_list(dsts)
        if not self._ctx.kv_unified and self._ctx.n_seq_max > 1 and (p0 > 0 or p1 >= 0) and \
                any(d != src for d in dst):
            raise UnsupportedError("copying part of a sequence needs a unified KV cache: create the context "
                                   "with kv_unified=True (or copy the whole sequence with p0=p1=-1)")
        self._ctx._touch_cache()
        # (a 32-node tree has ~20 branches: ~5 µs of checks each through seq_cp, on one AMD EPYC core)
        mem, cp = self._mem, lib.llama_memory_seq_cp
        for d in dst:
            cp(mem, src, d, p0, p1)

    @locked
    def seq_rm_many(self, seqs: Iterable[int], p0: int = -1, p1: int = -1) -> None:
        """Remove positions ``[p0, p1)`` of each sequence of ``seqs`` (:meth:`seq_rm` for each, checked
        once): a token tree's rejected branches go, or a rollback reaches every branch sequence.

        Raises:
            InvalidTypeError, InvalidArgumentError: a bad sequence id or position (nothing is removed then).
            UnsupportedError: the cache cannot remove part of a sequence (recurrent models).
        """
        p0, p1 = self._range(p0, p1)
        ids = self._seq_list(seqs)
        self._ctx._touch_cache()
        mem, rm = self._mem, lib.llama_memory_seq_rm
        for d in ids:
            if not rm(mem, d, p0, p1):
                raise _partial_rm_error(d, p0, p1)

    @locked
    def seq_keep(self, seq_id: int) -> None:
        """Remove every cell that does not belong to ``seq_id``."""
        self._ctx._touch_cache()
        lib.llama_memory_seq_keep(self._mem, self._seq(seq_id))

    @locked
    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        """Shift positions ``[p0, p1)`` of ``seq_id`` by ``delta`` (RoPE is re-applied).

        Raises:
            UnsupportedError: the cache cannot shift (e.g. M-RoPE models).
        """
        p0, p1 = self._range(p0, p1)
        delta = check_int("delta", delta)
        if not lib.llama_memory_can_shift(self._mem):
            raise UnsupportedError("this model's KV cache does not support position shifts")
        self._ctx._touch_cache()
        lib.llama_memory_seq_add(self._mem, self._seq(seq_id), p0, p1, delta)

    @locked
    def pos_min(self, seq_id: int = 0) -> int:
        """Smallest position held for ``seq_id`` (-1 when empty)."""
        return lib.llama_memory_seq_pos_min(self._mem, self._seq(seq_id))

    @locked
    def pos_max(self, seq_id: int = 0) -> int:
        """Largest position held for ``seq_id`` (-1 when empty)."""
        return lib.llama_memory_seq_pos_max(self._mem, self._seq(seq_id))

    @locked
    def state_get(self, seq_id: int = 0) -> bytes:
        """Serialize the cache of one sequence (restore with :meth:`state_set`)."""
        ctx = self._ctx.ptr
        seq_id = self._seq(seq_id)
        n = lib.llama_state_seq_get_size(ctx, seq_id)
        buf = ffi.new("uint8_t[]", n)
        written = lib.llama_state_seq_get_data(ctx, buf, n, seq_id)
        return ffi.unpack(ffi.cast("char *", buf), written)

    @locked
    def state_set(self, data: bytes, seq_id: int = 0) -> None:
        """Load a sequence's cache saved by :meth:`state_get` into ``seq_id``.

        Raises:
            InvalidTypeError: ``data`` is not bytes.
            InvalidArgumentError: llama.cpp rejected the data (another model or context shape).
        """
        if not isinstance(data, (bytes, bytearray)):
            raise InvalidTypeError(f"data must be bytes from state_get(), got {type(data).__name__}")
        seq_id = self._seq(seq_id)
        self._ctx._touch_cache()
        n = lib.llama_state_seq_set_data(self._ctx.ptr, bytes(data), len(data), seq_id)
        if n == 0:
            raise InvalidArgumentError("llama.cpp rejected the saved sequence state (made by another model "
                                       "or context configuration?)")


__all__ = ["Memory"]
