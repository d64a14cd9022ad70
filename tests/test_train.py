"""The DFlash training pipeline: the PyTorch drafter computes what llama.cpp computes, and the
pipeline runs end to end on the tiny fixtures (a few steps, no quality bar)."""
import json

import numpy as np
import pytest

import pyllama_spec as ps

from .conftest import EXACT, assert_same_tokens

torch = pytest.importorskip("torch")
# the tiny models gain nothing from intra-op threads, and on a busy 2-core machine torch's threads
# spin against llama.cpp's (a 4-step training run: 46 s wall with 2 threads, 11 s with 1)
torch.set_num_threads(1)


def test_torch_drafter_matches_llama_cpp(tiny, tmp_path):
    """Same weights, same features, same block: the logits of our PyTorch DFlash model and of
    llama.cpp's DFlash graph (exported GGUF, f32) agree."""
    from pyllama_spec.train.export import export_gguf
    from pyllama_spec.train.model import DFlashConfig, DFlashModel

    target = ps.Model(tiny["target"])
    emb = target.token_embeddings()
    layers = [1, 3]
    c = DFlashConfig(n_embd=64, n_layer=2, n_head=4, n_head_kv=2, head_dim=16, n_ff=128, n_vocab=emb.shape[0],
                     target_layer_ids=layers, block_size=8, mask_token_id=tiny["<|mask|>"])
    torch.manual_seed(0)
    from pyllama_spec.train.features import output_head

    head = output_head(tiny["target"], emb)
    assert head.shape == emb.shape
    m = DFlashModel(c, torch.tensor(emb), torch.tensor(head))
    with torch.no_grad():  # norms away from 1 so that a mix-up of norm weights would show
        for name, p in m.named_parameters():
            p.normal_(1.0 if "norm" in name else 0.0, 0.3 if "norm" in name else 0.08)
    path = tmp_path / "d.gguf"
    export_gguf(m, path, target=tiny["target"], quant="f32")

    tctx = ps.Context(target, n_ctx=256, n_batch=64)
    dm = ps.Model(path)
    dctx = ps.Context(dm, n_ctx=256, n_batch=64, ctx_other=tctx, causal_attn=False)
    dctx.set_embeddings_nextn(True, True)
    tctx.enable_layer_inputs(layers)
    toks = target.vocab.tokenize("the drafter must agree with llama.cpp")
    P = len(toks) - 1
    tctx.decode(toks[:P], logits="none")
    feats = np.concatenate([tctx.layer_input(i) for i in layers], axis=1)
    dctx.decode_embd(feats, np.arange(P))
    block = [toks[P]] + [c.mask_token_id] * 7
    dctx.decode(block, np.arange(P, P + 8), logits="all")
    ref = dctx.logits()[1:].copy()

    mask = torch.zeros(1, 1, 8, P + 8, dtype=torch.bool)
    mask[..., :] = True
    with torch.no_grad():
        h = m(torch.tensor(feats)[None], torch.arange(P)[None], torch.tensor(block)[None],
              torch.arange(P, P + 8)[None], mask)
        ours = m.logits(h)[0, 1:].numpy()
    np.testing.assert_allclose(ours, ref, rtol=2e-3, atol=2e-3 * np.abs(ref).max())
    assert (ours.argmax(1) == ref.argmax(1)).all()


@pytest.fixture(scope="module")
def tiny_data(tiny, tmp_path_factory):
    from pyllama_spec.train import data

    d = tmp_path_factory.mktemp("data") / "data.jsonl"
    n = data.generate(tiny["target"], d, n_chat=24, n_code=6, max_tokens=32, progress=False)
    assert n == 30 and sum(1 for _ in open(d)) == 30
    lines = [json.loads(x) for x in open(d)]
    assert {x["split"] for x in lines} <= {"train", "heldout"} and all(x["answer_tokens"] for x in lines)
    return d


