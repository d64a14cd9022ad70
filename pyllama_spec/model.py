"""``Model``: a loaded GGUF (owns ``llama_model *``) and its ``Vocab``."""
from __future__ import annotations

import os
import weakref
from pathlib import Path

import numpy as np

from . import backend
from ._ffi import ffi, lib
from .errors import ClosedError, InvalidArgumentError, ModelLoadError, UnsupportedError
from .gguf_file import GGUFInfo, read_gguf
from .vocab import Vocab

#: architectures whose llama.cpp graph records layer inputs (``t_layer_inp``), i.e. that can be a
#: DFlash / EAGLE-3 target; enabling a tap on any other makes llama.cpp abort (src/models/*.cpp).
#: ``qwen2`` and ``gemma3`` record them through our patches (vendor/patches/0002, 0003).
TAPPABLE_ARCHS = frozenset({
    "llama", "qwen2", "qwen3", "qwen3moe", "qwen3next", "qwen35", "qwen35moe", "gemma3", "gemma4", "gpt-oss",
    "lfm2", "minimax-m2", "deepseek4", "nemotron_h",
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
        n_gpu_layers: layers to offload to the GPU; ``-1`` (default) = all, ``0`` = CPU only.
            Ignored by a CPU-only build.
        main_gpu: the GPU that holds the model when not split.
        use_mmap: map the file instead of reading it.
        repack: let llama.cpp repack quantized weights into CPU-optimised ("extra") buffers.
            Off by default: on CPUs with AMX the repacked path of the pinned llama.cpp crashes
            (SIGSEGV/SIGILL) on quantized weights; turn on only on CPUs without AMX.
        vocab_only: load the vocabulary only (no weights; no context can be made).
        progress: show a tqdm progress bar while loading.

    Raises:
        ModelNotFoundError, NotGGUFError, TruncatedGGUFError: the file is missing or bad.
        ModelLoadError: llama.cpp refused the file (the message quotes its last error).

    The model is freed by :meth:`close` (or the ``with`` statement, or garbage collection);
    contexts keep their model alive.
    """

    def __init__(self, path: str | os.PathLike, *, n_gpu_layers: int = -1, main_gpu: int = 0,
                 use_mmap: bool = True, repack: bool = False, vocab_only: bool = False,
                 progress: bool = False):
        backend.ensure_init()
        self.path = Path(path)
        self.info: GGUFInfo = read_gguf(self.path)
        if not isinstance(n_gpu_layers, int):
            raise TypeError(f"n_gpu_layers must be an int (-1 = all layers), got {n_gpu_layers!r}")
        n_gpus = sum(d["type"] == "gpu" for d in backend.devices())
        if not isinstance(main_gpu, int) or not 0 <= main_gpu < max(1, n_gpus):
            raise InvalidArgumentError(f"main_gpu must be in [0, {max(1, n_gpus)}) on this machine ({n_gpus} GPU(s)), "
                             f"got {main_gpu!r}")
        params = lib.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers
        params.main_gpu = main_gpu
        params.load_mode = lib.LLAMA_LOAD_MODE_MMAP if use_mmap else lib.LLAMA_LOAD_MODE_NONE
        params.use_extra_bufts = repack
        params.vocab_only = vocab_only
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
        self._ptr = ffi.gc(ptr, lib.llama_model_free)
        self._contexts: weakref.WeakSet = weakref.WeakSet()
        self.vocab_only = vocab_only
        self.vocab = Vocab(self, lib.llama_model_get_vocab(ptr))

    # lifetime -------------------------------------------------------------------------------
    @property
    def ptr(self):
        """The ``llama_model *`` (raises if closed)."""
        if self._ptr is None:
            raise ClosedError(f"the model {self.path.name} is closed: load it again")
        return self._ptr

    def close(self) -> None:
        """Free the model now (idempotent); the contexts made from it are closed first."""
        if getattr(self, "_ptr", None) is not None:
            for ctx in list(self._contexts):
                ctx.close()
            ffi.release(self._ptr)
            self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return (f"Model({self.path.name!r}, arch={self.arch!r}, n_layer={self.n_layer}, "
                f"n_embd={self.n_embd}, n_vocab={self.n_vocab})")

    # metadata -------------------------------------------------------------------------------
    def _hparam(self, key: str, fn) -> int:
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
    def n_vocab(self) -> int:
        return self.vocab.n_tokens

    @property
    def size_bytes(self) -> int:
        """Total size of the weights in bytes."""
        return lib.llama_model_size(self.ptr)

    @property
    def n_params(self) -> int:
        return lib.llama_model_n_params(self.ptr)

    @property
    def description(self) -> str:
        """llama.cpp's one-line description, e.g. ``"llama 135M Q4_1"``."""
        buf = ffi.new("char[256]")
        lib.llama_model_desc(self.ptr, buf, 256)
        return ffi.string(buf).decode()

    @property
    def chat_template(self) -> str | None:
        """The Jinja chat template stored in the GGUF (``tokenizer.chat_template``), or None."""
        p = lib.llama_model_chat_template(self.ptr, ffi.NULL)
        return None if p == ffi.NULL else ffi.string(p).decode()

    def meta(self, key: str, default: str | None = None) -> str | None:
        """Any metadata value as llama.cpp renders it (a string), or ``default``."""
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
    def target_layer_ids(self) -> list[int]:
        """For a drafter (DFlash, EAGLE-3): the target layers whose inputs it reads; else ``[]``."""
        n = lib.pyls_model_target_layer_ids_n(self.ptr)
        if n == 0:
            return []
        ids = lib.pyls_model_target_layer_ids(self.ptr)
        return [int(ids[i]) for i in range(n)]

    @property
    def dflash_selector_top_k(self) -> int:
        """DFlash2's selector top-k (0 for plain DFlash and non-DFlash models)."""
        return int(lib.pyls_model_dflash_selector_top_k(self.ptr))

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


__all__ = ["Model", "TAPPABLE_ARCHS"]
