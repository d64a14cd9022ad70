"""Deterministic GGUF files for tests, examples and benchmarks, written with ``gguf`` (llama.cpp's gguf-py).

* :func:`write_tiny_target` - a small llama-, qwen3-, qwen2- or gemma3-architecture target with
  random but sensibly scaled weights and a byte-level BPE vocabulary of its own (264 tokens, chat
  template). qwen2 has q/k/v biases; gemma3 has q/k norms, post-attention and post-FFN norms, a
  sliding window on 5 layers of 6 (the real models' pattern) and a tied output head.
* :func:`write_big_pair` - a large target (e.g. Qwen3-8B-shaped, f16, Q4_0, Q4_K or Q4_K_M) and a DFlash drafter
  for it, written in about the time its bytes take (one random buffer per tensor shape).
* :func:`write_dflash_drafter` - a DFlash drafter (``general.architecture = "dflash"``) for any
  GGUF target: same hidden size, the target's tokenizer copied in, random weights. It is never
  right, so it measures the cost of speculation, not its benefit.

Command line::

    python -m pyllama_spec.fixtures target OUT.gguf [--arch llama|qwen3|qwen2|gemma3] [--layers 4] [--embd 64]
    python -m pyllama_spec.fixtures dflash OUT.gguf --target TARGET.gguf [--layers 2] [--block-size 8]
    python -m pyllama_spec.fixtures big OUT_DIR [--preset qwen3-8b] [--dtype f16|q4_0|q4_K|q4_K_M]
"""
from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]


def _byte_vocab() -> list[str]:
    # GPT-2's byte-to-unicode table: every byte is one printable token, so any text tokenizes.
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def _rng_tensor(rng: np.random.Generator, shape: tuple[int, ...], scale: float) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def _add_tiny_tokenizer(w: Any, n_vocab: int | None = None, extra_tokens: Sequence[str] = (),
                        chat_template: str = CHATML) -> dict[str, int]:
    """Byte-level BPE vocabulary: 256 bytes, 4 specials, 4 merges, then ``extra_tokens`` and
    (``n_vocab``) filler tokens ``"·<i>"`` that no text produces but any model may emit (a
    large-vocabulary output head without a real tokenizer); ``chat_template`` is stored as the
    model's template."""
    import gguf

    tokens = _byte_vocab() + SPECIALS
    types = [gguf.TokenType.NORMAL] * 256 + [gguf.TokenType.CONTROL] * len(SPECIALS)
    # a few merges so the BPE path is exercised ("Ġ t" -> "Ġt", ...)
    merges = ["Ġ t", "Ġ a", "h e", "i n"]
    tokens += ["Ġt", "Ġa", "he", "in"]
    types += [gguf.TokenType.NORMAL] * 4
    tokens += list(extra_tokens)  # never produced by the merges: only a larger vocabulary
    types += [gguf.TokenType.USER_DEFINED] * len(extra_tokens)
    if n_vocab is not None and n_vocab > len(tokens):
        n_fill = n_vocab - len(tokens)
        tokens += [f"·{i}" for i in range(n_fill)]
        types += [gguf.TokenType.NORMAL] * n_fill
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    ids = {s: 256 + i for i, s in enumerate(SPECIALS)}
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(chat_template)
    return {"n_vocab": len(tokens), **ids}


TINY_ARCHS = ("llama", "qwen3", "qwen2", "gemma3")


