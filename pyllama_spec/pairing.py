"""Does a drafter fit a target? Checks on the drafter's GGUF header against the loaded target,
made before llama.cpp sees the pair: on several mismatches llama.cpp aborts the process
(``GGML_ASSERT(ggml_can_repeat(b, a))`` for another hidden size, asserts in
``src/models/dflash.cpp`` for a drafter linked to a drafter) or reads past its buffers (a
drafter vocabulary of another size). ``Context(ctx_other=...)`` and the DFlash drafter both
run them, so neither the low-level API nor ``Generator`` lets a wrong pair through.
"""
from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Any

from .errors import DrafterMismatchError
from .gguf_file import GGUFInfo, read_gguf, sample_indices

if TYPE_CHECKING:
    from .model import Model

# Token texts that converters use to pad a vocabulary to a round size; they carry no meaning,
# so two vocabularies may differ there (e.g. "[PAD151643]", "<|pad_7|>", "<unused12>", "<pad>").
_PADDING = re.compile(r"^(\[PAD\d*\]|<\|?pad[_\d]*\|?>|<unused\d+>|<\|reserved_special_token_\d+\|>)$",
                      re.IGNORECASE)


def check_vocab_match(target: Model, drafter: GGUFInfo) -> None:
    """The drafter's tokenizer is the target's: the same number of tokens, and the same text at
    every sampled id (:func:`~pyllama_spec.gguf_file.sample_indices`: the first 16, the last 8
    and evenly spaced ones), where padding entries (``[PAD…]``, ``<pad>``, ``<unused…>``,
    ``<|reserved_special_token_…|>``) on either side are not compared. A drafter GGUF without a
    tokenizer passes (its tensor shapes are checked elsewhere). Every drafter kind that loads a
    model calls this at load.

    Raises:
        DrafterMismatchError: naming both vocabulary sizes, or the first id whose text differs.
    """
    n = drafter.n_tokens
    name = drafter.path.name
    if n is None:
        return
    if n != target.n_vocab:
        raise DrafterMismatchError(
            f"{name} has a vocabulary of {n} tokens but the target {target.path.name} has {target.n_vocab}: "
            "a drafter must use its target's tokenizer (it was made for another model)")
    vocab = target.vocab
    for i in sample_indices(n):
        theirs = drafter.token_text(i)
        if theirs is None:
            continue
        ours = vocab.text(i)
        if theirs != ours and not (_PADDING.match(theirs) or _PADDING.match(ours)):
            raise DrafterMismatchError(
                f"{name} and the target {target.path.name} both have {n} tokens, but token {i} is {theirs!r} in "
                f"the drafter and {ours!r} in the target: a drafter must use its target's tokenizer")


def check_dflash_pair(target: Model, drafter: str | os.PathLike | GGUFInfo) -> dict[str, Any]:
    """Check a DFlash drafter (a file, or the header of one) against a loaded target before
    llama.cpp links them.

    Returns:
        ``{"block_size", "target_layer_ids", "mask_token_id", "causal", "selector_top_k", "markov",
        "confidence", "sample_from_anchor"}`` from the drafter's metadata and tensors
        (``selector_top_k > 0``: a DFlash2 drafter; ``markov``: a DSpark drafter).

    Raises:
        DrafterMismatchError: not a DFlash file, a target that is not a tappable model (e.g.
            another drafter), or a drafter made for another target (hidden size, layers, vocabulary,
            fc shape, mask token; a DFlash2 selector wider than the hidden size allows).
    """
    info = drafter if isinstance(drafter, GGUFInfo) else read_gguf(drafter)
    from .model import TAPPABLE_ARCHS

    name = info.path.name
    if info.arch != "dflash":
        raise DrafterMismatchError(f"{name} is a {info.arch!r} model, not a DFlash drafter "
                                   "(general.architecture must be 'dflash')")
    if target.arch == "dflash":
        raise DrafterMismatchError(f"the target {target.path.name} is itself a DFlash drafter: link {name} to "
                                   "the context of the model it drafts for (ctx_other=<target Context>)")
    if target.arch not in TAPPABLE_ARCHS:
        raise DrafterMismatchError(f"target architecture {target.arch!r} does not expose layer inputs in "
                                   f"llama.cpp, so no DFlash drafter can run on it; supported: "
                                   f"{', '.join(sorted(TAPPABLE_ARCHS))}")
    ids = info.get("dflash.target_layers")
    if not ids:
        raise DrafterMismatchError(f"{name} has no dflash.target_layers metadata")
    n_layer = target.n_layer
    bad = [i for i in ids if not 0 <= int(i) < n_layer]
    if bad:
        raise DrafterMismatchError(f"{name} reads target layers {ids}, but {target.path.name} has "
                                   f"{n_layer} layers (ids {bad} out of range): it was made for another target")
    n_embd = int(info.get("dflash.embedding_length", 0))
    if n_embd != target.n_embd:
        raise DrafterMismatchError(f"{name} has hidden size {n_embd} but the target {target.path.name} has "
                                   f"{target.n_embd}: it was made for another target")
    check_vocab_match(target, info)
    tokens = info.tensors.get("token_embd.weight")
    n_vocab_dft = tokens[1] if tokens else None
    out = info.tensors.get("output.weight")
    if out is not None and out[1] != target.n_vocab:
        raise DrafterMismatchError(f"{name} has an output head of {out[1]} tokens but the target's vocabulary has "
                                   f"{target.n_vocab}")
    if n_vocab_dft is not None and n_vocab_dft != target.n_vocab:
        raise DrafterMismatchError(f"{name} has {n_vocab_dft} token embeddings but the target has "
                                   f"{target.n_vocab}")
    fc = info.tensors.get("fc.weight")
    if fc is None or fc[0] != len(ids) * n_embd:
        raise DrafterMismatchError(f"{name}: fc.weight has shape {fc}, expected ({len(ids) * n_embd}, {n_embd})")
    top_k = int(info.get("dflash.selector_top_k", 0) or 0)
    if top_k > 0 and n_embd < top_k * (top_k + 1):
        raise DrafterMismatchError(f"{name}: a DFlash2 selector of top-k {top_k} needs a hidden size of at least "
                                   f"{top_k * (top_k + 1)}, the drafter has {n_embd}")
    mask = info.get("tokenizer.ggml.mask_token_id")
    if mask is None or not 0 <= int(mask) < target.n_vocab:
        raise DrafterMismatchError(f"{name} has no valid tokenizer.ggml.mask_token_id (got {mask!r})")
    block = int(info.get("dflash.block_size", 16))
    if block < 2:
        raise DrafterMismatchError(f"{name}: dflash.block_size must be ≥ 2, got {block}")
    return {"block_size": block, "target_layer_ids": [int(i) for i in ids], "mask_token_id": int(mask),
            "causal": bool(info.get("dflash.attention.causal", False)), "selector_top_k": top_k,
            "markov": "markov_w1.weight" in info.tensors, "confidence": "conf_proj.weight" in info.tensors,
            "sample_from_anchor": bool(info.get("dflash.sample_from_anchor", True))}


__all__ = ["check_dflash_pair", "check_vocab_match"]
