"""Train several DFlash drafter configurations for one target on the same data and features,
measure each through the real loop, keep the best. (What pyllama_spec.train.pipeline does for
one configuration, with the features extracted once for all.)

    python benchmarks/train_configs.py TARGET.gguf DATA.jsonl WORK_DIR --out OUT_DIR [--seconds 70]

Writes WORK_DIR/<config>/ (HF checkpoint, GGUFs), OUT_DIR/train_report.json, copies the best
q8_0 GGUF to OUT_DIR/smollm2-dflash-q8_0.gguf and its path to WORK_DIR/best.txt. "Best" = the
highest generation speed of the drafter through our loop at n_max = block − 1 among those
whose q8_0 file is at most 16 MiB.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

import pyllama_spec as ps
from pyllama_spec.train.features import extract, load_sequences, output_head
from pyllama_spec.train.pipeline import evaluate_loop, pick_mask_token

CONFIGS = [
    {"name": "L2-B8-t4", "layers": [1, 10, 19, 29], "drafter_layers": 2, "block": 8},
    {"name": "L3-B8-t4", "layers": [1, 10, 19, 29], "drafter_layers": 3, "block": 8},
    {"name": "L2-B16-t4", "layers": [1, 10, 19, 29], "drafter_layers": 2, "block": 16},
    {"name": "L2-B8-t2", "layers": [15, 29], "drafter_layers": 2, "block": 8},
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("data")
    ap.add_argument("work")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=60.0, help="training time per configuration")
    ap.add_argument("--configs", default=",".join(c["name"] for c in CONFIGS))
    ap.add_argument("--eval-prompts", type=int, default=40)
    a = ap.parse_args()
    work, out = Path(a.work), Path(a.out)
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    seqs = load_sequences(a.data, max_len=1024)
    configs = [c for c in CONFIGS if c["name"] in a.configs.split(",")]
    union = sorted({i for c in configs for i in c["layers"]})
    feats_u, emb = extract(a.target, seqs, union, progress=False)
    head = output_head(a.target, emb)
    info = ps.Model(a.target, vocab_only=True).info
    mask = pick_mask_token(a.target, seqs)
    n_embd = emb.shape[1]
    # torch only now: loaded before llama.cpp's CUDA backend, its CUDA libraries crash ggml-cuda
    import torch

    from pyllama_spec.train.export import export_gguf, export_hf
    from pyllama_spec.train.model import DFlashConfig
    from pyllama_spec.train.trainer import train

    print(f"{len(seqs)} sequences ({sum(s['split'] == 'heldout' for s in seqs)} held out), "
          f"{sum(len(s['tokens']) for s in seqs)} tokens; features of layers {union} in {time.time() - t0:.1f} s; "
          f"mask token {mask}", flush=True)
    results = []
    for cfg in configs:
        cols = np.concatenate([np.arange(union.index(i) * n_embd, (union.index(i) + 1) * n_embd) for i in cfg["layers"]])
        feats = [f[:, cols] for f in feats_u]
        c = DFlashConfig.for_target(info, emb.shape[0], n_layer=cfg["drafter_layers"], target_layer_ids=cfg["layers"],
                                    block_size=cfg["block"], mask_token_id=mask)
        t1 = time.time()
        model, hist = train(seqs, feats, emb, head, c, steps=20000, batch=16, n_blocks=32, lr=1.5e-3,
                            eval_every=10**9, max_seconds=a.seconds, progress=False)
        t_train = time.time() - t1
        d = work / cfg["name"]
        export_hf(model, d / "hf")
        gg = d / "drafter-q8_0.gguf"
        export_gguf(model, gg, target=a.target, quant="q8_0", name=f"DFlash drafter for SmolLM2-135M-Instruct ({cfg['name']})")
        ev = evaluate_loop(a.target, gg, seqs, n_max=cfg["block"] - 1, max_prompts=a.eval_prompts, max_tokens=128)
        row = {**cfg, "steps": hist[-1]["step"], "train_seconds": t_train, "torch_heldout_tau": hist[-1]["tau"],
               "loss": hist[-1]["loss"], "q8_0_bytes": gg.stat().st_size, "loop": ev,
               "speedup": ev["dflash_tok_s"] / ev["plain_tok_s"], "gguf": str(gg)}
        results.append(row)
        print(f"{cfg['name']}: {row['steps']} steps in {t_train:.0f} s, loss {row['loss']:.3f}, torch τ "
              f"{row['torch_heldout_tau']:.2f}, loop τ {ev['tau']:.2f} (acc {100 * ev['acceptance_rate']:.1f}%), "
              f"{ev['dflash_tok_s']:.0f} vs {ev['plain_tok_s']:.0f} tok/s plain (×{row['speedup']:.2f}), "
              f"identical {ev['identical_to_plain']}, {row['q8_0_bytes'] / 2**20:.1f} MiB", flush=True)
        (out / "train_report.json").write_text(json.dumps({"results": results, "n_sequences": len(seqs),
                                                           "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"}, indent=2))
    ok = [r for r in results if r["q8_0_bytes"] <= 16 * 2**20]
    best = max(ok, key=lambda r: (r["speedup"], r["loop"]["tau"]))
    shutil.copy(best["gguf"], out / "smollm2-dflash-q8_0.gguf")
    (work / "best.txt").write_text(best["gguf"])
    print(f"best: {best['name']}  total {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
