"""Export a trained drafter as a GGUF for the pinned llama.cpp (and DFlash also as an HF checkpoint).

GGUFs are written directly with gguf-py, the tokenizer metadata copied from the target's GGUF, so
no HF target folder is needed (llama.cpp's converter requires one). One writer per kind, each
following llama.cpp's loader for that architecture:

* ``dflash`` (``src/models/dflash.cpp``): :func:`pyllama_spec.fixtures.write_dflash_gguf`;
* ``eagle3`` (``src/models/eagle3.cpp``; metadata as ``conversion/llama.py`` writes it):
  ``eagle3.target_layers`` (3 layer-input ids), ``eagle3.target_hidden_size``,
  ``eagle3.norm_before_residual``; tensors ``fc``, ``blk.0.{attn_norm, attn_norm_2, attn_q/k/v,
  attn_output, ffn_norm, ffn_gate/up/down}``, ``output_norm`` and, with a draft vocabulary of its
  own, ``output`` + ``d2t`` (int64, absolute target token ids);
* ``draft``: a plain ``llama`` / ``qwen3`` model (``output.weight`` only when not tied, as the target).

The DFlash HF folder holds ``config.json`` (``architectures: ["DFlashDraftModel"]`` with a
``dflash_config``: block size, target layer ids in HF counting, mask token) and
``model.safetensors`` with the z-lab parameter names.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..fixtures import _copy_tokenizer, write_dflash_gguf

if TYPE_CHECKING:
    import gguf
    from torch import nn

    from .draft_lm import DraftConfig, DraftLM
    from .eagle3 import Eagle3Config, Eagle3Model
    from .model import DFlashModel

QUANTS = ("f32", "f16", "q8_0")

# ours -> (GGUF name, HF name), per layer where {i} appears
_DFLASH_NAMES = {
    "fc.weight": ("fc.weight", "fc.weight"),
    "enc_norm.weight": ("enc.output_norm.weight", "hidden_norm.weight"),
    "out_norm.weight": ("output_norm.weight", "norm.weight"),
    "layers.{i}.attn_norm.weight": ("blk.{i}.attn_norm.weight", "layers.{i}.input_layernorm.weight"),
    "layers.{i}.q.weight": ("blk.{i}.attn_q.weight", "layers.{i}.self_attn.q_proj.weight"),
    "layers.{i}.k.weight": ("blk.{i}.attn_k.weight", "layers.{i}.self_attn.k_proj.weight"),
    "layers.{i}.v.weight": ("blk.{i}.attn_v.weight", "layers.{i}.self_attn.v_proj.weight"),
    "layers.{i}.o.weight": ("blk.{i}.attn_output.weight", "layers.{i}.self_attn.o_proj.weight"),
    "layers.{i}.q_norm.weight": ("blk.{i}.attn_q_norm.weight", "layers.{i}.self_attn.q_norm.weight"),
    "layers.{i}.k_norm.weight": ("blk.{i}.attn_k_norm.weight", "layers.{i}.self_attn.k_norm.weight"),
    "layers.{i}.ffn_norm.weight": ("blk.{i}.ffn_norm.weight", "layers.{i}.post_attention_layernorm.weight"),
    "layers.{i}.gate.weight": ("blk.{i}.ffn_gate.weight", "layers.{i}.mlp.gate_proj.weight"),
    "layers.{i}.up.weight": ("blk.{i}.ffn_up.weight", "layers.{i}.mlp.up_proj.weight"),
    "layers.{i}.down.weight": ("blk.{i}.ffn_down.weight", "layers.{i}.mlp.down_proj.weight"),
}
_EAGLE3_NAMES = {
    "fc.weight": "fc.weight", "attn_norm.weight": "blk.0.attn_norm.weight",
    "hidden_norm.weight": "blk.0.attn_norm_2.weight", "q.weight": "blk.0.attn_q.weight",
    "k.weight": "blk.0.attn_k.weight", "v.weight": "blk.0.attn_v.weight", "o.weight": "blk.0.attn_output.weight",
    "ffn_norm.weight": "blk.0.ffn_norm.weight", "gate.weight": "blk.0.ffn_gate.weight",
    "up.weight": "blk.0.ffn_up.weight", "down.weight": "blk.0.ffn_down.weight",
    "out_norm.weight": "output_norm.weight", "lm_head": "output.weight",
}


def _state(model: nn.Module) -> dict[str, np.ndarray]:
    return {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}


def _dflash_arrays(model: DFlashModel) -> dict[str, tuple[str, str, np.ndarray]]:
    """Our parameter name → ``(GGUF name, HF name, float32 array)``."""
    out = {}
    for ours, arr in _state(model).items():
        parts = ours.split(".")
        key = ours if parts[0] != "layers" else ".".join(["layers", "{i}", *parts[2:]])
        i = parts[1] if parts[0] == "layers" else None
        gg, hf = _DFLASH_NAMES[key]
        out[ours] = (gg.format(i=i), hf.format(i=i), arr)
    return out


def export_hf(model: DFlashModel, out_dir: str | os.PathLike, *, extra: dict[str, Any] | None = None) -> Path:
    """Write a DFlash drafter's ``config.json`` + ``model.safetensors`` (z-lab names) into ``out_dir``."""
    from safetensors.numpy import save_file

    c = model.c
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    save_file({hf: np.ascontiguousarray(a) for _, hf, a in _dflash_arrays(model).values()},
              str(d / "model.safetensors"))
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": c.n_embd, "num_hidden_layers": c.n_layer, "num_attention_heads": c.n_head,
        "num_key_value_heads": c.n_head_kv, "head_dim": c.head_dim, "intermediate_size": c.n_ff,
        "vocab_size": c.n_vocab, "rms_norm_eps": c.rms_eps, "rope_theta": c.rope_base, "hidden_act": "silu",
        "max_position_embeddings": c.n_ctx, "tie_word_embeddings": False, "block_size": c.block_size,
        # HF counts hidden states after the embedding: hidden state i+1 = input of llama.cpp layer i+1
        "dflash_config": {"block_size": c.block_size, "mask_token_id": c.mask_token_id,
                          "target_layer_ids": [i - 1 for i in c.target_layer_ids]},
        **(extra or {}),
    }
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    return d


