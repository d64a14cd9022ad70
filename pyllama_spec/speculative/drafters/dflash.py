"""DFlash drafter: block-diffusion drafting with target features injected into the drafter's
KV cache (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative Decoding",
arXiv 2602.06036; llama.cpp ``common_speculative_impl_draft_dflash`` in common/speculative.cpp
and ``src/models/dflash.cpp``).

Per step: the target's layer inputs at ``target_layer_ids`` for the committed rows are
concatenated per token (``(n, n_ids × n_embd)`` float32) and decoded into the drafter as
embedding rows, which its graph turns into K/V entries; then one non-causal pass over
``[last, mask × n_max]`` gives all draft tokens at once (rows 1..n_max); the block's own
K/V entries are removed right after.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from ...backend import supports_gpu_offload
from ...context import Context
from ...errors import InvalidArgumentError
from ...model import Model
from ...pairing import check_dflash_pair
from ...sampler import SamplerChain
from ..sampling import SamplingParams, densify, filtered_rows, sample_rows
from ..timing import StageTimer
from . import Draft, Drafter, register_drafter

log = logging.getLogger("pyllama_spec")


@register_drafter
class DFlashDrafter(Drafter):
    """A DFlash drafter model running in its own llama.cpp context linked to the target's.

    Args:
        target: the target :class:`~pyllama_spec.Context`.
        path: the drafter ``.gguf`` (``general.architecture = "dflash"``).
        n_gpu_layers: layers of the drafter to offload (-1 = all).
        type_k, type_v, flash_attn: the drafter's KV cache (default: like llama.cpp's).

    Raises:
        DrafterMismatchError: the file is not a DFlash drafter for this target.
    """
    kind = "dflash"
    supports_rejection = True

    def __init__(self, target: Context, path: str | os.PathLike | None = None, *, n_gpu_layers: int = -1,
                 flash_attn: bool | str = "auto", type_k: str = "f16", type_v: str = "f16", repack: bool = False,
                 fused_inject: bool | None = None):
        if path is None:
            raise InvalidArgumentError("a DFlash drafter needs the path of its .gguf file")
        meta = check_dflash_pair(target.model, path)
        super().__init__(target)
        self.block_size = meta["block_size"]
        self.target_layer_ids = meta["target_layer_ids"]
        self.mask_token = meta["mask_token_id"]
        self.n_max_limit = self.block_size - 1
        self.n_max_default = min(7, self.n_max_limit)
        self.model = Model(path, n_gpu_layers=n_gpu_layers, repack=repack)
        # The whole noise block must be one ubatch (non-causal attention), and the drafter
        # holds every committed position, like the target (common_speculative_init_result).
        n_ubatch = max(target.n_ubatch, self.block_size)
        # outputs: at most one block (llama.cpp sizes its sampling graph and buffers by this)
        self.ctx = Context(self.model, n_ctx=target.n_ctx, n_batch=max(target.n_batch, n_ubatch),
                           n_ubatch=n_ubatch, ctx_other=target, causal_attn=meta["causal"],
                           flash_attn=flash_attn, type_k=type_k, type_v=type_v,
                           n_outputs_max=self.block_size, n_outputs_max_per_seq=self.block_size,
                           n_threads=target.n_threads, n_threads_batch=target.n_threads_batch)
        self.ctx.set_embeddings_nextn(True, True)
        #: draw the greedy draft in the decode graph (False: read logits, argmax on the host)
        self.backend_sampling = True
        #: inject a step's committed features in the same decode as the next draft block
        #: (vendor/patches/0006-dflash-fused-inject: one drafter call per step instead of two). Default:
        #: when the drafter runs on a GPU; on the CPU the placeholder rows' extra layer compute costs
        #: more than the call it saves
        self.fused_inject = ((supports_gpu_offload() and n_gpu_layers != 0) if fused_inject is None
                             else bool(fused_inject))
        self._pending: tuple[np.ndarray, np.ndarray] | None = None  # staged (features, positions)

    def begin(self, prompt: list[int]) -> None:
        self._pending = None
        self.ctx.memory.clear()

    def observe(self, tokens: list[int], positions: np.ndarray, n_commit: int, timer: StageTimer) -> None:
        # only the committed rows: the same cache as llama.cpp's inject-all-then-remove, less work
        with timer("extract"):
            feats = np.concatenate([self.target.layer_input(i)[:n_commit] for i in self.target_layer_ids], axis=1)
        self.flush(timer)
        if self.fused_inject and n_commit <= self.block_size:
            # a verify step's rows: staged for the next propose(), which decodes them with its block
            self._pending = (feats, np.asarray(positions[:n_commit], dtype=np.int32).copy())
            return
        with timer("inject", self.ctx):
            self.ctx.decode_embd(feats, positions[:n_commit])

    def flush(self, timer: StageTimer | None = None) -> None:
        """Inject staged features now (a separate decode), so that the drafter's cache holds every
        committed position; ``propose`` does it in its own decode otherwise."""
        if self._pending is None:
            return
        feats, pos = self._pending
        self._pending = None
        if timer is None:
            self.ctx.decode_embd(feats, pos)
            return
        with timer("inject", self.ctx):
            self.ctx.decode_embd(feats, pos)

    def propose(self, last_token: int, n_past: int, n_max: int, sp: SamplingParams, rng: np.random.Generator,
                timer: StageTimer) -> Draft:
        n_max = min(n_max, self.n_max_limit)
        if n_max <= 0:
            return Draft(tokens=[])
        # the argmax of each block row is drawn in the decode graph (llama.cpp's backend sampling:
        # no logits copied); sampling from q needs q itself, so then the logits come back
        if sp.greedy and self.backend_sampling:
            if not self.ctx.samplers:
                self.ctx.set_sampler(SamplerChain())  # a fresh chain: llama.cpp sets each up once
        else:
            self.ctx.set_sampler(None)
        block = np.full(n_max + 1, self.mask_token, dtype=np.int32)
        block[0] = last_token
        pos = np.arange(n_past, n_past + n_max + 1, dtype=np.int32)
        if self._pending is not None:
            # fused: placeholders at the staged rows' positions, then the block (patch 0006)
            feats, pos_inj = self._pending
            self._pending = None
            n_inj = len(pos_inj)
            block = np.concatenate([np.full(n_inj, self.mask_token, dtype=np.int32), block])
            pos = np.concatenate([pos_inj, pos])
            flags = np.concatenate([np.zeros(n_inj, dtype=np.int8), np.ones(n_max + 1, dtype=np.int8)])
            with timer("draft", self.ctx):
                self.ctx.stage_dflash_inject(feats)
                self.ctx.decode(block, pos, logits=flags)
        else:
            with timer("draft", self.ctx):
                self.ctx.decode(block, pos, logits="all")
        with timer("draft_sample"):
            if self.ctx.samplers:
                draft = Draft(tokens=self.ctx.sampled_tokens()[1:])
            elif sp.greedy:
                draft = Draft(tokens=[int(t) for t in np.argmax(self.ctx.logits()[1:], axis=1)])
            else:
                rows = filtered_rows(self.ctx.logits()[1:], sp)
                draft = Draft(tokens=[int(t) for t in sample_rows(*rows, rng)],
                              probs=densify(*rows, self.target.model.n_vocab))
        with timer("rollback"):
            # the noise block never stays in the drafter's cache
            self.ctx.memory.seq_rm(0, n_past)
        return draft

    def rollback(self, n_past: int) -> None:
        if self._pending is not None:
            feats, pos = self._pending
            keep = pos < n_past
            self._pending = (feats[keep], pos[keep]) if keep.any() else None
        self.ctx.memory.seq_rm(0, n_past)

    def memory_report(self) -> dict[str, float]:
        return self.ctx.memory_summary()

    def close(self) -> None:
        self.ctx.close()
        self.model.close()

