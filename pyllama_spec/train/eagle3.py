"""The EAGLE-3 head in PyTorch, written to compute exactly what llama.cpp's ``LLM_ARCH_EAGLE3``
graph computes (``src/models/eagle3.cpp``) and what its drafter feeds it
(``common/speculative.cpp``, ``common_speculative_impl_draft_eagle3``), so that a trained head
exports to a working GGUF.

* encoder: the target features of position P (inputs of three target layers, low/mid/high,
  concatenated) → ``g_P = fc(features)``;
* decoder, one layer: at position P the input pair is ``(token_{P+1}, g_P)``:
  ``x = [attn_norm(embd(token)), hidden_norm(g)]`` (2·n_embd wide) → Q/K/V, normal RoPE at P,
  causal attention over the drafter's KV cache, residual ``+ g``, SwiGLU FFN with residual →
  the pre-norm state ``h_P``; logits = head(output_norm(h_P)) predict ``token_{P+2}``;
* drafting: the seed step uses the target's ``g_P``; draft step k feeds the drafted token and
  the previous step's ``h`` (not a target feature) at position ``P + k``, attending to the
  committed entries ``≤ P`` and to its own earlier draft steps.

Training-time test (Li et al. 2025, EAGLE-3, arXiv 2503.01840; SGLang SpecForge
``core/eagle3.py``): the draft chain is unrolled ``n_steps`` times for every row at once. Step 0
is ordinary causal attention; at step k, row t (the chain seeded at P = t) attends to the step-0
keys of positions ``≤ t`` and to its own keys of steps ``1..k`` — exactly the KV cache llama.cpp
holds at draft step k. (SpecForge also hides step-0 keys ``t−k+1 .. t`` at step k; llama.cpp's
drafter sees them, so we train on what it sees.)

The token embedding is the target's (frozen, borrowed at run time through ``ctx_other``). The
output head is either the target's (frozen, ``draft_vocab = 0``: no ``output.weight`` in the GGUF)
or a trainable head over the ``draft_vocab`` most frequent answer tokens with llama.cpp's ``d2t``
map (draft index → target token id).
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..errors import InvalidArgumentError
from .config import EAGLE3_ATTENTION
from .model import RMSNorm, rope_norm

if TYPE_CHECKING:
    import numpy as np

    from ..gguf_file import GGUFInfo


#: the values of :attr:`Eagle3Model.attention`
ATTENTION = EAGLE3_ATTENTION  # (defined in config.py, which imports no torch)
# "sdpa-no-cudnn": every SDPA kernel but cuDNN's (torch picks among them in its own order)
_NO_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


@dataclass
class Eagle3Config:
    """Shape of an EAGLE-3 head. ``target_layer_ids``: three llama.cpp layer ids (inputs of those
    layers), low / mid / high; ``draft_vocab``: 0 = the target's output head, else the size of
    the head's own vocabulary (``d2t`` holds its target token ids)."""
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ff: int
    n_vocab: int
    target_layer_ids: list[int]
    draft_vocab: int = 0
    d2t: list[int] = field(default_factory=list)
    rope_base: float = 10000.0
    rms_eps: float = 1e-5
    n_ctx: int = 8192
    n_steps: int = 7

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["d2t"] = f"{len(self.d2t)} ids" if self.d2t else []  # the map itself: the model's d2t buffer
        return d

    @classmethod
    def for_target(cls, info: GGUFInfo, n_vocab: int, **kwargs: Any) -> Eagle3Config:
        """A head shaped like the target whose GGUF header is ``info``: the target's hidden size
        (the borrowed token embedding fixes it), heads, FFN width, RoPE base, norm eps, context."""
        a = info.arch
        n_embd = int(info.get(f"{a}.embedding_length"))
        n_head = int(info.get(f"{a}.attention.head_count"))
        base = dict(n_embd=n_embd, n_head=n_head, n_head_kv=int(info.get(f"{a}.attention.head_count_kv", n_head)),
                    head_dim=int(info.get(f"{a}.attention.key_length", n_embd // n_head)),
                    n_ff=int(info.get(f"{a}.feed_forward_length")), n_vocab=n_vocab,
                    rope_base=float(info.get(f"{a}.rope.freq_base", 10000.0)),
                    rms_eps=float(info.get(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)),
                    n_ctx=int(info.get(f"{a}.context_length", 8192)))
        return cls(**{**base, **kwargs})


def default_eagle3_layers(n_layer: int) -> list[int]:
    """llama.cpp's converter default for EAGLE-3 taps: inputs of layers 2, n/2 and n−3 (EAGLE's
    low / mid / high hidden states)."""
    return [2, n_layer // 2, n_layer - 3] if n_layer >= 6 else [0, n_layer // 2, n_layer - 1]


class Eagle3Model(nn.Module):
    """The trainable part of an EAGLE-3 head; the target's token embedding ``tok_embd`` and output
    head ``head`` (``(n_vocab, n_embd)``) are frozen buffers.

    Args:
        c: the shape; with ``c.draft_vocab > 0`` a trainable head over ``c.d2t`` (target token ids,
            its rows initialised from ``head``).
    """

    tok_embd: torch.Tensor
    d2t: torch.Tensor
    head: torch.Tensor
    lm_head: nn.Parameter | None

    def __init__(self, c: Eagle3Config, tok_embd: torch.Tensor, head: torch.Tensor) -> None:
        super().__init__()
        if len(c.target_layer_ids) != 3:
            raise ValueError(f"EAGLE-3 reads exactly 3 target layers, got {c.target_layer_ids}")
        self.c = c
        self.fc = nn.Linear(3 * c.n_embd, c.n_embd, bias=False)
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)     # on the token embedding
        self.hidden_norm = RMSNorm(c.n_embd, c.rms_eps)   # on g (llama.cpp: attn_norm_2)
        self.q = nn.Linear(2 * c.n_embd, c.n_head * c.head_dim, bias=False)
        self.k = nn.Linear(2 * c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.v = nn.Linear(2 * c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.o = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.down = nn.Linear(c.n_ff, c.n_embd, bias=False)
        self.out_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.register_buffer("tok_embd", tok_embd, persistent=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        if c.draft_vocab:
            if len(c.d2t) != c.draft_vocab:
                raise ValueError(f"d2t has {len(c.d2t)} ids for draft_vocab={c.draft_vocab}")
            d2t = torch.as_tensor(c.d2t, dtype=torch.long)
            self.lm_head = nn.Parameter(head[d2t.to(head.device)].clone().float())
            self.register_buffer("d2t", d2t)  # in the state dict: a checkpoint carries its vocabulary
        else:
            self.lm_head = None
            self.register_buffer("head", head, persistent=False)

    def encode(self, feats: torch.Tensor) -> torch.Tensor:
        """``g = fc(features)``: ``(B, T, 3·n_embd)`` → ``(B, T, n_embd)`` (llama.cpp's encoder graph)."""
        return self.fc(feats)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, self.c.head_dim).transpose(1, 2)  # (B, n, T, D)

    #: how :meth:`step` attends (each in :data:`ATTENTION`; all three compute the same, the tests hold the SDPA ones
    #: to ``"explicit"``):
    #:
    #: * ``"explicit"`` (the default): the scores written out — step-0 scores ``T × T`` plus the k diagonal terms,
    #:   the softmax in float32. EAGLE-3 online training ran at 3.36 steps/s with it (3.92 at the end) against 1.3
    #:   with ``"sdpa"`` (one H100 80GB HBM3, 2026-12-06, draft vocabulary 16384, batch 32, bf16 autocast);
    #: * ``"sdpa"``: one ``F.scaled_dot_product_attention`` over the keys ``[k_0 | k_1 … k_k]`` under the mask
    #:   ``[causal | I | … | I]`` (``T × (k+1)·T`` scores, no score tensor kept for the backward pass). Alone, at one
    #:   fixed shape, it is the faster (90 vs 178 ms an unroll of batch 32 × 1024 rows, same GPU and day,
    #:   ``benchmarks/eagle3_attention.py``), but a training batch is as long as its longest sequence (T ≤ max_len:
    #:   a new T at 70 % of the first 60 steps on issue 20's answers), and recent torch sends SDPA on an H100 to cuDNN
    #:   first (``sdp_utils.cpp``: sm90 with cuDNN > 9.15, unless ``TORCH_CUDNN_SDPA_DEPRIORITIZED=1``), which builds
    #:   an execution plan for each new shape, forward and backward (tens of ms each) — the likely cause, not yet
    #:   measured (``benchmarks/eagle3_attention.py --from-data`` does; ``TrainConfig.pad_multiple`` bounds the shapes);
    #: * ``"sdpa-no-cudnn"``: the same call with cuDNN's kernel left out (flash, memory-efficient or math attention:
    #:   no per-shape plans).
    attention: str = "explicit"

    def _attend_explicit(self, q: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]],
                         causal_mask: torch.Tensor) -> torch.Tensor:
        """Attention of ``q`` ``(B, H, T, D)`` over the step-0 keys (causal) and, per row, the chain's own keys of
        steps 1..k (one per row each), the softmax in float32: ``(B, H, T, D)``."""
        scale = 1.0 / math.sqrt(self.c.head_dim)
        k0, v0 = cache[0]
        s0 = (q @ k0.transpose(-1, -2)) * scale
        s0 = s0.masked_fill(~causal_mask, float("-inf"))
        # the chain's own keys of steps 1..k sit on the same row (one key per row each)
        diag = [((q * kj).sum(-1) * scale)[..., None] for kj, _ in cache[1:]]
        p = torch.softmax(torch.cat([s0, *diag], dim=-1).float(), dim=-1).to(q.dtype)
        T = s0.shape[-1]
        a = p[..., :T] @ v0
        for j, (_, vj) in enumerate(cache[1:]):
            a = a + p[..., T + j, None] * vj
        return a

    def _attend_sdpa(self, q: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]],
                     causal_mask: torch.Tensor) -> torch.Tensor:
        """:meth:`_attend_explicit` as one ``F.scaled_dot_product_attention``: keys ``[k_0 | k_1 | … | k_k]``
        (``T·(k+1)`` of them) under the mask ``[causal | I | … | I]`` — row t sees step-0 keys s ≤ t and, of each
        later step, only its own row's key."""
        k0, v0 = cache[0]
        T = k0.shape[-2]
        if len(cache) == 1:
            return F.scaled_dot_product_attention(q, k0, v0, attn_mask=causal_mask)
        eye = torch.eye(T, dtype=torch.bool, device=q.device)
        keys = torch.cat([kj for kj, _ in cache], dim=-2)
        vals = torch.cat([vj for _, vj in cache], dim=-2)
        mask = torch.cat([causal_mask] + [eye] * (len(cache) - 1), dim=-1)
        return F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask)

    def _attend(self, q: torch.Tensor, cache: list[tuple[torch.Tensor, torch.Tensor]],
                causal_mask: torch.Tensor) -> torch.Tensor:
        """Attention by :attr:`attention`.

        Raises:
            InvalidArgumentError: an :attr:`attention` not in :data:`ATTENTION`.
        """
        if self.attention == "explicit":
            return self._attend_explicit(q, cache, causal_mask)
        if self.attention == "sdpa":
            return self._attend_sdpa(q, cache, causal_mask)
        if self.attention == "sdpa-no-cudnn":
            with sdpa_kernel(_NO_CUDNN):
                return self._attend_sdpa(q, cache, causal_mask)
        raise InvalidArgumentError(f"Eagle3Model.attention must be one of {ATTENTION}, got {self.attention!r}")

    def step(self, tokens: torch.Tensor, hid: torch.Tensor, pos: torch.Tensor,
             cache: list[tuple[torch.Tensor, torch.Tensor]], causal_mask: torch.Tensor) -> torch.Tensor:
        """One unrolled step for all rows.

        Args:
            tokens: ``(B, T)`` input tokens.  hid: ``(B, T, n_embd)`` g (step 0) or the previous h.
            pos: ``(B, T)`` positions.  cache: ``[(k, v), ...]`` of earlier steps (appended to);
            causal_mask: ``(T, T)`` bool, True where row t may see step-0 key s (s ≤ t).

        Returns:
            ``(B, T, n_embd)`` pre-norm state h.
        """
        c = self.c
        e = F.embedding(tokens, self.tok_embd).to(hid.dtype)
        x = torch.cat([self.attn_norm(e), self.hidden_norm(hid)], dim=-1)
        q = rope_norm(self._heads(self.q(x), c.n_head), pos, c.rope_base)
        k = rope_norm(self._heads(self.k(x), c.n_head_kv), pos, c.rope_base)
        v = self._heads(self.v(x), c.n_head_kv)
        rep = c.n_head // c.n_head_kv
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        cache.append((k, v))
        a = self._attend(q, cache, causal_mask)
        b, _, t, _ = a.shape
        h = hid + self.o(a.transpose(1, 2).reshape(b, t, -1))
        x = self.ffn_norm(h)
        return h + self.down(F.silu(self.gate(x)) * self.up(x))

    def unroll(self, feats: torch.Tensor, tokens: torch.Tensor, n_steps: int) -> list[torch.Tensor]:
        """Training-time test: the draft chain of every row, ``n_steps`` deep.

        Args:
            feats: ``(B, T, 3·n_embd)`` target features, row t = position t.
            tokens: ``(B, T + n_steps)`` the sequence: ``tokens[:, t + 1 + k]`` is the input of
                row t at step k (pad with any valid id past the end).

        Returns:
            ``n_steps`` tensors ``(B, T, n_embd)``: h of row t at step k, whose logits predict
            token ``t + 2 + k``.
        """
        B, T, _ = feats.shape
        pos = torch.arange(T, device=feats.device).expand(B, T)
        mask = torch.ones(T, T, dtype=torch.bool, device=feats.device).tril()
        hid = self.encode(feats)
        cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        out = []
        for k in range(n_steps):
            hid = self.step(tokens[:, 1 + k:1 + k + T], hid, pos + k, cache, mask)
            out.append(hid)
        return out

    @torch.no_grad()
    def draft(self, feats: np.ndarray | torch.Tensor, tokens: Iterable[int], n: int) -> list[torch.Tensor]:
        """Draft greedily as llama.cpp's drafter does after a verify step (a reference for tests).

        Args:
            feats: ``(P + 1, 3·n_embd)`` target features of positions ``0..P``.
            tokens: ``(P + 2,)`` the committed tokens ``0..P+1`` (the last is the target's newest).
            n: draft length.

        Returns:
            ``n`` logit vectors ``(n_vocab,)`` in target token ids (``-inf`` outside a draft
            vocabulary), the i-th computed after feeding drafts ``1..i−1``.
        """
        f = torch.as_tensor(feats, dtype=torch.float32)[None]
        toks = torch.as_tensor(list(tokens), dtype=torch.long)
        T = f.shape[1]
        pos = torch.arange(T).expand(1, T)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        hid = self.encode(f)
        cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        out: list[torch.Tensor] = []
        step_toks = toks[1:T + 1][None].clone()
        for k in range(n):
            hid = self.step(step_toks, hid, pos + k, cache, mask)
            lg = self.logits(hid[0, -1])
            if self.lm_head is not None:
                full = torch.full((self.c.n_vocab,), float("-inf"))
                full[self.d2t] = lg
                lg = full
            out.append(lg)
            step_toks = step_toks.clone()
            step_toks[0, -1] = int(lg.argmax())  # only the last row's chain matters
        return out

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        """Logits over the head's vocabulary: ``(…, n_vocab)`` or ``(…, draft_vocab)``."""
        hn = self.out_norm(h)
        w = self.lm_head if self.lm_head is not None else self.head
        return hn @ w.to(hn.dtype).T

    def to_target_ids(self, idx: torch.Tensor) -> torch.Tensor:
        """Map argmax indices of :meth:`logits` to target token ids."""
        return self.d2t[idx] if self.lm_head is not None else idx


__all__ = ["Eagle3Config", "Eagle3Model", "default_eagle3_layers", "ATTENTION"]
