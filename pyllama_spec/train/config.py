"""``TrainConfig``: every setting of one training run, in one validated, serialisable object.

The command line (``python -m pyllama_spec.train``) builds it; :func:`.pipeline.run` and
:func:`.trainer.train` take it whole; each run's ``report.json`` stores it (``asdict``) next to
the exact command, the seed and the data set's hash, so that a run can be repeated.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from ..errors import InvalidArgumentError

#: drafter kinds the pipeline trains, with llama.cpp's ``--spec-type`` for each
KINDS = {"dflash": "draft-dflash", "eagle3": "draft-eagle3", "draft": "draft-simple"}
QUANTS = ("f32", "f16", "q8_0")
#: how the EAGLE-3 head may attend (:data:`.eagle3.ATTENTION`, the same tuple: defined here, where no torch is imported)
EAGLE3_ATTENTION = ("explicit", "sdpa", "sdpa-no-cudnn")


@dataclass
class TrainConfig:
    """One training run.

    Attributes:
        kind: ``"dflash"`` (block-diffusion drafter), ``"eagle3"`` (EAGLE-3 head) or ``"draft"``
            (a small causal LM of the target's architecture).
        data: JSON lines of :mod:`.data` (plain or ``.gz``); None: generate them into the output folder.
        max_len: sequences are cut at this many tokens.
        layers: target layer ids (llama.cpp: layer inputs) the drafter reads — DFlash: any
            number (default 4 spread over the depth), EAGLE-3: three (default 2, n/2, n−3).
        drafter_layers: DFlash: its layers (default 2); draft: its layers (default 4); EAGLE-3: 1.
        block_size: DFlash's block (draft length + 1).
        n_max: draft length that training targets and validation measures — EAGLE-3: the
            training-time-test depth; draft: the validation's draft length; DFlash: block_size − 1.
        draft_embd: draft model width (None: the target's, initialised from the target's layers).
        draft_vocab: EAGLE-3 head's own vocabulary (the most frequent answer tokens, with
            llama.cpp's ``d2t`` map); 0: the target's output head, frozen.
        soft_weight: DFlash, online only: the share of each block row's loss taken against the target's own
            next-token distribution at that position (cross-entropy to its softmax: knowledge distillation, as
            DistillSpec, Zhou et al. 2023, arXiv 2310.08461, finds it raises acceptance over hard labels), the rest
            against the target's token as before; 0 (the default): the token alone. Why: on the target's own
            greedy answers the drafter learns only the argmax, and at a near-tie — or where a sampled answer took
            another token — nothing of what the target would also say (issue 20: the hard-label recipe saturates
            at validation τ ≈ 3.0 whatever the depth and data, RESULTS.md 15.8 / 15.14). The target's forward then
            runs to its last layer (its final hidden state × the shared output head), ~7 % more target work.
        pad_multiple: a batch's length (its longest sequence; DFlash: its context) is rounded up to a multiple
            of this (1: not rounded), so that training meets few distinct shapes: kernels that plan per shape
            (cuDNN's attention, first in recent torch on an H100) plan each once (:func:`.objectives.padded_len`).
        eagle3_attention: how the EAGLE-3 head's training-time test attends (:data:`.eagle3.ATTENTION`:
            ``"explicit"``, ``"sdpa"``, ``"sdpa-no-cudnn"``; see :attr:`.eagle3.Eagle3Model.attention`).
        steps: optimizer steps (an upper bound when ``max_seconds`` is set).
        batch: sequences per step.  n_blocks: DFlash anchor blocks per sequence and step.
        lr, warmup: AdamW learning rate (cosine schedule) and linear warm-up steps.
        eval_every: steps between held-out validations (the best checkpoint is kept).
        max_seconds: training-time cap in seconds (evaluations included); None: run all steps.
        max_eval_seqs: held-out sequences of the periodic validation (None: all).
        seed: seeds torch and the batch sampler (the held-out split is fixed by prompt hash).
        device: torch device (None: CUDA when available).
        quant: GGUF matrix type of the exported drafter (an f16 copy is always written too).
        n_gpu_layers: target layers on the GPU for data, features and the loop measurement.
        eval_prompts, eval_tokens: held-out prompts and tokens per prompt of the final measurement
            through our loop (T = 0).

    Raises:
        InvalidArgumentError: a value out of range (names the field, the allowed values and the value).
    """
    kind: str = "dflash"
    data: str | None = None
    max_len: int = 1024
    layers: list[int] | None = None
    drafter_layers: int | None = None
    block_size: int = 8
    n_max: int | None = None
    draft_embd: int | None = None
    draft_vocab: int = 0
    soft_weight: float = 0.0
    pad_multiple: int = 1
    eagle3_attention: str = "explicit"
    steps: int = 2000
    batch: int = 16
    n_blocks: int = 32
    lr: float = 1e-3
    warmup: int = 100
    eval_every: int = 250
    max_seconds: float | None = None
    max_eval_seqs: int | None = None
    seed: int = 0
    device: str | None = None
    quant: str = "q8_0"
    n_gpu_layers: int = -1
    eval_prompts: int = 40
    eval_tokens: int = 128

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InvalidArgumentError(f"kind must be one of {sorted(KINDS)}, got {self.kind!r}")
        if self.eagle3_attention not in EAGLE3_ATTENTION:
            raise InvalidArgumentError(f"eagle3_attention must be one of {EAGLE3_ATTENTION}, got "
                                       f"{self.eagle3_attention!r}")
        if self.quant not in QUANTS:
            raise InvalidArgumentError(f"quant must be one of {QUANTS}, got {self.quant!r}")
        for name in ("max_len", "block_size", "steps", "batch", "n_blocks", "eval_every", "eval_prompts",
                     "eval_tokens", "pad_multiple"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise InvalidArgumentError(f"{name} must be a positive int, got {v!r}")
        for name in ("drafter_layers", "n_max", "draft_embd", "max_eval_seqs"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise InvalidArgumentError(f"{name} must be a positive int or None, got {v!r}")
        if self.block_size < 2:
            raise InvalidArgumentError(f"block_size must be ≥ 2 (anchor + at least one draft), got {self.block_size}")
        if not isinstance(self.draft_vocab, int) or self.draft_vocab < 0:
            raise InvalidArgumentError(
                f"draft_vocab must be an int ≥ 0 (0: the target's head), got {self.draft_vocab!r}")
        if not (isinstance(self.soft_weight, (int, float)) and 0.0 <= self.soft_weight <= 1.0):
            raise InvalidArgumentError(f"soft_weight must lie in [0, 1], got {self.soft_weight!r}")
        if self.soft_weight > 0 and self.kind != "dflash":
            raise InvalidArgumentError(f"soft_weight (the target's distribution as a label) trains DFlash drafters "
                                       f"online; got kind={self.kind!r}: drop --soft-weight")
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise InvalidArgumentError(f"lr must be > 0, got {self.lr!r}")
        if self.max_seconds is not None and not self.max_seconds > 0:
            raise InvalidArgumentError(f"max_seconds must be > 0 or None, got {self.max_seconds!r}")
        if self.layers is not None:
            self.layers = [int(i) for i in self.layers]
            if self.kind == "eagle3" and len(self.layers) != 3:
                raise InvalidArgumentError(f"an EAGLE-3 head reads exactly 3 target layers (low, mid, high); "
                                           f"got layers={self.layers}")
        if self.kind == "eagle3" and self.drafter_layers not in (None, 1):
            raise InvalidArgumentError(f"an EAGLE-3 head has one layer (llama.cpp's graph); got "
                                       f"drafter_layers={self.drafter_layers}")
        if self.data is not None:
            self.data = str(self.data)

    @property
    def spec_type(self) -> str:
        """llama.cpp's ``--spec-type`` for this kind."""
        return KINDS[self.kind]

    @property
    def draft_length(self) -> int:
        """The draft length trained for and measured (DFlash: block_size − 1)."""
        if self.kind == "dflash":
            return self.block_size - 1
        return self.n_max or 7

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        """Rebuild from :meth:`to_dict` (unknown keys raise, so a misspelt setting is not ignored)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise InvalidArgumentError(f"unknown TrainConfig fields {unknown}; known: {sorted(names)}")
        return cls(**d)


__all__ = ["TrainConfig", "KINDS"]
