"""A classic draft model in PyTorch: a small causal LM of the target's architecture and
vocabulary, computing what llama.cpp's ``llama`` / ``qwen3`` graphs compute
(``src/models/llama.cpp``, ``src/models/qwen3.cpp``), so that it exports to a normal GGUF that
llama.cpp's ``draft-simple`` speculation (and our loop) loads next to the target.

Weights are kept in llama.cpp's layout: for ``llama`` the RoPE is the normal (pairwise) form
applied to the GGUF's q/k rows, for ``qwen3`` the NeoX form with q/k norms; the output head is
tied to the token embedding (one vocabulary matrix in the file) when the target's is, else its own
``output.weight``.

Initialisation from the target (no download): with the target's width, the embedding, the final
norm and ``n_layer`` of the target's layers spread over its depth are copied (a shallow copy of
the target that training then distils; "layer dropping"); with a narrower width the embedding is
the target's projected on its top principal directions and the layers start random.
"""
from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .model import RMSNorm, rope, rope_norm

if TYPE_CHECKING:
    from ..gguf_file import GGUFInfo

ARCHS = ("llama", "qwen3")


@dataclass
class DraftConfig:
    """Shape of a draft model; ``arch`` is its GGUF architecture (``llama`` or ``qwen3``)."""
    arch: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    n_ctx: int = 8192
    tied: bool = True  # output head = token embedding (as the target, when it has no output.weight)
    init_layers: list[int] | None = None  # target layers copied at initialisation (None: random)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def for_target(cls, info: GGUFInfo, n_vocab: int, *, n_layer: int = 4, n_embd: int | None = None) -> DraftConfig:
        """A draft for the target whose GGUF header is ``info``: the target's architecture (a
        ``llama`` graph for other architectures), head size, RoPE base and norm eps; ``n_embd``
        (default: the target's) sets the width, with heads and FFN scaled to it."""
        a = info.arch
        t_embd = int(info.get(f"{a}.embedding_length"))
        t_head = int(info.get(f"{a}.attention.head_count"))
        t_kv = int(info.get(f"{a}.attention.head_count_kv", t_head))
        hd = int(info.get(f"{a}.attention.key_length", t_embd // t_head))
        t_ff = int(info.get(f"{a}.feed_forward_length"))
        n_embd = n_embd or t_embd
        if n_embd == t_embd:
            n_head, n_kv, n_ff = t_head, t_kv, t_ff
            t_layers = int(info.get(f"{a}.block_count"))
            layers = sorted({int(round(x)) for x in np.linspace(0, t_layers - 1, n_layer)})
            # copy layers only from a target of the same graph (another RoPE layout or biases would not fit)
            init: list[int] | None = layers if len(layers) == n_layer and a in ARCHS else None
        else:
            n_head = max(1, n_embd // hd)
            n_kv = max(1, n_head // max(1, t_head // t_kv))
            while n_head % n_kv:
                n_kv -= 1
            n_ff = int(math.ceil(t_ff * n_embd / t_embd / 32) * 32)
            init = None
        return cls(arch=a if a in ARCHS else "llama", n_embd=n_embd, n_layer=n_layer, n_head=n_head,
                   n_head_kv=n_kv, head_dim=hd, n_ff=n_ff, n_vocab=n_vocab,
                   rope_base=float(info.get(f"{a}.rope.freq_base", 10000.0)),
                   rms_eps=float(info.get(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
                   n_ctx=int(info.get(f"{a}.context_length", 8192)), init_layers=init,
                   tied="output.weight" not in info.tensors)


class Block(nn.Module):
    """One pre-norm transformer layer (attention + SwiGLU FFN), llama.cpp tensor layout."""

    def __init__(self, c: DraftConfig) -> None:
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.q = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
        self.k = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.v = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.o = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        if c.arch == "qwen3":
            self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
            self.k_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.c.head_dim).transpose(1, 2)

    def forward(self, h: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        c = self.c
        x = self.attn_norm(h)
        q, k = self._heads(self.q(x), c.n_head), self._heads(self.k(x), c.n_head_kv)
        if c.arch == "qwen3":
            q, k = rope(self.q_norm(q), pos, c.rope_base), rope(self.k_norm(k), pos, c.rope_base)
        else:
            q, k = rope_norm(q, pos, c.rope_base), rope_norm(k, pos, c.rope_base)
        v = self._heads(self.v(x), c.n_head_kv)
        rep = c.n_head // c.n_head_kv
        if rep > 1:
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(c.head_dim))
        b, _, t, _ = a.shape
        h = h + self.o(a.transpose(1, 2).reshape(b, t, -1))
        x = self.ffn_norm(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))


class DraftLM(nn.Module):
    """The draft model: token embedding (tied output head), ``n_layer`` blocks, final norm.

    Args:
        c: the shape.
        target_weights: ``{gguf tensor name: float32 array}`` of the target (dequantized), used
            to initialise from it (see the module docstring); None: random layers.
        target_embd: the target's ``(n_vocab, n_embd_target)`` token embedding, for the
            projected initialisation of a narrower draft.
    """

    def __init__(self, c: DraftConfig, target_weights: dict[str, np.ndarray] | None = None,
                 target_embd: np.ndarray | None = None) -> None:
        super().__init__()
        self.c = c
        self.tok_embd = nn.Parameter(torch.randn(c.n_vocab, c.n_embd) * 0.02)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.n_layer))
        self.out_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.head = None if c.tied else nn.Parameter(torch.randn(c.n_vocab, c.n_embd) * 0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        with torch.no_grad():
            if target_weights is not None and c.init_layers:
                self._copy_target(target_weights)
            elif target_embd is not None:
                self.tok_embd.copy_(torch.as_tensor(project_embedding(target_embd, c.n_embd)))
                if self.head is not None:
                    self.head.copy_(self.tok_embd)
                # random layers: start with logits of about unit scale (near-uniform predictions)
                self.out_norm.weight.fill_(1.0 / float(self.tok_embd.norm(dim=1).mean()))

    def _copy_target(self, tw: dict[str, np.ndarray]) -> None:
        self.tok_embd.copy_(torch.as_tensor(tw["token_embd.weight"]))
        self.out_norm.weight.copy_(torch.as_tensor(tw["output_norm.weight"]))
        if self.head is not None:
            self.head.copy_(torch.as_tensor(tw.get("output.weight", tw["token_embd.weight"])))
        for i, src in enumerate(self.c.init_layers or []):
            for ours, gg in _LAYER_NAMES.items():
                t = tw.get(f"blk.{src}.{gg}.weight")
                if t is not None and hasattr(self.layers[i], ours.split(".")[0]):
                    self.layers[i].get_parameter(ours).copy_(torch.as_tensor(t).reshape(
                        self.layers[i].get_parameter(ours).shape))

    def forward(self, tokens: torch.Tensor, pos: torch.Tensor | None = None) -> torch.Tensor:
        """Hidden states after the final norm, ``(B, T, n_embd)`` (causal attention); positions default to 0..T−1."""
        if pos is None:
            pos = torch.arange(tokens.shape[1], device=tokens.device).expand_as(tokens)
        h = F.embedding(tokens, self.tok_embd)
        for layer in self.layers:
            h = layer(h, pos)
        return self.out_norm(h)

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """``(…, n_vocab)`` logits of normed hidden states."""
        w = self.tok_embd if self.head is None else self.head
        return h @ w.to(h.dtype).T


# our parameter -> GGUF tensor (per layer, "blk.{i}.<name>.weight")
_LAYER_NAMES = {"attn_norm.weight": "attn_norm", "q.weight": "attn_q", "k.weight": "attn_k", "v.weight": "attn_v",
                "o.weight": "attn_output", "q_norm.weight": "attn_q_norm", "k_norm.weight": "attn_k_norm",
                "ffn_norm.weight": "ffn_norm", "gate.weight": "ffn_gate", "up.weight": "ffn_up",
                "down.weight": "ffn_down"}


def project_embedding(emb: np.ndarray, n_embd: int) -> np.ndarray:
    """The target's ``(n_vocab, E)`` embedding on its top ``n_embd`` principal directions,
    rescaled to the same per-row RMS: ``(n_vocab, n_embd)`` float32."""
    e = np.asarray(emb, np.float32)
    _, _, vt = np.linalg.svd(e - e.mean(0), full_matrices=False)
    p = e @ vt[:n_embd].T
    if p.shape[1] < n_embd:  # wider than the target: the extra directions start at zero
        p = np.pad(p, ((0, 0), (0, n_embd - p.shape[1])))
    rms = np.sqrt((e ** 2).mean()) / max(np.sqrt((p ** 2).mean()), 1e-12)
    return (p * rms).astype(np.float32)


def target_weights(target_path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Every tensor of the target GGUF, dequantized to float32 (gguf-py), in llama.cpp's layout."""
    import gguf

    out: dict[str, np.ndarray] = {}
    for t in gguf.GGUFReader(str(target_path)).tensors:
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))
        out[t.name] = np.array(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(shape)
    return out


__all__ = ["DraftConfig", "DraftLM", "project_embedding", "target_weights", "ARCHS"]
