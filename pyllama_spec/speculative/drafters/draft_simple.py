"""Draft-model drafter: a separate small model with the target's vocabulary drafts token by
token in its own KV cache (Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding", arXiv 2211.17192; llama.cpp ``common_speculative_impl_draft_simple``
in common/speculative.cpp, ``--spec-type draft-simple``).

The drafter's cache mirrors the target's: every batch the target decodes (prefill chunks,
verify blocks) is decoded into the drafter too, and rollback cuts both at the same position.
A draft decodes the newest token, then each drafted token, one at a time, stopping at
``n_max`` or when the top candidate's probability falls below ``p_min``; the drafted
positions are removed again right after (the next verify block re-enters them), as the
native loop does. A greedy draft with no ``p_min`` cut is drawn in the decode graph (llama.cpp's
backend sampling: one token id per decode comes back instead of a row of ``n_vocab`` logits to
argmax on the host; ``backend_sampling``), as the DFlash drafter's is.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ...context import Context
from ...errors import DrafterMismatchError, InvalidArgumentError
from ...model import Model
from ..sampling import SamplingParams
from ..timing import StageTimer
from ._pick import pick
from .base import DeferredRows, Draft, ModelDrafter, register_drafter

#: llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE and SPEC_VOCAB_CHECK_START_TOKEN_ID
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


def check_vocab_compatible(target: Model, draft: Model) -> None:
    """Raise unless ``draft`` can draft for ``target``: llama.cpp's
    ``common_speculative_are_compatible`` (common/speculative.cpp), as an exception.

    Same tokenizer family; same add-BOS/EOS flags and, where added, the same BOS/EOS ids;
    vocabulary sizes within 128 of each other; identical entries from id 5 up to the smaller
    size.

    Raises:
        DrafterMismatchError: the first difference found, and what would fit.
    """
    tv, dv = target.vocab, draft.vocab
    tn, dn = target.path.name, draft.path.name
    fit = f"use a draft model converted with {tn}'s tokenizer (e.g. a smaller model of the same family)"
    if tv.kind != dv.kind:
        raise DrafterMismatchError(f"{dn} has a {dv.kind!r} tokenizer but the target {tn} a {tv.kind!r} one: {fit}")
    for what, t_add, d_add, t_id, d_id in (("BOS", tv.add_bos, dv.add_bos, tv.bos, dv.bos),
                                           ("EOS", tv.add_eos, dv.add_eos, tv.eos, dv.eos)):
        if t_add != d_add or (t_add and t_id != d_id):
            raise DrafterMismatchError(
                f"{dn} and the target {tn} disagree on the {what} token (added: {d_add} vs {t_add}, id: {d_id} vs "
                f"{t_id}), so their prompts would differ: {fit}")
    nt, nd = tv.n_tokens, dv.n_tokens
    if abs(nt - nd) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise DrafterMismatchError(f"{dn} has {nd} tokens but the target {tn} has {nt} (llama.cpp allows a "
                                   f"difference of at most {VOCAB_MAX_SIZE_DIFFERENCE}): {fit}")
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(nt, nd)):
        a, b = tv.raw_text(i), dv.raw_text(i)
        if a != b:
            raise DrafterMismatchError(f"token {i} is {b!r} in {dn} but {a!r} in the target {tn}: the vocabularies "
                                       f"differ: {fit}")


@register_drafter
class DraftModelDrafter(ModelDrafter):
    """A small draft model in its own llama.cpp context (``--spec-type draft-simple``).

    Args:
        target: the target :class:`~pyllama_spec.Context`.
        path: the draft model ``.gguf`` (any architecture llama.cpp runs, with the target's
            vocabulary).
        p_min: stop drafting when the top candidate's probability (softmax over the 10 best
            logits) is below this (``--spec-draft-p-min``; 0 = never).
        n_min: drop drafts shorter than this (``--spec-draft-n-min``).
        n_gpu_layers: layers of the draft model to offload (-1 = all).
        type_k, type_v, flash_attn: the draft model's KV cache (default: like llama.cpp's).
        repack: llama.cpp's CPU weight repacking (off: it crashes on AMX CPUs).

    Raises:
        DrafterMismatchError: the vocabularies are not compatible (see :func:`check_vocab_compatible`).
        ModelLoadError, ContextError: the file or its context could not be made.

    Memory: the draft model's weights, a KV cache of the target's ``n_ctx`` positions for its
    own layers, and its compute buffers (``memory_report()``).
    """
    kind = "draft-simple"
    aliases = ("draft",)
    supports_rejection = True
    n_max_limit = 32
    n_max_default = 3  # llama.cpp's --spec-draft-n-max default

    def __init__(self, target: Context, path: str | os.PathLike | None = None, *, p_min: float = 0.0, n_min: int = 0,
                 n_gpu_layers: int = -1, flash_attn: bool | str = "auto", type_k: str = "f16", type_v: str = "f16",
                 repack: bool = False) -> None:
        if path is None:
            raise InvalidArgumentError("a draft-simple drafter needs the path of the draft model's .gguf file")
        if not 0.0 <= p_min <= 1.0:
            raise InvalidArgumentError(f"p_min must lie in [0, 1], got {p_min!r}")
        if not isinstance(n_min, int) or n_min < 0:
            raise InvalidArgumentError(f"n_min must be an int ≥ 0, got {n_min!r}")
        super().__init__(target)
        self.p_min, self.n_min = float(p_min), n_min
        self.model = Model(path, n_gpu_layers=n_gpu_layers, repack=repack)
        try:
            check_vocab_compatible(target.model, self.model)
            # the draft holds every position the target holds (common_speculative_init_result);
            # one output row per decode, as common_base_params_to_speculative sets
            self.ctx = Context(self.model, n_ctx=target.n_ctx, n_batch=target.n_batch, n_ubatch=target.n_ubatch,
                               flash_attn=flash_attn, type_k=type_k, type_v=type_v, n_outputs_max=1,
                               n_outputs_max_per_seq=1)
        except BaseException:
            self.model.close()
            raise
        #: the committed rows kept while n_max="auto" rests (observe_deferred)
        self._pending = DeferredRows(self.ctx.n_batch)

    def begin(self, prompt: list[int], n_keep: int = 0) -> None:
        self.ctx.memory.clear()
        self._pending = DeferredRows(self.ctx.n_batch)

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        # the whole batch, as common_speculative_impl_draft_simple::process does (only its last
        # row is an output); rejected rows go at rollback. In chunks of the draft's n_batch.
        self._flush(timer)
        self._decode(tokens, positions, timer)

    def observe_deferred(self, tokens: list[int], positions: np.ndarray, n_commit: int,
                         timer: StageTimer) -> None:
        # n_max="auto" is resting: the committed rows wait and go into the draft model in one batch before the
        # next draft (or the next observe). Decoded one at a time they cost a draft-model decode per resting
        # step — on 2 CPU cores, SmolLM2 + the shipped draft model, auto rested 95 % of the steps yet ran at
        # 0.85 × plain, as fast as drafting at n_max 1 (2026-12-06)
        if self._pending.add(tokens[:n_commit], positions[:n_commit]):
            self._flush(timer)  # (a batch's worth)

    def _flush(self, timer: StageTimer) -> None:
        """Decode the rows deferred while resting (consecutive committed positions), in n_batch chunks."""
        if self._pending:
            tok, pos, _ = self._pending.take()
            self._decode(tok, pos, timer)

    def _decode(self, tokens: Sequence[int], positions: Sequence[int] | np.ndarray, timer: StageTimer) -> None:
        with timer("inject", self.ctx):
            step = self.ctx.n_batch
            for i in range(0, len(tokens), step):
                self.ctx.decode(tokens[i:i + step], positions[i:i + step], logits="last")

    def rollback(self, n_past: int) -> None:
        self._pending.cut(n_past)  # (deferred rows at or after n_past are gone: an EOS inside a rest)
        super().rollback(n_past)

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        self._flush(timer)  # (rows deferred while n_max="auto" rested)
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        tok = int(last_token)
        in_graph = self._draw_in_graph(sp.greedy and self.p_min == 0.0 and self.backend_sampling)
        for i in range(n_max):
            with timer("draft", self.ctx):
                self.ctx.decode([tok], [n_past + i], logits="last")
            with timer("draft_sample"):
                if in_graph:
                    nxt, q = self.ctx.sampled_tokens(1)[0], None
                else:
                    nxt, q = pick(self.ctx.logits()[0], sp, rng, self.p_min)
            if nxt is None:
                break
            tok = nxt
            tokens.append(tok)
            if q is not None:
                rows.append(q)
        with timer("rollback"):
            # the native loop cuts the draft's cache back to the target's before verifying
            self.ctx.memory.seq_rm(0, n_past)
        if len(tokens) < self.n_min:
            return Draft(tokens=[])
        return Draft(tokens=tokens, probs=np.stack(rows).astype(np.float32) if rows else None)
