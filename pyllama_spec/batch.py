"""Batches: ``TokenBatch`` (a ``llama_batch`` whose arrays numpy owns) and ``EmbdBatch``
(a ``llama_batch_ext`` of embedding rows, for injecting target features into a drafter).

The arrays handed to llama.cpp belong to the Python object for the whole call, so no
pointer ever outlives its buffer; filling a batch is a few numpy assignments, not a
C call per token.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._check import check_int
from ._ffi import ffi, lib
from .errors import ContextError, InvalidBatchError


class _LlamaBatch:
    """The arrays of a ``llama_batch`` of up to ``capacity`` tokens, each in up to ``width``
    sequences, owned by numpy, and the C struct that points into them (passed by value at each
    decode). ``seq`` is ``(capacity, width)``; token ``i``'s ids are ``seq[i, :n_seq_id[i]]``."""

    def __init__(self, capacity: int, width: int) -> None:
        self.capacity, self.width = capacity, width
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.seq = np.zeros((capacity, width), dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        self._n_seq_id = np.ones(capacity, dtype=np.int32)
        # one pointer per token into its row of self.seq: llama_batch wants llama_seq_id ** seq_id
        self._seq_ptrs = ffi.new("llama_seq_id *[]", capacity)
        base = ffi.cast("llama_seq_id *", self.seq.ctypes.data)
        for i in range(capacity):
            self._seq_ptrs[i] = base + i * width
        # the struct itself lives as long as the batch (passed by value at each decode)
        self._c = ffi.new("struct llama_batch *")
        self._c.token = ffi.cast("llama_token *", self.token.ctypes.data)
        self._c.embd = ffi.NULL
        self._c.pos = ffi.cast("llama_pos *", self.pos.ctypes.data)
        self._c.n_seq_id = ffi.cast("int32_t *", self._n_seq_id.ctypes.data)
        self._c.seq_id = self._seq_ptrs
        self._c.logits = ffi.cast("int8_t *", self.logits.ctypes.data)
        self.n_tokens = 0

    def as_c(self) -> Any:
        """The ``struct llama_batch`` value (valid while this object lives)."""
        self._c.n_tokens = self.n_tokens
        return self._c[0]


class TokenBatch(_LlamaBatch):
    """A reusable ``llama_batch`` of up to ``capacity`` tokens for one sequence per token.

    Attributes (numpy views, length ``capacity``; only the first ``n_tokens`` are used):
        token: int32 token ids.  pos: int32 positions.  seq: int32 sequence ids, (capacity, 1).
        logits: int8 output flags (1 = compute logits/embeddings for this row).
    """

    def __init__(self, capacity: int) -> None:
        super().__init__(check_int("capacity", capacity, min=1), 1)

    def set(self, tokens: Any, pos: Any, seq_id: Any = 0, logits: Any = None) -> None:
        """Fill the batch.

        Args:
            tokens: ``(n,)`` token ids.
            pos: ``(n,)`` positions.
            seq_id: the sequence every token belongs to, or ``(n,)`` ids, one per token.
            logits: ``(n,)`` bools (rows that produce outputs); None = last row only.

        Raises:
            InvalidBatchError: more tokens than the capacity, or mismatched lengths.
        """
        tokens = np.asarray(tokens, dtype=np.int32)
        n = tokens.shape[0]
        if n == 0 or n > self.capacity:
            raise InvalidBatchError(
                f"a batch holds 1..{self.capacity} tokens (the context's n_batch), got {n}; "
                "split the input or create the context with a larger n_batch", -1)
        pos = np.asarray(pos, dtype=np.int32)
        if pos.shape != (n,):
            raise InvalidBatchError(f"pos must have shape ({n},), got {pos.shape}", -1)
        self.token[:n] = tokens
        self.pos[:n] = pos
        self.seq[:n, 0] = seq_id
        if logits is None:
            self.logits[:n] = 0
            self.logits[n - 1] = 1
        else:
            lg = np.asarray(logits, dtype=np.int8)
            if lg.shape != (n,):
                raise InvalidBatchError(f"logits flags must have shape ({n},), got {lg.shape}", -1)
            self.logits[:n] = lg
        self.n_tokens = n

class SeqSetBatch(_LlamaBatch):
    """A reusable ``llama_batch`` of up to ``capacity`` tokens, each in a set of up to ``width``
    sequences (llama.cpp's ``common_batch_add`` with several seq ids): a token's KV cell then belongs
    to every sequence of its set, which is how a token tree is verified in one decode (each node is
    in the sequence of every branch through it; ``speculative/tree_step.py``).
    """

    def __init__(self, capacity: int, width: int) -> None:
        super().__init__(check_int("capacity", capacity, min=1), check_int("width", width, min=1))

    def set(self, tokens: np.ndarray, pos: np.ndarray, seq_sets: list[list[int]], logits: np.ndarray) -> None:
        """Fill with ``tokens`` / ``pos`` / ``logits`` flags ``(n,)`` and one non-empty list of
        sequence ids per token (callers check ranges and lengths).

        Raises:
            InvalidBatchError: more tokens than the capacity, or a set wider than ``width`` or empty.
        """
        n = len(tokens)
        if n == 0 or n > self.capacity:
            raise InvalidBatchError(f"a batch holds 1..{self.capacity} tokens (the context's n_batch), got {n}", -1)
        for i, s in enumerate(seq_sets):
            if not 0 < len(s) <= self.width:
                raise InvalidBatchError(f"token {i} belongs to {len(s)} sequences; a token belongs to 1..{self.width} "
                                        "(the context's n_seq_max)", -1)
            self.seq[i, :len(s)] = s
            self._n_seq_id[i] = len(s)
        self.token[:n] = tokens
        self.pos[:n] = pos
        self.logits[:n] = logits
        self.n_tokens = n

class EmbdBatch:
    """A ``llama_batch_ext`` of embedding rows (owned; freed with the object).

    Used to decode rows that are not token ids, e.g. the target features that a DFlash
    drafter turns into K/V entries (``common_speculative_impl_draft_dflash::process``).
    """

    def __init__(self, ctx_ptr: Any) -> None:
        ptr = lib.llama_batch_ext_init(ctx_ptr)
        if ptr == ffi.NULL:
            raise ContextError("llama.cpp could not allocate an embedding batch (llama_batch_ext_init) for this "
                               "context")
        self._ptr = ffi.gc(ptr, lib.llama_batch_ext_free)
        self._keep: tuple[np.ndarray, np.ndarray] | None = None

    def set(self, rows: np.ndarray, pos: np.ndarray, seq_id: int | np.ndarray = 0, output: bool = False) -> Any:
        """Fill with ``rows`` ``(n, width)`` float32 at positions ``pos`` ``(n,)`` of sequence
        ``seq_id`` (an int, or ``(n,)`` ids: one C call per run of equal ids).

        The 4-slot position form ``{p, p, p, 0}`` is used so M-RoPE drafters work too.

        Raises:
            InvalidBatchError: the batch is full or llama.cpp rejects a row.
        """
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        n, width = rows.shape
        pos4 = np.zeros((n, 4), dtype=np.int32)
        pos4[:, 0] = pos4[:, 1] = pos4[:, 2] = pos
        self._keep = (rows, pos4)  # llama.cpp reads these during llama_process
        lib.llama_batch_ext_clear(self._ptr)
        seq = np.broadcast_to(np.asarray(seq_id, dtype=np.int32), (n,))
        cuts = [0, *(np.flatnonzero(np.diff(seq)) + 1).tolist(), n]  # runs of one sequence
        base = ffi.cast("float *", rows.ctypes.data)
        pbase = ffi.cast("llama_pos *", pos4.ctypes.data)
        for a, b in zip(cuts[:-1], cuts[1:]):
            rc = lib.pyls_batch_ext_add_embd_rows(self._ptr, int(seq[a]), base + a * width, b - a, width,
                                                  pbase + 4 * a, 4, output)
            if rc != b - a:
                raise InvalidBatchError(f"could not add {n} embedding rows of width {width} (rc {rc}); "
                                        "a batch holds at most n_batch rows of the model's input width", -1)
        return self._ptr


class TokenEmbdBatch:
    """A ``llama_batch_ext`` of token rows that may each carry an embedding too (owned).

    EAGLE-3's decoder reads ``(token, g)`` pairs and MTP heads ``(token, target hidden state)``
    pairs: llama.cpp's ``common_batch::add`` + ``set_embd``, filled here in one C call.
    """

    def __init__(self, ctx_ptr):
        ptr = lib.llama_batch_ext_init(ctx_ptr)
        if ptr == ffi.NULL:
            raise MemoryError("llama_batch_ext_init failed")
        self._ptr = ffi.gc(ptr, lib.llama_batch_ext_free)

    def set(self, tokens: np.ndarray, embd: np.ndarray | None, pos: np.ndarray, seq_id: int,
            output: np.ndarray) -> Any:
        """Fill with ``tokens`` ``(n,)`` at ``pos`` ``(n,)``, ``embd`` ``(n, width)`` float32 or None,
        and ``output`` ``(n,)`` flags. llama.cpp copies the embeddings into the batch.

        Raises:
            InvalidBatchError: the batch is full or llama.cpp rejects a row (e.g. a wrong width).
        """
        tokens = np.ascontiguousarray(tokens, dtype=np.int32)
        pos = np.ascontiguousarray(pos, dtype=np.int32)
        out = np.ascontiguousarray(output, dtype=np.int8)
        n = tokens.shape[0]
        width = 0
        eptr = ffi.NULL
        if embd is not None:
            embd = np.ascontiguousarray(embd, dtype=np.float32)
            width = embd.shape[1]
            eptr = ffi.cast("float *", embd.ctypes.data)
        lib.llama_batch_ext_clear(self._ptr)
        rc = lib.pyls_batch_ext_add_token_rows(
            self._ptr, seq_id, ffi.cast("llama_token *", tokens.ctypes.data), eptr, n, width,
            ffi.cast("llama_pos *", pos.ctypes.data), ffi.cast("int8_t *", out.ctypes.data))
        if rc != n:
            raise InvalidBatchError(f"could not add {n} token rows with embeddings of width {width} (rc {rc}); "
                                    "a batch holds at most n_batch rows of the model's input width", -1)
        return self._ptr


__all__ = ["TokenBatch", "SeqSetBatch", "EmbdBatch", "TokenEmbdBatch"]
