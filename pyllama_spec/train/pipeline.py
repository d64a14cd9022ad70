"""End-to-end: self-distilled data → target features → training → export → evaluation.

    python -m pyllama_spec.train TARGET.gguf OUT_DIR [--data data.jsonl] [--layers 1,10,19,29]
        [--drafter-layers 2] [--block-size 8] [--steps 2000] [--quant q8_0]

Writes into OUT_DIR: ``hf/`` (HF-format checkpoint), ``drafter-{quant}.gguf``, ``drafter-f16.gguf``
and ``report.json`` (settings, training history, held-out τ through the real loop).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np


def pick_mask_token(target_path, sequences) -> int:
    """An unused control token of the target's vocabulary to serve as the mask token."""
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


def default_layers(n_layer: int, k: int = 4) -> list:
    """k layer ids spread from the second layer to the last (llama.cpp ids: layer inputs)."""
    return sorted({int(round(x)) for x in np.linspace(1, n_layer - 1, k)})


def evaluate_loop(target_path, drafter_path, sequences, *, n_max: int, n_gpu_layers: int = -1,
                  max_prompts: int = 40, max_tokens: int = 128) -> dict:
    """τ and acceptance per position of the exported GGUF through our loop (T = 0) on held-out
    prompts, and tokens/s against plain decoding measured in the same run."""
    import pyllama_spec as ps

    held = [s for s in sequences if s["split"] == "heldout"][:max_prompts]
    gen = ps.Generator(target_path, drafters={"dflash": str(drafter_path)}, n_ctx=4096, n_gpu_layers=n_gpu_layers)
    stats = ps.SpecStats(n_max=n_max)
    t_plain = t_spec = 0.0
    n_plain = n_spec = 0
    same = True
    for s in held:
        toks = s["tokens"][:s["n_prompt"]]
        r0 = _generate_tokens(gen, toks, None, n_max, max_tokens)
        r1 = _generate_tokens(gen, toks, "dflash", n_max, max_tokens)
        same &= r0.tokens == r1.tokens
        t_plain += r0.generation_seconds
        n_plain += r0.n_generated
        t_spec += r1.generation_seconds
        n_spec += r1.n_generated
        stats.merge(r1.stats)
    gen.close()
    return {"n_prompts": len(held), "n_max": n_max, "tau": stats.mean_accepted_length,
            "acceptance_rate": stats.acceptance_rate, "accepted_per_position": stats.accepted_per_position,
            "plain_tok_s": n_plain / t_plain if t_plain else None, "dflash_tok_s": n_spec / t_spec if t_spec else None,
            "identical_to_plain": bool(same)}


def _generate_tokens(gen, prompt_tokens, drafter, n_max, max_tokens):
    return gen.generate(prompt_tokens=prompt_tokens, drafter=drafter, n_max=n_max if drafter else None,
                        max_tokens=max_tokens, sync_stages=False)


def run(target, out_dir, *, data=None, layers=None, drafter_layers: int = 2, block_size: int = 8,
        steps: int = 2000, batch: int = 16, n_blocks: int = 32, lr: float = 1e-3, quant: str = "q8_0",
        n_gpu_layers: int = -1, eval_prompts: int = 40, eval_tokens: int = 128, max_len: int = 1024,
        features_cache=None, device=None, progress: bool = True) -> dict:
    """The whole pipeline; returns the report (also written to ``out_dir/report.json``)."""
    import torch

    import pyllama_spec as ps

    from . import data as data_mod
    from .export import export_gguf, export_hf
    from .features import extract, load_sequences, output_head
    from .model import DFlashConfig
    from .trainer import train

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    if data is None:
        data = out / "data.jsonl"
        data_mod.generate(target, data, n_gpu_layers=n_gpu_layers, progress=progress)
    seqs = load_sequences(data, max_len=max_len)
    tm = ps.Model(target, vocab_only=True)
    n_layer_t = tm.n_layer
    info = tm.info
    layers = list(layers or default_layers(n_layer_t))
    mask = pick_mask_token(target, seqs)
    t_feat = time.time()
    feats, emb = extract(target, seqs, layers, n_gpu_layers=n_gpu_layers, progress=progress)
    head = output_head(target, emb)
    t_feat = time.time() - t_feat
    c = DFlashConfig.for_target(info, emb.shape[0], n_layer=drafter_layers, target_layer_ids=layers,
                                block_size=block_size, mask_token_id=mask)
    t_train = time.time()
    model, history = train(seqs, feats, emb, head, c, steps=steps, batch=batch, n_blocks=n_blocks, lr=lr,
                           device=device, progress=progress)
    t_train = time.time() - t_train
    export_hf(model, out / "hf")
    torch.save({"config": c.to_dict(), "state_dict": model.state_dict()}, out / "drafter.pt")
    paths = {}
    for q in sorted({quant, "f16"}):
        paths[q] = out / f"drafter-{q}.gguf"
        export_gguf(model, paths[q], target=target, quant=q, name=f"DFlash drafter for {Path(target).name}")
    n_train_tok = sum(len(s["tokens"]) - s["n_prompt"] for s in seqs if s["split"] == "train")
    evals = {q: evaluate_loop(target, p, seqs, n_max=block_size - 1, n_gpu_layers=n_gpu_layers,
                              max_prompts=eval_prompts, max_tokens=eval_tokens) for q, p in paths.items()}
    report = {
        "target": str(target), "config": c.to_dict(), "steps": steps, "batch": batch, "blocks_per_seq": n_blocks,
        "lr": lr, "n_sequences": len(seqs), "n_train_answer_tokens": n_train_tok,
        "n_heldout": sum(s["split"] == "heldout" for s in seqs), "history": history,
        "seconds": {"features": t_feat, "train": t_train, "total": time.time() - t0},
        "device": str(device or ("cuda" if torch.cuda.is_available() else "cpu")),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "gguf": {q: {"path": p.name, "bytes": p.stat().st_size} for q, p in paths.items()},
        "loop_eval": evals,
    }
    (out / "report.json").write_text(json.dumps(report, indent=2))
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama_spec.train", description=__doc__.split("\n\n")[0])
    ap.add_argument("target")
    ap.add_argument("out_dir")
    ap.add_argument("--data", help="JSON lines from pyllama_spec.train.data (default: generate them)")
    ap.add_argument("--layers", type=lambda s: [int(x) for x in s.split(",")], help="target layer ids")
    ap.add_argument("--drafter-layers", type=int, default=2)
    ap.add_argument("--block-size", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--blocks", type=int, default=32, help="anchor blocks per sequence and step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--quant", default="q8_0", choices=["f16", "q8_0", "f32"])
    ap.add_argument("--eval-prompts", type=int, default=40)
    ap.add_argument("-ngl", "--n-gpu-layers", type=int, default=-1)
    a = ap.parse_args(argv)
    rep = run(a.target, a.out_dir, data=a.data, layers=a.layers, drafter_layers=a.drafter_layers,
              block_size=a.block_size, steps=a.steps, batch=a.batch, n_blocks=a.blocks, lr=a.lr, quant=a.quant,
              n_gpu_layers=a.n_gpu_layers, eval_prompts=a.eval_prompts)
    print(json.dumps({k: rep[k] for k in ("history", "loop_eval", "seconds", "gguf")}, indent=2))
    return 0
