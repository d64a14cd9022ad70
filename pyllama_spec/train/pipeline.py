"""End-to-end: self-distilled data → target features → training → export → evaluation, for any
drafter kind, from the target's GGUF alone.

    python -m pyllama_spec.train TARGET.gguf OUT_DIR --kind dflash|eagle3|draft [--data data.jsonl]
        [--layers 2,15,28] [--drafter-layers N] [--block-size 8] [--steps 2000] [--seconds S] [--seed 0]

Writes into OUT_DIR: ``drafter-{quant}.gguf`` and ``drafter-f16.gguf``, ``drafter.pt`` (PyTorch
checkpoint), ``hf/`` (DFlash only: HF-format checkpoint) and ``report.json``: the
:class:`.config.TrainConfig`, the exact command, the seed, the data set's sha256, the training
history (held-out τ by loop replay), and the exported file measured through our loop and through
``llama-speculative-simple`` where available.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from .config import EAGLE3_ATTENTION, KINDS, QUANTS, TrainConfig

if TYPE_CHECKING:
    import numpy as np

    from .objectives import AnyModel, Objective

#: registry names our loop may give each kind's drafter (the first registered one is used)
LOOP_KINDS = {"dflash": ("dflash", "draft-dflash"), "eagle3": ("eagle3", "draft-eagle3"),
              "draft": ("draft-simple", "draft", "draft-model")}


def pick_mask_token(target_path: str | os.PathLike, sequences: Sequence[dict[str, Any]]) -> int:
    """An unused control token of the target's vocabulary to serve as DFlash's mask token."""
    import pyllama_spec as ps

    m = ps.Model(target_path, vocab_only=True)
    v = m.vocab
    if v.mask is not None:
        return v.mask
    used = {t for s in sequences for t in s["tokens"]}
    reserved = {v.bos, v.eos, v.eot, v.pad}
    for t in range(v.n_tokens - 1, -1, -1) if v.n_tokens < 1000 else range(min(v.n_tokens, 512) - 1, -1, -1):
        if v.is_control(t) and t not in used and t not in reserved:
            return t
    for t in range(v.n_tokens):
        if t not in used and t not in reserved:
            return t
    raise ValueError("no unused token to use as the mask token")


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (the data set's identity in a report)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def kind_of(drafter_path: str | os.PathLike) -> str:
    """The trained kind of a drafter GGUF, from its architecture (``dflash``, ``eagle3``, else a
    draft model)."""
    from ..gguf_file import read_gguf

    arch = read_gguf(drafter_path).arch
    return arch if arch in ("dflash", "eagle3") else "draft"


def loop_drafter(kind: str) -> str | None:
    """The registered drafter kind of our loop that runs ``kind``'s files, or None in a checkout
    without one."""
    from ..speculative.drafters import drafter_kinds

    return next((k for k in LOOP_KINDS[kind] if k in drafter_kinds()), None)


def evaluate_loop(target: str | os.PathLike, drafter_path: str | os.PathLike, sequences: Sequence[dict[str, Any]], *,
                  n_max: int, kind: str | None = None, n_gpu_layers: int = -1, max_prompts: int = 40,
                  max_tokens: int = 128) -> dict[str, Any]:
    """τ and acceptance per position of an exported drafter through our loop (T = 0) on held-out
    prompts, and tokens/s against plain decoding measured in the same run.

    Returns ``{"n_prompts", "n_max", "tau", "acceptance_rate", "accepted_per_position",
    "plain_tok_s", "spec_tok_s", "identical_to_plain", "n_identical_to_plain"}`` (the prompts whose
    tokens equal plain decoding's: a batched verify may part from one-row decodes at a near-tie), or
    ``{"skipped": reason}`` when this
    checkout's loop has no drafter of that kind.
    """
    import pyllama_spec as ps

    kind = kind or kind_of(drafter_path)
    loop_kind = loop_drafter(kind)
    if loop_kind is None:
        return {"skipped": f"no drafter for {kind!r} files in this checkout's loop (looked for {LOOP_KINDS[kind]})"}
    held = [s for s in sequences if s["split"] == "heldout"][:max_prompts]
    spec = (loop_kind, {"path": str(drafter_path), "n_gpu_layers": n_gpu_layers})
    gen = ps.Generator(target, drafters={"trained": spec}, n_ctx=4096, n_gpu_layers=n_gpu_layers)
    stats = ps.SpecStats(n_max=n_max)
    t_plain = t_spec = 0.0
    n_plain = n_spec = 0
    n_same = 0
    for s in held:
        toks = s["tokens"][:s["n_prompt"]]
        r0 = gen.generate(prompt_tokens=toks, max_tokens=max_tokens, sync_stages=False)
        r1 = gen.generate(prompt_tokens=toks, drafter="trained", n_max=n_max, max_tokens=max_tokens,
                          sync_stages=False)
        n_same += r0.tokens == r1.tokens
        t_plain += r0.generation_seconds
        n_plain += r0.n_generated
        t_spec += r1.generation_seconds
        n_spec += r1.n_generated
        stats.merge(r1.stats)
    gen.close()
    return {"kind": kind, "n_prompts": len(held), "n_max": n_max, "tau": stats.mean_accepted_length,
            "acceptance_rate": stats.acceptance_rate, "accepted_per_position": stats.accepted_per_position,
            "plain_tok_s": n_plain / t_plain if t_plain else None, "spec_tok_s": n_spec / t_spec if t_spec else None,
            "identical_to_plain": n_same == len(held), "n_identical_to_plain": n_same}


def evaluate_native(target: str | os.PathLike, drafter_path: str | os.PathLike, sequences: Sequence[dict[str, Any]],
                    *, n_max: int, kind: str | None = None, n_gpu_layers: int = -1, max_prompts: int = 10,
                    max_tokens: int = 128) -> dict[str, Any]:
    """τ and acceptance of an exported drafter through llama.cpp's own ``llama-speculative-simple``
    (``--spec-type`` of the kind, T = 0) on held-out prompts.

    Returns ``{"spec_type", "n_prompts", "tau", "acceptance_rate", "n_drafted", "n_accept", "n_predict"}``
    (τ = predicted / verify steps, a step committing its accepted drafts + 1), or
    ``{"skipped": reason}`` without the native programs.
    """
    import pyllama_spec as ps

    from ..errors import UnsupportedError
    from ..native import find_program, run_speculative_simple

    kind = kind or kind_of(drafter_path)
    try:
        find_program("llama-speculative-simple")
    except UnsupportedError as exc:
        return {"skipped": str(exc)}
    vocab = ps.Model(target, vocab_only=True).vocab
    held = [s for s in sequences if s["split"] == "heldout"][:max_prompts]
    tot = {"n_drafted": 0, "n_accept": 0, "n_predict": 0}
    for s in held:
        text = vocab.detokenize(s["tokens"][:s["n_prompt"]], unparse_special=True)
        r = run_speculative_simple(target, drafter_path, text, n_max=n_max, n_predict=max_tokens,
                                   n_gpu_layers=99 if n_gpu_layers < 0 else n_gpu_layers, spec_type=KINDS[kind])
        for k in tot:
            tot[k] += getattr(r, k) or 0
    steps = tot["n_predict"] - tot["n_accept"]
    return {"spec_type": KINDS[kind], "n_prompts": len(held), "n_max": n_max, **tot,
            "tau": tot["n_predict"] / steps if steps else None,
            "acceptance_rate": tot["n_accept"] / tot["n_drafted"] if tot["n_drafted"] else None}


def run(target: str | os.PathLike, out_dir: str | os.PathLike, tc: TrainConfig | None = None, *,
        progress: bool = True, command: str | None = None, native: bool = True) -> dict[str, Any]:
    """The whole pipeline for one :class:`.config.TrainConfig`; returns the report (also written
    to ``out_dir/report.json``).

    Args:
        command: the command line that started the run, recorded in the report (default: this
            process's ``sys.argv``).
        native: also measure the exported file with ``llama-speculative-simple`` when installed.
    """
    import numpy as np
    import torch

    import pyllama_spec as ps

    from . import data as data_mod
    from .export import export_gguf, export_hf
    from .features import extract, load_sequences, output_head
    from .model import DFlashModel
    from .objectives import build_objective, refuse_soft_labels, target_layers
    from .trainer import train

    tc = tc or TrainConfig()
    refuse_soft_labels(tc)  # (before data generation and feature extraction, not after them in build_objective)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    data: str | Path | None = tc.data
    if data is None:
        data = out / "data.jsonl"
        data_mod.generate(target, data, n_gpu_layers=tc.n_gpu_layers, progress=progress)
    seqs = load_sequences(data, max_len=tc.max_len)
    tm = ps.Model(target, vocab_only=True)
    info = tm.info
    layers = target_layers(tc, tm.n_layer)
    t_feat = time.time()
    feats: list[np.ndarray] | None
    if layers:
        feats, emb = extract(target, seqs, layers, n_gpu_layers=tc.n_gpu_layers, progress=progress)
    else:
        feats = None
        with ps.Model(target, n_gpu_layers=0) as m:
            emb = m.token_embeddings()
    head = output_head(target, emb)
    t_feat = time.time() - t_feat
    mask = pick_mask_token(target, seqs) if tc.kind == "dflash" else None
    objective = build_objective(tc, info, seqs, emb, head, mask_token=mask, target=target)
    t_train = time.time()
    # train() only hands an objective the model that objective built, so a run is one Objective[its model];
    # mypy cannot solve train's model type from the union of the three kinds' objectives
    model, history = train(seqs, feats, cast("Objective[AnyModel]", objective), tc, progress=progress)
    t_train = time.time() - t_train
    c = objective.config
    if isinstance(model, DFlashModel):  # kind dflash
        export_hf(model, out / "hf")
    torch.save({"kind": tc.kind, "config": c.to_dict(), "train_config": tc.to_dict(),
                "state_dict": model.state_dict()}, out / "drafter.pt")
    paths: dict[str, Path] = {}
    for q in sorted({tc.quant, "f16"}):
        paths[q] = out / f"drafter-{q}.gguf"
        export_gguf(model, paths[q], target=target, quant=q, name=f"{tc.kind} drafter for {Path(target).name}")
    n_max = objective.n_max
    loop = {q: evaluate_loop(target, p, seqs, n_max=n_max, kind=tc.kind, n_gpu_layers=tc.n_gpu_layers,
                             max_prompts=tc.eval_prompts, max_tokens=tc.eval_tokens) for q, p in paths.items()}
    nat = evaluate_native(target, paths[tc.quant], seqs, n_max=n_max, kind=tc.kind, n_gpu_layers=tc.n_gpu_layers,
                          max_prompts=min(10, tc.eval_prompts), max_tokens=tc.eval_tokens) if native else None
    report = {
        "kind": tc.kind, "spec_type": tc.spec_type, "target": str(target),
        "command": command if command is not None else shlex.join([sys.executable, *sys.argv]),
        "seed": tc.seed, "data": str(data), "data_sha256": file_sha256(data), "train_config": tc.to_dict(),
        "config": c.to_dict(), "n_sequences": len(seqs),
        "n_train_answer_tokens": sum(len(s["tokens"]) - s["n_prompt"] for s in seqs if s["split"] == "train"),
        "n_heldout": sum(s["split"] == "heldout" for s in seqs), "history": history,
        "seconds": {"features": t_feat, "train": t_train, "total": time.time() - t0},
        "device": str(tc.device or ("cuda" if torch.cuda.is_available() else "cpu")),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "n_params": int(sum(int(np.prod(p.shape)) for p in model.parameters() if p.requires_grad)),
        "gguf": {q: {"path": p.name, "bytes": p.stat().st_size} for q, p in paths.items()},
        "loop_eval": loop, "native_eval": nat,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def config_from_args(a: argparse.Namespace) -> TrainConfig:
    """The :class:`.config.TrainConfig` of parsed command-line arguments."""
    return TrainConfig(kind=a.kind, data=a.data, max_len=a.max_len, layers=a.layers, drafter_layers=a.drafter_layers,
                       block_size=a.block_size, n_max=a.n_max, draft_embd=a.draft_embd, draft_vocab=a.draft_vocab,
                       pad_multiple=a.pad_multiple, eagle3_attention=a.eagle3_attention, steps=a.steps,
                       soft_weight=a.soft_weight,
                       batch=a.batch, n_blocks=a.blocks, lr=a.lr, warmup=a.warmup,
                       eval_every=a.eval_every, max_seconds=a.seconds, max_eval_seqs=a.eval_seqs, seed=a.seed,
                       device=a.device, quant=a.quant, n_gpu_layers=a.n_gpu_layers, eval_prompts=a.eval_prompts,
                       eval_tokens=a.eval_tokens)


def parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    ap = argparse.ArgumentParser(prog="python -m pyllama_spec.train", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    ap.add_argument("target", help="the target's GGUF")
    ap.add_argument("out_dir", help="folder for the drafter, its checkpoint and report.json")
    ap.add_argument("--kind", default=d.kind, choices=sorted(KINDS), help="drafter kind to train")
    ap.add_argument("--data", help="JSON lines from pyllama_spec.train.data (default: generate them)")
    ap.add_argument("--max-len", type=int, default=d.max_len, help="cut sequences at this many tokens")
    ap.add_argument("--layers", type=ints, help="target layer ids, comma-separated (default: per kind)")
    ap.add_argument("--drafter-layers", type=int, help="drafter layers (default: dflash 2, draft 4; eagle3 has 1)")
    ap.add_argument("--block-size", type=int, default=d.block_size, help="DFlash block (draft length + 1)")
    ap.add_argument("--n-max", type=int, help="draft length: EAGLE-3's training-time-test depth, the "
                                              "validation's draft length (default 7; DFlash: block − 1)")
    ap.add_argument("--draft-embd", type=int, help="draft model width (default: the target's)")
    ap.add_argument("--draft-vocab", type=int, default=d.draft_vocab,
                    help="EAGLE-3 head's own vocabulary size (0: the target's output head)")
    ap.add_argument("--soft-weight", type=float, default=d.soft_weight,
                    help="DFlash, online: share of the loss against the target's own distribution at each row "
                         "(distillation; 0: its greedy token only)")
    ap.add_argument("--pad-multiple", type=int, default=d.pad_multiple,
                    help="round each batch's length up to a multiple of this (fewer distinct shapes: kernels that "
                         "plan per shape, cuDNN attention on an H100, plan each once)")
    ap.add_argument("--eagle3-attention", default=d.eagle3_attention, choices=list(EAGLE3_ATTENTION),
                    help="how the EAGLE-3 head's training-time test attends: scores written out, one SDPA call a "
                         "step, or SDPA without cuDNN's kernel")
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--seconds", type=float, help="training-time cap in seconds (evaluations included)")
    ap.add_argument("--batch", type=int, default=d.batch, help="sequences per step")
    ap.add_argument("--blocks", type=int, default=d.n_blocks, help="DFlash anchor blocks per sequence and step")
    ap.add_argument("--lr", type=float, default=d.lr)
    ap.add_argument("--warmup", type=int, default=d.warmup)
    ap.add_argument("--eval-every", type=int, default=d.eval_every)
    ap.add_argument("--eval-seqs", type=int, help="held-out sequences of the periodic validation (default: all)")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--device", help="torch device (default: CUDA when available)")
    ap.add_argument("--quant", default=d.quant, choices=list(QUANTS))
    ap.add_argument("--eval-prompts", type=int, default=d.eval_prompts)
    ap.add_argument("--eval-tokens", type=int, default=d.eval_tokens)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=d.n_gpu_layers)
    ap.add_argument("--no-native", action="store_true", help="skip the llama-speculative-simple measurement")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    from ..errors import PyllamaSpecError

    args = sys.argv[1:] if argv is None else list(argv)
    a = parser().parse_args(args)
    try:
        tc = config_from_args(a)
        rep = run(a.target, a.out_dir, tc, native=not a.no_native,
                  command=shlex.join(["python", "-m", "pyllama_spec.train", *args]))
    except (PyllamaSpecError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: rep[k] for k in ("history", "loop_eval", "native_eval", "seconds", "gguf")}, indent=2))
    return 0


__all__ = ["run", "main", "config_from_args", "evaluate_loop", "evaluate_native", "pick_mask_token", "file_sha256"]
