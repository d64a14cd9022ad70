"""An EAGLE-3 head's τ replayed in PyTorch — the training run's validation arithmetic (``trainer.evaluate``: every
answer position an anchor, the loop replayed greedily) — on the same held-out prompts that ``heldout_tau.py`` runs
through llama.cpp, to tell a train / inference difference from a difference of prompt sets.

Why: the first online EAGLE-3 head for SmolLM2 (RESULTS.md 15.9) gave a validation τ of 2.56 and a loop τ of 2.12
(first position 0.69 vs 0.54), while the draft model's loop matched its replay on the same prompts (3.78 vs 3.85).

The head comes from its GGUF (``train.export.read_eagle3_gguf``: q8_0 dequantized), the target (its GGUF, loaded by
transformers) computes the features of each prompt + answer on the CPU or GPU.

    python benchmarks/eagle3_replay.py HEAD.gguf [--data heldout-greedy.jsonl.gz] [--n-prompts 60] [--max-tokens 128]
"""
from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from pyllama_spec.assets import smollm2_path
from pyllama_spec.gguf_file import read_gguf

HELD = Path(__file__).parent / "data" / "issue20-h200-torch" / "heldout-greedy.jsonl.gz"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("head", help="the EAGLE-3 head's GGUF")
    ap.add_argument("--target", help="the target's GGUF (default: SmolLM2-135M-Instruct)")
    ap.add_argument("--data", default=str(HELD), help="held-out answers (prompt_tokens, answer_tokens)")
    ap.add_argument("--n-prompts", type=int, default=60)
    ap.add_argument("--max-tokens", type=int, default=128, help="answer tokens a prompt (heldout_tau.py's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args()
    import torch

    from pyllama_spec.train.eagle3 import Eagle3Config, Eagle3Model
    from pyllama_spec.train.export import read_eagle3_gguf
    from pyllama_spec.train.objectives import Eagle3Objective
    from pyllama_spec.train.online import TargetFeatures, load_hf_target, token_matrices
    from pyllama_spec.train.trainer import evaluate

    target = a.target or str(smollm2_path())
    shape, state = read_eagle3_gguf(a.head)
    dev = torch.device(a.device)
    hf = load_hf_target(target, dtype=torch.float32, device=dev)
    emb, head = token_matrices(hf)
    c = Eagle3Config.for_target(read_gguf(target), emb.shape[0], target_layer_ids=shape["target_layer_ids"],
                                draft_vocab=len(shape["d2t"]), d2t=shape["d2t"])
    model = Eagle3Model(c, torch.tensor(emb), torch.tensor(head))
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    if missing or unexpected:
        raise SystemExit(f"the head does not fit: missing {missing}, unexpected {unexpected}")
    model.to(dev)
    with gzip.open(a.data, "rt") as fh:
        rows = [json.loads(line) for line in fh][:a.n_prompts]
    seqs = [{"split": "heldout", "tokens": r["prompt_tokens"] + r["answer_tokens"][:a.max_tokens],
             "n_prompt": len(r["prompt_tokens"])} for r in rows]
    tf = TargetFeatures(hf, c.target_layer_ids)
    with torch.no_grad():
        feats = [tf(torch.tensor([s["tokens"]], device=dev))[0].float().cpu().numpy() for s in seqs]
    tf.close()
    obj = Eagle3Objective(c, emb, head)
    res = evaluate(model, obj, seqs, feats, list(range(len(seqs))), dev)
    print(f"{Path(a.head).name}: replayed τ {res['tau']:.3f} on {len(seqs)} prompts × {a.max_tokens} tokens, n_max "
          f"{obj.n_max}; per position " + " ".join(f"{p:.2f}" for p in res["per_position"]))
    if a.json:
        Path(a.json).write_text(json.dumps({"head": str(a.head), "data": a.data, **res,
                                            "settings": vars(a)}, indent=1))


if __name__ == "__main__":
    main()
