"""``Context``: an inference context (owns ``llama_context *``, keeps its ``Model`` alive).

Outputs (logits, embeddings, layer-input taps) are returned as **read-only numpy views** of
llama.cpp's output buffer: zero-copy; they show the last decode's values until the next
decode on this context overwrites them (``.copy()`` keeps them). A view can never read freed
memory: its ``base`` holds the Context, so a closed Context frees its native memory only when
its last view is gone, and a decode that needs a larger output buffer keeps the old one while
views into it live (our llama.cpp patch 0002).
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import backend
from ._check import check_bool, check_choice, check_int
from ._ffi import ffi, lib
from ._locks import locked
from .batch import EmbdBatch, SeqSetBatch, TokenBatch, TokenEmbdBatch
from .errors import (
    ClosedError,
    ContextError,
    InvalidArgumentError,
    InvalidBatchError,
    InvalidTypeError,
    NoOutputError,
    UnsupportedError,
    check_decode,
)
from .memory import Memory
from .model import Model

if TYPE_CHECKING:
    from .sampler import SamplerChain

log = logging.getLogger("pyllama_spec")

#: llama.cpp allocates the KV cache in multiples of this many cells (src/llama-context.cpp)
N_CTX_PAD = 256

KV_TYPES = {"f32": lib.GGML_TYPE_F32, "f16": lib.GGML_TYPE_F16, "bf16": lib.GGML_TYPE_BF16,
            "q8_0": lib.GGML_TYPE_Q8_0, "q4_0": lib.GGML_TYPE_Q4_0, "q4_1": lib.GGML_TYPE_Q4_1,
            "q5_0": lib.GGML_TYPE_Q5_0, "q5_1": lib.GGML_TYPE_Q5_1}
FLASH_ATTN = {"auto": lib.LLAMA_FLASH_ATTN_TYPE_AUTO, True: lib.LLAMA_FLASH_ATTN_TYPE_ENABLED,
              False: lib.LLAMA_FLASH_ATTN_TYPE_DISABLED, "on": lib.LLAMA_FLASH_ATTN_TYPE_ENABLED,
              "off": lib.LLAMA_FLASH_ATTN_TYPE_DISABLED}


def default_threads() -> int:
    """CPU threads for decoding: the cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - macOS
        return max(1, os.cpu_count() or 1)


class _OutputView:
    """The ``base`` of a numpy view into a context's output buffer: it keeps the Context (and so
    its native memory) alive, and tells the Context which buffer generation it points into."""
    __slots__ = ("__array_interface__", "ctx", "gen", "__weakref__")
    __array_interface__: dict[str, Any]
    ctx: Context
    gen: int


def _as_int_array(name: str, value: object) -> np.ndarray:
    arr = np.asarray(value)
    if arr.size and arr.dtype.kind not in "iu":
        raise InvalidTypeError(f"{name} must be ints (a list or an integer array), got dtype {arr.dtype}")
    return arr.astype(np.int32, copy=False).reshape(-1)



def _output_flags(logits: str | Sequence[bool] | np.ndarray, n: int) -> np.ndarray:
    """``(n,)`` int8 output flags from ``"last"``, ``"all"``, ``"none"`` or ``n`` bools.

    Raises:
        InvalidArgumentError: an unknown name. InvalidTypeError: flags that are not bools or ints.
        InvalidBatchError: not ``n`` flags.
    """
    if isinstance(logits, str):
        if logits not in ("last", "all", "none"):
            raise InvalidArgumentError(f"logits must be 'last', 'all', 'none' or an array of flags, got {logits!r}")
        flags = np.zeros(n, dtype=np.int8)
        if logits == "all":
            flags[:] = 1
        elif logits == "last":
            flags[-1] = 1
        return flags
    arr = np.asarray(logits)
    if arr.dtype.kind not in "biu":
        raise InvalidTypeError(f"logits must be 'last', 'all', 'none' or an array of bools, got dtype {arr.dtype}")
    flags = arr.astype(np.int8).reshape(-1)
    if flags.shape[0] != n:
        raise InvalidBatchError(f"{n} tokens but {flags.shape[0]} output flags", -1)
    return flags

