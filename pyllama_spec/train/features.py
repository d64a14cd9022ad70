"""Target features for training, computed by llama.cpp through our bindings.

For every sequence (prompt + answer tokens) the target is run once with the layer-input
taps at the drafter's ``target_layer_ids`` switched on — the very numbers llama.cpp hands a
DFlash drafter at inference — and the concatenated rows are stored as float16.
"""
from __future__ import annotations

import gzip
import json
import os
import typing
from typing import Any

import numpy as np


def load_sequences(path: str | os.PathLike, max_len: int = 1024) -> list[dict[str, Any]]:
    """Read the JSON lines of :mod:`.data` (plain or ``.gz``): ``[{"split", "tokens", "n_prompt"}]``
    (cut at ``max_len``)."""
    out: list[dict[str, Any]] = []
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        for line in f:
            try:
                d = json.loads(line)
            except json.JSONDecodeError:  # the last line of a generation run killed mid-write
                continue
            toks = (d["prompt_tokens"] + d["answer_tokens"])[:max_len]
            if len(toks) > len(d["prompt_tokens"]) + 2:
                out.append({"split": d["split"], "tokens": toks, "n_prompt": len(d["prompt_tokens"])})
    return out


def extract(target_path: str | os.PathLike, sequences: list[dict[str, Any]], layer_ids: list[int], *,
            n_gpu_layers: int = -1, n_batch: int = 2048, n_pack: int = 16,
            progress: bool = True) -> tuple[list[np.ndarray], np.ndarray]:
    """Features of every sequence: a list of ``(len, len(layer_ids) × n_embd)`` float16 arrays,
    and the target's token embedding ``(n_vocab, n_embd)`` float32.

    Row i holds the inputs of the tapped layers at position i (computed from tokens 0..i).
    Short sequences are packed, up to ``n_pack`` per ``llama_decode`` (one KV-cache stream each);
    sequences longer than ``n_batch`` are decoded in chunks.
    """
    import pyllama_spec as ps

    model = ps.Model(target_path, n_gpu_layers=n_gpu_layers)
    longest = max(len(s["tokens"]) for s in sequences)
    n_ubatch = min(n_batch, 512)
    per_seq = -(-(longest + 1) // 256) * 256  # llama.cpp pads n_ctx to 256: keep it divisible by n_pack
    ctx = ps.Context(model, n_ctx=n_pack * per_seq, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=n_pack)
    ctx.enable_layer_inputs(layer_ids)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(sequences), desc="features", unit="seq")
    feats: list[np.ndarray | None] = [None] * len(sequences)

    def taps() -> np.ndarray:
        return np.concatenate([ctx.layer_input(lid) for lid in layer_ids], axis=1).astype(np.float16)

    i = 0
    while i < len(sequences):
        ctx.memory.clear(data=False)
        toks = sequences[i]["tokens"]
        if len(toks) > n_batch:
            parts = []
            for j in range(0, len(toks), n_batch):
                chunk = toks[j:j + n_batch]
                ctx.decode(chunk, np.arange(j, j + len(chunk)), logits="none")
                parts.append(taps())
            feats[i] = np.concatenate(parts, axis=0)
            i += 1
        else:
            group: list[int] = []
            n = 0
            while (i < len(sequences) and len(group) < n_pack and
                   n + len(sequences[i]["tokens"]) <= n_batch):
                group.append(i)
                n += len(sequences[i]["tokens"])
                i += 1
            lens = [len(sequences[g]["tokens"]) for g in group]
            ctx.decode(np.concatenate([sequences[g]["tokens"] for g in group]),
                       np.concatenate([np.arange(m) for m in lens]),
                       seq_id=np.repeat(np.arange(len(group)), lens), logits="none")
            rows = taps()
            for g, a, b in zip(group, np.cumsum([0] + lens[:-1]), np.cumsum(lens)):
                feats[g] = rows[a:b]
        if bar is not None:
            bar.n = i
            bar.refresh()
    if bar is not None:
        bar.close()
    emb = model.token_embeddings()
    ctx.close()
    model.close()
    # every slot is filled: each sequence is decoded alone (chunked) or in a packed group
    return typing.cast("list[np.ndarray]", feats), emb


def output_head(target_path: str | os.PathLike, token_embeddings: np.ndarray) -> np.ndarray:
    """The target's output projection ``(n_vocab, n_embd)`` float32: ``output.weight`` of the GGUF
    dequantized with gguf-py, or the token embedding when the model ties them."""
    import gguf

    reader = gguf.GGUFReader(str(target_path))
    for t in reader.tensors:
        if t.name == "output.weight":
            w = gguf.quants.dequantize(t.data, t.tensor_type)
            return np.asarray(w, dtype=np.float32).reshape(token_embeddings.shape[0], -1)
    return token_embeddings


__all__ = ["load_sequences", "extract", "output_head"]
