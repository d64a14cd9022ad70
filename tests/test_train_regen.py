"""The transformers regen engines on a tiny target — ``hf`` (left-padded static batches) and ``hf-cb``
(``generate_batch``, continuous batching): their greedy answers are transformers' own one-prompt
``generate`` answers, token for token."""
from __future__ import annotations

import gzip
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import pyllama_spec as ps  # noqa: E402
from pyllama_spec.fixtures import write_tiny_target  # noqa: E402
from pyllama_spec.train import prompts as P  # noqa: E402


@pytest.mark.parametrize("engine", ["hf-cb", "hf"])
def test_regen_hf_greedy_equals_one_prompt_generate(tmp_path, engine):
    from pyllama_spec.train.online import load_hf_target
    from pyllama_spec.train.regen import regenerate

    target = tmp_path / "tiny.gguf"
    write_tiny_target(target, n_layer=2, n_embd=32, n_head=2, n_head_kv=1, n_ff=64, seed=5)
    model = load_hf_target(target, dtype=torch.float32)
    if engine == "hf-cb" and not hasattr(model, "generate_batch"):
        pytest.skip(f"transformers {transformers.__version__} has no generate_batch (continuous batching)")
    recs = [{"id": f"p{i}", "source": "seed", "task": "t", "split": "train", "turns": [f"question {i} about {w}"]}
            for i, w in enumerate(["cats", "dogs", "the sea", "maps", "rain", "code"])]
    P.write_prompts(tmp_path / "p.jsonl", recs)
    man = regenerate(target, tmp_path / "p.jsonl", tmp_path / "ans", engine=engine, dtype="float32", max_tokens=8,
                     sampled=0.0, batch=4, progress=False, command="test")
    assert man["engine"] == engine and man["n_answers"] == len(recs) and man["complete"]
    lines = [json.loads(x) for x in gzip.open(tmp_path / "ans" / "answers-s0of1-00.jsonl.gz", "rt")]
    assert sorted(d["id"] for d in lines) == sorted(r["id"] for r in recs)
    vocab = ps.Model(target, vocab_only=True).vocab
    for d in lines:
        a = d["answer_tokens"]
        assert len(a) == 8 or (a and vocab.is_eog(a[-1]))  # full length, or ended by the target itself
        p = d["prompt_tokens"]
        with torch.no_grad():
            g = model.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                               max_new_tokens=8, do_sample=False)
        ref = g[0, len(p):].tolist()
        # (regen cuts after the first end-of-generation token; generate pads after it)
        assert a == ref[:len(a)]