@pytest.mark.parametrize("kind", ["dflash", "eagle3", "draft"])
def test_pipeline_end_to_end_on_tiny(tiny, tiny_data, tmp_path, kind):
    """Every kind: same data, a few steps, export, load in llama.cpp, measured through
    llama-speculative-simple with its spec type and through our loop where this checkout has the
    drafter (no quality bar on a random target)."""
    from pyllama_spec.train import TrainConfig
    from pyllama_spec.train.pipeline import file_sha256, run

    tc = TrainConfig(kind=kind, data=str(tiny_data), max_len=128, steps=4, batch=4, n_blocks=4, eval_every=4,
                     eval_prompts=2, eval_tokens=8, n_max=3, seed=3)
    rep = run(tiny["target"], tmp_path / "out", tc, progress=False, command="python -m pyllama_spec.train ...")
    out = tmp_path / "out"
    assert json.loads((out / "report.json").read_text())["train_config"] == tc.to_dict()
    assert rep["seed"] == 3 and rep["data_sha256"] == file_sha256(tiny_data) and rep["command"].startswith("python")
    assert [h["step"] for h in rep["history"]] == [4] and 1.0 <= rep["history"][0]["tau"] <= 8.0
    arch = {"dflash": "dflash", "eagle3": "eagle3", "draft": "llama"}[kind]
    for q in ("q8_0", "f16"):
        drafter = ps.Model(out / f"drafter-{q}.gguf")
        assert drafter.arch == arch and drafter.target_layer_ids == rep["config"].get("target_layer_ids", [])
        ev = rep["loop_eval"][q]
        assert "skipped" in ev or ev["identical_to_plain"] or not EXACT
    if kind == "eagle3":
        assert rep["config"]["target_layer_ids"] == [0, 2, 3] and rep["config"]["n_steps"] == 3
    if kind == "dflash":
        cfg = json.loads((out / "hf" / "config.json").read_text())
        assert cfg["architectures"] == ["DFlashDraftModel"]
        assert cfg["dflash_config"]["target_layer_ids"] == [i - 1 for i in rep["config"]["target_layer_ids"]]
        gen = ps.Generator(tiny["target"], drafters={"trained": out / "drafter-q8_0.gguf"}, n_ctx=512)
        ref = gen.generate("hello", max_tokens=20).tokens
        assert_same_tokens(gen.generate("hello", drafter="trained", max_tokens=20).tokens, ref)
        gen.close()
    nat = rep["native_eval"]
    if "skipped" not in nat:
        assert nat["spec_type"] == tc.spec_type and nat["n_prompts"] == 2 and nat["n_drafted"] > 0
        assert nat["n_predict"] > 0 and 1.0 <= nat["tau"] <= 8.0


def test_train_config_checks_and_round_trips():
    from pyllama_spec.errors import InvalidArgumentError
    from pyllama_spec.train import TrainConfig

    tc = TrainConfig(kind="eagle3", layers=[2, 15, 27], draft_vocab=8192, max_seconds=300.0, seed=7)
    assert TrainConfig.from_dict(tc.to_dict()) == tc and tc.spec_type == "draft-eagle3" and tc.draft_length == 7
    assert TrainConfig(block_size=16).draft_length == 15 and TrainConfig(kind="draft", n_max=4).draft_length == 4
    for bad in [dict(kind="medusa"), dict(quant="q4_0"), dict(steps=0), dict(block_size=1), dict(lr=0),
                dict(kind="eagle3", layers=[1, 2]), dict(kind="eagle3", drafter_layers=2), dict(draft_vocab=-1),
                dict(n_max=0), dict(max_seconds=-5), dict(pad_multiple=0), dict(eagle3_attention="flash")]:
        with pytest.raises(InvalidArgumentError):
            TrainConfig(**bad)
    with pytest.raises(InvalidArgumentError, match="unknown TrainConfig fields"):
        TrainConfig.from_dict({**tc.to_dict(), "stpes": 3})


def test_cli_builds_the_train_config():
    from pyllama_spec.train import TrainConfig
    from pyllama_spec.train.pipeline import config_from_args, parser

    a = parser().parse_args(["t.gguf", "out", "--kind", "draft", "--drafter-layers", "5", "--draft-embd", "256",
                             "--seconds", "300", "--batch", "32", "--lr", "2e-3", "--seed", "11", "--data", "d.jsonl"])
    assert config_from_args(a) == TrainConfig(kind="draft", drafter_layers=5, draft_embd=256, max_seconds=300.0,
                                              batch=32, lr=2e-3, seed=11, data="d.jsonl")
    assert config_from_args(parser().parse_args(["t.gguf", "out"])) == TrainConfig()
    a = parser().parse_args(["t.gguf", "out", "--kind", "eagle3", "--pad-multiple", "64", "--eagle3-attention",
                             "sdpa-no-cudnn"])
    assert config_from_args(a) == TrainConfig(kind="eagle3", pad_multiple=64, eagle3_attention="sdpa-no-cudnn")


def test_batched_self_distillation_equals_generator(tiny):
    """The batched decoder of the data step (many prompts, one KV stream each, prompts joining
    as others finish) gives the answers of the plain Generator."""
    from pyllama_spec.train import data

    gen = ps.Generator(tiny["target"], n_ctx=512)
    items = data.prompt_items(9, 3)
    prompts = [gen.tokenize_prompt(messages=p) if k == "chat" else gen.tokenize_prompt(prompt=p)[:64]
               for k, p in items]
    ref = [gen.generate(prompt_tokens=p, max_tokens=24).tokens for p in prompts]
    got = {}
    for i, answer, ended in data.answer_batched(gen.model, prompts, max_tokens=24, n_parallel=4, n_batch=256,
                                                progress=False):
        assert i not in got and len(answer) <= 24
        assert ended == gen.model.vocab.is_eog(answer[-1])
        got[i] = [t for t in answer if not gen.model.vocab.is_eog(t)]
    assert sorted(got) == list(range(len(prompts)))
    for i in range(len(prompts)):  # (the tiny random model has many near-ties: on a GPU check a prefix)
        assert_same_tokens(got[i], ref[i], min_prefix=4)
    gen.close()


