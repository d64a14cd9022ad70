"""Tiny GGUF files for every model drafter kind, and the targets they need (written with gguf-py,
deterministic; re-exported by :mod:`pyllama_spec.fixtures`).

Each kind has a *random* file (never right: it measures the cost of speculation) and, where
the architecture allows, an *echo* file whose weights make it predict what a "bigram" target
predicts. A bigram target (``write_tiny_target(..., layer_scale=s)``) has block outputs scaled
by ``s``, so its next token is mostly ``argmax W_out · norm(embedding of the current token)``;
the echo drafters compute exactly that function of the token they are given, so they are
right whenever the target's context effect (``s``) does not change the argmax: ``s = 0`` gives
acceptance 1, larger ``s`` partial acceptance.

* :func:`write_draft_model` — a ``draft-simple`` model: the target copied, with optional noise
  on its matrices (noise 0 = an exact copy, always right).
* :func:`write_eagle3_drafter` — an EAGLE-3 head (``eagle3``) reading three target layers.
* :func:`copy_gguf` — copy a GGUF with tensors transformed (used for the above and to
  dequantize a real model).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .fixtures import _copy_tokenizer, _rng_tensor
from .gguf_file import copy_fields, reader_field_value


def _add_value(w: Any, key: str, value: Any) -> None:
    """Add a Python value with the GGUF type llama.cpp expects for metadata of that shape."""
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        w.add_array(key, list(value))
    else:
        raise TypeError(f"cannot write {key}={value!r}")


def _write(w: Any) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def copy_gguf(src: str | os.PathLike, dst: str | os.PathLike, *,
              transform: Callable[[str, np.ndarray], np.ndarray | None] | None = None, set_kv: dict | None = None,
              drop_kv: Iterable[str] = (), dequantize: str | None = None, name: str | None = None) -> None:
    """Copy a GGUF file, optionally changing tensors and metadata.

    Args:
        src, dst: input and output ``.gguf``.
        transform: ``f(name, array) -> array | None`` applied to every float tensor (row-major
            ``(out, in)`` float32; None drops the tensor). Quantized tensors are copied as they
            are unless ``dequantize`` is set.
        set_kv: metadata to add or replace (``{key: value}``; ints become uint32, floats float32).
        drop_kv: metadata keys to leave out.
        dequantize: ``"f16"`` or ``"f32"``: write quantized matrices dequantized (gguf-py's
            ``gguf.quants.dequantize``), e.g. to make a higher-precision copy of a quantized model.
        name: new ``general.name``.
    """
    import gguf

    reader = gguf.GGUFReader(str(src))
    arch = reader_field_value(reader.fields["general.architecture"])[0]
    w = gguf.GGUFWriter(str(dst), arch)
    set_kv = dict(set_kv or {})
    if name is not None:
        set_kv["general.name"] = name
    if dequantize is not None:
        set_kv["general.file_type"] = int(gguf.LlamaFileType.MOSTLY_F16 if dequantize == "f16"
                                          else gguf.LlamaFileType.ALL_F32)
    copy_fields(reader, w, skip=[*set_kv, *drop_kv])
    for key, value in set_kv.items():
        _add_value(w, key, value)
    float_types = (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16)
    for t in reader.tensors:
        qtype = gguf.GGMLQuantizationType(t.tensor_type)
        if qtype not in float_types and dequantize is None:
            w.add_tensor(t.name, np.asarray(t.data), raw_shape=gguf.quant_shape_from_byte_shape(
                t.data.shape, qtype), raw_dtype=qtype)
            continue
        arr = gguf.quants.dequantize(np.asarray(t.data), qtype) if qtype not in float_types \
            else np.asarray(t.data, dtype=np.float32)
        if transform is not None:
            changed = transform(t.name, arr)
            if changed is None:
                continue
            arr = changed
        keep_f32 = arr.ndim == 1 or (qtype == gguf.GGMLQuantizationType.F32 and dequantize is None)
        w.add_tensor(t.name, np.ascontiguousarray(arr, dtype=np.float32 if keep_f32 or dequantize == "f32"
                                                  else np.float16))
    _write(w)


def write_draft_model(path: str | os.PathLike, *, target: str | os.PathLike, noise: float = 0.0, seed: int = 0) -> None:
    """A ``draft-simple`` model for ``target``: a copy of it with Gaussian noise of ``noise`` × each
    matrix's standard deviation added (0 = an exact copy, whose drafts the target always accepts;
    about 0.3 gives partial acceptance on the tiny targets).
    """
    rng = np.random.default_rng(seed)

    def perturb(name, arr):
        if arr.ndim < 2 or noise == 0.0:
            return arr
        return arr + rng.standard_normal(arr.shape).astype(np.float32) * (noise * float(arr.std()))

    copy_gguf(target, path, transform=perturb, name=f"pyllama_spec draft model (noise {noise})")


def write_eagle3_drafter(path: str | os.PathLike, *, target: str | os.PathLike,
                         target_layers: Sequence[int] | None = None, n_embd: int | None = None, n_head: int = 4,
                         n_ff: int | None = None, echo: bool = False, seed: int = 0,
                         target_hidden_size: int | None = None) -> dict:
    """An EAGLE-3 head (``general.architecture = "eagle3"``, one decoder layer) for ``target``.

    It reads three target features (``eagle3.target_layers``: layer inputs; an id equal to the
    target's layer count means its final hidden state), fuses them with ``fc`` into g, and
    decodes ``(token, g)`` pairs. Without its own ``token_embd`` / ``output`` it borrows the
    target's (then ``n_embd`` must be the target's).

    Args:
        target_layers: default ``[1, n_layer // 2, n_layer - 1]`` of the target.
        n_embd: the head's hidden size (default: the target's; another size writes its own
            token embedding and LM head).
        echo: weights that predict the target's bigram next token (module docstring): attention
            matches positions holding the same token (query = key = its normalized embedding, in
            head dimensions RoPE leaves alone) and copies that embedding into the residual; g
            is zeroed (``hidden_norm`` 0, ``norm_before_residual``), the FFN is off, and the
            target's LM head reads the result.
        target_hidden_size: metadata value (default: the target's; other values make a
            mismatched file for tests).

    Returns:
        ``{"target_layers", "n_embd"}``.
    """
    import gguf

    from .gguf_file import read_gguf

    tinfo = read_gguf(target)
    tarch = tinfo.arch
    n_embd_t = int(tinfo.get(f"{tarch}.embedding_length"))
    t_layers = int(tinfo.get(f"{tarch}.block_count"))
    n_embd = n_embd or n_embd_t
    n_ff = n_ff or 2 * n_embd
    if target_layers is None:
        target_layers = [1, t_layers // 2, t_layers - 1]
    target_layers = [int(x) for x in target_layers]
    rng = np.random.default_rng(seed)
    if echo:
        if n_embd != n_embd_t:
            raise ValueError("an echo EAGLE-3 head borrows the target's embedding and LM head: n_embd must be "
                             f"the target's ({n_embd_t})")
        n_head, hd, n_rot = 1, n_embd + 8, 8
    else:
        hd = n_embd // n_head
        n_rot = hd
    w = gguf.GGUFWriter(str(path), "eagle3")
    w.add_name("pyllama_spec " + ("echo" if echo else "random") + " EAGLE-3 head")
    w.add_context_length(int(tinfo.get(f"{tarch}.context_length", 4096)))
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(1)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(n_rot)
    w.add_rope_freq_base(float(tinfo.get(f"{tarch}.rope.freq_base", 10000.0)))
    w.add_layer_norm_rms_eps(1e-6)
    w.add_array("eagle3.target_layers", target_layers)
    w.add_uint32("eagle3.target_hidden_size", int(target_hidden_size or n_embd_t))
    w.add_bool("eagle3.norm_before_residual", bool(echo))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    tok = _copy_tokenizer(w, target)
    n_vocab = len(tok.get("tokenizer.ggml.tokens", []))
    n_in = len(target_layers) * n_embd_t
    wts = {"fc.weight": _rng_tensor(rng, (n_embd, n_in), 1 / np.sqrt(n_in)),
           "output_norm.weight": np.ones(n_embd, np.float32),
           "blk.0.attn_norm.weight": np.ones(n_embd, np.float32),
           "blk.0.attn_norm_2.weight": np.zeros(n_embd, np.float32) if echo else np.ones(n_embd, np.float32),
           "blk.0.ffn_norm.weight": np.ones(n_embd, np.float32),
           "blk.0.ffn_gate.weight": _rng_tensor(rng, (n_ff, n_embd), 1 / np.sqrt(n_embd)),
           "blk.0.ffn_up.weight": _rng_tensor(rng, (n_ff, n_embd), 1 / np.sqrt(n_embd)),
           "blk.0.ffn_down.weight": (np.zeros((n_embd, n_ff), np.float32) if echo
                                     else _rng_tensor(rng, (n_embd, n_ff), 1 / np.sqrt(n_ff)))}
    if echo:
        # input = [normalized token embedding (n_embd), normalized g (n_embd)]; one head of
        # n_rot + n_embd dims: the first n_rot (rotated by RoPE) stay 0, the rest carry the token
        # embedding, so scores depend on token identity only and self-matches win by far
        sel = np.zeros((hd, 2 * n_embd), np.float32)
        sel[n_rot:, :n_embd] = np.eye(n_embd, dtype=np.float32)
        wts["blk.0.attn_q.weight"] = 3.0 * sel
        wts["blk.0.attn_k.weight"] = 3.0 * sel
        wts["blk.0.attn_v.weight"] = sel
        out = np.zeros((n_embd, hd), np.float32)
        out[:, n_rot:] = np.eye(n_embd, dtype=np.float32)
        wts["blk.0.attn_output.weight"] = out
    else:
        for m, rows in (("q", n_head * hd), ("k", n_head * hd), ("v", n_head * hd)):
            wts[f"blk.0.attn_{m}.weight"] = _rng_tensor(rng, (rows, 2 * n_embd), 1 / np.sqrt(2 * n_embd))
        wts["blk.0.attn_output.weight"] = _rng_tensor(rng, (n_embd, n_head * hd), 1 / np.sqrt(n_embd))
    if n_embd != n_embd_t:
        wts["token_embd.weight"] = _rng_tensor(rng, (n_vocab, n_embd), 1.0)
        wts["output.weight"] = _rng_tensor(rng, (n_vocab, n_embd), 4 / np.sqrt(n_embd))
    for name, arr in wts.items():
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    _write(w)
    return {"target_layers": target_layers, "n_embd": n_embd}


def _base_writer(path: str | os.PathLike, arch: str, *, name: str, n_ctx: int, n_embd: int, n_layer: int, n_head: int,
                 n_head_kv: int, hd: int, n_ff: int, rms_eps: float = 1e-6, rope_base: float = 10000.0) -> Any:
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(rms_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    return w


def write_mtp_target(path: str | os.PathLike, *, n_layer: int = 3, n_embd: int = 64, n_head: int = 4,
                     n_head_kv: int = 2,
                     n_ff: int = 128, n_expert: int = 4, n_ctx: int = 4096, layer_scale: float = 1.0,
                     echo_mtp: bool = False, seed: int = 0) -> dict:
    """A tiny target with one next-token-prediction (MTP / NextN) layer: GLM-4.5's architecture
    (``glm4moe``; dense trunk layers, the MTP block a small MoE as the loader requires), the byte-level
    test vocabulary, random weights.

    Args:
        n_layer: trunk layers (the file's ``block_count`` is ``n_layer + 1``).
        layer_scale: factor on the trunk blocks' output projections (a bigram target when small).
        echo_mtp: MTP weights that predict the bigram next token of the token they are given
            (``eh_proj`` keeps the token-embedding half, attention and FFN outputs are 0, the
            target's LM head reads the normalized embedding), else random.

    Returns:
        like :func:`~pyllama_spec.fixtures.write_tiny_target`.
    """

    from .fixtures import _add_tiny_tokenizer

    rng = np.random.default_rng(seed)
    hd = n_embd // n_head
    n_ff_exp = n_ff // 2
    arch = "glm4moe"
    w = _base_writer(path, arch, name="pyllama_spec tiny MTP target", n_ctx=n_ctx, n_embd=n_embd,
                     n_layer=n_layer + 1, n_head=n_head, n_head_kv=n_head_kv, hd=hd, n_ff=n_ff, rms_eps=1e-5)
    w.add_rope_dimension_count(hd)
    w.add_uint32(f"{arch}.nextn_predict_layers", 1)
    w.add_uint32(f"{arch}.leading_dense_block_count", n_layer)
    w.add_uint32(f"{arch}.expert_count", n_expert)
    w.add_uint32(f"{arch}.expert_used_count", 2)
    w.add_uint32(f"{arch}.expert_shared_count", 1)
    w.add_uint32(f"{arch}.expert_feed_forward_length", n_ff_exp)
    w.add_float32(f"{arch}.expert_weights_scale", 1.0)
    w.add_bool(f"{arch}.expert_weights_norm", True)
    info = _add_tiny_tokenizer(w)
    n_vocab = info["n_vocab"]
    w.add_vocab_size(n_vocab)
    r = lambda shape, scale: _rng_tensor(rng, shape, scale)  # noqa: E731
    wts = {"token_embd.weight": r((n_vocab, n_embd), 1.0), "output_norm.weight": np.ones(n_embd, np.float32),
           "output.weight": r((n_vocab, n_embd), 4 / np.sqrt(n_embd))}
    for i in range(n_layer + 1):
        p = f"blk.{i}."
        mtp = i == n_layer
        scale = 0.0 if (mtp and echo_mtp) else (1.0 if mtp else layer_scale)
        wts[p + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        wts[p + "attn_q.weight"] = r((n_head * hd, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "attn_k.weight"] = r((n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "attn_v.weight"] = r((n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "attn_output.weight"] = r((n_embd, n_head * hd), 1 / np.sqrt(n_embd)) * scale
        wts[p + "post_attention_norm.weight"] = np.ones(n_embd, np.float32)
        if not mtp:
            wts[p + "ffn_gate.weight"] = r((n_ff, n_embd), 1 / np.sqrt(n_embd))
            wts[p + "ffn_up.weight"] = r((n_ff, n_embd), 1 / np.sqrt(n_embd))
            wts[p + "ffn_down.weight"] = r((n_embd, n_ff), 1 / np.sqrt(n_ff)) * scale
            continue
        wts[p + "ffn_gate_inp.weight"] = r((n_expert, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "exp_probs_b.bias"] = np.zeros(n_expert, np.float32)
        wts[p + "ffn_gate_exps.weight"] = r((n_expert, n_ff_exp, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "ffn_up_exps.weight"] = r((n_expert, n_ff_exp, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "ffn_down_exps.weight"] = r((n_expert, n_embd, n_ff_exp), 1 / np.sqrt(n_ff_exp)) * scale
        wts[p + "ffn_gate_shexp.weight"] = r((n_ff_exp, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "ffn_up_shexp.weight"] = r((n_ff_exp, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "ffn_down_shexp.weight"] = r((n_embd, n_ff_exp), 1 / np.sqrt(n_ff_exp)) * scale
        eh = r((n_embd, 2 * n_embd), 1 / np.sqrt(2 * n_embd))
        if echo_mtp:  # keep the normalized token embedding, drop the hidden state
            eh = np.concatenate([np.eye(n_embd, dtype=np.float32), np.zeros((n_embd, n_embd), np.float32)], axis=1)
        wts[p + "nextn.eh_proj.weight"] = eh
        wts[p + "nextn.enorm.weight"] = np.ones(n_embd, np.float32)
        wts[p + "nextn.hnorm.weight"] = np.ones(n_embd, np.float32)
        wts[p + "nextn.shared_head_norm.weight"] = np.ones(n_embd, np.float32)
    for name, arr in wts.items():
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    _write(w)
    return info


def write_gemma4_target(path: str | os.PathLike, *, n_layer: int = 4, n_embd: int = 64, n_head: int = 4,
                        n_head_kv: int = 2,
                        hd: int = 16, n_ff: int = 128, n_ctx: int = 4096, n_swa: int = 256,
                        layer_scale: float = 1.0, seed: int = 0) -> dict:
    """A tiny Gemma-4 target (``gemma4``): sliding-window layers with a full-attention last layer
    (the layout its assistants share KV with), per-layer Q/K norms, post-norms, proportional-RoPE
    factors, a separate LM head, no per-layer embeddings; the byte-level test vocabulary.

    Args:
        layer_scale: factor on the blocks' post-attention / post-FFN norm weights (Gemma's blocks
            add normalized outputs, so this is what scales their effect; small = bigram target).

    Returns:
        like :func:`~pyllama_spec.fixtures.write_tiny_target`, plus ``"swa_pattern"``.
    """
    from .fixtures import _add_tiny_tokenizer

    rng = np.random.default_rng(seed)
    arch = "gemma4"
    pattern = [True] * (n_layer - 1) + [False]  # ..., SWA, full: the layers an assistant reads
    w = _base_writer(path, arch, name="pyllama_spec tiny Gemma-4 target", n_ctx=n_ctx, n_embd=n_embd,
                     n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv, hd=hd, n_ff=n_ff)
    w.add_uint32(f"{arch}.attention.key_length_swa", hd)
    w.add_uint32(f"{arch}.attention.value_length_swa", hd)
    w.add_uint32(f"{arch}.attention.sliding_window", n_swa)
    w.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
    w.add_uint32(f"{arch}.attention.shared_kv_layers", 0)
    w.add_uint32(f"{arch}.embedding_length_per_layer_input", 0)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
    info = _add_tiny_tokenizer(w)
    n_vocab = info["n_vocab"]
    w.add_vocab_size(n_vocab)
    r = lambda shape, scale: _rng_tensor(rng, shape, scale)  # noqa: E731
    ones = lambda n: np.ones(n, np.float32)  # noqa: E731
    wts = {"token_embd.weight": r((n_vocab, n_embd), 1.0 / np.sqrt(n_embd)),  # Gemma scales it by sqrt(n_embd)
           "output.weight": r((n_vocab, n_embd), 4 / np.sqrt(n_embd)), "output_norm.weight": ones(n_embd),
           "rope_freqs.weight": ones(hd // 2)}
    for i in range(n_layer):
        p = f"blk.{i}."
        wts |= {p + "attn_norm.weight": ones(n_embd),
                p + "attn_q.weight": r((n_head * hd, n_embd), 1 / np.sqrt(n_embd)),
                p + "attn_k.weight": r((n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd)),
                p + "attn_v.weight": r((n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd)),
                p + "attn_output.weight": r((n_embd, n_head * hd), 1 / np.sqrt(n_embd)),
                p + "attn_q_norm.weight": ones(hd), p + "attn_k_norm.weight": ones(hd),
                p + "post_attention_norm.weight": ones(n_embd) * layer_scale,
                p + "ffn_norm.weight": ones(n_embd),
                p + "ffn_gate.weight": r((n_ff, n_embd), 1 / np.sqrt(n_embd)),
                p + "ffn_up.weight": r((n_ff, n_embd), 1 / np.sqrt(n_embd)),
                p + "ffn_down.weight": r((n_embd, n_ff), 1 / np.sqrt(n_ff)),
                p + "post_ffw_norm.weight": ones(n_embd) * layer_scale}
    for name, arr in wts.items():
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    _write(w)
    return {**info, "swa_pattern": pattern}


def write_gemma4_assistant(path: str | os.PathLike, *, target: str | os.PathLike, n_embd: int = 128, n_layer: int = 2,
                           n_ff: int = 256,
                           echo: bool = False, seed: int = 0, n_embd_out: int | None = None) -> dict:
    """A Gemma-4 assistant (``gemma4-assistant``) for a Gemma-4 ``target``: a few layers of its own
    (queries only: keys and values come from the target's KV cache, the last SWA and the last
    full-attention layer), input = [target token embedding, target hidden state] projected
    down, output = logits over its tied embedding and the next hidden state projected back up.

    Args:
        n_embd: the assistant's hidden size (must differ from the target's).
        echo: weights that predict the target's bigram next token: the pre-projection keeps
            the scaled token embedding, attention and FFN add nothing, and the LM head holds the
            target's LM head.
        n_embd_out: metadata ``embedding_length_out`` (default: the target's hidden size; other
            values make a mismatched file for tests).

    Returns:
        ``{"n_embd", "n_embd_out"}``.
    """
    import gguf

    from .gguf_file import read_gguf

    tinfo = read_gguf(target)
    tarch = tinfo.arch
    n_bb = int(tinfo.get(f"{tarch}.embedding_length"))
    n_head = int(tinfo.get(f"{tarch}.attention.head_count"))
    n_head_kv = int(tinfo.get(f"{tarch}.attention.head_count_kv"))
    hd = int(tinfo.get(f"{tarch}.attention.key_length"))
    hd_swa = int(tinfo.get(f"{tarch}.attention.key_length_swa", hd))
    if n_embd == n_bb:
        raise ValueError("a Gemma-4 assistant's hidden size must differ from its target's")
    rng = np.random.default_rng(seed)
    arch = "gemma4-assistant"
    pattern = [i % 2 == 0 for i in range(n_layer - 1)] + [False]
    w = _base_writer(path, arch, name="pyllama_spec " + ("echo" if echo else "random") + " Gemma-4 assistant",
                     n_ctx=int(tinfo.get(f"{tarch}.context_length", 4096)), n_embd=n_embd, n_layer=n_layer,
                     n_head=n_head, n_head_kv=n_head_kv, hd=hd, n_ff=n_ff)
    w.add_uint32(f"{arch}.embedding_length_out", int(n_embd_out or n_bb))
    w.add_uint32(f"{arch}.nextn_predict_layers", n_layer)
    w.add_uint32(f"{arch}.attention.key_length_swa", hd_swa)
    w.add_uint32(f"{arch}.attention.value_length_swa", hd_swa)
    w.add_uint32(f"{arch}.attention.sliding_window", int(tinfo.get(f"{tarch}.attention.sliding_window", 256)))
    w.add_array(f"{arch}.attention.sliding_window_pattern", pattern)
    w.add_float32(f"{arch}.rope.freq_base_swa", 10000.0)
    tok = _copy_tokenizer(w, target)
    n_vocab = len(tok.get("tokenizer.ggml.tokens", []))
    r = lambda shape, scale: _rng_tensor(rng, shape, scale)  # noqa: E731
    ones = lambda n: np.ones(n, np.float32)  # noqa: E731
    pre = r((n_embd, 2 * n_bb), 1 / np.sqrt(2 * n_bb))
    head = r((n_vocab, n_embd), 4 / np.sqrt(n_embd))
    if echo:
        reader = gguf.GGUFReader(str(target))
        w_out = next(np.asarray(t.data, dtype=np.float32) for t in reader.tensors if t.name == "output.weight")
        pre = np.zeros((n_embd, 2 * n_bb), np.float32)
        pre[:n_bb, :n_bb] = np.eye(n_bb, dtype=np.float32)
        head = np.zeros((n_vocab, n_embd), np.float32)
        head[:, :n_bb] = w_out
    wts = {"token_embd.weight": head, "output_norm.weight": ones(n_embd),
           "nextn.pre_projection.weight": pre, "nextn.post_projection.weight": r((n_bb, n_embd), 1 / np.sqrt(n_embd)),
           "rope_freqs.weight": ones(hd // 2)}
    for i in range(n_layer):
        p = f"blk.{i}."
        hd_i = hd_swa if pattern[i] else hd
        wts |= {p + "attn_norm.weight": ones(n_embd),
                p + "attn_q.weight": r((n_head * hd_i, n_embd), 1 / np.sqrt(n_embd)),
                p + "attn_output.weight": r((n_embd, n_head * hd_i), 1 / np.sqrt(n_embd)) * (0.0 if echo else 1.0),
                p + "attn_q_norm.weight": ones(hd_i),
                p + "post_attention_norm.weight": ones(n_embd) * (0.0 if echo else 1.0),
                p + "layer_output_scale.weight": ones(1),
                p + "ffn_norm.weight": ones(n_embd),
                p + "ffn_gate.weight": r((n_ff, n_embd), 1 / np.sqrt(n_embd)),
                p + "ffn_up.weight": r((n_ff, n_embd), 1 / np.sqrt(n_embd)),
                p + "ffn_down.weight": r((n_embd, n_ff), 1 / np.sqrt(n_ff)),
                p + "post_ffw_norm.weight": ones(n_embd) * (0.0 if echo else 1.0)}
    for name, arr in wts.items():
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    _write(w)
    return {"n_embd": n_embd, "n_embd_out": int(n_embd_out or n_bb)}


def _bigram_table(target: str | os.PathLike) -> np.ndarray:
    """For a llama/qwen3 ``target``: the token each token's own embedding predicts,
    ``argmax(W_out · rmsnorm(e_t))`` for every ``t`` — the bigram target's next token."""
    import gguf

    reader = gguf.GGUFReader(str(target))
    t = {x.name: np.asarray(x.data, dtype=np.float32) for x in reader.tensors
         if x.name in ("token_embd.weight", "output.weight", "output_norm.weight")}
    e = t["token_embd.weight"]
    e = e / np.sqrt((e * e).mean(axis=1, keepdims=True) + 1e-5) * t["output_norm.weight"]
    return np.argmax(e @ t["output.weight"].T, axis=1)


