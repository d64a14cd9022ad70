"""A reduced draft vocabulary for a DFlash drafter: its own output head over the most frequent tokens.

A DFlash drafter has no output head of its own: it borrows the target's (``src/models/dflash.cpp``), so every
draft block pays the ``n_embd x n_vocab`` matmul on each of its rows: on 2 CPU cores ~40 % of the shipped SmolLM2
drafter's call (49 152 tokens) and ~70 % of a 3-layer drafter's for Qwen2.5-Coder (151 936; RESULTS.md §21); on a
GPU its bytes (1.2 GB of f16 head for a Qwen3-8B-shaped drafter) are read on every call.
FR-Spec (Zhao et al., 2025, "FR-Spec: Accelerating Large-Vocabulary Language Models via Frequency-Ranked
Speculative Sampling") keeps the drafter's head to the few thousand most frequent tokens: a draft can then only
propose those, which costs little acceptance because the tokens left out are rare.

llama.cpp's DFlash loader already takes such a drafter: an ``output.weight`` of ``n_keep`` rows and a ``d2t``
tensor (int64, the target token id of each row) make the graph scatter the ``n_keep`` logits into a full-vocabulary
row filled with -inf (``dflash.cpp``, "reduced-draft-vocab exports"). So nothing changes downstream: the backend
greedy rows, the sampler and the verification see target token ids, and speculative decoding stays lossless (the
target verifies every token; at T > 0 the rejection rule sees a draft distribution that is zero off the kept set).

This module makes such a drafter from a trained one, with no training: the kept rows are the target's own head rows
(copied byte for byte, in the target's quantization), so the kept tokens' logits equal the full head's.

* :func:`token_counts` counts tokens in the target's answers (the drafter's training data: what the target writes);
* :func:`kept_tokens` ranks them and always keeps the end-of-generation tokens;
* :func:`write_reduced_vocab` writes the new drafter GGUF.

    python -m pyllama_spec.draft_vocab --drafter D.gguf --target T.gguf --counts answers*.jsonl.gz \\
        --keep 8192 -o D-v8192.gguf
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._check import check_int
from ._files import atomic_file
from .errors import ModelLoadError

#: a key of the reduced drafter: its head rows are the target head's, copied (checked at load against the target)
FROM_TARGET_HEAD_KEY = "pyllama_spec.draft_vocab.from_target_head"

__all__ = ["FROM_TARGET_HEAD_KEY", "token_counts", "kept_tokens", "write_reduced_vocab", "head_shape", "eog_ids",
           "main"]


def token_counts(answer_files: str | os.PathLike | Iterable[str | os.PathLike], n_vocab: int, *,
                 split: str | None = "train", field: str = "answer_tokens") -> np.ndarray:
    """Count every token of the answers in regen answer files (JSON lines, optionally gzipped).

    Args:
        answer_files: a file, or files, of :mod:`pyllama_spec.train.regen` records (``{"split", field: [ids]}`` a
            line; blank lines are skipped).
        n_vocab: the target's vocabulary size (the length of the result).
        split: count only records of this split (``"train"``: keep the held-out prompts out of the ranking);
            ``None`` counts every record.
        field: the record's token list.

    Returns:
        ``(n_vocab,)`` int64 counts.

    Raises:
        InvalidArgumentError: ``n_vocab < 1``.
        ValueError: a line that is not a JSON object, a token list that is not of integers, or an id outside
            ``[0, n_vocab)`` (answers of another target); the message names the file and line.
        OSError: a file cannot be read.
    """
    n_vocab = check_int("n_vocab", n_vocab, min=1)
    files = [answer_files] if isinstance(answer_files, (str, os.PathLike)) else list(answer_files)
    counts = np.zeros(n_vocab, dtype=np.int64)
    for path in files:
        p = Path(path)
        opener: Any = gzip.open if p.suffix == ".gz" else open
        with opener(p, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{p}, line {lineno}: not JSON ({exc.msg}): a regen answer file has one "
                                     "JSON object a line") from None
                if not isinstance(rec, dict):
                    raise ValueError(f"{p}, line {lineno}: a JSON {type(rec).__name__}, not an object with "
                                     f"{field!r}: is this a regen answer file?")
                if split is not None and rec.get("split") != split:
                    continue
                toks = rec.get(field) or []
                if not isinstance(toks, list) or not all(isinstance(t, int) and not isinstance(t, bool)
                                                         for t in toks):
                    raise ValueError(f"{p}, line {lineno}: {field!r} must be a list of integer token ids")
                ids = np.asarray(toks, dtype=np.int64)
                bad = ids[(ids < 0) | (ids >= n_vocab)]
                if bad.size:
                    raise ValueError(f"{p}, line {lineno}: token id {int(bad[0])} outside a {n_vocab}-token "
                                     "vocabulary: answers of another target? count with that target's n_vocab")
                counts += np.bincount(ids, minlength=n_vocab)
    return counts


def kept_tokens(counts: np.ndarray, keep: int, *, always: Sequence[int] = ()) -> np.ndarray:
    """The ``keep`` most frequent token ids, ``always`` among them, sorted by id.

    Ties (tokens never seen, mostly) go to the lower id, so the result is deterministic.

    Args:
        counts: ``(n_vocab,)`` counts (:func:`token_counts`).
        keep: how many rows the drafter's head keeps, ``len(always) <= keep <= n_vocab``.
        always: ids kept whatever their count (the end-of-generation tokens: a drafter that cannot propose the
            end of an answer loses the last step of every answer).

    Returns:
        ``(keep,)`` int64 ids, ascending.

    Raises:
        InvalidArgumentError: ``keep`` not an int or out of range (InvalidTypeError, a ValueError too), or an
            ``always`` id outside the vocabulary.
        ValueError: ``counts`` not a vector of non-negative integers.
    """
    counts = _check_counts(counts)
    n_vocab = counts.shape[0]
    always = sorted({check_int("an always-kept id", t, min=0, max=n_vocab - 1) for t in always})
    keep = check_int("keep", keep, min=max(1, len(always)), max=n_vocab,
                     what=f"an int between {max(1, len(always))} (1 or the always-kept tokens) and the "
                          f"vocabulary's {n_vocab}")
    order = np.lexsort((np.arange(n_vocab), -counts.astype(np.int64)))  # by count descending, then id
    chosen = list(always)
    seen = set(always)
    for t in order:
        if len(chosen) == keep:
            break
        if int(t) not in seen:
            chosen.append(int(t))
            seen.add(int(t))
    return np.sort(np.asarray(chosen, dtype=np.int64))


def _check_counts(counts: Any) -> np.ndarray:
    """``counts`` as an int64 vector, refusing what cannot be token counts."""
    arr = np.asarray(counts)
    integral = arr.dtype.kind in "iu" or (arr.dtype.kind == "f" and bool(np.all(np.isfinite(arr)))
                                          and bool(np.all(arr == np.round(arr))))  # (counts saved as floats)
    if arr.ndim != 1 or arr.size == 0 or not integral:
        raise ValueError(f"counts must be a non-empty vector of integer counts, one a token; got shape {arr.shape}, "
                         f"dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if (arr < 0).any():
        raise ValueError("counts must not be negative (token counts, one a token)")
    return arr


def head_shape(target: str | os.PathLike) -> tuple[str, int, int]:
    """The target's output head: ``(tensor name, n_embd, n_vocab)`` — ``output.weight``, else the tied
    ``token_embd.weight``.

    Raises:
        ModelLoadError: the target has neither (not a language model's GGUF).
        ModelNotFoundError, NotGGUFError, TruncatedGGUFError: as :func:`pyllama_spec.gguf_file.read_gguf`.
    """
    from .gguf_file import read_gguf

    info = read_gguf(target)
    for name in ("output.weight", "token_embd.weight"):
        shape = info.tensors.get(name)
        if shape is not None and len(shape) == 2:
            return name, int(shape[0]), int(shape[1])
    raise ModelLoadError(f"{target} has no output head (output.weight or token_embd.weight): pass the target's GGUF")


def write_reduced_vocab(drafter: str | os.PathLike, target: str | os.PathLike, ids: Sequence[int] | np.ndarray,
                        out: str | os.PathLike) -> Path:
    """Write a copy of a DFlash drafter whose own output head keeps only the target head's rows ``ids``.

    Every key and tensor of ``drafter`` is copied; added are ``output.weight`` (the rows ``ids`` of the target's
    ``output.weight``, or of ``token_embd.weight`` where the head is tied, byte for byte in their quantization) and
    ``d2t`` (``ids`` as int64), which llama.cpp's DFlash graph uses to scatter the draft logits back to target ids.
    The file is written beside ``out`` and moved there when complete (an interrupted write leaves no partial file).

    Args:
        drafter: a DFlash (or DFlash2) GGUF that borrows the target's head (no ``output.weight`` / ``d2t`` of its own).
        target: the target GGUF it drafts for.
        ids: the kept target token ids (:func:`kept_tokens`): a vector of distinct integers in ``[0, n_vocab)``.
        out: the new GGUF's path (its folder is created); neither input file.

    Returns:
        ``out`` as a Path.

    Raises:
        ModelLoadError: ``drafter`` is not a DFlash GGUF, is a DSpark one (its Markov head is per token too),
            already has a head of its own, or does not fit ``target`` (width, vocabulary).
        ValueError: ``ids`` empty, not integers, repeated or out of range; ``out`` names an input file.
        ModelNotFoundError, NotGGUFError, TruncatedGGUFError: an input is missing or not a GGUF file.
        OSError: a file cannot be written.
    """
    import gguf

    from .gguf_file import copy_fields, read_gguf, tensor_rows

    info = read_gguf(drafter)  # (fast, and a clear error for what is not a GGUF file)
    if info.arch != "dflash":
        raise ModelLoadError(f"{drafter}: architecture {info.arch!r}, not 'dflash': a reduced vocabulary is made for "
                             "DFlash drafters (EAGLE-3 heads are trained with their own d2t: train --draft-vocab)")
    if "markov_w1.weight" in info.tensors or "markov_w2.weight" in info.tensors:
        raise ModelLoadError(f"{drafter} is a DSpark drafter: its Markov head has a row per token too, which this "
                             "writer does not reduce; use it with the target's head")
    own = sorted(set(info.tensors) & {"output.weight", "d2t", "token_embd.weight"})
    if own:
        raise ModelLoadError(f"{drafter} already has an output head of its own ({', '.join(own)}): "
                             "pass the drafter that borrows the target's head")
    head, head_embd, n_vocab = head_shape(target)
    n_embd = int(info.get("dflash.embedding_length", 0))
    if head_embd != n_embd:
        raise ModelLoadError(f"{target} has an output head of {head_embd} columns, the drafter is {n_embd} wide: "
                             "pass the target this drafter was trained for")
    if info.n_tokens is not None and info.n_tokens != n_vocab:
        raise ModelLoadError(f"{drafter}'s tokenizer has {info.n_tokens} tokens, {target}'s head {n_vocab}: "
                             "pass the target this drafter was trained for")
    ids_arr = np.asarray(ids)
    if ids_arr.ndim != 1 or ids_arr.size == 0 or ids_arr.dtype.kind not in "iu":
        raise ValueError(f"ids must be a non-empty vector of integer token ids, got shape {ids_arr.shape}, dtype "
                         f"{ids_arr.dtype}")
    ids_arr = ids_arr.astype(np.int64)
    if ids_arr.min() < 0 or ids_arr.max() >= n_vocab:
        raise ValueError(f"ids must lie within [0, {n_vocab}) (the target's vocabulary)")
    if np.unique(ids_arr).size != ids_arr.size:
        raise ValueError("ids repeat a token: each kept token needs exactly one head row")
    out = Path(out)
    for src in (drafter, target):
        if out.exists() and os.path.samefile(out, src):
            raise ValueError(f"out {out} is the {'drafter' if src is drafter else 'target'} itself: write the "
                             "reduced drafter to a new file")

    dr = gguf.GGUFReader(str(drafter))  # (its keys are copied whole: the tokenizer's too)
    with atomic_file(out) as tmp:  # (an interrupted write leaves no partial file at out)
        w = gguf.GGUFWriter(tmp, "dflash")
        copy_fields(dr, w)
        for t in dr.tensors:
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=t.data.shape, raw_dtype=t.tensor_type)
        rows, ttype = tensor_rows(target, head, ids_arr)  # one row per kept token, as stored (blocks or values)
        # (says the rows are the target's own, so that a load on another target of the same shape is caught:
        # pairing.check_head_rows compares a sample of them with that target's head; llama.cpp ignores the key)
        w.add_bool(FROM_TARGET_HEAD_KEY, True)
        w.add_tensor("output.weight", rows, raw_shape=rows.shape, raw_dtype=gguf.GGMLQuantizationType(ttype))
        w.add_tensor("d2t", ids_arr)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return out


def eog_ids(target: str | os.PathLike) -> list[int]:
    """The target's end-of-generation ids (eos, eot, eom) from its GGUF header."""
    from .gguf_file import read_gguf

    info = read_gguf(target)
    keys = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")
    return sorted({int(info.metadata[k]) for k in keys if info.metadata.get(k) is not None})


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m pyllama_spec.draft_vocab", description=__doc__.split("\n")[0])
    ap.add_argument("--drafter", required=True, help="a DFlash GGUF that borrows the target's head")
    ap.add_argument("--target", required=True, help="the target GGUF")
    ap.add_argument("--counts", nargs="+", required=True,
                    help="what to rank tokens by: regen answer files (.jsonl[.gz]) and / or token counts (.npy)")
    ap.add_argument("--keep", type=int, required=True, help="rows the drafter's head keeps (e.g. 8192)")
    ap.add_argument("--split", default="train", help="count only this split's records ('' = all)")
    ap.add_argument("-o", "--out", required=True, help="the new drafter GGUF")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: rank the target's answer tokens and write the reduced-vocabulary drafter."""
    from .errors import PyllamaSpecError

    a = parser().parse_args(argv)
    try:
        n_vocab = head_shape(a.target)[2]
        counts = np.zeros(n_vocab, dtype=np.int64)
        answers = [c for c in a.counts if not c.endswith(".npy")]
        for c in a.counts:
            if c.endswith(".npy"):  # counts made before (np.save(p, pyllama_spec.assets.smollm2_token_counts()))
                try:
                    arr = _check_counts(np.load(c, allow_pickle=False))
                except ValueError as exc:
                    raise ValueError(f"{c}: {exc}") from None
                if arr.shape != (n_vocab,):
                    raise ValueError(f"{c} holds counts of shape {arr.shape}, the target's vocabulary is {n_vocab}")
                counts += arr
        if answers:
            counts += token_counts(answers, n_vocab, split=a.split or None)
        if counts.sum() == 0:
            raise ValueError(f"no answer tokens were counted in {', '.join(a.counts)}"
                             + (f" (only records of split {a.split!r} count: --split '' counts every record)"
                                if a.split and answers else ""))
        ids = kept_tokens(counts, a.keep, always=eog_ids(a.target))
        path = write_reduced_vocab(a.drafter, a.target, ids, a.out)
    except (PyllamaSpecError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cover = float(counts[ids].sum() / max(1, counts.sum()))
    print(json.dumps({"out": str(path), "keep": int(ids.size), "n_vocab": int(counts.size),
                      "answer_tokens": int(counts.sum()), "coverage": round(cover, 6)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