def _open_gguf(path: str | os.PathLike, what: str) -> Any:
    """A ``gguf.GGUFReader`` of ``path`` (``what``: the drafter named in errors).

    Raises:
        FileNotFoundError: no such file.
        InvalidArgumentError: not a GGUF.
    """
    from gguf import GGUFReader

    from ..errors import InvalidArgumentError

    if not Path(path).is_file():
        raise FileNotFoundError(f"no {what} GGUF at {path}")
    try:
        return GGUFReader(str(path))
    except Exception as exc:  # gguf-py's own parse errors (ValueError, struct.error, ...)
        raise InvalidArgumentError(f"{path} cannot be read as a GGUF ({exc})") from exc


def _field(r: Any, key: str, default: Any = None) -> Any:
    f = r.fields.get(key)
    return default if f is None else f.contents()


def _required(r: Any, key: str, path: str | os.PathLike) -> Any:
    """The field ``key`` of ``r``.

    Raises:
        InvalidArgumentError: the file has no such field.
    """
    from ..errors import InvalidArgumentError

    v = _field(r, key)
    if v is None:
        raise InvalidArgumentError(f"{path} has no {key!r}: not a drafter GGUF this package wrote (pass the GGUF or "
                                   "the drafter.pt of a pyllama_spec.train run)")
    return v


