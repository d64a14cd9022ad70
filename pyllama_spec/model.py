"""``Model``: a loaded GGUF (owns ``llama_model *``) and its ``Vocab``."""
from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from . import backend
from ._check import check_bool, check_int, check_path, check_str
from ._ffi import ffi, lib
from ._locks import locked
from .errors import ClosedError, ModelLoadError, UnsupportedError
from .gguf_file import GGUFInfo, read_gguf
from .placement import Placement
from .vocab import Vocab

if TYPE_CHECKING:
    from .context import Context

#: architectures whose llama.cpp graph records layer inputs (``t_layer_inp``), i.e. that can be a
#: DFlash / EAGLE-3 target; enabling a tap on any other makes llama.cpp abort (src/models/*.cpp).
#: ``qwen2`` and ``gemma3`` record them through our patches (vendor/patches/0002, 0003).
TAPPABLE_ARCHS = frozenset({
    "llama", "qwen2", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "gemma3", "gemma4", "gpt-oss",
    "lfm2", "minimax-m2", "deepseek4", "nemotron_h",
})


#: architectures whose llama.cpp graph exposes the final hidden state before the LM head
#: (``t_h_nextn``, read with ``llama_get_embeddings_nextn``): what an MTP head reads, and an
#: EAGLE-3 feature id equal to the target's layer count (src/models/*.cpp).
HIDDEN_STATE_ARCHS = frozenset({
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "gemma4", "glm-dsa", "glm4moe",
    "glm5-next", "gpt-oss", "hy_v3", "mimo2", "nemotron_h", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next",
    "step35",
})

#: architectures with a next-token-prediction graph (``LLM_GRAPH_TYPE_DECODER_MTP``): targets whose
#: own NextN layers a ``draft-mtp`` drafter can run (src/models/*.cpp).
MTP_ARCHS = frozenset({
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "glm5-next",
    "hy_v3", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35",
})


@ffi.def_extern()
def _pyls_progress_callback(progress, user_data):
    bar = ffi.from_handle(user_data)
    bar.n = round(progress * 100)
    bar.refresh()
    return True


