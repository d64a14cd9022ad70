"""How each drafter kind is trained and measured: batches, loss, and accepted drafts at anchors.

All kinds learn from the same self-distilled sequences (prompt + the target's greedy answer) and
the same held-out split; the loss covers answer tokens only (what the target itself says).

An *anchor* a is the position of the newest committed token (the one the target just gave), as
in the loop: the target has computed features for positions ``< a``; the drafter proposes tokens
``a+1 .. a+n_max``. :meth:`Objective.leads` returns, per held-out sequence, how many leading
drafts are right at every anchor ``a ∈ [lo, hi]`` (``lo = max(1, n_prompt − 1)``, ``hi = len − 2``;
drafts past the end count as right, the replay caps them) — on the target's own greedy answers
this is exactly what T = 0 speculative decoding accepts, whatever the drafter does after its
first wrong token. :func:`.trainer.evaluate` replays the loop over them.

* DFlash (arXiv 2602.06036): blocks ``[t_a, mask × (B−1)]`` at random anchors, see features
  ``< a`` and (non-causally) their own block; cross-entropy weighted ``exp(−(k−1)/γ)``.
* EAGLE-3 (arXiv 2503.01840): training-time test (:meth:`.eagle3.Eagle3Model.unroll`): step k of
  row t predicts token ``t + 2 + k``; cross-entropy weighted ``0.8^k`` (SpecForge's weights).
  Anchor a is row ``a − 1``.
* draft model: next-token cross-entropy; anchor a drafts from position a on (teacher forcing
  gives the accepted run: the first k drafts are right iff the next k predictions are).
"""
from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..errors import InvalidArgumentError
from .model import DFlashConfig, DFlashModel

if TYPE_CHECKING:
    from ..gguf_file import GGUFInfo
    from .config import TrainConfig
    from .draft_lm import DraftConfig, DraftLM
    from .eagle3 import Eagle3Config, Eagle3Model

GAMMA = {16: 7.0, 10: 5.0, 8: 4.0}
EAGLE3_STEP_WEIGHT = 0.8

#: the model an objective trains (each subclass fixes it)
ModelT = TypeVar("ModelT", bound=nn.Module)
#: the model of any kind
AnyModel: TypeAlias = "DFlashModel | Eagle3Model | DraftLM"
#: a batch: tensors in the order the kind's :meth:`Objective.batch` builds them
Batch = tuple[torch.Tensor, ...]
#: per sequence: ``(lo, acc)``, ``acc[j]`` = leading correct drafts at anchor ``lo + j``
Leads = list[tuple[int, np.ndarray]]


def anchor_range(seq: dict[str, Any]) -> tuple[int, int]:
    """``(lo, hi)``: first and last anchor of a sequence (inclusive)."""
    return max(1, seq["n_prompt"] - 1), len(seq["tokens"]) - 2


