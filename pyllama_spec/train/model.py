"""The DFlash drafter in PyTorch, written to compute exactly what llama.cpp's graph computes
(``src/models/dflash.cpp``), so that a trained checkpoint exports to a working GGUF.

* context: target features ``(n_ctx, n_ids·n_embd)`` → ``g = rms_norm(fc(features))``; every
  layer's context K/V are ``k_norm(W_k g)`` (RoPE at the context positions) and ``W_v g``;
* block: ``[anchor, mask × (B−1)]`` token embeddings of the target go through the layers
  (pre-norm attention + SwiGLU FFN); the block attends non-causally to the context before the
  anchor and to the whole block;
* logits: the target's output head applied to ``rms_norm(h)``.

Reference: Chen et al. 2026, arXiv 2602.06036; z-lab ``dflash/model.py``. RoPE is the NeoX
(rotate-half) form that llama.cpp uses for DFlash drafters.
"""
from __future__ import annotations

import math
import typing
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:
    from ..gguf_file import GGUFInfo


@dataclass
class DFlashConfig:
    """Shape of a drafter. ``target_layer_ids`` are llama.cpp layer ids (inputs of those layers)."""
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    target_layer_ids: list[int]
    block_size: int = 8
    mask_token_id: int = 0
    rope_base: float = 10000.0
    rms_eps: float = 1e-6
    n_ctx: int = 8192

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def for_target(cls, info: GGUFInfo, n_vocab: int, **kwargs: Any) -> DFlashConfig:
        """A drafter shaped like the target whose GGUF header is ``info`` (:class:`GGUFInfo`): same
        hidden size (llama.cpp's DFlash graph requires it), heads, FFN width, RoPE base and context."""
        a = info.arch
        n_embd = int(info.get(f"{a}.embedding_length"))
        n_head = int(info.get(f"{a}.attention.head_count"))
        base = dict(n_embd=n_embd, n_head=n_head, n_head_kv=int(info.get(f"{a}.attention.head_count_kv", n_head)),
                    head_dim=int(info.get(f"{a}.attention.key_length", n_embd // n_head)),
                    n_ff=int(info.get(f"{a}.feed_forward_length")), n_vocab=n_vocab,
                    rope_base=float(info.get(f"{a}.rope.freq_base", 10000.0)),
                    n_ctx=int(info.get(f"{a}.context_length", 8192)))
        return cls(**{**base, **kwargs})


class RMSNorm(nn.Module):
    def __init__(self, n: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def _angles(x: torch.Tensor, pos: torch.Tensor, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    d = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d))
    ang = pos.float()[:, None, :, None] * inv  # (B, 1, T, D/2)
    return ang.cos().to(x.dtype), ang.sin().to(x.dtype)


def rope(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """NeoX RoPE (llama.cpp ``LLAMA_ROPE_TYPE_NEOX``: dimension i pairs with i + D/2).
    x: (B, H, T, D), pos: (B, T) int."""
    d = x.shape[-1]
    cos, sin = _angles(x, pos, base)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def rope_norm(x: torch.Tensor, pos: torch.Tensor, base: float) -> torch.Tensor:
    """Normal RoPE (llama.cpp ``LLAMA_ROPE_TYPE_NORM``, used by llama and EAGLE-3 GGUFs: dimension
    2i pairs with 2i + 1; HF checkpoints reach this layout through the converter's q/k permutation).
    x: (B, H, T, D), pos: (B, T) int."""
    cos, sin = _angles(x, pos, base)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).flatten(-2)


class Layer(nn.Module):
    def __init__(self, c: DFlashConfig) -> None:
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.q = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
        self.k = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.v = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.o = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.c.head_dim).transpose(1, 2)  # (B, n, T, D)

    def ctx_kv(self, g: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = rope(self.k_norm(self.heads(self.k(g), self.c.n_head_kv)), pos, self.c.rope_base)
        return k, self.heads(self.v(g), self.c.n_head_kv)

    def forward(self, h: torch.Tensor, pos: torch.Tensor, k_ctx: torch.Tensor, v_ctx: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        c = self.c
        x = self.attn_norm(h)
        q = rope(self.q_norm(self.heads(self.q(x), c.n_head)), pos, c.rope_base)
        k = rope(self.k_norm(self.heads(self.k(x), c.n_head_kv)), pos, c.rope_base)
        v = self.heads(self.v(x), c.n_head_kv)
        k = torch.cat([k_ctx, k], dim=2)
        v = torch.cat([v_ctx, v], dim=2)
        rep = c.n_head // c.n_head_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(c.head_dim))
        b, _, t, _ = a.shape
        h = h + self.o(a.transpose(1, 2).reshape(b, t, -1))
        x = self.ffn_norm(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))


class DFlashModel(nn.Module):
    """The DFlash drafter network in PyTorch, for training (the inference-time drafter is
    :class:`pyllama_spec.speculative.drafters.dflash.DFlashDrafter`, which runs the exported GGUF
    in llama.cpp). The trainable part; the target's token embedding and output head are frozen
    buffers passed in (``tok_embd``, ``head``: ``(n_vocab, n_embd)``)."""

    def __init__(self, c: DFlashConfig, tok_embd: torch.Tensor, head: torch.Tensor) -> None:
        super().__init__()
        self.c = c
        n_in = len(c.target_layer_ids) * c.n_embd
        self.fc = nn.Linear(n_in, c.n_embd, bias=False)
        self.enc_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.tok_embd: torch.Tensor
        self.head: torch.Tensor
        self.register_buffer("tok_embd", tok_embd, persistent=False)
        self.register_buffer("head", head, persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    def forward(self, feats: torch.Tensor, ctx_pos: torch.Tensor, block_tokens: torch.Tensor,
                block_pos: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Hidden states of the block rows.

        Args:
            feats: ``(B, Lc, n_ids·n_embd)`` context features.  ctx_pos: ``(B, Lc)`` their positions.
            block_tokens: ``(B, Lq)`` anchor/mask token ids (several blocks may be packed).
            block_pos: ``(B, Lq)`` positions.  mask: ``(B, 1, Lq, Lc + Lq)`` bool, True = attend.

        Returns:
            ``(B, Lq, n_embd)``; :meth:`logits` maps them to the vocabulary.
        """
        g = self.enc_norm(self.fc(feats))
        h = F.embedding(block_tokens, self.tok_embd).to(g.dtype)
        for layer in typing.cast("list[Layer]", self.layers):
            k_ctx, v_ctx = layer.ctx_kv(g, ctx_pos)
            h = layer(h, block_pos, k_ctx, v_ctx, mask)
        return self.out_norm(h)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return h @ self.head.to(h.dtype).T


def grow_layers(state: typing.Mapping[str, torch.Tensor], n_from: int, n_to: int) -> dict[str, torch.Tensor]:
    """A :class:`DFlashModel` state of ``n_from`` layers made into one of ``n_to`` that computes the same
    function: layers ``n_from .. n_to − 1`` are copies of the last layer with their output projections
    (``o``, ``down``) zero, so each adds nothing to the residual stream until training moves them (a
    function-preserving deepening, as Net2DeeperNet: Chen, Goodfellow & Shlens 2016, "Net2Net", arXiv
    1511.05641, there with identity layers; zero-initialised residual branches as in Goyal et al. 2017).
    The copied query/key/value/gate/up weights are non-zero, so gradients reach them once ``o``/``down`` move.
    Used by ``online --init … --grow`` to train a deeper drafter from a shipped one (issue 20).

    Args:
        state: a ``state_dict`` of ``n_from`` layers (``layers.{i}.*`` keys).
        n_from, n_to: layer counts, ``1 ≤ n_from ≤ n_to``.

    Returns:
        a new ``state_dict`` (the old tensors shared, the new layers' cloned).

    Raises:
        ValueError: ``n_from`` outside ``1..n_to``, or ``state`` lacks layer ``n_from − 1``.
    """
    if not 1 <= n_from <= n_to:
        raise ValueError(f"cannot grow {n_from} layers into {n_to}: need 1 <= n_from <= n_to")
    last = f"layers.{n_from - 1}."
    src = {k[len(last):]: v for k, v in state.items() if k.startswith(last)}
    if not src:
        raise ValueError(f"the state has no layer {n_from - 1} (keys {last}*)")
    out = dict(state)
    for i in range(n_from, n_to):
        for name, v in src.items():
            out[f"layers.{i}.{name}"] = torch.zeros_like(v) if name in ("o.weight", "down.weight") else v.clone()
    return out


__all__ = ["DFlashConfig", "DFlashModel", "RMSNorm", "rope", "rope_norm", "grow_layers"]
