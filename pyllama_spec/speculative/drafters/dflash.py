"""DFlash drafter: block-diffusion drafting with target features injected into the drafter's
KV cache (Chen et al. 2026, "DFlash: Block Diffusion for Flash Speculative Decoding",
arXiv 2602.06036; llama.cpp ``common_speculative_impl_draft_dflash`` in common/speculative.cpp
and ``src/models/dflash.cpp``).

Per step: the target's layer inputs at ``target_layer_ids`` for the committed rows are
concatenated per token (``(n, n_ids × n_embd)`` float32) and decoded into the drafter as
embedding rows, which its graph turns into K/V entries; then one non-causal pass over
``[last, mask × n_max]`` gives all draft tokens at once (rows 1..n_max); the block's own
K/V entries are removed right after.

The drafter's context mirrors the target's stream layout (same ``n_ctx`` and ``n_seq_max``):
single generations use sequence 0, ``generate_batch`` sequences ``0 .. n-1`` through
:meth:`DFlashDrafter.batched`, whose one decode drafts every sequence's block (llama.cpp's
``draft()`` for ``n_seq > 1``). Between generations the injected features stay: a new prompt that
starts with the tokens they were made for keeps them (prefix reuse, :meth:`DFlashDrafter.cached_prefix`).
"""
from __future__ import annotations

import logging

import numpy as np

from ...context import Context
from ...errors import InvalidArgumentError, DrafterMismatchError, UnsupportedError
from ...gguf_file import read_gguf
from ...model import TAPPABLE_ARCHS, Model
from ...sampler import SamplerChain
from ..sampling import SamplingParams, densify, filtered_rows, sample_rows
from . import Draft, Drafter, register_drafter

log = logging.getLogger("pyllama_spec")


def check_dflash_pair(target_model: Model, drafter_path) -> dict:
    """Check a DFlash drafter file against a loaded target before llama.cpp loads it.

    llama.cpp aborts the process (GGML_ASSERT) on several mismatches, so they are caught here.

    Returns:
        ``{"block_size", "target_layer_ids", "mask_token_id", "causal"}`` from the drafter's metadata.

    Raises:
        DrafterMismatchError: not a DFlash file, or built for another target.
        UnsupportedError: DFlash2 / DSpark drafters (not driven by this loop yet).
    """
    info = read_gguf(drafter_path)
    name = info.path.name
    if info.arch != "dflash":
        raise DrafterMismatchError(f"{name} is a {info.arch!r} model, not a DFlash drafter "
                                   "(general.architecture must be 'dflash')")
    if target_model.arch not in TAPPABLE_ARCHS:
        raise DrafterMismatchError(f"target architecture {target_model.arch!r} does not expose layer inputs in "
                                   f"llama.cpp, so no DFlash drafter can run on it; supported: "
                                   f"{', '.join(sorted(TAPPABLE_ARCHS))}")
    ids = info.get("dflash.target_layers")
    if not ids:
        raise DrafterMismatchError(f"{name} has no dflash.target_layers metadata")
    n_layer = target_model.n_layer
    bad = [i for i in ids if not 0 <= int(i) < n_layer]
    if bad:
        raise DrafterMismatchError(f"{name} reads target layers {ids}, but {target_model.path.name} has "
                                   f"{n_layer} layers (ids {bad} out of range): it was made for another target")
    n_embd = int(info.get("dflash.embedding_length", 0))
    if n_embd != target_model.n_embd:
        raise DrafterMismatchError(f"{name} has hidden size {n_embd} but the target {target_model.path.name} has "
                                   f"{target_model.n_embd}: it was made for another target")
    tokens = info.tensors.get("token_embd.weight")
    n_vocab_dft = tokens[1] if tokens else None
    out = info.tensors.get("output.weight")
    if out is not None and out[1] != target_model.n_vocab:
        raise DrafterMismatchError(f"{name} has an output head of {out[1]} tokens but the target's vocabulary has "
                                   f"{target_model.n_vocab}")
    if n_vocab_dft is not None and n_vocab_dft != target_model.n_vocab:
        raise DrafterMismatchError(f"{name} has {n_vocab_dft} token embeddings but the target has "
                                   f"{target_model.n_vocab}")
    fc = info.tensors.get("fc.weight")
    if fc is None or fc[0] != len(ids) * n_embd:
        raise DrafterMismatchError(f"{name}: fc.weight has shape {fc}, expected ({len(ids) * n_embd}, {n_embd})")
    if int(info.get("dflash.selector_top_k", 0)) > 0 or "markov_w1.weight" in info.tensors:
        raise UnsupportedError(f"{name} is a DFlash2/DSpark drafter; this loop drives plain DFlash only")
    mask = info.get("tokenizer.ggml.mask_token_id")
    if mask is None or not 0 <= int(mask) < target_model.n_vocab:
        raise DrafterMismatchError(f"{name} has no valid tokenizer.ggml.mask_token_id (got {mask!r})")
    block = int(info.get("dflash.block_size", 16))
    if block < 2:
        raise DrafterMismatchError(f"{name}: dflash.block_size must be ≥ 2, got {block}")
    return {"block_size": block, "target_layer_ids": [int(i) for i in ids], "mask_token_id": int(mask),
            "causal": bool(info.get("dflash.attention.causal", False))}


