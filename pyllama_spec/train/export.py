"""Export a trained drafter: an HF-format DFlash checkpoint and a GGUF for the pinned llama.cpp.

The HF folder holds ``config.json`` (``architectures: ["DFlashDraftModel"]`` with a
``dflash_config``: block size, target layer ids in HF counting, mask token) and
``model.safetensors`` with the z-lab parameter names. The GGUF is written directly with
gguf-py, tokenizer metadata copied from the target's GGUF — so no HF target folder is needed
(llama.cpp's converter requires one).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..fixtures import write_dflash_gguf
from .model import DFlashConfig, DFlashModel

# ours -> (GGUF name, HF name), per layer where {i} appears
_NAMES = {
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


def _arrays(model: DFlashModel) -> dict:
    out = {}
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    for ours, arr in sd.items():
        parts = ours.split(".")
        key = ours if parts[0] != "layers" else ".".join(["layers", "{i}", *parts[2:]])
        i = parts[1] if parts[0] == "layers" else None
        gg, hf = _NAMES[key]
        out[ours] = (gg.format(i=i), hf.format(i=i), arr)
    return out


def export_hf(model: DFlashModel, out_dir, *, extra: dict | None = None) -> Path:
    """Write ``config.json`` + ``model.safetensors`` (z-lab names) into ``out_dir``."""
    from safetensors.numpy import save_file

    c: DFlashConfig = model.c
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    save_file({hf: np.ascontiguousarray(a) for _, hf, a in _arrays(model).values()}, str(d / "model.safetensors"))
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


def export_gguf(model: DFlashModel, path, *, target, quant: str = "q8_0", name: str = "DFlash drafter") -> dict:
    """Write the drafter as a GGUF for the pinned llama.cpp (``quant``: f32, f16 or q8_0)."""
    c: DFlashConfig = model.c
    weights = {gg: a for gg, _, a in _arrays(model).values()}
    return write_dflash_gguf(path, target=target, weights=weights, n_layer=c.n_layer, n_head=c.n_head,
                             n_head_kv=c.n_head_kv, head_dim=c.head_dim, n_ff=c.n_ff, block_size=c.block_size,
                             target_layers=c.target_layer_ids, mask_token_id=c.mask_token_id, rms_eps=c.rms_eps,
                             quant=quant, name=name)


__all__ = ["export_hf", "export_gguf"]