def test_batched_answers_drawn_in_the_graph_equal_the_host_argmax(tiny):
    """Greedy answers drawn by the backend sampler on every stream (the default at T = 0: no logits
    to the host) are the host argmax's, token for token; a sampled prompt refuses that path."""
    from pyllama_spec.train import data

    gen = ps.Generator(tiny["target"], n_ctx=512)
    prompts = [gen.tokenize_prompt(messages=p) for k, p in data.prompt_items(6, 0)]
    runs = [{i: a for i, a, _ in data.answer_batched(gen.model, prompts, max_tokens=12, n_parallel=3, n_batch=256,
                                                     progress=False, backend_sampling=b)} for b in (False, True)]
    assert sorted(runs[0]) == list(range(len(prompts)))
    assert runs[1] == runs[0]  # same ubatches, same kernels: identical on every backend
    with pytest.raises(ps.InvalidArgumentError, match="backend_sampling needs every temperature 0"):
        next(data.answer_batched(gen.model, prompts, max_tokens=4, temperatures=[0.7] * len(prompts),
                                 progress=False, backend_sampling=True))
    gen.close()


def test_batched_answers_with_gap_filling_rows(tiny, monkeypatch):
    """fill_gaps: every decode names the streams 0..n_parallel-1 in order (llama.cpp's per-stream KV
    splits a batch at every gap in the sequence ids: one more pass over the model each), the dummy
    rows leave no trace (the same answers, greedy and sampled, as without them), and a prompt as long
    as n_batch still starts beside the other streams' rows."""
    from pyllama_spec.context import Context
    from pyllama_spec.train import data

    gen = ps.Generator(tiny["target"], n_ctx=512)
    prompts = [gen.tokenize_prompt(messages=p) for k, p in data.prompt_items(7, 0)]
    prompts.append(list(prompts[0]) * (100 // len(prompts[0]) + 1))  # the longest: n_batch below
    n_batch = max(len(p) for p in prompts)
    temps = [0.0, 0.7] * 4
    seqs = []
    real = Context.decode

    def spy(self, tokens, pos=None, *, seq_id=None, logits="last"):
        if seq_id is not None:
            seqs.append(list(np.asarray(seq_id)))
        return real(self, tokens, pos, seq_id=seq_id, logits=logits)

    runs, steps = [], []
    for fill in (False, True):
        monkeypatch.setattr(Context, "decode", spy)
        seqs.clear()
        tm = {}
        runs.append({i: a for i, a, _ in data.answer_batched(gen.model, prompts, max_tokens=10, n_parallel=3,
                                                             n_batch=n_batch, progress=False, temperatures=temps,
                                                             seed=5, fill_gaps=fill, timing=tm)})
        monkeypatch.undo()
        steps.append((list(seqs), tm))
    assert sorted(runs[0]) == list(range(len(prompts)))
    assert runs[1] == runs[0]
    filled, tm = steps[1]
    assert tm["dummy_rows"] > 0 and steps[0][1]["dummy_rows"] == 0
    for ids in filled:  # every stream in every decode, in order (a new prompt's tokens are consecutive)
        assert ids == sorted(ids) and sorted(set(ids)) == [0, 1, 2]
    for ids in steps[0][0]:  # without the rows: in order too, with gaps
        assert ids == sorted(ids)
    gen.close()


def test_data_generation_resumes_after_a_killed_run(tiny, tmp_path):
    from pyllama_spec.train import data

    d = tmp_path / "data.jsonl"
    assert data.generate(tiny["target"], d, n_chat=6, n_code=2, max_tokens=8, n_parallel=4, progress=False) == 8
    full = d.read_text().splitlines()
    d.write_text("\n".join(full[:5]) + "\n" + full[5][:20])  # killed while writing line 6
    assert data.generate(tiny["target"], d, n_chat=6, n_code=2, max_tokens=8, n_parallel=4, progress=False) == 8
    again = d.read_text().splitlines()
    assert again[:5] == full[:5]  # kept as they were; the cut prompt and the rest answered again
    assert sorted(json.loads(x)["key"] for x in again) == sorted(json.loads(x)["key"] for x in full)


def test_prompt_sets_are_deterministic_and_split():
    from pyllama_spec.train import data

    a, b = data.prompt_items(200, 40), data.prompt_items(200, 40)
    assert a == b and len(a) == 240
    texts = [p[0]["content"] if k == "chat" else p for k, p in a]
    assert len(set(texts)) == 240  # distinct prompts
    held = sum(data.split_of(t) == "heldout" for t in texts)
    assert 5 <= held <= 50  # ~10 % held out


def test_loop_replay_counts_steps_not_anchors():
    from pyllama_spec.train.trainer import loop_tau

    acc = np.zeros(20, dtype=int)
    acc[0] = 7   # step 1 at anchor 0 commits 8 tokens, lands on anchor 8
    acc[8] = 0   # one token
    acc[9] = 3   # four tokens, lands on 13
    # anchors 13..15 commit one each; the replay stops at the end (16)
    assert loop_tau(acc, 0, 16) == (16, 6)
    assert loop_tau(np.full(20, 100), 2, 12) == (10, 1)  # capped at the end of the sequence