@register_drafter
class DFlashDrafter(Drafter):
    """A DFlash drafter model running in its own llama.cpp context linked to the target's.

    Args:
        target: the target :class:`~pyllama_spec.Context`.
        path: the drafter ``.gguf`` (``general.architecture = "dflash"``).
        n_gpu_layers: layers of the drafter to offload (-1 = all).
        device: the device that holds the drafter's layers and KV cache (a name from
            ``pyllama_spec.devices()``, e.g. ``"CUDA1"``; ``"CPU"``); default: the one that holds the
            target's output head, which the drafter borrows for its logits (with the target split
            over GPUs: the last of them). Elsewhere, that product runs on the head's device.
        type_k, type_v, flash_attn: the drafter's KV cache (default: like llama.cpp's).

    Raises:
        DrafterMismatchError: the file is not a DFlash drafter for this target.
        InvalidArgumentError: an unknown device.
    """
    kind = "dflash"
    supports_rejection = True

    def __init__(self, target: Context, path=None, *, n_gpu_layers: int = -1, flash_attn="auto",
                 type_k: str = "f16", type_v: str = "f16", repack: bool = False, device: str | None = None):
        if path is None:
            raise InvalidArgumentError("a DFlash drafter needs the path of its .gguf file")
        meta = check_dflash_pair(target.model, path)
        super().__init__(target)
        self.block_size = meta["block_size"]
        self.target_layer_ids = meta["target_layer_ids"]
        self.mask_token = meta["mask_token_id"]
        self.n_max_limit = self.block_size - 1
        self.n_max_default = min(7, self.n_max_limit)
        if device is not None and not isinstance(device, str):
            raise InvalidArgumentError(f"device must be a device name (see pyllama_spec.devices()) or None, got "
                                       f"{device!r}")
        # The drafter computes its logits with the target's output head, and a llama.cpp backend
        # computes only with its own device's buffers (ggml_backend_sched aborts otherwise): the
        # head's device is always in the drafter's device list; with another device chosen the
        # drafter's own layers all go there (share 0 for the head's device).
        head = target.model.output_device
        self.device = head if device is None else device
        if head == "CPU" or self.device == head:
            placement = {"devices": [self.device], "n_gpu_layers": 0 if self.device == "CPU" else n_gpu_layers}
        elif self.device == "CPU":
            placement = {"devices": [head], "n_gpu_layers": 0}
        else:
            placement = {"devices": [self.device, head], "tensor_split": [1.0, 0.0], "n_gpu_layers": n_gpu_layers}
        self.model = Model(path, repack=repack, **placement)
        # The whole noise block must be one ubatch (non-causal attention) — for a batched draft,
        # every sequence's block — and the drafter holds every committed position of every
        # sequence, in the target's stream layout (common_speculative_init_result).
        n_seq = target.n_seq_max
        n_ubatch = max(target.n_ubatch, self.block_size * n_seq)
        # outputs: at most one block per sequence (llama.cpp sizes its sampling graph and buffers by this)
        self.ctx = Context(self.model, n_ctx=target.n_ctx, n_batch=max(target.n_batch, n_ubatch),
                           n_ubatch=n_ubatch, n_seq_max=n_seq, kv_unified=target.kv_unified, ctx_other=target,
                           causal_attn=meta["causal"], flash_attn=flash_attn, type_k=type_k, type_v=type_v,
                           n_outputs_max=self.block_size * n_seq, n_outputs_max_per_seq=self.block_size)
        self.ctx.set_embeddings_nextn(True, True)
        #: draw the greedy draft in the decode graph (False: read logits, argmax on the host)
        self.backend_sampling = True
        # prefix reuse: the tokens whose features sequence 0 of the cache holds, valid while the
        # cache is at version _version (anything else that touched it makes the record void)
        self._tokens: list[int] = []
        self._version = -1

    def _settle(self) -> None:
        self._version = self.ctx.cache_version

    def cached_prefix(self, prompt) -> int:
        if self.ctx.cache_version != self._version:
            return 0
        n = min(len(prompt), len(self._tokens))
        mismatch = np.flatnonzero(np.asarray(prompt[:n]) != np.asarray(self._tokens[:n], dtype=np.int64))
        return int(mismatch[0]) if mismatch.size else n

    def begin(self, prompt, n_keep: int = 0) -> None:
        if n_keep:
            self.ctx.memory.seq_rm(0, n_keep)  # features of [0, n_keep) stay; nothing after
            del self._tokens[n_keep:]
        else:
            self.ctx.memory.clear()
            self._tokens = []
        self._settle()

    def observe(self, tokens, positions, n_commit, timer) -> None:
        # only the committed rows: the same cache as llama.cpp's inject-all-then-remove, less work
        with timer("extract"):
            feats = np.concatenate([self.target.layer_input(i)[:n_commit] for i in self.target_layer_ids], axis=1)
        with timer("inject", self.ctx):
            self.ctx.decode_embd(feats, positions[:n_commit])
        if n_commit:
            del self._tokens[int(positions[0]):]
            self._tokens.extend(int(t) for t in tokens[:n_commit])
        self._settle()

    def propose(self, last_token, n_past, n_max, sp: SamplingParams, rng, timer) -> Draft:
        n_max = min(n_max, self.n_max_limit)
        if n_max <= 0:
            return Draft(tokens=[])
        # the argmax of each block row is drawn in the decode graph (llama.cpp's backend sampling:
        # no logits copied); sampling from q needs q itself, so then the logits come back
        if sp.greedy and self.backend_sampling:
            if 0 not in self.ctx.samplers:
                self.ctx.set_sampler(SamplerChain())  # a fresh chain: llama.cpp sets each up once
        else:
            for seq in list(self.ctx.samplers):  # (a batched draft may have left chains on other sequences)
                self.ctx.set_sampler(None, seq)
        block = np.full(n_max + 1, self.mask_token, dtype=np.int32)
        block[0] = last_token
        with timer("draft", self.ctx):
            self.ctx.decode(block, np.arange(n_past, n_past + n_max + 1, dtype=np.int32), logits="all")
        with timer("draft_sample"):
            if 0 in self.ctx.samplers:
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
        self._settle()
        return draft

    def rollback(self, n_past: int) -> None:
        self.ctx.memory.seq_rm(0, n_past)
        del self._tokens[n_past:]
        self._settle()

    def save_state(self) -> dict | None:
        if self.ctx.cache_version != self._version:
            return None
        return {"tokens": list(self._tokens), "data": self.ctx.memory.state_get(0)}

    def load_state(self, state: dict) -> None:
        self.ctx.memory.clear()
        self._tokens = []
        self._settle()  # a failed restore leaves an empty, consistent cache
        self.ctx.memory.state_set(state["data"], 0)
        self._tokens = [int(t) for t in state["tokens"]]
        self._settle()

    def batched(self, n_seq: int):
        from .dflash_batch import DFlashBatch

        return DFlashBatch(self, n_seq)

    def memory_report(self) -> dict:
        return self.ctx.memory_summary()

    def close(self) -> None:
        self.ctx.close()
        self.model.close()
