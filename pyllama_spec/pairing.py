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

import numpy as np

from .errors import DrafterMismatchError
from .gguf_file import GGUFInfo, read_gguf, read_tensor, sample_indices, tensor_rows

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


def check_d2t(info: GGUFInfo, n_vocab: int, out: tuple[int, ...] | None,
              n_embd: int | None = None) -> np.ndarray | None:
    """Check a drafter's ``d2t`` map (draft head row -> target token id) before llama.cpp sees it.

    llama.cpp's DFlash and EAGLE-3 graphs scatter the head's rows to target ids with ``ggml_set_rows``
    (``src/models/dflash.cpp``, ``eagle3.cpp``): an id outside the vocabulary would write out of bounds, a
    repeated one would drop a row. So the map is read whole (``n_keep`` int64s) and checked here.

    Args:
        info: the drafter's header.
        n_vocab: the target's vocabulary size.
        out: the drafter's ``output.weight`` shape, or None.
        n_embd: the width its head must have (the drafter's hidden size), or None not to check it.

    Returns:
        the map (``(n_keep,)`` int64: its length is the draft vocabulary), or None without a ``d2t`` tensor.

    Raises:
        DrafterMismatchError: no head of the map's length (or of the drafter's width), an empty map, ids
            repeated or outside ``[0, n_vocab)``, or a map that is not one int64 vector.
    """
    d2t = info.tensors.get("d2t")
    if d2t is None:
        return None
    name = info.path.name
    if len(d2t) != 1 or out is None or len(out) != 2 or out[1] != d2t[0] or d2t[0] == 0:
        raise DrafterMismatchError(f"{name}: d2t has shape {d2t} but the output head {out}: a reduced draft "
                                   "vocabulary needs an output.weight of one row per d2t id, at least one")
    if n_embd is not None and out[0] != n_embd:
        raise DrafterMismatchError(f"{name}: its output head is {out[0]} wide, its hidden size {n_embd}: the "
                                   "head's rows were taken from another model")
    try:
        ids = read_tensor(info.path, "d2t")
    except ValueError as exc:
        raise DrafterMismatchError(f"{name}: d2t is not an integer vector ({exc})") from None
    if ids.dtype != np.int64:
        raise DrafterMismatchError(f"{name}: d2t must be int64 (llama.cpp's loader asserts it), got {ids.dtype}")
    if ids.size > n_vocab or (ids.size and (int(ids.min()) < 0 or int(ids.max()) >= n_vocab)) \
            or np.unique(ids).size != ids.size:
        raise DrafterMismatchError(f"{name}: d2t maps {ids.size} rows to ids that repeat or leave the target's "
                                   f"{n_vocab}-token vocabulary: it was made for another target")
    return ids


def check_head_rows(info: GGUFInfo, target: Model, ids: np.ndarray, n_sample: int = 16) -> None:
    """A reduced drafter whose head rows were copied from its target's head (:mod:`pyllama_spec.draft_vocab`) made
    from *this* target: ``n_sample`` of its rows, evenly spaced, equal the target head's rows of their ids.

    Another target of the same shape and vocabulary would load and stay lossless, but draft with the first
    target's rows; reading 16 rows of each file through a memory map catches it at load.

    Args:
        info: the drafter's header.
        target: the loaded target.
        ids: the drafter's ``d2t`` map (:func:`check_d2t`).
        n_sample: rows compared.

    Raises:
        DrafterMismatchError: a sampled row differs (or the head's type does).
    """
    from .draft_vocab import FROM_TARGET_HEAD_KEY

    if not info.get(FROM_TARGET_HEAD_KEY):
        return
    head = "output.weight" if "output.weight" in target.info.tensors else "token_embd.weight"
    pos = np.unique(np.linspace(0, ids.size - 1, min(n_sample, ids.size)).astype(np.int64))
    own, own_type = tensor_rows(info.path, "output.weight", pos)
    tgt, tgt_type = tensor_rows(target.path, head, ids[pos])
    if own_type != tgt_type or not np.array_equal(own.view(np.uint8), tgt.view(np.uint8)):
        raise DrafterMismatchError(f"{info.path.name}'s head rows were copied from another target's head than "
                                   f"{target.path.name}'s: make the reduced drafter again for this target "
                                   "(python -m pyllama_spec.draft_vocab)")


def check_dflash_pair(target: Model, drafter: str | os.PathLike | GGUFInfo) -> dict[str, Any]:
    """Check a DFlash drafter (a file, or the header of one) against a loaded target before
    llama.cpp links them.

    Returns:
        ``{"block_size", "target_layer_ids", "mask_token_id", "causal", "selector_top_k", "markov",
        "confidence", "sample_from_anchor", "draft_vocab"}`` from the drafter's metadata and tensors
        (``selector_top_k > 0``: a DFlash2 drafter; ``markov``: a DSpark drafter; ``draft_vocab``: the rows of
        the head it drafts with — the target's vocabulary, or fewer with a ``d2t`` map,
        :mod:`pyllama_spec.draft_vocab`).

    Raises:
        DrafterMismatchError: not a DFlash file, a target that is not a tappable model (e.g.
            another drafter), or a drafter made for another target (hidden size, layers, vocabulary,
            fc shape, mask token; a DFlash2 selector wider than the hidden size allows; a ``d2t`` map whose
            length is not the head's or whose ids repeat or leave the target's vocabulary).
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
    width = info.get("dflash.embedding_length")
    d2t = check_d2t(info, target.n_vocab, out, None if width is None else int(width))
    if d2t is not None:
        check_head_rows(info, target, d2t)
    if out is not None and d2t is None and out[1] != target.n_vocab:
        raise DrafterMismatchError(f"{name} has an output head of {out[1]} tokens but the target's vocabulary has "
                                   f"{target.n_vocab} (and no d2t map to the target's ids)")
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
            "sample_from_anchor": bool(info.get("dflash.sample_from_anchor", True)),
            "draft_vocab": target.n_vocab if d2t is None else int(d2t.size)}


__all__ = ["check_dflash_pair", "check_vocab_match", "check_d2t", "check_head_rows"]