class Model:
    """A GGUF model loaded by llama.cpp.

    Args:
        path: the ``.gguf`` file (the first shard of a split model).
        n_gpu_layers: layers to offload to the devices (GPUs, RPC servers); ``-1`` (default) = all,
            ``0`` = CPU only. Ignored without devices.
        main_gpu: index in the device list of the device that holds the model with
            ``split_mode="none"``.
        split_mode: ``"layer"`` (default: layers divided among the devices), ``"row"`` (matrices
            split across CUDA GPUs) or ``"none"`` (one device).
        tensor_split: each device's share of the layers, in device-list order (default: by free memory).
        devices: device names (``pyllama_spec.devices()``) to offload to, in order; default: the
            local GPUs. See :mod:`pyllama_spec.placement`.
        use_mmap: map the file instead of reading it.
        repack: let llama.cpp repack quantized weights into CPU-optimised ("extra") buffers.
            Off by default, and refused on CPUs with AMX (``system_info()`` shows ``AMX_INT8 = 1``):
            there the pinned llama.cpp's repacked quantized matmul crashes the process (SIGSEGV)
            on the first multi-token decode.
        vocab_only: load the vocabulary only (no weights; no context can be made).
        progress: show a tqdm progress bar while loading.
        load_mtp: also load the model's next-token-prediction (MTP / NextN) layers, which an
            MTP drafter runs (llama.cpp skips them otherwise; ``--spec-type draft-mtp`` sets this).

    Raises:
        ModelNotFoundError, NotGGUFError, TruncatedGGUFError: the file is missing or bad.
        ModelLoadError: llama.cpp refused the file (the message quotes its last error).
        InvalidTypeError, InvalidArgumentError: a bad argument; a device, split or main_gpu that does
            not fit this machine (checked before llama.cpp sees it).
        UnsupportedError: ``repack=True`` on a CPU with AMX; ``split_mode="row"`` without CUDA GPUs.

    The model is freed by :meth:`close` (or the ``with`` statement, or garbage collection);
    contexts keep their model alive. Calls are serialised by a lock (``_locks.py``).
    """

    def __init__(self, path: str | os.PathLike, *, n_gpu_layers: int = -1, main_gpu: int = 0,
                 use_mmap: bool = True, repack: bool = False, vocab_only: bool = False,
                 progress: bool = False, load_mtp: bool = False, split_mode: str = "layer",
                 tensor_split: Sequence[float] | None = None, devices: Sequence[str] | None = None):
        backend.ensure_init()
        self._lock = threading.RLock()
        self._ptr = self._handle = None
        self.path = check_path("path", path)
        n_gpu_layers = check_int("n_gpu_layers", n_gpu_layers, min=-1, what="an int ≥ -1 (-1 = all layers)")
        use_mmap, vocab_only = check_bool("use_mmap", use_mmap), check_bool("vocab_only", vocab_only)
        repack, progress = check_bool("repack", repack), check_bool("progress", progress)
        load_mtp = check_bool("load_mtp", load_mtp)
        main_gpu = check_int("main_gpu", main_gpu, min=0, what="an int ≥ 0 (an index in the device list)")
        if repack and not vocab_only and cpu_has_amx():
            raise UnsupportedError(
                "repack=True is refused on this CPU: it has AMX (system_info() shows AMX_INT8 = 1), and the "
                "pinned llama.cpp's repacked quantized matmul crashes the process there (SIGSEGV on the first "
                "multi-token decode); load the model with repack=False (the default)")
        self.placement = Placement(n_gpu_layers=n_gpu_layers, split_mode=split_mode, tensor_split=tensor_split,
                                   main_gpu=main_gpu, devices=devices)
        self.info: GGUFInfo = read_gguf(self.path)
        params = lib.llama_model_default_params()
        keep = self.placement.apply(params)  # noqa: F841  (C arrays llama.cpp reads while loading)
        #: the devices the offloaded layers were given to (names; empty: CPU only)
        self.devices = self.placement.resolve()[1] if n_gpu_layers != 0 else []
        params.load_mode = lib.LLAMA_LOAD_MODE_MMAP if use_mmap else lib.LLAMA_LOAD_MODE_NONE
        params.use_extra_bufts = repack
        params.vocab_only = vocab_only
        params.load_mtp = load_mtp
        bar = handle = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=100, desc=f"loading {self.path.name}", unit="%")
            handle = ffi.new_handle(bar)
            params.progress_callback = lib._pyls_progress_callback
            params.progress_callback_user_data = handle
        backend.recent_errors.clear()
        try:
            ptr = lib.llama_model_load_from_file(str(self.path).encode(), params)
        finally:
            if bar is not None:
                bar.close()
        if ptr == ffi.NULL:
            raise ModelLoadError(f"llama.cpp could not load {str(self.path)!r}: "
                                 f"{backend.last_llama_error('no reason given')}")
        # _handle owns the pointer (freed by close() or the GC); _ptr is None once closed
        self._ptr = self._handle = ffi.gc(ptr, lib.llama_model_free)
        self._contexts: weakref.WeakSet[Context] = weakref.WeakSet()
        self.vocab_only = vocab_only
        self.load_mtp = load_mtp
        self.vocab = Vocab(self, lib.llama_model_get_vocab(ptr))

    # lifetime -------------------------------------------------------------------------------
    @property
    def ptr(self) -> Any:
        """The ``llama_model *`` (raises if closed)."""
        if self._ptr is None:
            raise ClosedError(f"the model {self.path.name} is closed: load it again")
        return self._ptr

    def close(self) -> None:
        """Free the model now (idempotent); the contexts made from it are closed first.

        A context whose outputs are still viewed by numpy arrays frees its memory when the last
        view is dropped (``Context.close``); the model's weights are then freed after it.
        """
        if getattr(self, "_ptr", None) is None:
            return
        for ctx in list(self._contexts):
            ctx.close()  # takes each context's lock; never under the model lock (lock order)
        with self._lock:
            if self._ptr is None:
                return
            self._ptr = None
            if not any(c._handle is not None for c in list(self._contexts)):
                ffi.release(self._handle)
                self._handle = None
            # else: a closed context still awaits its views' end; its destructor holds this model

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Model({self.path.name!r}, arch={self.arch!r}, n_layer={self.n_layer}, "
                f"n_embd={self.n_embd}, n_vocab={self.n_vocab})")

    # metadata -------------------------------------------------------------------------------
    @locked
    def _hparam(self, key: str, fn: Any) -> int:
        # a vocab-only load leaves llama.cpp's hyper-parameters unset: read them from the header
        if self.vocab_only:
            return int(self.info.get("{arch}." + key, 0))
        return int(fn(self.ptr))

    @property
    def arch(self) -> str:
        """``general.architecture`` (e.g. ``"llama"``, ``"dflash"``)."""
        return self.info.arch

    @property
    def n_embd(self) -> int:
        """Hidden size."""
        return self._hparam("embedding_length", lib.llama_model_n_embd)

    @property
    def n_layer(self) -> int:
        """Number of transformer blocks."""
        return self._hparam("block_count", lib.llama_model_n_layer)

    @property
    def n_head(self) -> int:
        return self._hparam("attention.head_count", lib.llama_model_n_head)

    @property
    def n_head_kv(self) -> int:
        return self._hparam("attention.head_count_kv", lib.llama_model_n_head_kv)

    @property
    def n_ctx_train(self) -> int:
        """Context length the model was trained with (tokens)."""
        return self._hparam("context_length", lib.llama_model_n_ctx_train)

    @property
    @locked
    def n_embd_out(self) -> int:
        """Width of the model's output hidden state (next-n embeddings; differs from ``n_embd``
        for e.g. a Gemma-4 assistant, whose output carries its target's hidden size)."""
        if self.vocab_only:
            return int(self.info.get("{arch}.embedding_length_out", self.n_embd))
        return int(lib.llama_model_n_embd_out(self.ptr))

    @property
    def n_layer_nextn(self) -> int:
        """Next-token-prediction (MTP / NextN) layers the file declares (``nextn_predict_layers``);
        they run only in an MTP context of a model loaded with ``load_mtp=True``."""
        return int(self.info.get("{arch}.nextn_predict_layers", 0) or 0)

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_tokens

    @property
    @locked
    def size_bytes(self) -> int:
        """Total size of the weights in bytes."""
        return lib.llama_model_size(self.ptr)

    @property
    @locked
    def n_params(self) -> int:
        return lib.llama_model_n_params(self.ptr)

    @property
    @locked
    def description(self) -> str:
        """llama.cpp's one-line description, e.g. ``"llama 135M Q4_1"``."""
        buf = ffi.new("char[256]")
        lib.llama_model_desc(self.ptr, buf, 256)
        return ffi.string(buf).decode()

    @property
    def name(self) -> str:
        """The model's name for people: the GGUF's ``general.name`` (e.g. ``"Qwen2.5 Coder 0.5B
        Instruct AWQ"``), else the file name without ``.gguf``."""
        return (self.meta("general.name") or "").strip() or self.path.name.removesuffix(".gguf")

    @property
    def label(self) -> str:
        """:attr:`name` and the weights' type from :attr:`description`, for report headings and plot
        titles, e.g. ``"Qwen2.5 Coder 0.5B Instruct AWQ, Q4_K - Medium"``."""
        parts = self.description.split(" ", 2)  # "<arch> <size> <file type>"
        return f"{self.name}, {parts[2]}" if len(parts) == 3 else self.name

    @property
    @locked
    def chat_template(self) -> str | None:
        """The Jinja chat template stored in the GGUF (``tokenizer.chat_template``), or None."""
        p = lib.llama_model_chat_template(self.ptr, ffi.NULL)
        return None if p == ffi.NULL else ffi.string(p).decode()

    @locked
    def meta(self, key: str, default: str | None = None) -> str | None:
        """Any metadata value as llama.cpp renders it (a string), or ``default``."""
        check_str("key", key)
        size = 256
        while True:
            buf = ffi.new("char[]", size)
            n = lib.llama_model_meta_val_str(self.ptr, key.encode(), buf, size)
            if n < 0:
                return default
            if n < size:
                return ffi.string(buf).decode("utf-8", "replace")
            size = n + 1

    @property
    @locked
    def metadata(self) -> dict[str, str]:
        """Every metadata key → value string (long arrays abbreviated by llama.cpp)."""
        out = {}
        kbuf = ffi.new("char[512]")
        for i in range(lib.llama_model_meta_count(self.ptr)):
            lib.llama_model_meta_key_by_index(self.ptr, i, kbuf, 512)
            n = lib.llama_model_meta_val_str_by_index(self.ptr, i, ffi.NULL, 0)
            vbuf = ffi.new("char[]", max(n, 0) + 1)
            lib.llama_model_meta_val_str_by_index(self.ptr, i, vbuf, max(n, 0) + 1)
            out[ffi.string(kbuf).decode()] = ffi.string(vbuf).decode("utf-8", "replace")
        return out

    @property
    def supports_layer_taps(self) -> bool:
        """Whether llama.cpp records this architecture's layer inputs (a DFlash/EAGLE-3 target)."""
        return self.arch in TAPPABLE_ARCHS

    @property
    @locked
    def target_layer_ids(self) -> list[int]:
        """For a drafter (DFlash, EAGLE-3): the target layers whose inputs it reads; else ``[]``."""
        n = lib.pyls_model_target_layer_ids_n(self.ptr)
        if n == 0:
            return []
        ids = lib.pyls_model_target_layer_ids(self.ptr)
        return [int(ids[i]) for i in range(n)]

    @property
    @locked
    def output_device(self) -> str:
        """Name of the device that holds the output head (``"CPU"`` unless offloaded; llama.cpp
        counts the head as the layer after the last: ``n_gpu_layers ≥ 1`` offloads it)."""
        return ffi.string(lib.pyls_model_dev_output(self.ptr)).decode() or "CPU"

    @property
    @locked
    def dflash_selector_top_k(self) -> int:
        """DFlash2's selector top-k (0 for plain DFlash and non-DFlash models)."""
        return int(lib.pyls_model_dflash_selector_top_k(self.ptr))

    @locked
    def token_embeddings(self) -> np.ndarray:
        """The token-embedding matrix, dequantized: ``(n_vocab, n_embd)`` float32 (a copy).

        Raises:
            UnsupportedError: the model has no token embedding (e.g. a DFlash drafter).
        """
        n = lib.pyls_model_get_tok_embd(self.ptr, ffi.NULL)
        if n == 0:
            raise UnsupportedError(f"{self.path.name} has no token embedding matrix to read")
        out = np.empty(n, dtype=np.float32)
        lib.pyls_model_get_tok_embd(self.ptr, ffi.cast("float *", out.ctypes.data))
        return out.reshape(-1, self.n_embd)


def cpu_has_amx() -> bool:
    """Whether llama.cpp's CPU backend reports AMX (``AMX_INT8 = 1`` in :func:`system_info`)."""
    return "AMX_INT8 = 1" in backend.system_info()


__all__ = ["Model", "TAPPABLE_ARCHS", "HIDDEN_STATE_ARCHS", "MTP_ARCHS", "cpu_has_amx"]