def _shape(r: Any, arch: str, path: str | os.PathLike) -> dict[str, int]:
    """The widths every writer of :func:`_writer` stores (the drafter's config fields of those names); where a file
    of another writer leaves the optional ones out, llama.cpp's defaults (``head_count_kv`` = ``head_count``,
    ``key_length`` = ``embedding_length / head_count``, the vocabulary the tokenizer's).

    Raises:
        InvalidArgumentError: a width llama.cpp needs is missing.
    """
    n_embd = int(_required(r, f"{arch}.embedding_length", path))
    n_head = int(_required(r, f"{arch}.attention.head_count", path))
    n_head_kv, head_dim = _field(r, f"{arch}.attention.head_count_kv"), _field(r, f"{arch}.attention.key_length")
    n_vocab = _field(r, f"{arch}.vocab_size")
    return {"n_embd": n_embd, "n_head": n_head,
            "n_head_kv": int(n_head_kv) if n_head_kv is not None else n_head,
            "head_dim": int(head_dim) if head_dim is not None else n_embd // max(n_head, 1),
            "n_ff": int(_required(r, f"{arch}.feed_forward_length", path)),
            "n_vocab": int(n_vocab) if n_vocab is not None else len(_field(r, "tokenizer.ggml.tokens", []))}


def _matrix(t: Any) -> np.ndarray:
    """A GGUF tensor as a float32 array in numpy order (q8_0 and f16 dequantized by gguf-py); a copy: F32 tensors
    come back as read-only views of the memory-mapped file."""
    from gguf.quants import dequantize

    shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # ggml's ne, innermost first
    return np.array(dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)