class Context:
    """An inference context over a :class:`Model`.

    Args:
        model: the model.
        n_ctx: KV-cache size in tokens (0 = the model's training context).
        n_batch: most tokens one :meth:`decode` call may take.
        n_ubatch: most tokens computed in one graph (≤ n_batch).
        n_seq_max: number of sequences. Without ``kv_unified`` each has a KV-cache stream of its own
            of ``n_ctx_seq = n_ctx / n_seq_max`` cells (llama.cpp rounds it up to a multiple of 256).
        flash_attn: ``"auto"`` | True | False.
        type_k, type_v: KV-cache types: ``"f16"`` (default), ``"q8_0"``, ``"bf16"``, ``"f32"``, ...
            (a quantized V cache needs flash attention).
        offload_kqv: keep the KV cache and attention on the GPU.
        n_threads, n_threads_batch: CPU threads (default: the cores available).
        embeddings: also output embeddings (final hidden states).
        ctx_other: another context this one is linked to; a DFlash drafter's context must be
            linked to its target's (it borrows the target's token embedding and output head).
        causal_attn: False for bidirectional attention inside a batch (DFlash drafters).
        n_outputs_max, n_outputs_max_per_seq: caps on output rows per ubatch, and per sequence when
            it is sampled on the backend (0 = n_batch). llama.cpp sizes the backend-sampling graph
            for ``n_outputs_max_per_seq`` rows: keep it near the largest verify batch.
        kv_unified: one KV buffer shared by all sequences (needed to copy part of a sequence
            into another with ``Memory.seq_cp`` when ``n_seq_max > 1``).
        ctx_type: ``"default"``, or ``"mtp"`` for a context that runs a model's next-token-prediction
            (MTP / NextN) layers instead of its trunk (``LLAMA_CONTEXT_TYPE_MTP``; a Gemma-4
            assistant runs in one too).

    ``n_ctx`` is rounded up by llama.cpp to a multiple of 256 (a warning says so; ``n_ctx`` is
    then the real size, ``n_ctx_requested`` what was asked for).

    Raises:
        InvalidTypeError, InvalidArgumentError: a parameter of the wrong type or out of range.
        DrafterMismatchError: ``ctx_other`` does not fit this model (a DFlash drafter linked to a
            target of another hidden size, layer count or vocabulary, or to another drafter).
        ContextError: llama.cpp could not create the context (its reason is quoted).
    """

    model: Model
    _lock: threading.RLock

    def __init__(self, model: Model, *, n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int | None = None,
                 n_seq_max: int = 1, flash_attn: bool | str = "auto", type_k: str = "f16", type_v: str = "f16",
                 offload_kqv: bool = True, n_threads: int | None = None, n_threads_batch: int | None = None,
                 embeddings: bool = False, ctx_other: Context | None = None, causal_attn: bool = True,
                 n_outputs_max: int = 0, n_outputs_max_per_seq: int = 0, no_perf: bool = False,
                 kv_unified: bool = False, ctx_type: str = "default"):
        backend.ensure_init()
        self._ptr = self._handle = None
        if not isinstance(model, Model):
            raise InvalidTypeError(f"model must be a pyllama_spec.Model, got {type(model).__name__}")
        if model.vocab_only:
            raise InvalidArgumentError("this model was loaded with vocab_only=True; load it with weights to decode")
        n_ctx = check_int("n_ctx", n_ctx, min=0, what="an int ≥ 0 (0 = the model's training context)")
        n_batch = check_int("n_batch", n_batch, min=1)
        n_ubatch = n_batch if n_ubatch is None else check_int("n_ubatch", n_ubatch, min=1)
        if n_ubatch > n_batch:
            raise InvalidArgumentError(f"n_ubatch ({n_ubatch}) cannot exceed n_batch ({n_batch})")
        n_seq_max = check_int("n_seq_max", n_seq_max, min=1)
        check_choice("type_k", type_k, list(KV_TYPES))
        check_choice("type_v", type_v, list(KV_TYPES))
        check_choice("flash_attn", flash_attn, list(FLASH_ATTN))
        n_threads = check_int("n_threads", n_threads, min=1, none_ok=True)
        n_threads_batch = check_int("n_threads_batch", n_threads_batch, min=1, none_ok=True)
        n_outputs_max = check_int("n_outputs_max", n_outputs_max, min=0, what="an int ≥ 0 (0 = n_batch)")
        n_outputs_max_per_seq = check_int("n_outputs_max_per_seq", n_outputs_max_per_seq, min=0,
                                          what="an int ≥ 0 (0 = no cap)")
        offload_kqv, embeddings = check_bool("offload_kqv", offload_kqv), check_bool("embeddings", embeddings)
        causal_attn, no_perf = check_bool("causal_attn", causal_attn), check_bool("no_perf", no_perf)
        kv_unified = check_bool("kv_unified", kv_unified)
        if ctx_other is not None:
            if not isinstance(ctx_other, Context):
                raise InvalidTypeError(f"ctx_other must be a pyllama_spec.Context or None, got "
                                       f"{type(ctx_other).__name__}")
            ctx_other.ptr  # noqa: B018 - raises ClosedError for a closed one
        check_choice("ctx_type", ctx_type, list(CTX_TYPES))
        if model.arch == "gemma4-assistant" and ctx_other is None:
            raise InvalidArgumentError("a Gemma-4 assistant reads its target's KV cache and token embedding: create "
                                       "its context with ctx_other=<the target's Context>")
        if model.arch == "dflash":
            if ctx_other is None:
                raise InvalidArgumentError("a DFlash drafter has no token embedding or output head of its own: "
                                           "create its context with ctx_other=<the target's Context>")
            from .pairing import check_dflash_pair

            check_dflash_pair(ctx_other.model, model.info)  # llama.cpp aborts on a wrong pair
        threads = n_threads or default_threads()
        p = lib.llama_context_default_params()
        p.n_ctx = n_ctx
        p.n_batch = n_batch
        p.n_ubatch = n_ubatch
        p.n_seq_max = n_seq_max
        p.n_rs_seq = 0
        p.n_outputs_max = n_outputs_max
        p.n_outputs_max_per_seq = n_outputs_max_per_seq
        p.n_threads = threads
        p.n_threads_batch = n_threads_batch or threads
        p.flash_attn_type = FLASH_ATTN[flash_attn]
        p.type_k = KV_TYPES[type_k]
        p.type_v = KV_TYPES[type_v]
        p.offload_kqv = offload_kqv
        p.embeddings = embeddings
        p.no_perf = no_perf
        p.kv_unified = kv_unified
        p.ctx_type = CTX_TYPES[ctx_type]
        # linked contexts share one lock: a drafter's decode reads its target's buffers (_locks.py)
        self._lock = ctx_other._lock if ctx_other is not None else threading.RLock()
        with self._lock, model._lock:
            if ctx_other is not None:
                p.ctx_other = ctx_other.ptr
            backend.recent_errors.clear()
            ptr = lib.llama_init_from_model(model.ptr, p)
            if ptr == ffi.NULL:
                raise ContextError(f"llama.cpp could not create the context for {model.path.name} "
                                   f"(n_ctx={n_ctx}, n_batch={n_batch}, n_ubatch={n_ubatch}, type_k={type_k}, "
                                   f"type_v={type_v}): {backend.last_llama_error('no reason given')}")
            # The destructor holds the model's (and the linked target's) handles, so that however the
            # garbage collector orders things, this context is freed before what it points to.
            keep = (model._handle, ctx_other._handle if ctx_other is not None else None)
            self._ptr = self._handle = ffi.gc(ptr, lambda p, _keep=keep: lib.llama_free(p))
            model._contexts.add(self)
        self.model = model
        self.ctx_other = ctx_other
        self._dependents: weakref.WeakSet[Context] = weakref.WeakSet()
        if ctx_other is not None:
            ctx_other._dependents.add(self)
        self.n_ctx: int = lib.llama_n_ctx(ptr)
        self.n_ctx_requested = n_ctx
        if n_ctx and self.n_ctx != n_ctx:
            log.warning("n_ctx=%d was rounded up to %d by llama.cpp (it sizes the KV cache in multiples of %d "
                        "cells%s); pass a multiple of %d to get exactly what you ask for", n_ctx, self.n_ctx,
                        N_CTX_PAD, " per sequence" if n_seq_max > 1 else "", N_CTX_PAD)
        #: positions one sequence can hold (= n_ctx with one sequence or a unified cache)
        self.n_ctx_seq: int = lib.llama_n_ctx_seq(ptr)
        self._cache_version = 0
        self.n_batch: int = lib.llama_n_batch(ptr)
        self.n_ubatch: int = lib.llama_n_ubatch(ptr)
        self.n_seq_max: int = lib.llama_n_seq_max(ptr)
        self.n_threads, self.n_threads_batch = threads, n_threads_batch or threads
        self.kv_unified = kv_unified
        self.n_outputs_max = n_outputs_max or self.n_batch
        self.n_outputs_max_per_seq = min(n_outputs_max_per_seq or self.n_outputs_max, self.n_outputs_max)
        self.memory = Memory(self)
        self._batch = TokenBatch(self.n_batch)
        #: (row ids 0.., their tokens, both as C pointers): sampled_tokens' buffers where rows are 0..n-1
        self._rows_buf: tuple[np.ndarray, np.ndarray, Any, Any] | None = None
        self._ebatch: EmbdBatch | None = None
        self._sbatch: SeqSetBatch | None = None
        self._n_vocab = model.n_vocab
        self._n_embd = model.n_embd
        ids = model.target_layer_ids
        self._embd_input_width = len(ids) * self._n_embd if ids else int(lib.llama_model_n_embd_inp(model.ptr))
        self._n_outputs = 0
        self._out_index: np.ndarray | None = None  # batch indices of the last decode's output rows (None: all)
        self._n_tokens_last = 0
        self._last_raw_logits = True
        self._taps: set[int] = set()
        self._taps_ready = False
        self._tebatch: TokenEmbdBatch | None = None
        self._nextn = (False, False)
        self._n_embd_out = lib.llama_model_n_embd_out(model.ptr)
        self._causal = True
        self.ctx_type = ctx_type
        self._samplers: dict[int, Any] = {}  # seq_id -> SamplerChain run on the backend
        # a sampler change may make llama.cpp re-reserve its graphs at the next decode (sched_reserve: patch 0017
        # does so where the chain needs more graph nodes than the last reserve planned for, and
        # LLAMA_SAMPLER_RESERVE=1 always), which cannot build a fused DFlash graph: no injection may be staged then
        self._reserve_pending = False
        # numpy views into the output buffer (_OutputView owners), and its generation: how often
        # llama.cpp replaced it by a larger one (replaced buffers are kept while views use them)
        self._views: weakref.WeakSet[_OutputView] = weakref.WeakSet()
        self._out_gen = 0
        self._out_gen_released = 0
        self.set_causal_attn(causal_attn)

    # lifetime -------------------------------------------------------------------------------
    @property
    def ptr(self) -> Any:
        """The ``llama_context *`` (raises if closed)."""
        if self._ptr is None:
            raise ClosedError("this context is closed (or its model was): create a new one")
        return self._ptr

    def close(self) -> None:
        """Close the context (idempotent); contexts linked to it with ctx_other are closed first.

        Its native memory (KV cache, buffers) is freed now, unless numpy views of its outputs are
        still alive: then they keep reading the last values, and the memory is freed when the
        last of them is dropped. Every method raises :class:`ClosedError` afterwards.
        """
        if getattr(self, "_ptr", None) is None:
            return
        with self._lock:
            if self._ptr is None:
                return
            for dep in list(self._dependents):
                dep.close()
            for seq_id in list(self._samplers):  # llama.cpp does not own them: detach before freeing
                lib.llama_set_sampler(self._ptr, seq_id, ffi.NULL)
            self._samplers.clear()
            self._ptr = None
            if not self._views and not any(d._handle is not None for d in list(self._dependents)):
                ffi.release(self._handle)
                self._handle = None
            # else: the views' base holds this Context, whose _handle frees it with the last of them

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def cache_version(self) -> int:
        """A counter that changes whenever this context's KV cache may have changed (every decode
        and every :class:`Memory` edit). Whoever keeps a record of what the cache holds (the
        prefix reuse of :class:`~pyllama_spec.Generator`) compares it to know the record is still
        true."""
        return self._cache_version

    def _touch_cache(self) -> None:
        self._cache_version += 1

    # settings -------------------------------------------------------------------------------
    @locked
    def set_causal_attn(self, causal: bool) -> None:
        """Causal (True) or bidirectional (False) attention within a batch."""
        causal = check_bool("causal", causal)
        lib.llama_set_causal_attn(self.ptr, causal)
        self._causal = causal

    @property
    def causal_attn(self) -> bool:
        return self._causal

    @locked
    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        """CPU threads for single-token and batch decoding (``n_threads_batch`` default: ``n_threads``)."""
        n_threads = check_int("n_threads", n_threads, min=1)
        n_threads_batch = check_int("n_threads_batch", n_threads_batch, min=1, none_ok=True)
        lib.llama_set_n_threads(self.ptr, n_threads, n_threads_batch or n_threads)
        self.n_threads, self.n_threads_batch = n_threads, n_threads_batch or n_threads

    @locked
    def set_embeddings_nextn(self, value: bool, masked: bool = True) -> None:
        """Ask for next-n embeddings (MTP / DFlash graphs; ``masked``: only for output rows).

        On a target these are the hidden states before the LM head (the input of MTP heads and
        of EAGLE-3's last feature); on a drafter, whatever its graph exposes (EAGLE-3's g and
        pre-norm state, DFlash2's selector lattice, DSpark's confidences). Read them with
        :meth:`embeddings_nextn`."""
        value, masked = check_bool("value", value), check_bool("masked", masked)
        if (value, masked) == self._nextn:
            return
        lib.pyls_set_embeddings_nextn(self.ptr, value, masked)
        self._nextn = (value, masked)

    @property
    def embeddings_nextn_enabled(self) -> tuple[bool, bool]:
        """``(on, masked)`` as last set with :meth:`set_embeddings_nextn`."""
        return self._nextn

    @locked
    def set_nextn_layer_offset(self, offset: int) -> None:
        """Which NextN block an MTP context runs (``il = n_layer + offset``; models with chained heads).

        Raises:
            InvalidArgumentError: ``offset`` outside ``[0, n_layer_nextn)``.
        """
        n = lib.llama_model_n_layer_nextn(self.model.ptr)
        offset = check_int("offset", offset, min=0, max=max(1, n) - 1,
                           what=f"a NextN layer offset in [0, {max(1, n)})")
        lib.pyls_set_nextn_layer_offset(self.ptr, offset)

    @locked
    def set_sampler(self, chain: SamplerChain | None, seq_id: int = 0) -> None:
        """Sample sequence ``seq_id``'s output rows inside the decode graph (llama.cpp's backend
        sampling), or stop doing so (``chain=None``).

        With a chain attached, a decode copies back one sampled token per output row
        (:meth:`sampled_tokens`) instead of the ``(n_outputs, n_vocab)`` logits: on a GPU the
        argmax / draw runs there and no logits cross to the host. Changing it rebuilds the graph
        once (patch 0017; a scheduler reserve where the chain needs more graph nodes than the context planned
        for); keep one chain for a whole generation where you can.

        Args:
            chain: a :class:`~pyllama_spec.sampler.SamplerChain` (kept alive by this context), or None.
                A chain can be attached once (llama.cpp sets it up for that context).
            seq_id: the sequence (``< n_seq_max``).

        Raises:
            UnsupportedError: llama.cpp cannot run this chain on this context's backend.
            InvalidArgumentError: the chain was attached before.
            InvalidTypeError: ``chain`` is not a SamplerChain or None.
        """
        from .sampler import SamplerChain

        seq_id = self.memory._seq(seq_id)
        if chain is not None and not isinstance(chain, SamplerChain):
            raise InvalidTypeError(f"chain must be a pyllama_spec.sampler.SamplerChain or None, got "
                                   f"{type(chain).__name__}")
        if chain is None:
            if seq_id in self._samplers:
                lib.llama_set_sampler(self.ptr, seq_id, ffi.NULL)
                del self._samplers[seq_id]
                self._reserve_pending = True
            return
        if self._samplers.get(seq_id) is chain:
            return
        if chain._attached:  # llama.cpp initialises a chain for one context once, else it aborts
            raise InvalidArgumentError(f"{chain!r} was attached to a context before; llama.cpp sets a chain up for "
                                       "one attachment only: make a new SamplerChain")
        chain._attached, chain._attached_to = True, weakref.ref(self)
        self._reserve_pending = True  # llama.cpp rebuilds its worst-case graphs at the next decode
        if not lib.llama_set_sampler(self.ptr, seq_id, chain.ptr):
            self._samplers.pop(seq_id, None)
            raise UnsupportedError(f"llama.cpp cannot run the sampler chain {chain!r} on this context's backend")
        self._samplers[seq_id] = chain

    @property
    @locked
    def samplers(self) -> dict[int, SamplerChain]:
        """``{seq_id: SamplerChain}`` of the sequences sampled on the backend."""
        return dict(self._samplers)

    @locked
    def sampled_tokens(self, n: int | None = None) -> list[int]:
        """Tokens the backend sampler drew for the first ``n`` output rows of the last decode
        (default: all of them), in output order.

        Raises:
            InvalidArgumentError: no backend sampler is attached, or fewer output rows than ``n``.
        """
        if not self._samplers:
            raise InvalidArgumentError("no backend sampler is attached: call set_sampler() first, or read logits()")
        n = self._n_outputs if n is None else check_int("n", n, min=0)
        if not 0 <= n <= self._n_outputs:
            raise InvalidArgumentError(f"the last decode has {self._n_outputs} output rows, asked for {n}")
        if self._out_index is None:  # (rows 0..n-1: the buffers made once, their pointers cast once)
            if self._rows_buf is None or len(self._rows_buf[0]) < n:
                idx = np.arange(max(n, self.n_outputs_max), dtype=np.int32)
                buf = np.empty(len(idx), dtype=np.int32)
                self._rows_buf = (idx, buf, ffi.cast("const int32_t *", idx.ctypes.data),
                                  ffi.cast("int32_t *", buf.ctypes.data))
            _, buf, idx_p, buf_p = self._rows_buf
        else:
            idx = np.ascontiguousarray(self._out_index[:n], dtype=np.int32)
            buf = np.empty(n, dtype=np.int32)
            idx_p, buf_p = ffi.cast("const int32_t *", idx.ctypes.data), ffi.cast("int32_t *", buf.ctypes.data)
        # one call, one synchronization: llama_get_sampled_token_ith synchronizes the backends on every call (on a
        # GPU a stream sync a row; a DFlash draft call read 8-16 rows so, RESULTS.md 13.8)
        if n and lib.pyls_get_sampled_tokens(self.ptr, idx_p, n, buf_p) != 0:
            raise ContextError("llama.cpp failed to read the sampled tokens (an exception in the shim)")
        out = buf[:n].tolist()
        if any(t < 0 for t in out):
            raise UnsupportedError(f"llama.cpp sampled no token for some output rows ({out}): their sequence has "
                                   "no backend sampler")
        return out

    @locked
    def sampled_candidates(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """The candidates a backend chain without a draw kept for output row ``i`` of the last decode
        (:meth:`SamplerChain.candidates`): ``(ids, logits)``, ``(k,)`` int32 and ``(k,)`` float32 copies,
        in no particular order. Output rows are counted as in :meth:`sampled_tokens` (the rows flagged
        for output, in batch order).

        Raises:
            InvalidArgumentError: no backend sampler, row out of range, or the chain kept no candidates.
        """
        if not self._samplers:
            raise InvalidArgumentError("no backend sampler is attached: call set_sampler() first, or read logits()")
        i = check_int("i", i)
        if not 0 <= i < self._n_outputs:
            raise InvalidArgumentError(f"the last decode has {self._n_outputs} output rows, asked for row {i}")
        b = i if self._out_index is None else int(self._out_index[i])  # llama.cpp takes the batch index
        # one synchronization for the four reads (llama.cpp's getters sync the backends once each)
        ids_p, logits_p = ffi.new("const int32_t **"), ffi.new("const float **")
        n_ids, n_logits = ffi.new("uint32_t *"), ffi.new("uint32_t *")
        if lib.pyls_get_sampled_candidates(self.ptr, b, ids_p, n_ids, logits_p, n_logits) != 0:
            raise ContextError("llama.cpp failed to read the sampled candidates (an exception in the shim)")
        n = int(n_ids[0])
        if n == 0 or int(n_logits[0]) != n or ids_p[0] == ffi.NULL or logits_p[0] == ffi.NULL:
            raise InvalidArgumentError(f"row {i} has no candidate set: the attached chain ends in a draw (read "
                                       "sampled_tokens()) or keeps the whole vocabulary")
        ids = np.frombuffer(ffi.buffer(ids_p[0], 4 * n), dtype=np.int32)
        logits = np.frombuffer(ffi.buffer(logits_p[0], 4 * n), dtype=np.float32)
        return ids.copy(), logits.copy()

    # decoding -------------------------------------------------------------------------------
    def _check_tokens(self, tokens: Sequence[int] | np.ndarray, what: str) -> np.ndarray:
        """``tokens`` as an ``(n,)`` int32 array of ids in the vocabulary, ``n ≥ 1``.

        Raises:
            InvalidTypeError: not ints. InvalidBatchError: empty, or an id outside the vocabulary.
        """
        toks = _as_int_array("tokens", tokens)
        if toks.shape[0] == 0:
            raise InvalidBatchError(f"{what}() needs at least one token", -1)
        if toks.min() < 0 or toks.max() >= self._n_vocab:
            bad = toks[(toks < 0) | (toks >= self._n_vocab)][0]
            raise InvalidBatchError(f"token id {bad} is outside the vocabulary [0, {self._n_vocab})", -1)
        return toks

    @locked
    def decode(self, tokens: Sequence[int] | np.ndarray, pos: Sequence[int] | np.ndarray | None = None, *,
               seq_id: int | Sequence[int] | np.ndarray = 0, logits: str | Sequence[bool] | np.ndarray = "last") -> int:
        """Decode a batch of tokens (``llama_decode``), of one sequence or of several.

        Args:
            tokens: ``(n,)`` token ids, ``1 ≤ n ≤ n_batch``.
            pos: ``(n,)`` positions, or None to continue after the sequence's last cached position
                (one sequence only).
            seq_id: the sequence, or ``(n,)`` sequence ids, one per token (``< n_seq_max``; then
                ``pos`` is required). Output rows follow the order of the flagged tokens.
            logits: which rows produce outputs: ``"last"``, ``"all"``, ``"none"``, or ``(n,)`` bools.

        Returns:
            The number of output rows (the first dimension of :meth:`logits`).

        Raises:
            InvalidTypeError: tokens, positions or sequence ids that are not ints.
            InvalidBatchError: bad sizes, token ids or positions (checked before llama.cpp runs).
            KVCacheFullError: no room in the KV cache.
            DecodeError: any other failure.
        """
        one = self._one_token(tokens, pos, seq_id, logits)
        if one is not None:
            return self._decode_one(*one)
        toks = self._check_tokens(tokens, "decode")
        n = toks.shape[0]
        if pos is not None:
            pos = _as_int_array("pos", pos)
        if np.ndim(seq_id) == 0:
            if isinstance(seq_id, np.ndarray):
                seq_id = seq_id.item()
            seq_id = self.memory._seq(seq_id)  # type: ignore[arg-type]
            if pos is None:
                pos = np.arange(n, dtype=np.int32) + (self.memory.pos_max(seq_id) + 1)
        else:
            seq_id = _as_int_array("seq_id", seq_id)
            if seq_id.shape[0] != n:
                raise InvalidBatchError(f"{n} tokens but {seq_id.shape[0]} sequence ids", -1)
            if seq_id.min() < 0 or seq_id.max() >= self.n_seq_max:
                raise InvalidArgumentError(f"sequence ids must lie in [0, {self.n_seq_max}) (n_seq_max); got "
                                           f"{int(seq_id.min())}..{int(seq_id.max())}")
            if pos is None:
                raise InvalidArgumentError("pos is required when seq_id gives one sequence per token")
        flags = _output_flags(logits, n)
        n_out = int(np.count_nonzero(flags))
        # a backend sampler draws for each sequence's own rows: the cap is per sequence
        per_seq = (n_out if np.ndim(seq_id) == 0 or not n_out
                   else int(np.bincount(np.asarray(seq_id)[flags.astype(bool)]).max()))
        self._check_batch(n, n_out, per_seq)
        self._batch.set(toks, pos, seq_id, flags)
        backend.recent_errors.clear()
        self._cache_version += 1
        rc = lib.llama_decode(self.ptr, self._batch.as_c())
        self._after_decode(rc, n, n_out, "decode", flags)
        return n_out

    def _one_token(self, tokens: Any, pos: Any, seq_id: Any, logits: Any) -> tuple[int, int | None, int] | None:
        """``(token, position or None, seq_id)`` where :meth:`decode` was asked for one valid token of one sequence
        with an output row, given as Python or numpy ints (a draft model's draft token, a plain step's verify);
        None for anything else, which takes the general path and its checks. (That path's numpy conversions and
        checks cost ~30 µs a call on the CPU machine against a 1-layer fixture's 48 µs decode, and ~0.1 ms a
        draft token on an H100 host, where a draft model's decode is ~0.3 ms: RESULTS.md 13.11.)"""
        if not (type(tokens) is list and len(tokens) == 1 and isinstance(logits, str) and logits in ("last", "all")):
            return None
        t = tokens[0]
        if not isinstance(t, (int, np.integer)) or isinstance(t, bool) or not 0 <= t < self._n_vocab:
            return None
        if type(seq_id) is not int or not 0 <= seq_id < self.n_seq_max:
            return None
        if pos is None:
            return int(t), None, seq_id
        if (type(pos) is list or (isinstance(pos, np.ndarray) and pos.ndim == 1 and pos.dtype.kind in "iu")) \
                and len(pos) == 1:
            p = pos[0]
            if isinstance(p, (int, np.integer)) and not isinstance(p, bool) and 0 <= p < 2**31 - 1:
                return int(t), int(p), seq_id
        return None

    def _decode_one(self, token: int, pos: int | None, seq_id: int) -> int:
        """:meth:`decode` of one checked token with an output row (:meth:`_one_token`): the values go into the
        batch's first row as they are."""
        if pos is None:
            pos = self.memory.pos_max(seq_id) + 1
        self._check_batch(1, 1, 1)
        b = self._batch
        b.token[0], b.pos[0], b.seq[0, 0], b.logits[0] = token, pos, seq_id, 1
        b.n_tokens = 1
        backend.recent_errors.clear()
        self._cache_version += 1
        rc = lib.llama_decode(self.ptr, b.as_c())
        self._after_decode(rc, 1, 1, "decode")
        return 1

    @locked
    def decode_seq_sets(self, tokens: Sequence[int] | np.ndarray, pos: Sequence[int] | np.ndarray,
                        seq_sets: Sequence[Sequence[int]], *, logits: str | Sequence[bool] | np.ndarray = "all") -> int:
        """Decode a batch whose tokens may each belong to several sequences (llama.cpp's seq-id
        lists): a token's KV cell then belongs to all of them, and it attends to the cells of its
        first (lowest) sequence. A token tree is verified this way (``speculative/tree_step.py``).

        llama.cpp requires (and checks, refusing the batch) that each sequence's positions in the
        batch follow its last cached position without gaps and never decrease, and that sequences
        sharing a token hold the same positions in the cache.

        Args:
            tokens: ``(n,)`` token ids.  pos: ``(n,)`` positions.
            seq_sets: ``n`` non-empty lists of sequence ids (each in ``[0, n_seq_max)``).
            logits: which rows produce outputs (as :meth:`decode`).

        Returns:
            The number of output rows.

        Raises:
            InvalidArgumentError: a sequence id out of range; a backend sampler is attached (llama.cpp
                samples a row for its first sequence only: detach it with ``set_sampler(None)``).
            InvalidBatchError, KVCacheFullError, DecodeError: as :meth:`decode`.
        """
        toks = self._check_tokens(tokens, "decode_seq_sets")
        n = toks.shape[0]
        posa = _as_int_array("pos", pos)
        if posa.shape != (n,) or len(seq_sets) != n:
            raise InvalidBatchError(f"{n} tokens need {n} positions and {n} sequence sets, got {posa.shape[0]} and "
                                    f"{len(seq_sets)}", -1)
        sets = [sorted(int(s) for s in ss) for ss in seq_sets]
        for ss in sets:
            if not ss or ss[0] < 0 or ss[-1] >= self.n_seq_max or len(set(ss)) != len(ss):
                raise InvalidArgumentError(f"each sequence set must be distinct ids in [0, {self.n_seq_max}) "
                                           f"(n_seq_max), got {ss}")
        if self._samplers:
            raise InvalidArgumentError("decode_seq_sets() reads logits: detach the backend sampler first "
                                       "(set_sampler(None))")
        flags = _output_flags(logits, n)
        n_out = int(np.count_nonzero(flags))
        self._check_batch(n, n_out)
        if self._sbatch is None:
            self._sbatch = SeqSetBatch(self.n_batch, self.n_seq_max)
        self._sbatch.set(toks, posa, sets, flags)
        backend.recent_errors.clear()
        self._cache_version += 1
        rc = lib.llama_decode(self.ptr, self._sbatch.as_c())
        self._after_decode(rc, n, n_out, "decode_seq_sets", flags)
        return n_out

    @locked
    def decode_embd(self, rows: np.ndarray, pos: Sequence[int] | np.ndarray, *,
                    seq_id: int | Sequence[int] | np.ndarray = 0, output: bool = False) -> None:
        """Decode embedding rows instead of token ids (``llama_batch_ext`` + ``llama_process``).

        For a DFlash drafter a row is the concatenated target features of one position,
        ``len(target_layer_ids) × n_embd`` wide; the drafter turns them into K/V entries.
        Rows are sent in chunks of ``n_ubatch``.

        Args:
            rows: ``(n, width)`` float32.
            pos: ``(n,)`` positions.
            seq_id: the sequence of every row, or ``(n,)`` sequence ids, one per row.
            output: produce outputs for these rows.

        Raises:
            InvalidBatchError: wrong width or shape.
            DecodeError (and subclasses): llama.cpp failed.
        """
        rows = np.asarray(rows)
        if rows.dtype.kind not in "fiu":
            raise InvalidTypeError(f"rows must be a float array (n, width), got dtype {rows.dtype}")
        rows = rows.astype(np.float32, copy=False)
        if rows.ndim != 2:
            raise InvalidBatchError(f"rows must be 2-D (n, width), got shape {rows.shape}", -1)
        width = self._embd_input_width
        if rows.shape[1] != width:
            raise InvalidBatchError(f"{self.model.path.name} takes embedding rows of width {width}, "
                                    f"got {rows.shape[1]}", -1)
        pos = _as_int_array("pos", pos)
        if pos.shape[0] != rows.shape[0]:
            raise InvalidBatchError(f"{rows.shape[0]} rows but {pos.shape[0]} positions", -1)
        output = check_bool("output", output)
        if np.ndim(seq_id) == 0:
            seq = np.full(rows.shape[0], self.memory._seq(seq_id), dtype=np.int32)  # type: ignore[arg-type]
        else:
            seq = _as_int_array("seq_id", seq_id)
            if seq.shape[0] != rows.shape[0]:
                raise InvalidBatchError(f"{rows.shape[0]} rows but {seq.shape[0]} sequence ids", -1)
            if seq.size and (seq.min() < 0 or seq.max() >= self.n_seq_max):
                raise InvalidArgumentError(f"sequence ids must lie in [0, {self.n_seq_max}) (n_seq_max); got "
                                           f"{int(seq.min())}..{int(seq.max())}")
        if self._ebatch is None:
            self._ebatch = EmbdBatch(self.ptr)
        step = self.n_ubatch
        for i in range(0, rows.shape[0], step):
            n = min(step, rows.shape[0] - i)
            self._check_batch(n, n if output else 0)
            b = self._ebatch.set(rows[i:i + n], pos[i:i + n], seq[i:i + n], output)
            backend.recent_errors.clear()
            self._cache_version += 1
            rc = lib.llama_process(self.ptr, lib.LLAMA_PROCESS_TYPE_DECODE, b)
            self._after_decode(rc, n, n if output else 0, "decode_embd")

    @locked
    def decode_tokens_embd(self, tokens: Sequence[int] | np.ndarray, embd: np.ndarray | None,
                           pos: Sequence[int] | np.ndarray, *, logits: str | Sequence[bool] | np.ndarray = "all",
                           seq_id: int = 0) -> int:
        """Decode token rows that each carry an embedding too (``llama_batch_ext`` + ``llama_process``).

        EAGLE-3's decoder takes ``(token, g)`` pairs, MTP heads ``(token, target hidden state)``
        pairs (llama.cpp's ``common_batch::add`` + ``set_embd``).

        Args:
            tokens: ``(n,)`` token ids.
            embd: ``(n, width)`` float32, ``width`` = the model's input embedding width
                (:attr:`embd_state_width`), or None for plain tokens.
            pos: ``(n,)`` positions.
            logits: ``"all"``, ``"last"``, ``"none"`` or ``(n,)`` flags.

        Returns:
            The number of output rows.

        Raises:
            InvalidBatchError: bad sizes, ids, positions or width (checked before llama.cpp runs).
            DecodeError (and subclasses): llama.cpp failed.
        """
        toks = np.asarray(tokens, dtype=np.int32).reshape(-1)
        n = toks.shape[0]
        if n == 0:
            raise InvalidBatchError("decode_tokens_embd() needs at least one row", -1)
        if toks.min() < 0 or toks.max() >= self._n_vocab:
            bad = toks[(toks < 0) | (toks >= self._n_vocab)][0]
            raise InvalidBatchError(f"token id {bad} is outside the vocabulary [0, {self._n_vocab})", -1)
        pos = np.asarray(pos, dtype=np.int32).reshape(-1)
        if pos.shape[0] != n:
            raise InvalidBatchError(f"{n} tokens but {pos.shape[0]} positions", -1)
        if embd is not None:
            embd = np.asarray(embd, dtype=np.float32)
            width = self.embd_state_width
            if embd.ndim != 2 or embd.shape != (n, width):
                raise InvalidBatchError(f"{self.model.path.name} takes ({n}, {width}) embeddings with these tokens, "
                                        f"got shape {embd.shape}", -1)
        flags = _output_flags(logits, n)
        n_out = int(np.count_nonzero(flags))
        self.memory._seq(seq_id)
        self._check_batch(n, n_out)
        if self._tebatch is None:
            self._tebatch = TokenEmbdBatch(self.ptr)
        b = self._tebatch.set(toks, embd, pos, seq_id, flags)
        backend.recent_errors.clear()
        self._cache_version += 1
        rc = lib.llama_process(self.ptr, lib.LLAMA_PROCESS_TYPE_DECODE, b)
        self._after_decode(rc, n, n_out, "decode_tokens_embd", flags)
        return n_out

    @locked
    def encode_embd(self, rows: np.ndarray, pos: Sequence[int] | np.ndarray) -> np.ndarray:
        """Run the encoder graph over embedding rows, in chunks of ``n_ubatch``, and return its
        next-n output (``llama_process(ENCODE)`` + ``llama_get_embeddings_nextn``).

        EAGLE-3's encoder is its feature-fusion layer: ``(n, 3 × n_embd_target)`` target features
        in, ``(n, n_embd)`` rows of g out (``common_speculative_impl_draft_eagle3::process``).
        Positions are not used by a per-token encoder but must be given.

        Returns:
            ``(n, n_embd_out)`` float32 (a copy).

        Raises:
            InvalidBatchError, DecodeError: as :meth:`decode_embd`.
        """
        rows = np.asarray(rows, dtype=np.float32)
        if rows.ndim != 2:
            raise InvalidBatchError(f"rows must be 2-D (n, width), got shape {rows.shape}", -1)
        pos = np.asarray(pos, dtype=np.int32).reshape(-1)
        if pos.shape[0] != rows.shape[0]:
            raise InvalidBatchError(f"{rows.shape[0]} rows but {pos.shape[0]} positions", -1)
        if not self._nextn[0]:
            raise InvalidArgumentError("encode_embd() returns next-n embeddings: call set_embeddings_nextn(True) first")
        if self._ebatch is None:
            self._ebatch = EmbdBatch(self.ptr)
        out = np.empty((rows.shape[0], self._n_embd_out), dtype=np.float32)
        step = self.n_ubatch
        for i in range(0, rows.shape[0], step):
            n = min(step, rows.shape[0] - i)
            self._check_batch(n, n)
            b = self._ebatch.set(rows[i:i + n], pos[i:i + n], 0, True)
            backend.recent_errors.clear()
            self._cache_version += 1
            rc = lib.llama_process(self.ptr, lib.LLAMA_PROCESS_TYPE_ENCODE, b)
            self._after_decode(rc, n, n, "encode_embd")
            out[i:i + n] = self.embeddings_nextn()
        return out

    @property
    def embd_state_width(self) -> int:
        """Width of the embedding that goes with each token in :meth:`decode_tokens_embd`."""
        return lib.llama_model_n_embd_inp(self.model.ptr)

    @locked
    def stage_dflash_inject(self, rows: np.ndarray) -> None:
        """Stage target-feature rows that this DFlash drafter context's next :meth:`decode` injects
        (vendor/patches/0006-dflash-fused-inject): that decode's first ``len(rows)`` tokens must be
        placeholders at the rows' positions with no outputs, followed by the draft block. One
        decode then writes the rows' K/V and drafts the block (instead of :meth:`decode_embd`
        followed by :meth:`decode`).

        Args:
            rows: ``(n, embd_input_width)`` float32 (copied by llama.cpp), ``1 ≤ n ≤ n_ubatch``.

        Raises:
            InvalidBatchError: wrong shape.
            InvalidArgumentError: a sampler was attached or detached (:meth:`set_sampler`) since the
                last decode: llama.cpp may re-reserve its graphs at the next decode and then aborts the process
                when an injection is staged then; decode once without one first (e.g. :meth:`decode_embd`).
            UnsupportedError: not a plain DFlash drafter context (DFlash2 / DSpark, other models).
        """
        if self._reserve_pending and self.model.arch == "dflash":
            raise InvalidArgumentError("set_sampler() changed this context's samplers since its last decode: "
                                       "llama.cpp may re-reserve its graphs at the next decode and cannot do that "
                                       "with an injection staged; decode once without one first "
                                       "(decode_embd() for the rows, then a plain draft decode)")
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[1] != self.embd_input_width or not 1 <= rows.shape[0] <= self.n_ubatch:
            raise InvalidBatchError(f"staged rows must be (1..{self.n_ubatch}, {self.embd_input_width}), "
                                    f"got {rows.shape}", -1)
        backend.recent_errors.clear()
        if not lib.pyls_dflash_set_inject(self.ptr, ffi.cast("float *", rows.ctypes.data), rows.shape[0]):
            raise UnsupportedError(f"{self.model.path.name} takes no fused injection: "
                                   f"{backend.last_llama_error('only plain DFlash drafters do')}")

    @property
    def embd_input_width(self) -> int:
        """Width of one embedding row for :meth:`decode_embd`."""
        return self._embd_input_width

    def _check_batch(self, n: int, n_out: int, n_out_seq: int | None = None) -> None:
        if n > self.n_batch:
            raise InvalidBatchError(f"{n} tokens exceed n_batch={self.n_batch}; split the input or create the "
                                    "context with a larger n_batch", -1)
        if not self._causal and n > self.n_ubatch:
            raise InvalidBatchError(f"with non-causal attention the whole batch must fit one ubatch: {n} tokens "
                                    f"> n_ubatch={self.n_ubatch}; create the context with n_ubatch ≥ {n}", -1)
        if n_out > self.n_outputs_max:
            raise InvalidBatchError(f"{n_out} output rows exceed n_outputs_max={self.n_outputs_max}", -1)
        n_out_seq = n_out if n_out_seq is None else n_out_seq
        if self._samplers and n_out_seq > self.n_outputs_max_per_seq:
            raise InvalidBatchError(f"{n_out_seq} output rows of one sequence exceed n_outputs_max_per_seq="
                                    f"{self.n_outputs_max_per_seq}, "
                                    "the most a backend sampler draws per decode; detach it (set_sampler(None)) "
                                    "or create the context with a larger n_outputs_max_per_seq", -1)

    def _after_decode(self, rc: int, n: int, n_out: int, what: str, flags: np.ndarray | None = None) -> None:
        gen = lib.pyls_output_buffer_reallocs(self._ptr)
        if gen != self._out_gen:
            self._out_gen = gen  # llama.cpp replaced the output buffer: the old one is kept
        if self._out_gen != self._out_gen_released and not any(v.gen != gen for v in list(self._views)):
            lib.pyls_release_replaced_outputs(self._ptr)  # no view reads a replaced buffer any more
            self._out_gen_released = gen
        if rc != 0:
            self._n_outputs = 0
            self._taps_ready = False
            check_decode(rc, f"{self.model.path.name}: {what} of {n} tokens")
        self._n_outputs = n_out
        # llama_get_sampled_token_ith() and friends take the batch index of an output row, not its rank
        self._out_index = None if flags is None or n_out == n else np.flatnonzero(flags)
        self._n_tokens_last = n
        self._taps_ready = bool(self._taps)
        self._last_raw_logits = not self._samplers
        self._reserve_pending = False

    @locked
    def synchronize(self) -> None:
        """Wait until the backend (GPU) has finished all queued work."""
        lib.llama_synchronize(self.ptr)

    # outputs --------------------------------------------------------------------------------
    def _view(self, p: Any, shape: tuple[int, ...]) -> np.ndarray:
        """A read-only float32 view of ``shape`` at ``p`` whose base keeps this Context alive."""
        owner = _OutputView()
        owner.__array_interface__ = {"data": (int(ffi.cast("uintptr_t", p)), True), "shape": shape,
                                     "typestr": "<f4", "version": 3}
        owner.ctx, owner.gen = self, self._out_gen
        self._views.add(owner)
        return np.asarray(owner)

    @property
    def n_outputs(self) -> int:
        """Output rows of the last decode."""
        return self._n_outputs

    @locked
    def logits(self) -> np.ndarray:
        """Logits of the last decode's output rows: ``(n_outputs, n_vocab)`` float32, a read-only view.

        Rows are in batch order of the rows flagged for output. The next decode overwrites the
        values (``.copy()`` keeps them); the view stays readable after :meth:`close`.

        Raises:
            InvalidArgumentError: the last decode produced no output rows.
        """
        if self._n_outputs == 0:
            raise InvalidArgumentError("the last decode produced no output rows (pass logits='all' or 'last')")
        if self._samplers and not self._last_raw_logits:
            raise InvalidArgumentError("the last decode was sampled on the backend (set_sampler): llama.cpp copied "
                                       "no logits; read sampled_tokens(), or detach the sampler first")
        p = lib.llama_get_logits(self.ptr)
        if p == ffi.NULL:
            raise UnsupportedError("this context produces no logits")
        return self._view(p, (self._n_outputs, self._n_vocab))

    @locked
    def logits_ith(self, i: int) -> np.ndarray:
        """Logits of batch row ``i`` (negative counts from the end): ``(n_vocab,)`` float32, a
        read-only view (as :meth:`logits`).

        Raises:
            IndexError: row ``i`` produced no output.
        """
        i = check_int("i", i)
        if self._samplers and not self._last_raw_logits:
            raise InvalidArgumentError("the last decode was sampled on the backend (set_sampler): llama.cpp copied "
                                       "no logits; read sampled_tokens(), or detach the sampler first")
        p = lib.llama_get_logits_ith(self.ptr, i)
        if p == ffi.NULL:
            raise NoOutputError(f"batch row {i} has no logits: flag it for output in decode(logits=...)")
        return self._view(p, (self._n_vocab,))

    @locked
    def embeddings(self) -> np.ndarray:
        """Final hidden states of the output rows: ``(n_outputs, n_embd)`` float32, a read-only view
        (as :meth:`logits`; needs ``embeddings=True``).

        Raises:
            UnsupportedError: the context was made without embeddings, or the last decode had no outputs.
        """
        p = lib.llama_get_embeddings(self.ptr)
        if p == ffi.NULL or self._n_outputs == 0:
            raise UnsupportedError("no embeddings: create the context with embeddings=True and decode with outputs")
        return self._view(p, (self._n_outputs, self._n_embd))

    @locked
    def embeddings_nextn(self) -> np.ndarray:
        """Next-n embeddings of the last decode: ``(rows, n_embd_out)`` float32 view, one row per
        output row (masked) or per batch row (unmasked). Valid until the next decode.

        Raises:
            InvalidArgumentError: next-n embeddings are off.
            UnsupportedError: this model's graph produced none.
        """
        on, masked = self._nextn
        if not on:
            raise InvalidArgumentError("next-n embeddings are off: call set_embeddings_nextn(True) first")
        n = self._n_outputs if masked else self._n_tokens_last
        p = lib.pyls_get_embeddings_nextn(self.ptr)
        if p == ffi.NULL or n == 0:
            raise UnsupportedError(f"{self.model.path.name}'s last decode produced no next-n embeddings")
        return np.frombuffer(ffi.buffer(p, n * self._n_embd_out * 4), dtype=np.float32).reshape(n, self._n_embd_out)

    # layer-input taps (the features DFlash and EAGLE-3 drafters read) -----------------------
    @locked
    def enable_layer_inputs(self, layer_ids: Iterable[int]) -> None:
        """Record the inputs of these layers at every following decode.

        Raises:
            UnsupportedError: llama.cpp does not record layer inputs for this architecture.
            InvalidTypeError, InvalidArgumentError: a layer id that is not an int in ``[0, n_layer)``.
        """
        if not self.model.supports_layer_taps:
            raise UnsupportedError(f"llama.cpp records no layer inputs for architecture {self.model.arch!r}; "
                                   f"tappable: {', '.join(sorted(m for m in _tappable()))}")
        n_layer = self.model.n_layer
        if isinstance(layer_ids, (str, bytes)) or not isinstance(layer_ids, Iterable):
            raise InvalidTypeError(f"layer_ids must be a list of ints, got {type(layer_ids).__name__}")
        layer_ids = [check_int("layer id", lid, min=0, max=n_layer - 1,
                               what=f"in [0, {n_layer}) for {self.model.path.name} (outside otherwise)")
                     for lid in layer_ids]
        for lid in layer_ids:
            lib.pyls_set_embeddings_layer_inp(self.ptr, int(lid), True)
            self._taps.add(int(lid))
        self._taps_ready = False

    @locked
    def set_layer_inputs(self, layer_ids: Iterable[int]) -> None:
        """Record exactly the inputs of these layers from the next decode on (``[]``: none).

        Taps cost a device-to-host copy of ``n_tokens × n_embd`` floats per layer and decode, so
        the loop keeps on only those that the active drafter reads. A change makes the next decode
        build its graph afresh (and, where a tap went on, plan its allocation): 1–3 ms on an H200,
        0.5–0.8 ms on 2 CPU cores (our patch 0016; upstream reserved the whole scheduler, ~9 ms).

        Raises:
            UnsupportedError, InvalidArgumentError: as :meth:`enable_layer_inputs`.
        """
        if isinstance(layer_ids, (str, bytes)) or not isinstance(layer_ids, Iterable):
            raise InvalidTypeError(f"layer_ids must be a list of ints, got {type(layer_ids).__name__}")
        layer_ids = list(layer_ids)
        want = {check_int("layer id", i, min=0) for i in layer_ids}
        if want == self._taps:
            return
        if want:
            self.enable_layer_inputs(sorted(want - self._taps))
        for lid in sorted(self._taps - want):
            lib.pyls_set_embeddings_layer_inp(self.ptr, lid, False)
            self._taps.discard(lid)
        self._taps_ready = False

    @property
    def enabled_layer_inputs(self) -> list[int]:
        return sorted(self._taps)

    @locked
    def layer_input(self, layer_id: int) -> np.ndarray:
        """The input of layer ``layer_id`` for every token of the last decode:
        ``(n_tokens, n_embd)`` float32, a read-only view (row = batch index; as :meth:`logits`).

        Raises:
            InvalidArgumentError: the tap was not enabled, or no decode has run since it was.
        """
        check_int("layer_id", layer_id)
        if layer_id not in self._taps:
            raise InvalidArgumentError(f"layer {layer_id} is not tapped; call enable_layer_inputs([{layer_id}]) first")
        if not self._taps_ready:
            raise InvalidArgumentError("no decode has run since the layer taps were enabled")
        p = lib.pyls_get_embeddings_layer_inp(self.ptr, layer_id)
        return self._view(p, (self._n_tokens_last, self._n_embd))

    # statistics -----------------------------------------------------------------------------
    @locked
    def perf(self) -> dict[str, float]:
        """llama.cpp's own counters: prompt/eval milliseconds and token counts.

        Work still queued on the backend is waited for first: llama.cpp adds a decode to its counters
        only at the next synchronisation (``llama_context::synchronize``), so on a GPU, where decodes run
        asynchronously, the counters would otherwise lag behind the calls made."""
        lib.llama_synchronize(self.ptr)
        d = lib.llama_perf_context(self.ptr)
        return {"t_load_ms": d.t_load_ms, "t_p_eval_ms": d.t_p_eval_ms, "t_eval_ms": d.t_eval_ms,
                "n_p_eval": d.n_p_eval, "n_eval": d.n_eval, "n_reused": d.n_reused}

    @locked
    def reset_perf(self) -> None:
        """Zero llama.cpp's counters (:meth:`perf`).

        Queued decodes are waited for first, so that they are counted before the reset and not after it
        (llama.cpp keeps their token count until the next synchronisation, and its reset leaves that count:
        on a GPU the previous generation's last decodes would land in the next one's counters)."""
        lib.llama_synchronize(self.ptr)
        lib.llama_perf_context_reset(self.ptr)

    def memory_summary(self) -> dict[str, float]:
        """``{"weights_mib", "kv_cache_mib", "compute_mib"}`` summed over devices (MiB)."""
        rows = self.memory_breakdown()
        return {"weights_mib": sum(r["model_mib"] for r in rows), "kv_cache_mib": sum(r["context_mib"] for r in rows),
                "compute_mib": sum(r["compute_mib"] for r in rows)}

    @locked
    def memory_breakdown(self) -> list[dict[str, Any]]:
        """Memory by buffer type: ``[{"buffer", "model_bytes", "context_bytes", "compute_bytes",
        "model_mib", "context_mib", "compute_mib"}]``.

        ``model`` = weights, ``context`` = KV cache, ``compute`` = scratch buffers (bytes and MiB).
        """
        rows = ffi.new("struct pyls_mem_row[32]")
        n = lib.pyls_memory_breakdown(self.ptr, rows, 32)
        out = []
        for i in range(max(0, min(n, 32))):
            r = rows[i]
            out.append({"buffer": ffi.string(r.name).decode(), "model_bytes": r.model, "context_bytes": r.context,
                        "compute_bytes": r.compute, "model_mib": r.model / 2**20,
                        "context_mib": r.context / 2**20, "compute_mib": r.compute / 2**20})
        return out


CTX_TYPES = {"default": lib.LLAMA_CONTEXT_TYPE_DEFAULT, "mtp": lib.LLAMA_CONTEXT_TYPE_MTP}


def _tappable() -> frozenset[str]:
    from .model import TAPPABLE_ARCHS
    return TAPPABLE_ARCHS


__all__ = ["Context", "KV_TYPES", "N_CTX_PAD", "default_threads"]