def write_dflash2_drafter(path: str | os.PathLike, *, target: str | os.PathLike, n_layer: int = 1,
                          block_size: int = 8, top_k: int = 4, rank: int = 16,
                          conv_kernel: int = 3, conv_group: int = 16, target_layers: Sequence[int] | None = None,
                          seed: int = 0) -> dict:
    """A random DFlash2 drafter (DFlash plus the selector: ``selector_*`` tensors, per-layer
    dynamic convolutions ``attn_conv_*`` / ``ffn_conv_*``, ``dflash.selector_top_k`` and friends).

    Its selector walks among the top-``top_k`` candidates of each block row; with random weights
    it is rarely right (no weight arrangement makes untrained candidates follow the target).
    """
    from .fixtures import write_dflash_drafter
    from .gguf_file import read_gguf

    tmp = Path(str(path) + ".base.gguf")
    meta = write_dflash_drafter(tmp, target=target, n_layer=n_layer, block_size=block_size,
                                target_layers=target_layers, seed=seed)
    n_embd = meta["n_embd"]
    n_vocab = read_gguf(target).tensors["token_embd.weight"][1]
    rng = np.random.default_rng(seed + 1)
    groups = n_embd // conv_group
    extra = {"selector_predecessor.weight": _rng_tensor(rng, (n_vocab, rank), 1.0),
             "selector_successor.weight": _rng_tensor(rng, (n_vocab, rank), 1.0),
             "selector_hidden.weight": _rng_tensor(rng, (rank, n_embd), 1 / np.sqrt(n_embd))}
    for i in range(n_layer):
        for part in ("attn", "ffn"):
            extra[f"blk.{i}.{part}_conv_base"] = _rng_tensor(rng, (2, conv_kernel, n_embd), 0.3)
            extra[f"blk.{i}.{part}_conv_proj.weight"] = _rng_tensor(rng, (2 * conv_kernel * groups, n_embd),
                                                                    0.1 / np.sqrt(n_embd))
    _extend(tmp, path, extra, {"dflash.selector_top_k": top_k, "dflash.selector_rank": rank,
                               "dflash.conv_kernel_size": conv_kernel, "dflash.conv_group_size": conv_group})
    tmp.unlink()
    return {**meta, "selector_top_k": top_k}