def padded_len(n: int, multiple: int = 1) -> int:
    """``n`` rounded up to a multiple of ``multiple``: a batch's length (its longest sequence) in steps of
    ``multiple``, so that training meets few distinct shapes — kernels that plan per shape (cuDNN's attention,
    which recent torch picks first on an H100) then plan each once (issue 20: batches of 32 of its answers met 42
    new lengths in their first 60 steps, 401 in 2000; in steps of 64, 8 lengths in all, 2.3 % more rows)."""
    return -(-n // multiple) * multiple


def _features(feats: Sequence[np.ndarray] | None, kind: str) -> Sequence[np.ndarray]:
    """``feats``, which a kind that reads target features cannot do without."""
    if feats is None:
        raise InvalidArgumentError(f"{kind} batches read target features: feats must be the "
                                   f"features.extract() arrays, got None")
    return feats


def _as_t(x: np.ndarray, device: torch.device | str | None, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.as_tensor(np.ascontiguousarray(x), device=device, dtype=dtype)


class Objective(Generic[ModelT]):
    """Interface of a kind's objective (one subclass per kind).

    Attributes:
        kind: ``"dflash"`` | ``"eagle3"`` | ``"draft"``.
        config: the model's shape (a dataclass with ``to_dict``).
        n_max: the draft length measured by :meth:`leads`.
        needs_features: whether batches read target features.
    """
    kind = ""
    needs_features = True
    config: DFlashConfig | Eagle3Config | DraftConfig
    n_max: int
    eval_batch = 4

    def build(self) -> ModelT:
        """A fresh model (on the CPU)."""
        raise NotImplementedError

    def batch(self, seqs: Sequence[dict[str, Any]], feats: Sequence[np.ndarray] | None, idx: Sequence[int],
              rng: np.random.Generator, device: torch.device, *, evaluate: bool = False) -> Batch:
        """Tensors for sequences ``idx`` on ``device``."""
        raise NotImplementedError

    def loss(self, model: ModelT, b: Batch, dtype: torch.dtype) -> torch.Tensor:
        """Scalar training loss of a batch (``dtype``: the features' compute type)."""
        raise NotImplementedError

    def leads(self, model: ModelT, b: Batch, seqs: Sequence[dict[str, Any]], idx: Sequence[int],
              dtype: torch.dtype) -> Leads:
        """Per sequence of ``idx``: ``(lo, acc)`` with ``acc[j]`` = leading correct drafts (≤ n_max)
        at anchor ``lo + j``."""
        raise NotImplementedError


# --------------------------------------------------------------------------------------------- DFlash
def make_blocks(seqs: Sequence[dict[str, Any]], idx: Sequence[int], c: DFlashConfig, n_blocks: int,
                rng: np.random.Generator, *, all_anchors: bool = False,
                pad_multiple: int = 1) -> tuple[np.ndarray, ...]:
    """DFlash's block tensors for sequences ``idx`` (all but the features), as numpy arrays:
    ``(ctx_pos (n, Lc), block_tokens (n, Lq), block_pos (n, Lq), mask (n, 1, Lq, Lc + Lq), targets
    (n, Lq))`` with ``Lc`` the longest sequence (rounded up to a multiple of ``pad_multiple``: :func:`padded_len`)
    and ``Lq = K · block_size`` for K anchor blocks."""
    B = c.block_size
    lens = [len(seqs[i]["tokens"]) for i in idx]
    Lc = padded_len(max(lens), pad_multiple)
    anchors = []
    for i in idx:
        lo, hi = anchor_range(seqs[i])
        cand = np.arange(lo, hi + 1)
        if all_anchors:
            a = cand[:n_blocks] if len(cand) > n_blocks else cand
        else:
            a = rng.choice(cand, size=min(n_blocks, len(cand)), replace=False)
        anchors.append(np.sort(a))
    K = max(len(a) for a in anchors)
    Lq = K * B
    tok = np.full((len(idx), Lq), c.mask_token_id, dtype=np.int64)
    pos = np.zeros((len(idx), Lq), dtype=np.int64)
    tgt = np.full((len(idx), Lq), -100, dtype=np.int64)
    mask = np.zeros((len(idx), 1, Lq, Lc + Lq), dtype=bool)
    for r, (i, a_list) in enumerate(zip(idx, anchors)):
        t = seqs[i]["tokens"]
        for k, a in enumerate(a_list):
            q0 = k * B
            tok[r, q0] = t[a]
            pos[r, q0:q0 + B] = np.arange(a, a + B)
            for j in range(1, B):
                if a + j < len(t):
                    tgt[r, q0 + j] = t[a + j]
            mask[r, 0, q0:q0 + B, :a] = True
            mask[r, 0, q0:q0 + B, Lc + q0:Lc + q0 + B] = True
        for k in range(len(a_list), K):  # padding blocks: let them see themselves (no NaN rows)
            q0 = k * B
            mask[r, 0, q0:q0 + B, Lc + q0:Lc + q0 + B] = True
    ctx_pos = np.broadcast_to(np.arange(Lc), (len(idx), Lc))
    return ctx_pos, tok, pos, mask, tgt


def make_batch(seqs: Sequence[dict[str, Any]], feats: Sequence[np.ndarray], idx: Sequence[int], c: DFlashConfig,
               n_blocks: int, rng: np.random.Generator, device: torch.device, *, all_anchors: bool = False,
               pad_multiple: int = 1) -> Batch:
    """DFlash tensors for sequences ``idx``: features, positions, packed blocks, mask and targets."""
    blocks = make_blocks(seqs, idx, c, n_blocks, rng, all_anchors=all_anchors, pad_multiple=pad_multiple)
    Lc = blocks[0].shape[1]
    f = np.zeros((len(idx), Lc, feats[idx[0]].shape[1]), dtype=np.float16)
    for r, i in enumerate(idx):
        f[r, :len(seqs[i]["tokens"])] = feats[i]
    return (_as_t(f, device), *(_as_t(x, device) for x in blocks))


def position_weights(c: DFlashConfig, device: torch.device) -> torch.Tensor:
    """DFlash's per-block-position loss weights ``[0, 1, e^{−1/γ}, …]`` (the anchor row has none)."""
    B = c.block_size
    gamma = GAMMA.get(B, B / 2)
    return torch.tensor([0.0] + [math.exp(-(k - 1) / gamma) for k in range(1, B)], device=device)


class DFlashObjective(Objective[DFlashModel]):
    """DFlash's block-diffusion objective (z-lab ``dflash``)."""
    kind = "dflash"
    config: DFlashConfig
    max_eval_anchors = 256

    def __init__(self, c: DFlashConfig, tok_embd: np.ndarray, head: np.ndarray, *, n_blocks: int = 32,
                 pad_multiple: int = 1, soft_weight: float = 0.0) -> None:
        self.config, self.n_blocks, self.pad_multiple = c, n_blocks, pad_multiple
        #: the share of the loss against the target's distribution (TrainConfig.soft_weight): its batches then carry
        #: a seventh tensor, the target's final hidden state at each block row's position − 1 (online only)
        self.soft_weight = float(soft_weight)
        self.n_max = c.block_size - 1
        self._embd, self._head = tok_embd, head

    def build(self) -> DFlashModel:
        return DFlashModel(self.config, torch.tensor(np.asarray(self._embd, np.float32)),
                           torch.tensor(np.asarray(self._head, np.float32)))

    def batch(self, seqs: Sequence[dict[str, Any]], feats: Sequence[np.ndarray] | None, idx: Sequence[int],
              rng: np.random.Generator, device: torch.device, *, evaluate: bool = False) -> Batch:
        n = self.max_eval_anchors if evaluate else self.n_blocks
        return make_batch(seqs, _features(feats, self.kind), idx, self.config, n, rng, device, all_anchors=evaluate,
                          pad_multiple=self.pad_multiple)

    def loss(self, model: DFlashModel, b: Batch, dtype: torch.dtype) -> torch.Tensor:
        """Per block row k ≥ 1 the cross-entropy of the drafter's logits against the target's token, weighted
        ``exp(−(k−1)/γ)`` (DFlash); with ``soft_weight`` w > 0 (a batch of 7 tensors: the 7th the target's final
        hidden state ``(n, Lq, n_embd)`` at each row's position − 1, whose product with the shared output head
        is the target's logits there) ``(1 − w)`` of it and ``w`` of the cross-entropy against the target's
        softmax (``−Σ_v p_t(v) log q(v)``: KL(p_t ‖ q) plus p_t's entropy, which does not depend on the drafter).

        Raises:
            InvalidArgumentError: ``soft_weight`` > 0 with a batch that lacks the target's hidden states."""
        f, cp, tok, pos, mask, tgt = b[:6]
        logits = model.logits(model(f.to(dtype), cp, tok, pos, mask)).float()
        flat = logits.view(-1, logits.shape[-1])
        if self.soft_weight > 0:
            if len(b) < 7:
                raise InvalidArgumentError("soft_weight > 0 needs the target's final hidden states in the batch: "
                                           "an online objective (pyllama_spec.train.online) makes them")
            w_s = self.soft_weight
            with torch.no_grad():  # one target: (1 − w)·onehot(tgt) + w·p_t (rows without a label weigh 0 below)
                y = torch.softmax(model.logits(b[6]).float(), dim=-1).view_as(flat).mul_(w_s)
                t = tgt.view(-1, 1).clamp_min(0)
                y.scatter_add_(1, t, torch.full(t.shape, 1.0 - w_s, dtype=y.dtype, device=y.device))
            ce = F.cross_entropy(flat, y, reduction="none")
        else:
            ce = F.cross_entropy(flat, tgt.view(-1), ignore_index=-100, reduction="none")
        w = position_weights(self.config, tgt.device)
        wt = w.repeat(tgt.shape[1] // self.config.block_size)[None, :].expand_as(tgt).reshape(-1) * (tgt.view(-1) >= 0)
        return (ce * wt).sum() / wt.sum().clamp_min(1)

    def leads(self, model: DFlashModel, b: Batch, seqs: Sequence[dict[str, Any]], idx: Sequence[int],
              dtype: torch.dtype) -> Leads:
        f, cp, tok, pos, mask, tgt = b[:6]
        B = self.config.block_size
        pred = model.logits(model(f.to(dtype), cp, tok, pos, mask)).argmax(-1).view(len(idx), -1, B)[:, :, 1:]
        t = tgt.view(len(idx), -1, B)[:, :, 1:]
        ok = (pred == t) | (t < 0)
        acc = torch.cumprod(ok.int(), dim=-1).sum(-1).cpu().numpy()
        valid = (t[:, :, 0] >= 0).cpu().numpy()
        return [(anchor_range(seqs[i])[0], acc[r, :int(valid[r].sum())]) for r, i in enumerate(idx)]


# -------------------------------------------------------------------------------------------- EAGLE-3
class Eagle3Objective(Objective["Eagle3Model"]):
    """EAGLE-3's training-time test with hard labels (the target's greedy tokens).

    Args:
        attention: the built model's :attr:`.eagle3.Eagle3Model.attention`.
        pad_multiple: batch lengths in steps of this (:func:`padded_len`).
    """
    kind = "eagle3"
    config: Eagle3Config

    def __init__(self, c: Eagle3Config, tok_embd: np.ndarray, head: np.ndarray, *, attention: str = "explicit",
                 pad_multiple: int = 1) -> None:
        self.config = c
        self.n_max = c.n_steps
        self._embd, self._head = tok_embd, head
        self.attention, self.pad_multiple = attention, pad_multiple

    def build(self) -> Eagle3Model:
        from .eagle3 import Eagle3Model

        m = Eagle3Model(self.config, torch.tensor(np.asarray(self._embd, np.float32)),
                        torch.tensor(np.asarray(self._head, np.float32)))
        m.attention = self.attention
        return m

    def labels(self, seqs: Sequence[dict[str, Any]], idx: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """The batch's token ids ``(B, T + K + 1)`` (zero-padded) and step labels ``(B, K, T)``: row t of
        step k is labelled with token t + 2 + k where that is an answer token, −100 elsewhere. T: the longest
        sequence, rounded up to a multiple of :attr:`pad_multiple`."""
        K = self.config.n_steps
        lens = [len(seqs[i]["tokens"]) for i in idx]
        T = padded_len(max(lens), self.pad_multiple)
        tok = np.zeros((len(idx), T + K + 1), dtype=np.int64)
        tgt = np.full((len(idx), K, T), -100, dtype=np.int64)
        for r, i in enumerate(idx):
            s, L = seqs[i], lens[r]
            tok[r, :L] = s["tokens"]
            for k in range(K):  # row t, step k predicts token t + 2 + k (an answer token)
                t0, t1 = max(0, s["n_prompt"] - 2 - k), L - 2 - k
                if t1 > t0:
                    tgt[r, k, t0:t1] = tok[r, t0 + 2 + k:t1 + 2 + k]
        return tok, tgt

    def batch(self, seqs: Sequence[dict[str, Any]], feats: Sequence[np.ndarray] | None, idx: Sequence[int],
              rng: np.random.Generator, device: torch.device, *, evaluate: bool = False) -> Batch:
        feats = _features(feats, self.kind)
        tok, tgt = self.labels(seqs, idx)
        f = np.zeros((len(idx), tgt.shape[2], feats[idx[0]].shape[1]), dtype=np.float16)
        for r, i in enumerate(idx):
            f[r, :len(seqs[i]["tokens"])] = feats[i]
        return _as_t(f, device), _as_t(tok, device), _as_t(tgt, device)

    def _map(self, model: Eagle3Model, y: torch.Tensor) -> torch.Tensor:
        """Target ids → the head's vocabulary (−100 where the head cannot say them)."""
        if model.lm_head is None:
            return y
        t2d = torch.full((self.config.n_vocab,), -100, dtype=torch.long, device=y.device)
        t2d[model.d2t] = torch.arange(len(model.d2t), device=y.device)
        return torch.where(y >= 0, t2d[y.clamp_min(0)], y)

    def loss(self, model: Eagle3Model, b: Batch, dtype: torch.dtype) -> torch.Tensor:
        f, tok, tgt = b
        hs = model.unroll(f.to(dtype), tok, self.config.n_steps)
        total: torch.Tensor | float = 0.0
        wsum = 0.0
        for k, h in enumerate(hs):
            y = self._map(model, tgt[:, k])
            sel = y >= 0
            if not bool(sel.any()):
                continue
            logits = model.logits(h[sel]).float()
            w = EAGLE3_STEP_WEIGHT ** k
            total = total + w * F.cross_entropy(logits, y[sel])
            wsum += w
        # a tensor as is (as_tensor does not copy it); 0.0 only when no step had a label
        return torch.as_tensor(total / max(wsum, 1e-9))

    def leads(self, model: Eagle3Model, b: Batch, seqs: Sequence[dict[str, Any]], idx: Sequence[int],
              dtype: torch.dtype) -> Leads:
        f, tok, _ = b
        K = self.config.n_steps
        hs = model.unroll(f.to(dtype), tok, K)
        out: Leads = []
        for r, i in enumerate(idx):
            lo, hi = anchor_range(seqs[i])
            L = len(seqs[i]["tokens"])
            rows = torch.arange(lo - 1, hi, device=f.device)  # anchor a ↔ row a − 1
            ok = []
            for k, h in enumerate(hs):
                pred = model.to_target_ids(model.logits(h[r, rows]).argmax(-1))
                p = rows + 2 + k
                truth = tok[r, p.clamp_max(tok.shape[1] - 1)]
                ok.append((pred == truth) | (p >= L))
            lead = torch.cumprod(torch.stack(ok, -1).int(), dim=-1).sum(-1)
            out.append((lo, lead.cpu().numpy()))
        return out


def draft_vocab_ids(seqs: Sequence[dict[str, Any]], n: int, n_vocab: int) -> list[int]:
    """EAGLE-3's draft vocabulary: the ``min(n, n_vocab)`` target tokens most frequent in the
    training split's answers (then in its prompts, then by id), sorted by id."""
    answer: dict[int, int] = {}
    prompt: dict[int, int] = {}
    for s in seqs:
        if s["split"] == "train":
            for i, t in enumerate(s["tokens"]):
                d = answer if i >= s["n_prompt"] else prompt
                d[t] = d.get(t, 0) + 1
    order = sorted(range(n_vocab), key=lambda t: (-answer.get(t, 0), -prompt.get(t, 0), t))
    return sorted(order[:min(n, n_vocab)])


# ------------------------------------------------------------------------------------- draft model
class DraftObjective(Objective["DraftLM"]):
    """Next-token distillation of the target's greedy answers into a small causal LM."""
    kind = "draft"
    needs_features = False
    config: DraftConfig

    def __init__(self, c: DraftConfig, tok_embd: np.ndarray, *, n_max: int = 7,
                 target_weights: dict[str, np.ndarray] | None = None, pad_multiple: int = 1) -> None:
        self.config, self.n_max, self.pad_multiple = c, n_max, pad_multiple
        self._embd, self._tw = tok_embd, target_weights

    def build(self) -> DraftLM:
        from .draft_lm import DraftLM

        return DraftLM(self.config, self._tw, self._embd)

    def batch(self, seqs: Sequence[dict[str, Any]], feats: Sequence[np.ndarray] | None, idx: Sequence[int],
              rng: np.random.Generator, device: torch.device, *, evaluate: bool = False) -> Batch:
        lens = [len(seqs[i]["tokens"]) for i in idx]
        T = padded_len(max(lens), self.pad_multiple)
        tok = np.zeros((len(idx), T), dtype=np.int64)
        tgt = np.full((len(idx), T), -100, dtype=np.int64)
        for r, i in enumerate(idx):
            s, L = seqs[i], lens[r]
            tok[r, :L] = s["tokens"]
            lo = max(0, s["n_prompt"] - 1)  # position p predicts token p + 1 (an answer token)
            tgt[r, lo:L - 1] = tok[r, lo + 1:L]
        return _as_t(tok, device), _as_t(tgt, device)

    def loss(self, model: DraftLM, b: Batch, dtype: torch.dtype) -> torch.Tensor:
        tok, tgt = b
        h = model(tok)
        sel = tgt >= 0
        return F.cross_entropy(model.logits(h[sel]).float(), tgt[sel])

    def leads(self, model: DraftLM, b: Batch, seqs: Sequence[dict[str, Any]], idx: Sequence[int],
              dtype: torch.dtype) -> Leads:
        tok, _ = b
        h = model(tok)
        out: Leads = []
        for r, i in enumerate(idx):
            lo, hi = anchor_range(seqs[i])
            pred = model.logits(h[r, lo:hi + 1]).argmax(-1).cpu().numpy()
            right = pred == np.asarray(seqs[i]["tokens"][lo + 1:hi + 2])
            run = np.zeros(len(right) + 1, dtype=np.int64)
            run[-1] = self.n_max  # past the end counts as right (the replay caps it)
            for j in range(len(right) - 1, -1, -1):
                run[j] = run[j + 1] + 1 if right[j] else 0
            out.append((lo, np.minimum(run[:-1], self.n_max)))
        return out


# ---------------------------------------------------------------------------------------- factory
#: the objective of any kind (what :func:`build_objective` returns)
AnyObjective: TypeAlias = DFlashObjective | Eagle3Objective | DraftObjective


def default_layers(n_layer: int, k: int = 4) -> list[int]:
    """k layer ids spread from the second layer to the last (llama.cpp ids: layer inputs)."""
    return sorted({int(round(x)) for x in np.linspace(1, n_layer - 1, k)})


def target_layers(tc: TrainConfig, n_layer: int) -> list[int]:
    """The target layers (inputs) a run of ``tc`` reads: its own, or the kind's default; [] for a
    draft model."""
    from .eagle3 import default_eagle3_layers

    if tc.kind == "draft":
        return []
    if tc.layers:
        bad = [i for i in tc.layers if not 0 <= i < n_layer]
        if bad:
            raise ValueError(f"target layer ids {bad} out of range: the target has {n_layer} layers (0..{n_layer - 1})")
        return list(tc.layers)
    return default_eagle3_layers(n_layer) if tc.kind == "eagle3" else default_layers(n_layer)


def refuse_soft_labels(tc: TrainConfig) -> None:
    """Stored features keep no final hidden state of the target, so soft labels (``tc.soft_weight`` > 0) train
    online only (:mod:`.online`).

    Raises:
        InvalidArgumentError: ``tc.soft_weight`` > 0, naming the online command.
    """
    if tc.soft_weight > 0:
        raise InvalidArgumentError("soft_weight > 0 reads the target's distribution at every step, which stored "
                                   "features do not keep: train online (python -m pyllama_spec.train.online "
                                   "--soft-weight ...)")


def build_objective(tc: TrainConfig, info: GGUFInfo, seqs: Sequence[dict[str, Any]], tok_embd: np.ndarray,
                    head: np.ndarray, *, mask_token: int | None = None,
                    target: str | os.PathLike | None = None) -> AnyObjective:
    """The objective (and so the model shape) of a run.

    Args:
        tc: the :class:`.config.TrainConfig`.
        info: the target's GGUF header (:class:`pyllama_spec.gguf_file.GGUFInfo`).
        seqs: the sequences (EAGLE-3's own vocabulary is counted on their training split).
        tok_embd, head: the target's ``(n_vocab, n_embd)`` token embedding and output head.
        mask_token: DFlash's mask token id.
        target: the target's GGUF path (a draft model of the target's width copies its layers).

    Raises:
        InvalidArgumentError: ``tc.soft_weight`` > 0 (:func:`refuse_soft_labels`).
    """
    refuse_soft_labels(tc)
    n_vocab = tok_embd.shape[0]
    n_layer = int(info.get(f"{info.arch}.block_count"))
    layers = target_layers(tc, n_layer)
    if tc.kind == "dflash":
        if mask_token is None:
            raise ValueError("DFlash needs a mask token id")
        c = DFlashConfig.for_target(info, n_vocab, n_layer=tc.drafter_layers or 2, target_layer_ids=layers,
                                    block_size=tc.block_size, mask_token_id=mask_token)
        return DFlashObjective(c, tok_embd, head, n_blocks=tc.n_blocks, pad_multiple=tc.pad_multiple)
    if tc.kind == "eagle3":
        from .eagle3 import Eagle3Config

        d2t = draft_vocab_ids(seqs, tc.draft_vocab, n_vocab) if tc.draft_vocab else []
        ce = Eagle3Config.for_target(info, n_vocab, target_layer_ids=layers, draft_vocab=len(d2t), d2t=d2t,
                                    n_steps=tc.draft_length)
        return Eagle3Objective(ce, tok_embd, head, attention=tc.eagle3_attention, pad_multiple=tc.pad_multiple)
    from .draft_lm import DraftConfig, target_weights

    cd = DraftConfig.for_target(info, n_vocab, n_layer=tc.drafter_layers or 4, n_embd=tc.draft_embd)
    tw = target_weights(target) if cd.init_layers and target is not None else None
    if cd.init_layers and tw is None:
        cd.init_layers = None
    return DraftObjective(cd, tok_embd, n_max=tc.draft_length, target_weights=tw, pad_multiple=tc.pad_multiple)


__all__ = ["build_objective", "target_layers", "default_layers", "Objective", "DFlashObjective", "Eagle3Objective",
           "DraftObjective", "make_batch", "make_blocks", "position_weights", "anchor_range", "draft_vocab_ids",
           "padded_len"]