def write_tiny_target(path: str | os.PathLike, *, arch: str = "llama", n_layer: int = 4, n_embd: int = 64,
                      n_head: int = 4, n_head_kv: int = 2, n_ff: int = 128, n_ctx: int = 4096, seed: int = 0,
                      dtype: str = "f32", head_dim: int | None = None, sliding_window: int = 8,
                      extra_tokens: Sequence[str] = (), layer_scale: float = 1.0,
                      chat_template: str = CHATML) -> dict[str, int]:
    """Write a small random target model in the tensor layout the pinned llama.cpp loads
    (``src/models/{llama,qwen3,qwen2,gemma3}.cpp``: ``load_arch_hparams`` / ``load_arch_tensors``).

    Weights are drawn in a fixed order (embedding, output head, then layer by layer), so two files
    written with the same seed and different ``n_layer`` share their first layers: a model cut
    after layer k computes exactly the hidden state that the longer one feeds into layer k.

    Args:
        path: output ``.gguf``.
        arch: ``"llama"``, ``"qwen3"``, ``"qwen2"`` or ``"gemma3"`` (all record layer inputs, so all
            can be DFlash targets). qwen2 adds q/k/v biases; gemma3 adds q/k norms, post-attention
            and post-FFN norms, Gemma's embedding scale (sqrt(n_embd), applied by llama.cpp), a tied
            output head, GELU and a sliding window on layers ``il % 6 < 5`` (llama.cpp's default
            pattern for gemma3; RoPE base 10000 there, ``rope.freq_base`` = 1e6 on the others).
            qwen2 and gemma3 also get non-unit norm weights, so a forward that skips one differs.
        dtype: ``"f32"`` or ``"f16"`` for the matrices.
        head_dim: per-head width (default ``n_embd // n_head``; gemma3 default ``2 * n_embd // n_head``,
            so that ``n_head * head_dim != n_embd`` as in Gemma-3-270M).
        sliding_window: gemma3's window in tokens (keep it below the test prompts' length).
        extra_tokens: token texts appended to the 264-token vocabulary (a target with another
            vocabulary for mismatch tests).
        layer_scale: factor on every block's output projections (``attn_output``, ``ffn_down``).
            Small values make the next token mostly a function of the current one (the LM head
            of its embedding, a "bigram" target), which echo drafters learn to predict
            (:mod:`pyllama_spec.drafter_fixtures`).
        chat_template: the Jinja chat template stored (default: ChatML).

    Returns:
        ``{"n_vocab", "<|im_end|>", "<|mask|>", ...}``: vocabulary size and special-token ids.
    """
    import gguf

    if arch not in TINY_ARCHS:
        from .errors import InvalidArgumentError
        raise InvalidArgumentError(f"arch must be one of {', '.join(TINY_ARCHS)}, got {arch!r}")
    rng = np.random.default_rng(seed)
    gemma = arch == "gemma3"
    hd = head_dim or (2 * n_embd // n_head if gemma else n_embd // n_head)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(f"pyllama_spec tiny {arch} target")
    w.add_context_length(n_ctx)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_dimension_count(hd)
    if gemma:
        w.add_rope_freq_base(1e6)  # global layers; sliding-window layers keep llama.cpp's 10000 (no key)
        w.add_sliding_window(sliding_window)
        w.add_layer_norm_rms_eps(1e-6)
    else:
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    info = _add_tiny_tokenizer(w, extra_tokens=extra_tokens, chat_template=chat_template)
    n_vocab = info["n_vocab"]
    w.add_vocab_size(n_vocab)
    mat = (lambda a: a) if dtype == "f32" else (lambda a: a.astype(np.float16))
    if arch in ("qwen2", "gemma3"):
        def norm(n):  # around 1, so that a skipped or misplaced norm shows
            return (1.0 + 0.2 * rng.standard_normal(n)).astype(np.float32)
    else:
        def norm(n):
            return np.ones(n, np.float32)
    # gemma3: the graph scales inputs by sqrt(n_embd) (so rows of RMS 1 here), and the head is tied
    # (Gemma-3 has no output.weight)
    w.add_tensor("token_embd.weight", mat(_rng_tensor(rng, (n_vocab, n_embd), 1 / np.sqrt(n_embd) if gemma else 1.0)))
    w.add_tensor("output_norm.weight", norm(n_embd))
    if not gemma:
        w.add_tensor("output.weight", mat(_rng_tensor(rng, (n_vocab, n_embd), 1.0 / np.sqrt(n_embd) * 4)))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", norm(n_embd))
        w.add_tensor(p + "attn_q.weight", mat(_rng_tensor(rng, (n_head * hd, n_embd), 1 / np.sqrt(n_embd))))
        w.add_tensor(p + "attn_k.weight", mat(_rng_tensor(rng, (n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd))))
        w.add_tensor(p + "attn_v.weight", mat(_rng_tensor(rng, (n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd))))
        w.add_tensor(p + "attn_output.weight", mat(_rng_tensor(rng, (n_embd, n_head * hd), 1 / np.sqrt(n_head * hd))
                                                   * layer_scale))
        if arch == "qwen2":
            w.add_tensor(p + "attn_q.bias", _rng_tensor(rng, (n_head * hd,), 0.1))
            w.add_tensor(p + "attn_k.bias", _rng_tensor(rng, (n_head_kv * hd,), 0.1))
            w.add_tensor(p + "attn_v.bias", _rng_tensor(rng, (n_head_kv * hd,), 0.1))
        if arch in ("qwen3", "gemma3"):
            w.add_tensor(p + "attn_q_norm.weight", norm(hd))
            w.add_tensor(p + "attn_k_norm.weight", norm(hd))
        if gemma:  # ~3: each layer outweighs the embedding, else a tied head repeats the last token
            w.add_tensor(p + "post_attention_norm.weight", 3 * norm(n_embd))
            w.add_tensor(p + "post_ffw_norm.weight", 3 * norm(n_embd))
        w.add_tensor(p + "ffn_norm.weight", norm(n_embd))
        w.add_tensor(p + "ffn_gate.weight", mat(_rng_tensor(rng, (n_ff, n_embd), 1 / np.sqrt(n_embd))))
        w.add_tensor(p + "ffn_up.weight", mat(_rng_tensor(rng, (n_ff, n_embd), 1 / np.sqrt(n_embd))))
        w.add_tensor(p + "ffn_down.weight", mat(_rng_tensor(rng, (n_embd, n_ff), 1 / np.sqrt(n_ff)) * layer_scale))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return info


def _copy_tokenizer(w: Any, target_path: str | os.PathLike) -> dict[str, Any]:
    """Copy every ``tokenizer.*`` key of the target GGUF into writer ``w``."""
    import gguf

    reader = gguf.GGUFReader(str(target_path))
    copied = {}
    for name, f in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        vtype = f.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            sub = f.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                val = [bytes(f.parts[i]) for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(name, val, vtype, sub_type=sub)
        elif vtype == gguf.GGUFValueType.STRING:
            val = bytes(f.parts[f.data[0]]).decode("utf-8")  # type: ignore[assignment]
            w.add_key_value(name, val, vtype)
        else:
            val = f.parts[f.data[0]].tolist()[0]
            w.add_key_value(name, val, vtype)
        copied[name] = val
    return copied


def write_dflash_gguf(path: str | os.PathLike, *, target: str | os.PathLike, weights: dict[str, np.ndarray],
                      n_layer: int, n_head: int, n_head_kv: int, head_dim: int, n_ff: int, block_size: int,
                      target_layers: Sequence[int], mask_token_id: int | None = None, rms_eps: float = 1e-6,
                      quant: str = "f16", causal: bool | None = None,
                      name: str = "pyllama_spec DFlash drafter") -> dict[str, Any]:
    """Write a DFlash drafter GGUF that the pinned llama.cpp loads (``general.architecture = "dflash"``).

    Args:
        target: the target ``.gguf``: its tokenizer is copied in (so no HF folder is needed) and
            its context length and RoPE base are reused.
        weights: GGUF tensor name → float32 array in llama.cpp's row-major layout (``(out, in)`` for
            matrices): ``fc.weight``, ``enc.output_norm.weight``, ``output_norm.weight`` and
            ``blk.{i}.{attn_norm,attn_q,attn_k,attn_v,attn_output,attn_q_norm,attn_k_norm,ffn_norm,
            ffn_gate,ffn_up,ffn_down}.weight``.
        target_layers: llama.cpp layer ids whose inputs the drafter reads (``dflash.target_layers``).
        mask_token_id: default: a ``<|mask|>``-like control token of the vocabulary, else the last id.
        quant: ``"f32"``, ``"f16"`` or ``"q8_0"`` for the matrices (norms stay f32).

    Returns:
        ``{"target_layers", "block_size", "mask_token_id", "n_embd"}``.
    """
    import gguf

    from .gguf_file import read_gguf

    tinfo = read_gguf(target)
    tarch = tinfo.arch
    n_embd = int(tinfo.get(f"{tarch}.embedding_length"))
    target_layers = [int(x) for x in target_layers]
    w = gguf.GGUFWriter(str(path), "dflash")
    w.add_name(name)
    w.add_context_length(int(tinfo.get(f"{tarch}.context_length", 4096)))
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(float(tinfo.get(f"{tarch}.rope.freq_base", 10000.0)))
    w.add_layer_norm_rms_eps(rms_eps)
    # generic setters: PyPI's gguf 0.19.0 lacks the DFlash helpers of the vendored gguf-py
    w.add_uint32("dflash.block_size", block_size)
    w.add_array("dflash.target_layers", target_layers)
    if causal is not None:
        w.add_bool("dflash.attention.causal", causal)
    ftype = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
             "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[quant]
    w.add_file_type(ftype)
    tok = _copy_tokenizer(w, target)
    n_vocab = len(tok.get("tokenizer.ggml.tokens", []))
    if mask_token_id is None:
        toks = tok.get("tokenizer.ggml.tokens", [])
        names = [t.decode("utf-8", "replace") if isinstance(t, bytes) else t for t in toks]
        mask_token_id = next((i for i, t in enumerate(names) if "mask" in t.lower()), n_vocab - 1)
    if "tokenizer.ggml.mask_token_id" not in tok:
        w.add_uint32("tokenizer.ggml.mask_token_id", int(mask_token_id))
    for tname, arr in weights.items():
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.ndim == 1 or quant == "f32":
            w.add_tensor(tname, arr)
        elif quant == "f16":
            w.add_tensor(tname, arr.astype(np.float16))
        else:
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"target_layers": target_layers, "block_size": block_size, "mask_token_id": int(mask_token_id),
            "n_embd": n_embd}


def write_dflash_drafter(path: str | os.PathLike, *, target: str | os.PathLike, n_layer: int = 2,
                         block_size: int = 8, target_layers: Sequence[int] | None = None,
                         n_head: int | None = None, n_head_kv: int | None = None, n_ff: int | None = None,
                         mask_token_id: int | None = None, seed: int = 0, dtype: str = "f32",
                         causal: bool | None = None) -> dict[str, Any]:
    """Write a random DFlash drafter for the GGUF ``target`` (see :func:`write_dflash_gguf`).

    The drafter has the target's hidden size (llama.cpp's DFlash graph requires it), reads
    ``target_layers`` (default: spread over the target's depth, as the z-lab drafters do) and
    borrows the target's token embedding and output head at run time (``ctx_other``).
    """
    from .gguf_file import read_gguf

    tinfo = read_gguf(target)
    tarch = tinfo.arch
    n_embd = int(tinfo.get(f"{tarch}.embedding_length"))
    t_layers = int(tinfo.get(f"{tarch}.block_count"))
    n_head = n_head or int(tinfo.get(f"{tarch}.attention.head_count"))
    n_head_kv = n_head_kv or int(tinfo.get(f"{tarch}.attention.head_count_kv", n_head))
    hd = int(tinfo.get(f"{tarch}.attention.key_length", n_embd // n_head))
    n_ff = n_ff or int(tinfo.get(f"{tarch}.feed_forward_length"))
    if target_layers is None:
        k = min(3, t_layers)
        target_layers = sorted({round(1 + i * (t_layers - 3) / max(1, k - 1)) for i in range(k)}) \
            if t_layers > 3 else list(range(t_layers))
    rng = np.random.default_rng(seed)
    n_in = len(target_layers) * n_embd
    wts = {"fc.weight": _rng_tensor(rng, (n_embd, n_in), 1 / np.sqrt(n_in)),
           "enc.output_norm.weight": np.ones(n_embd, np.float32),
           "output_norm.weight": np.ones(n_embd, np.float32)}
    for i in range(n_layer):
        p = f"blk.{i}."
        wts[p + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        wts[p + "attn_q.weight"] = _rng_tensor(rng, (n_head * hd, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "attn_k.weight"] = _rng_tensor(rng, (n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "attn_v.weight"] = _rng_tensor(rng, (n_head_kv * hd, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "attn_output.weight"] = _rng_tensor(rng, (n_embd, n_head * hd), 1 / np.sqrt(n_embd))
        wts[p + "attn_q_norm.weight"] = np.ones(hd, np.float32)
        wts[p + "attn_k_norm.weight"] = np.ones(hd, np.float32)
        wts[p + "ffn_norm.weight"] = np.ones(n_embd, np.float32)
        wts[p + "ffn_gate.weight"] = _rng_tensor(rng, (n_ff, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "ffn_up.weight"] = _rng_tensor(rng, (n_ff, n_embd), 1 / np.sqrt(n_embd))
        wts[p + "ffn_down.weight"] = _rng_tensor(rng, (n_embd, n_ff), 1 / np.sqrt(n_ff))
    return write_dflash_gguf(path, target=target, weights=wts, n_layer=n_layer, n_head=n_head, n_head_kv=n_head_kv,
                             head_dim=hd, n_ff=n_ff, block_size=block_size, target_layers=target_layers,
                             mask_token_id=mask_token_id, quant=dtype, causal=causal,
                             name="pyllama_spec random DFlash drafter")


#: A Qwen3-8B-shaped pair: the target's shape (36 layers, hidden 4096, 32/8 heads of 128, FFN 12288,
#: vocabulary 151 936) and a z-lab-shaped DFlash drafter (5 layers of the same width, block 16,
#: target layers 1, 9, 17, 25, 33 as z-lab's Qwen3-8B drafter reads them).
BIG_PRESETS: dict[str, dict[str, Any]] = {
    "qwen3-8b": dict(n_layer=36, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=12288, n_vocab=151936,
                     drafter_layers=5, block_size=16, target_layers=[1, 9, 17, 25, 33]),
    # the same shape at 1/8 of the layers: a few-GB pair for a quick run
    "qwen3-8b-short": dict(n_layer=5, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=12288,
                           n_vocab=151936, drafter_layers=1, block_size=16, target_layers=[1, 2, 3]),
}


def quantize_q4_K(a: np.ndarray) -> np.ndarray:
    """Quantize float rows to ggml's Q4_K blocks (gguf-py has no Q4_K quantizer).

    A plain min/max encoder, not llama.cpp's iterative ``make_qkx2_quants`` (``ggml-quants.c``): good
    enough for random fixture weights, byte-compatible with ``block_q4_K`` (``ggml-common.h``: f16 ``d``,
    f16 ``dmin``, 12 bytes of 6-bit sub-block scales and mins, 128 bytes of nibbles; a value is
    ``d * sc * q - dmin * m``).

    Args:
        a: ``(rows, cols)`` float32, ``cols`` a multiple of 256.

    Returns:
        ``(rows, cols // 256 * 144)`` uint8.

    Raises:
        ValueError: ``a`` is not 2-D or ``cols`` is not a multiple of 256.
    """
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"quantize_q4_K needs (rows, cols) with cols % 256 == 0, got shape {a.shape}")
    rows, cols = a.shape
    x = a.astype(np.float32).reshape(-1, 8, 32)                     # (super-blocks, sub-blocks, values)
    mn = np.minimum(x.min(axis=2), 0.0)
    scale = (x.max(axis=2) - mn) / 15.0
    minv = -mn
    d = scale.max(axis=1) / 63.0
    dmin = minv.max(axis=1) / 63.0
    d16, dmin16 = d.astype(np.float16), dmin.astype(np.float16)     # what the decoder multiplies by
    df, dminf = d16.astype(np.float32), dmin16.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.rint(np.where(df[:, None] > 0, scale / df[:, None], 0)), 0, 63).astype(np.uint8)
        m = np.clip(np.rint(np.where(dminf[:, None] > 0, minv / dminf[:, None], 0)), 0, 63).astype(np.uint8)
        step = df[:, None] * sc
        q = np.rint(np.where(step[..., None] > 0, (x + (dminf[:, None] * m)[..., None]) / step[..., None], 0))
    q = np.clip(q, 0, 15).astype(np.uint8)
    scales = np.zeros((x.shape[0], 12), np.uint8)
    scales[:, 0:4] = (sc[:, 0:4] & 63) | ((sc[:, 4:8] >> 4) << 6)
    scales[:, 4:8] = (m[:, 0:4] & 63) | ((m[:, 4:8] >> 4) << 6)
    scales[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(-1, 128)   # sub-block 2i low nibbles, 2i+1 high
    out = np.concatenate([d16.view(np.uint8).reshape(-1, 2), dmin16.view(np.uint8).reshape(-1, 2), scales, qs], axis=1)
    return out.reshape(rows, cols // 256 * 144)


def quantize_q6_K(a: np.ndarray) -> np.ndarray:
    """Quantize float rows to ggml's Q6_K blocks (gguf-py has no Q6_K quantizer).

    A plain absmax encoder, not llama.cpp's ``make_qx_quants`` search (``ggml-quants.c``): good enough for
    random fixture weights, byte-compatible with ``block_q6_K`` (``ggml-common.h``: 128 bytes of low nibbles
    ``ql``, 64 bytes of high 2-bit pairs ``qh``, 16 int8 scales, one per 16 values, then f16 ``d``; a value is
    ``d * scale * (q - 32)`` with ``q`` in 0..63).

    Args:
        a: ``(rows, cols)`` float32, ``cols`` a multiple of 256.

    Returns:
        ``(rows, cols // 256 * 210)`` uint8.

    Raises:
        ValueError: ``a`` is not 2-D or ``cols`` is not a multiple of 256.
    """
    if a.ndim != 2 or a.shape[1] % 256:
        raise ValueError(f"quantize_q6_K needs (rows, cols) with cols % 256 == 0, got shape {a.shape}")
    rows, cols = a.shape
    x = a.astype(np.float32).reshape(-1, 16, 16)                    # (super-blocks, 16-value groups, values)
    group = np.abs(x).max(axis=2) / 31.0                            # q - 32 in -31..31: no clipping needed
    d16 = (group.max(axis=1) / 127.0).astype(np.float16)            # the int8 scales in 0..127
    df = d16.astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.clip(np.rint(np.where(df[:, None] > 0, group / df[:, None], 0)), 0, 127).astype(np.int8)
        step = df[:, None] * sc                                     # what the decoder multiplies q - 32 by
        q = np.rint(np.where(step[..., None] > 0, x / step[..., None], 0))
    q = (np.clip(q, -32, 31) + 32).astype(np.uint8).reshape(-1, 2, 4, 32)  # value 128n + 32j + l at [n, j, l]
    # ql[64n + 32a + l]: value 128n + 32a + l in the low nibble, 128n + 64 + 32a + l in the high one;
    # qh[32n + l]: bits 2j..2j+1 = the high 2 bits of value 128n + 32j + l (ggml's dequantize_row_q6_K)
    ql = ((q[:, :, 0:2, :] & 0xF) | ((q[:, :, 2:4, :] & 0xF) << 4)).reshape(-1, 128)
    qh = np.zeros(q.shape[:2] + (32,), np.uint8)
    for j in range(4):
        qh |= ((q[:, :, j, :] >> 4) & 3) << (2 * j)
    out = np.concatenate([ql, qh.reshape(-1, 64), sc.view(np.uint8), d16.view(np.uint8).reshape(-1, 2)], axis=1)
    return out.reshape(rows, cols // 256 * 210)


def q4_K_M_type(name: str, i_layer: int, n_layer: int) -> str:
    """The type llama.cpp's ``llama-quantize`` gives a Qwen3-style tensor in a Q4_K_M file (``"q4_K"`` or ``"q6_K"``).

    ``src/llama-quant.cpp`` ``llama_tensor_get_type`` for ``LLAMA_FTYPE_MOSTLY_Q4_K_M`` (no imatrix, no tied
    embeddings, not Falcon, no experts): the output head is Q6_K; ``attn_v`` and ``ffn_down`` are Q6_K in the
    layers where ``use_more_bits(i_layer, n_layer)`` holds -- the first and last eighth of the layers and every
    third layer between -- and Q4_K elsewhere; every other matrix (``token_embd`` too) is Q4_K.

    Args:
        name: the tensor's name without its ``blk.N.`` prefix (``"attn_v.weight"``, ``"output.weight"``, ...).
        i_layer: its layer (ignored for tensors outside the layers).
        n_layer: the model's layer count.

    Returns:
        ``"q6_K"`` or ``"q4_K"``.
    """
    if name == "output.weight":
        return "q6_K"
    if name in ("attn_v.weight", "ffn_down.weight"):
        more_bits = (i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8
                     or (i_layer - n_layer // 8) % 3 == 2)
        return "q6_K" if more_bits else "q4_K"
    return "q4_K"


class _TensorPool:
    """One random buffer per (shape, dtype): a big model of identical layers is written in the time it
    takes to write its bytes, not to draw them. ``dtype``: ``"f16"``, ``"q4_0"``, ``"q8_0"``, ``"q4_K"`` or
    ``"q6_K"``."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.cache: dict = {}

    def get(self, shape: tuple[int, int], scale: float, dtype: str,
            distinct_rows: bool = False) -> tuple[np.ndarray, Any]:
        import gguf

        key = (tuple(shape), scale, dtype, distinct_rows)
        if key not in self.cache:
            rows, cols = shape
            # a big matrix repeats a block of rows: drawing 600 M normals would take longer than writing them
            block = next((b for b in (256, 128, 64, 32, 16, 8) if rows % b == 0 and rows > 4 * b), rows)
            a = _rng_tensor(self.rng, (block, cols), scale)
            if dtype == "f16":
                arr, qt = a.astype(np.float16), None
            else:
                qt = {"q4_0": gguf.GGMLQuantizationType.Q4_0, "q8_0": gguf.GGMLQuantizationType.Q8_0,
                      "q4_K": gguf.GGMLQuantizationType.Q4_K, "q6_K": gguf.GGMLQuantizationType.Q6_K}[dtype]
                # (block, bytes per row): whole rows, so rows tile
                own = {"q4_K": quantize_q4_K, "q6_K": quantize_q6_K}  # (gguf-py quantizes neither)
                arr = own[dtype](a) if dtype in own else gguf.quants.quantize(a, qt)
            if block != rows:
                arr = np.tile(arr, (rows // block, 1))
                if distinct_rows:
                    # scale each copy of the block by its own factor, so that no two rows are equal (an
                    # output head of equal rows makes argmax ties); Q4_0/Q8_0: the f16 scale opening
                    # every 32-value block (2 bytes, then 16 / 32 bytes of quants); Q4_K: the f16 d opening
                    # every 144-byte super-block; Q6_K: the f16 d closing every 210-byte super-block
                    tiles = rows // block
                    f = (1.0 + np.arange(tiles, dtype=np.float32) / 1024).astype(np.float16)
                    if qt is None:
                        arr.reshape(tiles, block, cols)[...] *= f[:, None, None]
                    else:
                        bs, o = {"q4_0": (18, 0), "q8_0": (34, 0), "q4_K": (144, 0), "q6_K": (210, 208)}[dtype]
                        blocks = arr.reshape(tiles, block, -1, bs)
                        d = blocks[..., o:o + 2].copy().view(np.float16)
                        blocks[..., o:o + 2] = (d * f[:, None, None, None]).view(np.uint8)
            self.cache[key] = (arr, qt)
        return self.cache[key]

    def add(self, w: Any, name: str, shape: tuple[int, int], scale: float, dtype: str,
            distinct_rows: bool = False) -> None:
        arr, qt = self.get(shape, scale, dtype, distinct_rows)
        if qt is None:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_shape=arr.shape, raw_dtype=qt)


def _qwen3_layer(w: Any, pool: Any, i: int, dims: tuple[int, int, int, int, int], ones: dict[int, np.ndarray],
                 dtype: str, n_layer: int = 0) -> None:
    """Layer ``i`` of a Qwen3-shaped stack (q/k norms, SwiGLU) with ``dims`` = (n_embd, head_dim,
    heads, KV heads, FFN width): the big target's and its DFlash drafter's layers are alike. ``dtype``
    ``"q4_K_M"``: each matrix of the type :func:`q4_K_M_type` gives it in a stack of ``n_layer`` layers."""
    E, D, H, KV, F = dims
    p = f"blk.{i}."

    def dt(name: str) -> str:
        return q4_K_M_type(name, i, n_layer) if dtype == "q4_K_M" else dtype

    w.add_tensor(p + "attn_norm.weight", ones[E])
    pool.add(w, p + "attn_q.weight", (H * D, E), 1 / np.sqrt(E), dt("attn_q.weight"))
    pool.add(w, p + "attn_k.weight", (KV * D, E), 1 / np.sqrt(E), dt("attn_k.weight"))
    pool.add(w, p + "attn_v.weight", (KV * D, E), 1 / np.sqrt(E), dt("attn_v.weight"))
    pool.add(w, p + "attn_output.weight", (E, H * D), 1 / np.sqrt(E), dt("attn_output.weight"))
    w.add_tensor(p + "attn_q_norm.weight", ones[D])
    w.add_tensor(p + "attn_k_norm.weight", ones[D])
    w.add_tensor(p + "ffn_norm.weight", ones[E])
    pool.add(w, p + "ffn_gate.weight", (F, E), 1 / np.sqrt(E), dt("ffn_gate.weight"))
    pool.add(w, p + "ffn_up.weight", (F, E), 1 / np.sqrt(E), dt("ffn_up.weight"))
    pool.add(w, p + "ffn_down.weight", (E, F), 1 / np.sqrt(F), dt("ffn_down.weight"))


def write_big_pair(out_dir: str | os.PathLike, *, preset: str = "qwen3-8b", dtype: str = "f16",
                   drafter_dtype: str | None = None, seed: int = 0) -> dict[str, Any]:
    """Write a large random target (qwen3 architecture) and a random DFlash drafter for it, fast.

    For measuring step costs at a real model's shapes where no such model can be downloaded
    (``benchmarks/step_cost.py``). Every layer reuses the same random buffers, so writing costs
    about the file size at disk speed (``qwen3-8b``: ~16 GB f16 / ~4.6 GB Q4_0 for the target).

    Args:
        out_dir: folder for ``target-<preset>-<dtype>.gguf`` and ``dflash-<preset>-<drafter_dtype or dtype>.gguf``.
        preset: a key of :data:`BIG_PRESETS`.
        dtype: ``"f16"``, ``"q4_0"`` or ``"q4_K"`` (matrices; norms stay f32; the study behind this
            project ran a Q4_K_M model, whose big matrices are mostly Q4_K), or ``"q4_K_M"``: the mix
            llama.cpp's Q4_K_M file has (:func:`q4_K_M_type`: Q6_K output head, Q6_K ``attn_v`` / ``ffn_down``
            in about half the layers, Q4_K elsewhere).
        drafter_dtype: the drafter's matrices (default: ``dtype``; for ``"q4_K_M"``, ``"q4_K"``: the drafter of
            a ``"q4_K"`` pair, its file named after the target's dtype).

    Returns:
        ``{"target": Path, "drafter": Path, **preset}``.

    Raises:
        ValueError: an unknown preset or dtype.
    """
    import gguf

    if preset not in BIG_PRESETS:
        raise ValueError(f"preset must be one of {sorted(BIG_PRESETS)}, got {preset!r}")
    # (a Q4_K_M target's drafter: Q4_K matrices, as a Q4_K pair's; named dflash-<preset>-q4_K_M.gguf all the same,
    # as benchmarks/h200.sh finds a pair's drafter by the target's dtype)
    ddt = drafter_dtype or ("q4_K" if dtype == "q4_K_M" else dtype)
    if dtype not in ("f16", "q4_0", "q4_K", "q4_K_M") or ddt not in ("f16", "q4_0", "q8_0", "q4_K"):
        raise ValueError(f"dtype must be 'f16', 'q4_0', 'q4_K' or 'q4_K_M' (drafter 'f16', 'q4_0', 'q8_0' or "
                         f"'q4_K'), got {dtype!r}/{drafter_dtype!r}")
    cfg = BIG_PRESETS[preset]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tpath, dpath = out_dir / f"target-{preset}-{dtype}.gguf", out_dir / f"dflash-{preset}-{drafter_dtype or dtype}.gguf"
    L, E, H, KV, D, F, V = (cfg[k] for k in ("n_layer", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"))
    pool = _TensorPool(seed)

    w = gguf.GGUFWriter(str(tpath), "qwen3")
    w.add_name(f"pyllama_spec random {preset} target")
    w.add_context_length(40960)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_block_count(L)
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_dimension_count(D)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type({"f16": gguf.LlamaFileType.MOSTLY_F16, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                     "q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M, "q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M}[dtype])
    _add_tiny_tokenizer(w, n_vocab=V)
    w.add_vocab_size(V)
    ones = {n: np.ones(n, np.float32) for n in (E, D)}
    q4km = dtype == "q4_K_M"
    pool.add(w, "token_embd.weight", (V, E), 1.0, q4_K_M_type("token_embd.weight", 0, L) if q4km else dtype)
    w.add_tensor("output_norm.weight", ones[E])
    pool.add(w, "output.weight", (V, E), 4 / np.sqrt(E), q4_K_M_type("output.weight", 0, L) if q4km else dtype,
             distinct_rows=True)
    for i in range(L):
        _qwen3_layer(w, pool, i, (E, D, H, KV, F), ones, dtype, n_layer=L)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    ids = cfg["target_layers"]
    w = gguf.GGUFWriter(str(dpath), "dflash")
    w.add_name(f"pyllama_spec random {preset} DFlash drafter")
    w.add_context_length(40960)
    w.add_embedding_length(E)
    w.add_feed_forward_length(F)
    w.add_block_count(cfg["drafter_layers"])
    w.add_head_count(H)
    w.add_head_count_kv(KV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_rope_dimension_count(D)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_uint32("dflash.block_size", cfg["block_size"])
    w.add_array("dflash.target_layers", ids)
    w.add_file_type({"f16": gguf.LlamaFileType.MOSTLY_F16, "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
                     "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0, "q4_K": gguf.LlamaFileType.MOSTLY_Q4_K_M}[ddt])
    info = _add_tiny_tokenizer(w, n_vocab=V)
    w.add_uint32("tokenizer.ggml.mask_token_id", info["<|mask|>"])
    pool.add(w, "fc.weight", (E, len(ids) * E), 1 / np.sqrt(len(ids) * E), ddt)
    w.add_tensor("enc.output_norm.weight", ones[E])
    w.add_tensor("output_norm.weight", ones[E])
    for i in range(cfg["drafter_layers"]):
        _qwen3_layer(w, pool, i, (E, D, H, KV, F), ones, ddt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return {"target": tpath, "drafter": dpath, **cfg}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama_spec.fixtures", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("target", help="a tiny random target")
    t.add_argument("out", type=Path)
    t.add_argument("--arch", default="llama", choices=list(TINY_ARCHS))
    t.add_argument("--layers", type=int, default=4)
    t.add_argument("--embd", type=int, default=64)
    t.add_argument("--seed", type=int, default=0)
    d = sub.add_parser("dflash", help="a random DFlash drafter for a target")
    d.add_argument("out", type=Path)
    d.add_argument("--target", type=Path, required=True)
    d.add_argument("--layers", type=int, default=2)
    d.add_argument("--block-size", type=int, default=8)
    d.add_argument("--target-layers", type=lambda s: [int(x) for x in s.split(",")], default=None)
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--f16", action="store_true")
    b = sub.add_parser("big", help="a large random target + DFlash drafter pair (e.g. Qwen3-8B-shaped)")
    b.add_argument("out_dir", type=Path)
    b.add_argument("--preset", default="qwen3-8b", choices=sorted(BIG_PRESETS))
    b.add_argument("--dtype", default="f16", choices=["f16", "q4_0", "q4_K", "q4_K_M"])
    b.add_argument("--drafter-dtype", default=None, choices=["f16", "q4_0", "q8_0", "q4_K"])
    a = ap.parse_args(argv)
    if a.cmd == "big":
        r = write_big_pair(a.out_dir, preset=a.preset, dtype=a.dtype, drafter_dtype=a.drafter_dtype)
        print(r["target"], r["drafter"])
        return 0
    if a.cmd == "target":
        print(write_tiny_target(a.out, arch=a.arch, n_layer=a.layers, n_embd=a.embd, seed=a.seed))
    else:
        print(write_dflash_drafter(a.out, target=a.target, n_layer=a.layers, block_size=a.block_size,
                                   target_layers=a.target_layers, seed=a.seed, dtype="f16" if a.f16 else "f32"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