def write_dspark_drafter(path: str | os.PathLike, *, target: str | os.PathLike, n_layer: int = 1, block_size: int = 8,
                         rank: int | None = None,
                         echo: bool = False, confidence: bool = True, sample_from_anchor: bool = True,
                         target_layers: Sequence[int] | None = None, seed: int = 0) -> dict:
    """A DSpark drafter: DFlash plus a Markov head (``markov_w1``, ``markov_w2``) and optionally a
    confidence head (``conf_proj``).

    Args:
        echo: the Markov head holds the bigram target's next-token table (``markov_w1`` = identity,
            ``markov_w2`` scores the bigram successor of the previous token high) and the blocks
            add nothing, so each row predicts the bigram successor of the row before it (the anchor
            row: of the newest token) — right while the target behaves like a bigram model.
        confidence: write a confidence head (random; echo: constant 0.95).
        sample_from_anchor: ``dflash.sample_from_anchor`` (the anchor row drafts the first token).
    """
    from .fixtures import write_dflash_drafter
    from .gguf_file import read_gguf

    tmp = Path(str(path) + ".base.gguf")
    meta = write_dflash_drafter(tmp, target=target, n_layer=n_layer, block_size=block_size,
                                target_layers=target_layers, seed=seed)
    n_embd = meta["n_embd"]
    n_vocab = read_gguf(target).tensors["token_embd.weight"][1]
    rng = np.random.default_rng(seed + 1)
    zero_out = None
    if echo:
        rank = n_vocab
        nxt = _bigram_table(target)
        w2 = np.zeros((n_vocab, rank), np.float32)
        w2[nxt, np.arange(n_vocab)] = 100.0  # bias(prev)[v] = 100 if v is prev's bigram successor
        extra = {"markov_w1.weight": np.eye(n_vocab, dtype=np.float32), "markov_w2.weight": w2}
        # blocks add nothing: the rows keep their token embeddings, the bias decides
        zero_out = [f"blk.{i}.{m}.weight" for i in range(n_layer) for m in ("attn_output", "ffn_down")]
    else:
        rank = rank or 16
        extra = {"markov_w1.weight": _rng_tensor(rng, (n_vocab, rank), 1.0),
                 "markov_w2.weight": _rng_tensor(rng, (n_vocab, rank), 1 / np.sqrt(rank))}
    if confidence:
        extra["conf_proj.weight"] = (np.zeros((1, n_embd + rank), np.float32) if echo
                                     else _rng_tensor(rng, (1, n_embd + rank), 1 / np.sqrt(n_embd + rank)))
        extra["conf_proj.bias"] = np.full(1, 3.0 if echo else 0.0, np.float32)
    _extend(tmp, path, extra, {"dflash.sample_from_anchor": bool(sample_from_anchor)}, zero=zero_out)
    tmp.unlink()
    return {**meta, "rank": rank}


def _extend(src: str | os.PathLike, dst: str | os.PathLike, tensors: dict, kv: dict,
            zero: Iterable[str] | None = None) -> None:
    """Copy ``src`` with ``tensors`` and ``kv`` added (and the tensors named in ``zero`` zeroed)."""
    import gguf

    reader = gguf.GGUFReader(str(src))
    w = gguf.GGUFWriter(str(dst), "dflash")
    copy_fields(reader, w, skip=kv)
    for key, value in kv.items():
        _add_value(w, key, value)
    for t in reader.tensors:
        arr = np.asarray(t.data, dtype=np.float32)
        if zero and t.name in zero:
            arr = np.zeros_like(arr)
        w.add_tensor(t.name, arr)
    for name, arr in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    _write(w)


__all__ = ["copy_gguf", "write_draft_model", "write_eagle3_drafter", "write_mtp_target", "write_gemma4_target",
           "write_gemma4_assistant", "write_dflash2_drafter", "write_dspark_drafter"]
