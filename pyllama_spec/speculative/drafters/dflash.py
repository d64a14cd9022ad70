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

import numpy as np

from ...context import Context
from ...errors import InvalidArgumentError, DrafterMismatchError
from ...gguf_file import read_gguf
from ...model import TAPPABLE_ARCHS, Model
from ..sampling import SamplingParams
from . import Draft, Drafter, register_drafter
from ._pick import pick

log = logging.getLogger("pyllama_spec")


def check_dflash_pair(target_model: Model, drafter_path) -> dict:
    """Check a DFlash drafter file against a loaded target before llama.cpp loads it.

    llama.cpp aborts the process (GGML_ASSERT) on several mismatches, so they are caught here.

    Returns:
        ``{"block_size", "target_layer_ids", "mask_token_id", "causal", "selector_top_k", "markov",
        "confidence", "sample_from_anchor"}`` from the drafter's metadata and tensors
        (``selector_top_k > 0``: a DFlash2 drafter; ``markov``: a DSpark drafter).

    Raises:
        DrafterMismatchError: not a DFlash file, or built for another target.
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
    top_k = int(info.get("dflash.selector_top_k", 0) or 0)
    if top_k > 0 and n_embd < top_k * (top_k + 1):
        raise DrafterMismatchError(f"{name}: a DFlash2 selector of top-k {top_k} needs a hidden size of at least "
                                   f"{top_k * (top_k + 1)}, the drafter has {n_embd}")
    mask = info.get("tokenizer.ggml.mask_token_id")
    if mask is None or not 0 <= int(mask) < target_model.n_vocab:
        raise DrafterMismatchError(f"{name} has no valid tokenizer.ggml.mask_token_id (got {mask!r})")
    block = int(info.get("dflash.block_size", 16))
    if block < 2:
        raise DrafterMismatchError(f"{name}: dflash.block_size must be ≥ 2, got {block}")
    return {"block_size": block, "target_layer_ids": [int(i) for i in ids], "mask_token_id": int(mask),
            "causal": bool(info.get("dflash.attention.causal", False)), "selector_top_k": top_k,
            "markov": "markov_w1.weight" in info.tensors, "confidence": "conf_proj.weight" in info.tensors,
            "sample_from_anchor": bool(info.get("dflash.sample_from_anchor", True))}


@register_drafter
class DFlashDrafter(Drafter):
    """A DFlash drafter model running in its own llama.cpp context linked to the target's.

    Args:
        target: the target :class:`~pyllama_spec.Context`.
        path: the drafter ``.gguf`` (``general.architecture = "dflash"``). A DFlash2 file
            (``dflash.selector_top_k > 0``) makes a :class:`~.dflash2.DFlash2Drafter`.
        p_min: stop the draft at the first row whose top candidate (softmax over the 10 best
            logits) is below this (``--spec-draft-p-min``; 0 = never).
        n_min: drop drafts shorter than this.
        n_gpu_layers: layers of the drafter to offload (-1 = all).
        type_k, type_v, flash_attn: the drafter's KV cache (default: like llama.cpp's).

    Raises:
        DrafterMismatchError: the file is not a DFlash drafter for this target.
    """
    kind = "draft-dflash"
    aliases = ("dflash",)
    supports_rejection = True

    def __new__(cls, target=None, path=None, **kwargs):
        # one --spec-type for both: a DFlash2 file (a selector over the block) gets its own class
        if cls is DFlashDrafter and path is not None and check_dflash_pair(target.model, path)["selector_top_k"] > 0:
            from .dflash2 import DFlash2Drafter
            cls = DFlash2Drafter
        return super().__new__(cls)

    def __init__(self, target: Context, path=None, *, p_min: float = 0.0, n_min: int = 0, n_gpu_layers: int = -1,
                 flash_attn="auto", type_k: str = "f16", type_v: str = "f16", repack: bool = False):
        if path is None:
            raise InvalidArgumentError("a DFlash drafter needs the path of its .gguf file")
        if not 0.0 <= p_min <= 1.0:
            raise InvalidArgumentError(f"p_min must lie in [0, 1], got {p_min!r}")
        meta = check_dflash_pair(target.model, path)
        super().__init__(target)
        self.meta = meta
        self.p_min, self.n_min = float(p_min), int(n_min)
        self.block_size = meta["block_size"]
        self.target_layer_ids = meta["target_layer_ids"]
        self.mask_token = meta["mask_token_id"]
        self.n_max_limit = self.block_size - 1
        self.n_max_default = min(7, self.n_max_limit)
        self.model = Model(path, n_gpu_layers=n_gpu_layers, repack=repack)
        # The whole noise block must be one ubatch (non-causal attention), and the drafter
        # holds every committed position, like the target (common_speculative_init_result).
        n_ubatch = max(target.n_ubatch, self.block_size)
        self.ctx = Context(self.model, n_ctx=target.n_ctx, n_batch=max(target.n_batch, n_ubatch),
                           n_ubatch=n_ubatch, ctx_other=target, causal_attn=meta["causal"],
                           flash_attn=flash_attn, type_k=type_k, type_v=type_v)
        self.ctx.set_embeddings_nextn(True, True)

    def begin(self, prompt) -> None:
        self.ctx.memory.clear()

    def observe(self, tokens, positions, n_commit, timer) -> None:
        # only the committed rows: the same cache as llama.cpp's inject-all-then-remove, less work
        with timer("extract"):
            feats = np.concatenate([self.target.layer_input(i)[:n_commit] for i in self.target_layer_ids], axis=1)
        with timer("inject", self.ctx):
            self.ctx.decode_embd(feats, positions[:n_commit])

    def propose(self, last_token, n_past, n_max, sp: SamplingParams, rng, timer) -> Draft:
        n_max = min(n_max, self.n_max_limit)
        if n_max <= 0:
            return Draft(tokens=[])
        block = np.full(n_max + 1, self.mask_token, dtype=np.int32)
        block[0] = last_token
        with timer("draft", self.ctx):
            self.ctx.decode(block, np.arange(n_past, n_past + n_max + 1, dtype=np.int32), logits="all")
        with timer("draft_sample"):
            draft = self._read_block(self.ctx.logits()[1:], sp, rng)
        with timer("rollback"):
            # the noise block never stays in the drafter's cache
            self.ctx.memory.seq_rm(0, n_past)
        return draft

    def _read_block(self, logits: np.ndarray, sp: SamplingParams, rng, conf: np.ndarray | None = None) -> Draft:
        """Draft tokens from the block's rows of logits ``(n, n_vocab)``, stopping at the first row
        whose top candidate is below ``p_min`` (or, with ``conf``, whose confidence is)."""
        tokens: list[int] = []
        qs: list[np.ndarray] = []
        for i, row in enumerate(logits):
            if conf is not None and conf[i] < self.p_min:
                break
            tok, q = pick(row, sp, rng, 0.0 if conf is not None else self.p_min)
            if tok is None:
                break
            tokens.append(tok)
            if q is not None:
                qs.append(q)
        if len(tokens) < self.n_min:
            return Draft(tokens=[])
        return Draft(tokens=tokens, probs=np.stack(qs).astype(np.float32) if qs else None)

    def rollback(self, n_past: int) -> None:
        self.ctx.memory.seq_rm(0, n_past)

    def memory_report(self) -> dict:
        return self.ctx.memory_summary()

    def close(self) -> None:
        self.ctx.close()
        self.model.close()