def read_dflash_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read back a DFlash drafter GGUF (ours, or any with llama.cpp's ``dflash`` tensor names):
    ``(shape, state)`` — ``shape`` the :class:`.model.DFlashConfig` fields the file holds (``n_embd``,
    ``n_layer``, ``n_head``, ``n_head_kv``, ``head_dim``, ``n_ff``, ``n_vocab``, ``block_size``,
    ``target_layer_ids``, ``mask_token_id``, ``rms_eps``), ``state`` our parameter names → float32 arrays
    (q8_0 and f16 matrices dequantized by gguf-py: q8_0 is within half a step of 1/127 of each
    32-weight block's largest magnitude). What ``online --init drafter.gguf`` continues from, so a
    shipped drafter (only its GGUF is kept) can be trained further.

    Raises:
        InvalidArgumentError: not a DFlash GGUF, or a tensor this layout lacks or does not know.
        FileNotFoundError: no such file.
    """
    from ..errors import InvalidArgumentError

    r = _open_gguf(path, "drafter")

    def field(key: str, default: Any = None) -> Any:
        return _field(r, key, default)

    if field("general.architecture") != "dflash":
        raise InvalidArgumentError(f"{path} is a {field('general.architecture')!r} GGUF, not a DFlash drafter "
                                   "(general.architecture = 'dflash')")
    n_layer = int(field("dflash.block_count"))
    shape = {"n_embd": int(field("dflash.embedding_length")), "n_layer": n_layer,
             "n_head": int(field("dflash.attention.head_count")),
             "n_head_kv": int(field("dflash.attention.head_count_kv")),
             "head_dim": int(field("dflash.attention.key_length")), "n_ff": int(field("dflash.feed_forward_length")),
             "n_vocab": len(field("tokenizer.ggml.tokens", [])), "block_size": int(field("dflash.block_size")),
             "target_layer_ids": [int(i) for i in field("dflash.target_layers")],
             "mask_token_id": int(field("tokenizer.ggml.mask_token_id")),
             # stored as float32: the shortest decimal that rounds to it (1e-06, not 9.9999999747e-07)
             "rms_eps": float(f'{np.float32(field("dflash.attention.layer_norm_rms_epsilon")):.7g}')}
    by_gguf = {gg.format(i=i): ours.format(i=i) for ours, (gg, _) in _DFLASH_NAMES.items()
               for i in (range(n_layer) if "{i}" in ours else [None])}
    state: dict[str, np.ndarray] = {}
    for t in r.tensors:
        if t.name not in by_gguf:
            raise InvalidArgumentError(f"{path}: tensor {t.name!r} is not part of a DFlash drafter of {n_layer} layers")
        state[by_gguf[t.name]] = _matrix(t)
    missing = sorted(set(by_gguf.values()) - set(state))
    if missing:
        raise InvalidArgumentError(f"{path} lacks the tensors {missing} of a DFlash drafter")
    return shape, state


def read_eagle3_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read back an EAGLE-3 head GGUF of :func:`export_eagle3_gguf`: ``(shape, state)`` — ``shape``
    ``{"target_layer_ids", "d2t", "draft_vocab", "n_embd", "n_head", "n_head_kv", "head_dim", "n_ff", "n_vocab"}``
    (``d2t``: the head's vocabulary as target ids, [] where it uses the target's output head; the rest: the
    :class:`.eagle3.Eagle3Config` fields of those names), ``state`` :class:`.eagle3.Eagle3Model` parameter names →
    float32 arrays (q8_0 and f16 matrices dequantized by gguf-py), ``d2t`` as int64. For a replay of the head in
    PyTorch (``benchmarks/eagle3_replay.py``) against the loop through llama.cpp, and for ``online --init`` (a head
    trained further in a later session).

    Raises:
        InvalidArgumentError: not an EAGLE-3 GGUF, or a tensor this layout does not know.
        FileNotFoundError: no such file.
    """
    from ..errors import InvalidArgumentError

    r = _open_gguf(path, "EAGLE-3")
    arch = _field(r, "general.architecture")
    if arch != "eagle3":
        raise InvalidArgumentError(f"{path} is a {arch!r} GGUF, not an EAGLE-3 head (general.architecture = 'eagle3')")
    ours_of = {gg: ours for ours, gg in _EAGLE3_NAMES.items()}
    state: dict[str, np.ndarray] = {}
    for t in r.tensors:
        if t.name == "d2t":
            state["d2t"] = np.array(t.data, dtype=np.int64).reshape(-1)
        elif t.name in ours_of:
            state[ours_of[t.name]] = _matrix(t)
        else:
            raise InvalidArgumentError(f"{path}: tensor {t.name!r} is not part of an EAGLE-3 head")
    want = set(_EAGLE3_NAMES) - {"lm_head"} | ({"lm_head", "d2t"} if {"lm_head", "d2t"} & set(state) else set())
    missing = sorted(want - set(state))
    if missing:
        raise InvalidArgumentError(f"{path} lacks the tensors {missing} of an EAGLE-3 head (a partial or damaged "
                                   "file: export it again, or join all of its parts)")
    d2t = state["d2t"].tolist() if "d2t" in state else []
    shape = {"target_layer_ids": [int(i) for i in _required(r, "eagle3.target_layers", path)], "d2t": d2t,
             "draft_vocab": len(d2t), **_shape(r, arch, path)}
    return shape, state


def read_draft_gguf(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read back a draft model GGUF of :func:`export_draft_gguf` (a plain ``llama`` / ``qwen3`` model):
    ``(shape, state)`` — ``shape`` the :class:`.draft_lm.DraftConfig` fields the file holds (``arch``, ``n_embd``,
    ``n_layer``, ``n_head``, ``n_head_kv``, ``head_dim``, ``n_ff``, ``n_vocab``, ``tied``), ``state``
    :class:`.draft_lm.DraftLM` parameter names → float32 arrays (q8_0 and f16 matrices dequantized by gguf-py: q8_0
    is within half a step of 1/127 of each 32-weight block's largest magnitude). What ``online --init`` continues a
    draft model from.

    Raises:
        InvalidArgumentError: not a ``llama`` / ``qwen3`` GGUF, or a tensor this layout lacks or does not know.
        FileNotFoundError: no such file.
    """
    from ..errors import InvalidArgumentError
    from .draft_lm import _LAYER_NAMES, ARCHS

    r = _open_gguf(path, "draft model")
    arch = _field(r, "general.architecture")
    if arch not in ARCHS:
        raise InvalidArgumentError(f"{path} is a {arch!r} GGUF, not a draft model (general.architecture one of "
                                   f"{ARCHS})")
    n_layer = int(_required(r, f"{arch}.block_count", path))
    names = {"token_embd.weight": "tok_embd", "output_norm.weight": "out_norm.weight", "output.weight": "head"}
    names.update({f"blk.{i}.{gg}.weight": f"layers.{i}.{ours}" for i in range(n_layer)
                  for ours, gg in _LAYER_NAMES.items()})
    state: dict[str, np.ndarray] = {}
    for t in r.tensors:
        if t.name not in names:
            raise InvalidArgumentError(f"{path}: tensor {t.name!r} is not part of a draft model of {n_layer} layers")
        state[names[t.name]] = _matrix(t)
    per_layer = [ours for ours in _LAYER_NAMES if arch == "qwen3" or not ours.startswith(("q_norm", "k_norm"))]
    want = {"tok_embd", "out_norm.weight"} | {f"layers.{i}.{ours}" for i in range(n_layer) for ours in per_layer}
    missing = sorted(want - set(state))
    if missing:
        raise InvalidArgumentError(f"{path} lacks the tensors {missing} of a {arch} draft model of {n_layer} layers "
                                   "(a partial or damaged file: export it again, or join all of its parts)")
    shape = {"arch": arch, "n_layer": n_layer, **_shape(r, arch, path), "tied": "head" not in state}
    return shape, state


def export_dflash_gguf(model: DFlashModel, path: str | os.PathLike, *, target: str | os.PathLike, quant: str = "q8_0",
                       name: str = "DFlash drafter") -> dict[str, Any]:
    """Write a DFlash drafter (:class:`.model.DFlashModel`) as a GGUF (``quant``: f32, f16 or q8_0)."""
    c = model.c
    weights = {gg: a for gg, _, a in _dflash_arrays(model).values()}
    return write_dflash_gguf(path, target=target, weights=weights, n_layer=c.n_layer, n_head=c.n_head,
                             n_head_kv=c.n_head_kv, head_dim=c.head_dim, n_ff=c.n_ff, block_size=c.block_size,
                             target_layers=c.target_layer_ids, mask_token_id=c.mask_token_id, rms_eps=c.rms_eps,
                             quant=quant, name=name)


def _writer(path: str | os.PathLike, arch: str, *, target: str | os.PathLike, name: str,
            c: Eagle3Config | DraftConfig, n_layer: int, quant: str) -> gguf.GGUFWriter:
    """A GGUFWriter with the hyperparameters every llama.cpp architecture reads, and the target's
    tokenizer (the drafter shares the target's vocabulary)."""
    import gguf

    if quant not in QUANTS:
        raise ValueError(f"quant must be one of {QUANTS}, got {quant!r}")
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(c.n_ctx)
    w.add_embedding_length(c.n_embd)
    w.add_feed_forward_length(c.n_ff)
    w.add_block_count(n_layer)
    w.add_head_count(c.n_head)
    w.add_head_count_kv(c.n_head_kv)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_dimension_count(c.head_dim)
    w.add_rope_freq_base(float(c.rope_base))
    w.add_layer_norm_rms_eps(float(c.rms_eps))
    w.add_vocab_size(c.n_vocab)
    w.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                     "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[quant])
    _copy_tokenizer(w, target)
    return w


def _add_tensor(w: gguf.GGUFWriter, name: str, arr: np.ndarray, quant: str) -> None:
    """Norms and vectors stay f32; matrices in ``quant`` (q8_0 needs rows of a multiple of 32:
    others fall back to f16)."""
    import gguf

    arr = np.ascontiguousarray(arr, dtype=np.float32)
    if arr.ndim == 1 or quant == "f32":
        w.add_tensor(name, arr)
    elif quant == "f16" or arr.shape[-1] % 32:
        w.add_tensor(name, arr.astype(np.float16))
    else:
        q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)


def _close(w: gguf.GGUFWriter) -> None:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def export_eagle3_gguf(model: Eagle3Model, path: str | os.PathLike, *, target: str | os.PathLike,
                       quant: str = "q8_0", name: str = "EAGLE-3 head") -> dict[str, Any]:
    """Write an EAGLE-3 head (:class:`.eagle3.Eagle3Model`) as the ``eagle3`` GGUF llama.cpp loads.

    Returns:
        ``{"target_layers", "draft_vocab"}``.
    """
    c = model.c
    w = _writer(path, "eagle3", target=target, name=name, c=c, n_layer=1, quant=quant)
    w.add_array("eagle3.target_layers", [int(i) for i in c.target_layer_ids])
    w.add_uint32("eagle3.target_hidden_size", c.n_embd)
    w.add_bool("eagle3.norm_before_residual", False)
    w.add_bool("eagle3.norm_before_fc", False)
    state = _state(model)
    for ours, gg in _EAGLE3_NAMES.items():
        if ours in state:
            _add_tensor(w, gg, state[ours], quant)
    if c.draft_vocab:
        # the model's d2t buffer, not c.d2t: a warm restart loads the checkpoint's map into the buffer (its lm_head
        # rows follow it), while c.d2t was counted again on the new run's data
        w.add_tensor("d2t", model.d2t.detach().cpu().numpy().astype(np.int64))
    _close(w)
    return {"target_layers": list(c.target_layer_ids), "draft_vocab": c.draft_vocab}


def export_draft_gguf(model: DraftLM, path: str | os.PathLike, *, target: str | os.PathLike, quant: str = "q8_0",
                      name: str = "draft model") -> dict[str, Any]:
    """Write a draft model (:class:`.draft_lm.DraftLM`) as a normal ``llama`` / ``qwen3`` GGUF, for
    llama.cpp's ``draft-simple`` speculation.

    Returns:
        ``{"arch", "n_layer", "n_embd"}``.
    """
    from .draft_lm import _LAYER_NAMES

    c = model.c
    w = _writer(path, c.arch, target=target, name=name, c=c, n_layer=c.n_layer, quant=quant)
    state = _state(model)
    _add_tensor(w, "token_embd.weight", state.pop("tok_embd"), quant)
    _add_tensor(w, "output_norm.weight", state.pop("out_norm.weight"), quant)
    if "head" in state:
        _add_tensor(w, "output.weight", state.pop("head"), quant)
    for key, arr in state.items():
        _, i, rest = key.split(".", 2)  # layers.{i}.<param>
        _add_tensor(w, f"blk.{i}.{_LAYER_NAMES[rest]}.weight", arr, quant)
    _close(w)
    return {"arch": c.arch, "n_layer": c.n_layer, "n_embd": c.n_embd}


def export_gguf(model: DFlashModel | Eagle3Model | DraftLM, path: str | os.PathLike, *, target: str | os.PathLike,
                quant: str = "q8_0", name: str | None = None) -> dict[str, Any]:
    """Write any trained drafter as its GGUF (dispatch on the model's class)."""
    from .draft_lm import DraftLM
    from .eagle3 import Eagle3Model

    if isinstance(model, Eagle3Model):
        return export_eagle3_gguf(model, path, target=target, quant=quant, name=name or "EAGLE-3 head")
    if isinstance(model, DraftLM):
        return export_draft_gguf(model, path, target=target, quant=quant, name=name or "draft model")
    return export_dflash_gguf(model, path, target=target, quant=quant, name=name or "DFlash drafter")


__all__ = ["export_hf", "export_gguf", "export_dflash_gguf", "read_dflash_gguf", "read_eagle3_gguf", "read_draft_gguf",
           "export_eagle3_gguf", "export_draft_gguf", "QUANTS"]
