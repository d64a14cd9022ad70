"""MTP drafter: the target's own next-token-prediction layers, or a Gemma-4 assistant (DeepSeek-AI
2024, "DeepSeek-V3 Technical Report", arXiv 2412.19437, §2.2 multi-token prediction; llama.cpp
``common_speculative_impl_draft_mtp`` in common/speculative.cpp, ``--spec-type draft-mtp``;
Gemma-4 assistants: ``src/models/gemma4-assistant.cpp``).

An MTP head predicts the token after ``x_p`` from ``x_p`` and the target's final hidden state
of the position before, ``h_{p-1}``. Two cases, chosen by the file:

* **The target's own MTP (NextN) layers** (no file): the target is loaded with ``load_mtp`` and
  a second context of type MTP runs only those layers, with a KV cache of its own. Every
  target batch is replayed into it as pairs ``(x_k, h_{k-1})`` at ``k``'s position (the first
  row pairs with the hidden state left over from the previous batch), so its cache mirrors
  the target's. A draft decodes ``(newest token, its h)`` at ``n_past``, then each drafted token
  with the head's own next hidden state at the following positions.
* **A Gemma-4 assistant** (``gemma4-assistant`` file): a separate small model whose attention
  reads the *target's* KV cache (its own "cache" is a read-only view of the target's cells,
  so nothing is replayed and nothing needs removing). Every draft step is decoded at the
  same position ``n_past`` — the assistant attends to the committed context only and carries
  the draft forward through its hidden state, as HF's ``Gemma4Assistant`` does.

Both need the target's final hidden state for every row of every target decode
(``llama_set_embeddings_nextn(target, on, masked=False)``), switched on in ``begin``.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from ...context import Context
from ...errors import DrafterMismatchError, InvalidArgumentError, UnsupportedError
from ...gguf_file import read_gguf
from ...model import MTP_ARCHS, Model
from ..sampling import SamplingParams
from ..timing import StageTimer
from ._pick import pick
from .base import DeferredRows, Draft, Drafter, register_drafter

log = logging.getLogger("pyllama_spec")

#: the target architecture a Gemma-4 assistant is built for
ASSISTANT_TARGETS = {"gemma4-assistant": "gemma4"}


def check_mtp_target(target_model: Model) -> None:
    """Raise unless the target can draft with its own MTP layers.

    Raises:
        DrafterMismatchError: its architecture has no MTP graph in llama.cpp, or the file has
            no MTP layers (converted without them).
    """
    name, arch = target_model.path.name, target_model.arch
    if arch not in MTP_ARCHS:
        raise DrafterMismatchError(
            f"the target {name} ({arch!r}) has no next-token-prediction layers llama.cpp can run; MTP drafting "
            f"works for {', '.join(sorted(MTP_ARCHS))} targets converted with their MTP layers, or with a separate "
            "assistant file (Gemma-4). Use another drafter kind (draft-simple, draft-eagle3, draft-dflash) here")
    if target_model.n_layer_nextn == 0:
        raise DrafterMismatchError(
            f"the target {name} has no MTP layers ({arch}.nextn_predict_layers is 0 or missing): convert it with its "
            "MTP layers (convert_hf_to_gguf.py without --no-mtp) or use another drafter kind")


def check_assistant_pair(target_model: Model, path: str | os.PathLike) -> dict:
    """Check a Gemma-4 assistant file against a loaded target before llama.cpp loads it (a wrong
    width or KV layout makes llama.cpp abort).

    Returns:
        ``{"n_embd_out"}``.

    Raises:
        DrafterMismatchError: not an assistant, or one for another model.
    """
    info = read_gguf(path)
    name, tname = info.path.name, target_model.path.name
    want = ASSISTANT_TARGETS.get(info.arch)
    if want is None:
        raise DrafterMismatchError(f"{name} is a {info.arch!r} model, not an MTP assistant "
                                   f"({', '.join(ASSISTANT_TARGETS)})")
    if target_model.arch != want:
        raise DrafterMismatchError(f"{name} is an assistant for {want!r} models but the target {tname} is "
                                   f"{target_model.arch!r}: use the assistant released with {tname}")
    arch, tinfo = info.arch, target_model.info
    n_out = int(info.get(f"{arch}.embedding_length_out", 0))
    if n_out != target_model.n_embd:
        raise DrafterMismatchError(f"{name} reads hidden states of width {n_out} ({arch}.embedding_length_out) "
                                   f"but {tname} has hidden size {target_model.n_embd}: it is the assistant of "
                                   "another model")
    pattern = tinfo.get(f"{want}.attention.sliding_window_pattern")
    if not pattern or len(pattern) < 2 or not pattern[-2] or pattern[-1]:
        raise DrafterMismatchError(f"{name} reads the KV cache of {tname}'s last sliding-window and last "
                                   f"full-attention layers, but {tname}'s layer pattern ends "
                                   f"{pattern[-2:] if pattern else pattern}")
    for key in ("attention.key_length", "attention.key_length_swa", "attention.head_count_kv"):
        a, b = info.get(f"{arch}.{key}"), tinfo.get(f"{want}.{key}")
        if b is not None and a != b:
            raise DrafterMismatchError(f"{name} has {key} {a} but {tname} has {b}: its queries cannot read that KV "
                                       "cache; it is the assistant of another model")
    return {"n_embd_out": n_out}


@register_drafter
class MTPDrafter(Drafter):
    """Multi-token-prediction drafting (``--spec-type draft-mtp``).

    Args:
        target: the target :class:`~pyllama_spec.Context`.
        path: None to run the target's own MTP layers, or a Gemma-4 assistant ``.gguf``.
        p_min, n_min: early stop / minimum draft, as for ``draft-simple``.
        n_gpu_layers, flash_attn, type_k, type_v, repack: the MTP context (and the assistant's
            model).

    Raises:
        DrafterMismatchError: the target has no MTP layers, or the assistant is another model's.
        UnsupportedError: a target with several chained MTP heads (not driven yet).

    The target must be loaded with ``load_mtp=True`` for its own layers to be in memory; if it
    was not, a second copy of the target is loaded with them (mmap shares the file pages on the
    CPU; on a GPU that doubles the weights: load the target with ``load_mtp=True``).

    Memory: own layers — the MTP layers' KV cache (one layer for ``n_ctx``), compute buffers,
    no extra weights; assistant — its small weights and compute buffers, **no KV cache of its
    own** (it reads the target's).
    """
    kind = "draft-mtp"
    aliases = ("mtp",)
    supports_rejection = True
    #: reads the target's final hidden state of every decoded row (switched on in begin(); a loop
    #: that manages it like the layer taps would also switch it off for other drafters)
    target_hidden_state = True
    n_max_limit = 32
    n_max_default = 3  # llama.cpp's --spec-draft-n-max default

    def __init__(self, target: Context, path: str | os.PathLike | None = None, *, p_min: float = 0.0, n_min: int = 0,
                 n_gpu_layers: int = -1, flash_attn: bool | str = "auto", type_k: str = "f16", type_v: str = "f16",
                 repack: bool = False) -> None:
        if not 0.0 <= p_min <= 1.0:
            raise InvalidArgumentError(f"p_min must lie in [0, 1], got {p_min!r}")
        super().__init__(target)
        self.p_min, self.n_min = float(p_min), int(n_min)
        self.shared_kv = path is not None
        self._own_model = None
        if path is not None:
            check_assistant_pair(target.model, path)
            model = self._own_model = Model(path, n_gpu_layers=n_gpu_layers, repack=repack)
        else:
            check_mtp_target(target.model)
            if target.model.n_layer_nextn > 1:
                raise UnsupportedError(f"{target.model.path.name} has {target.model.n_layer_nextn} chained MTP heads; "
                                       "this drafter runs single-head MTP targets (and Gemma-4 assistants)")
            model = target.model
            if not model.load_mtp:
                log.warning("the target %s was loaded without its MTP layers: loading a copy with them (pass "
                            "load_mtp=True when loading the target to avoid the second copy)", model.path.name)
                model = self._own_model = Model(target.model.path, n_gpu_layers=n_gpu_layers, repack=repack,
                                                load_mtp=True)
        self.model = model
        try:
            if model.n_vocab != target.model.n_vocab:
                raise DrafterMismatchError(f"{model.path.name} has a vocabulary of {model.n_vocab} tokens but the "
                                           f"target {target.model.path.name} has {target.model.n_vocab}")
            # an MTP context of the target's size; the assistant's "KV cache" is a view of the target's
            self.ctx = Context(model, n_ctx=target.n_ctx, n_batch=target.n_batch, n_ubatch=target.n_ubatch,
                               ctx_other=target, ctx_type="mtp", flash_attn=flash_attn, type_k=type_k, type_v=type_v)
        except BaseException:
            if self._own_model is not None:
                self._own_model.close()
            raise
        self.ctx.set_embeddings_nextn(True, True)
        self.n_embd = model.n_embd_out
        self._reset()

    def _reset(self) -> None:
        #: the committed rows (and their hidden states) kept while n_max="auto" rests (observe_deferred)
        self._deferred = DeferredRows(self.ctx.n_batch)
        self.pending_h = np.zeros(self.n_embd, dtype=np.float32)
        self.verify_h = np.zeros((0, self.n_embd), dtype=np.float32)

    def begin(self, prompt: list[int], n_keep: int = 0) -> None:
        if not self.shared_kv:  # clearing an assistant's view would clear the target's cells
            self.ctx.memory.clear()
        self._reset()
        # the head reads the target's final hidden state of every row (masked = false)
        self.target.set_embeddings_nextn(True, False)

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        self._flush(timer)
        n = len(tokens)
        with timer("extract"):
            h = self.target.embeddings_nextn()[:n].copy()
        self._inject(tokens, positions, h, timer)

    def observe_deferred(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                         timer: StageTimer) -> None:
        # n_max="auto" is resting: own MTP layers take the committed rows' (token, previous hidden state) pairs in
        # one decode before the next draft instead of one a step (as draft-simple, DFlash and EAGLE-3 defer theirs);
        # the hidden states are copied now, the target's next decode overwrites them. An assistant that reads the
        # target's cache decodes nothing here: it only keeps the last hidden state, at once
        if self.shared_kv:
            self.observe(tokens, positions, n_commit, timer)
            return
        with timer("extract"):
            h = self.target.embeddings_nextn()[:n_commit].copy()
        if self._deferred.add(tokens[:n_commit], positions[:n_commit], h):
            self._flush(timer)  # (a batch's worth: the copies kept stay bounded — a long prompt in a long rest)

    def _flush(self, timer: StageTimer) -> None:
        """Decode the rows deferred while resting (consecutive committed positions), as one verify batch."""
        if self._deferred:
            tokens, positions, h = self._deferred.take()
            assert h is not None  # (observe_deferred keeps every row's hidden state)
            self._inject(tokens, positions, h, timer)

    def _inject(self, tokens: list[int], positions: np.ndarray, h: np.ndarray, timer: StageTimer) -> None:
        """Decode (x_k, h_{k-1}) at each row's position into the MTP layers' cache (own layers only); the last
        row's h waits for the next batch's first token (``pending_h``)."""
        n = len(tokens)
        if not self.shared_kv:
            with timer("inject", self.ctx):
                # (x_k, h_{k-1}) at k's position; the first row pairs with the previous batch's last h
                prev = np.concatenate([self.pending_h[None, :], h[:n - 1]], axis=0)
                step = self.ctx.n_batch
                for i in range(0, n, step):
                    self.ctx.decode_tokens_embd(tokens[i:i + step], prev[i:i + step], positions[i:i + step],
                                                logits="none")
        self.verify_h = h
        self.pending_h = h[n - 1]

    def on_accept(self, n_drafted: int, n_accepted: int) -> None:
        # the hidden state of the last accepted row goes with the bonus token (common_..._mtp::accept); a step that
        # drafted nothing (a rest, an empty draft) leaves the last row its injection set, as in eagle3.py
        if self.verify_h.shape[0] and n_drafted:
            self.pending_h = self.verify_h[min(n_accepted, self.verify_h.shape[0] - 1)]

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        self._flush(timer)  # (rows deferred while n_max="auto" rested)
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        tok, h = int(last_token), self.pending_h
        for i in range(n_max):
            # an assistant drafts every step at n_past; own layers at consecutive positions
            pos = n_past if self.shared_kv else n_past + i
            with timer("draft", self.ctx):
                self.ctx.decode_tokens_embd([tok], h[None, :], [pos], logits="all")
            with timer("draft_sample"):
                nxt, q = pick(self.ctx.logits()[0], sp, rng, self.p_min)
                h = self.ctx.embeddings_nextn()[0].copy()
            if nxt is None:
                break
            tok = nxt
            tokens.append(tok)
            if q is not None:
                qs.append(q)
        if not self.shared_kv:
            with timer("rollback"):
                self.ctx.memory.seq_rm(0, n_past)
        if len(tokens) < self.n_min:
            return Draft(tokens=[])
        return Draft(tokens=tokens, probs=np.stack(qs).astype(np.float32) if qs else None)

    def rollback(self, n_past: int) -> None:
        self._deferred.cut(n_past)  # (deferred rows at or after n_past are gone: an EOS inside a rest)
        if not self.shared_kv:
            self.ctx.memory.seq_rm(0, n_past)

    def memory_report(self) -> dict:
        out = self.ctx.memory_summary()
        if self._own_model is None:  # the target's own weights: nothing extra
            out["weights_mib"] = 0.0
        if self.shared_kv:
            out["kv_cache_mib"] = 0.0  # a view of the target's cache (counted there)
            out["shares_target_kv"] = True
        return out

    def close(self) -> None:
        self.ctx.close()
        if self._own_model is not None:
            self._own_model.close()
