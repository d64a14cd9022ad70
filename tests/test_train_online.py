"""Online training (pyllama_spec.train.online): a tiny llama target loaded by transformers from its
GGUF gives the same layer-input features as llama.cpp's taps, the online DFlash objective's loss
equals the stored-features one, and a few online steps reduce the loss."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import pyllama_spec as ps  # noqa: E402
from pyllama_spec.fixtures import write_tiny_target  # noqa: E402
from pyllama_spec.train import TrainConfig  # noqa: E402
from pyllama_spec.train.features import extract  # noqa: E402
from pyllama_spec.train.model import DFlashConfig  # noqa: E402
from pyllama_spec.train.objectives import DFlashObjective  # noqa: E402
from pyllama_spec.train.online import TargetFeatures, load_hf_target, online_objective, token_matrices  # noqa: E402
from pyllama_spec.train.trainer import train  # noqa: E402

LAYERS = [1, 3]
TEXTS = ["the cat sat on the mat and then it ran away", "def add(a, b):\n    return a + b\n",
         "hello there, how are you today?", "in the beginning the tiny model had random weights",
         "a b c d e f g h i j k l m n o p", "speculative decoding drafts tokens that the target verifies"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("online")
    path = d / "tiny.gguf"
    info = write_tiny_target(path, n_layer=4, n_embd=64, n_head=4, n_head_kv=2, n_ff=128, seed=3)
    return path, info


@pytest.fixture(scope="module")
def seqs(tiny):
    m = ps.Model(tiny[0], vocab_only=True)
    out = []
    for i, t in enumerate(TEXTS * 3):
        toks = m.vocab.tokenize(t * (1 + i % 3), add_special=False)
        out.append({"split": "heldout" if i % 6 == 5 else "train", "tokens": toks, "n_prompt": 4})
    return out


def test_hf_hidden_states_are_llama_cpp_layer_inputs(tiny):
    path, _ = tiny
    model = ps.Model(path)
    toks = model.vocab.tokenize("the layer inputs of llama.cpp and transformers agree", add_special=False)
    ctx = ps.Context(model, n_ctx=256, n_batch=256, n_ubatch=256)
    ctx.enable_layer_inputs(list(range(4)))
    ctx.decode(toks, np.arange(len(toks)), logits="none")
    ref = {i: ctx.layer_input(i) for i in range(4)}
    ctx.close()
    model.close()
    hf = load_hf_target(path)
    x = torch.tensor([toks])
    with torch.no_grad():
        hs = hf.model(input_ids=x, output_hidden_states=True).hidden_states
    for i in range(4):  # hidden_states[i] is the input of decoder layer i = llama.cpp's tap of layer i
        scale = np.abs(ref[i]).max()
        assert np.abs(hs[i][0].numpy() - ref[i]).max() < 2e-3 * max(scale, 1.0), i
    taps = TargetFeatures(hf, LAYERS)
    f = taps(x)[0].numpy()
    assert f.shape == (len(toks), 64 * len(LAYERS))
    np.testing.assert_array_equal(f, torch.cat([hs[i][0] for i in LAYERS], -1).numpy())  # hook = hidden_states[i]
    np.testing.assert_allclose(f, np.concatenate([ref[i] for i in LAYERS], 1), atol=2e-3 * np.abs(f).max())
    # right padding leaves the earlier rows as they are (causal): batches pad with token 0
    padded = torch.tensor([toks + [0] * 7])
    np.testing.assert_allclose(taps(padded)[0, :len(toks)].numpy(), f, atol=1e-5)
    with pytest.raises(ps.errors.InvalidArgumentError, match="already has"):
        TargetFeatures(hf, LAYERS)
    taps.close()
    TargetFeatures(hf, [0]).close()


def _target_and_config(tiny):
    """The tiny target in transformers, its token matrices and a one-layer block-4 DFlash configuration."""
    path, info = tiny
    hf = load_hf_target(path)
    emb, head = token_matrices(hf)
    ginfo = ps.Model(path, vocab_only=True).info
    c = DFlashConfig.for_target(ginfo, emb.shape[0], n_layer=1, target_layer_ids=LAYERS, block_size=4,
                                mask_token_id=info["<|mask|>"])
    return hf, emb, head, c


def _objectives(tiny, seqs):
    hf, emb, head, c = _target_and_config(tiny)
    on = online_objective(c, emb, head, TargetFeatures(hf, LAYERS), n_blocks=4)
    return on, DFlashObjective(c, emb, head, n_blocks=4), c


def test_online_loss_equals_stored_features_loss(tiny, seqs):
    on, off, _ = _objectives(tiny, seqs)
    feats, _ = extract(tiny[0], seqs, LAYERS, progress=False)
    idx = [0, 1, 2, 3]
    cpu = torch.device("cpu")
    b_on = on.batch(seqs, None, idx, np.random.default_rng(7), cpu)
    b_off = off.batch(seqs, feats, idx, np.random.default_rng(7), cpu)
    for x, y in zip(b_on[1:], b_off[1:]):  # the same anchors, blocks and targets
        assert torch.equal(x, y)
    torch.manual_seed(0)
    model = on.build()
    l_on = float(on.loss(model, b_on, torch.float32).detach())
    l_off = float(off.loss(model, b_off, torch.float32).detach())
    assert abs(l_on - l_off) < 1e-3 * abs(l_off), (l_on, l_off)


def test_online_steps_reduce_the_loss(tiny, seqs):
    on, _, _ = _objectives(tiny, seqs)
    tc = TrainConfig(kind="dflash", steps=40, batch=4, n_blocks=4, lr=3e-3, warmup=5, eval_every=40, seed=0,
                     device="cpu", block_size=4, layers=LAYERS)
    cpu = torch.device("cpu")
    train_idx = [i for i, s in enumerate(seqs) if s["split"] == "train"][:8]
    b = on.batch(seqs, None, train_idx, np.random.default_rng(1), cpu)
    torch.manual_seed(tc.seed)  # train() builds its model after the same seeding: the same start
    before = float(on.loss(on.build(), b, torch.float32).detach())
    model, hist = train(seqs, None, on, tc, progress=False, log=lambda m: None)
    after = float(on.loss(model, b, torch.float32).detach())
    assert hist and np.isfinite(hist[-1]["tau"])
    assert after < 0.8 * before, (before, after)


def test_soft_labels_mix_the_targets_distribution_into_the_loss(tiny, seqs):
    """``soft_weight`` w: each block row's loss is (1 − w) × the cross-entropy against the target's token and
    w × the cross-entropy against the target's softmax at the position before it — the logits transformers
    computes for the whole sequence, checked here row by row; w = 0 is the hard-label loss as before, and the
    stored-features objective (no final hidden states) refuses w > 0."""
    import torch.nn.functional as F

    from pyllama_spec.errors import InvalidArgumentError

    hf, emb, head, c = _target_and_config(tiny)
    with pytest.raises(InvalidArgumentError, match="final=True"):
        online_objective(c, emb, head, TargetFeatures(hf, LAYERS), n_blocks=4, soft_weight=0.5)
    hf._pyllama_spec_taps.close()
    taps = TargetFeatures(hf, LAYERS, final=True)
    soft = online_objective(c, emb, head, taps, n_blocks=4, soft_weight=0.5)
    hard = online_objective(c, emb, head, taps, n_blocks=4)  # (the same taps: the final state is left out)
    idx, cpu = [0, 1, 2, 3], torch.device("cpu")
    b = soft.batch(seqs, None, idx, np.random.default_rng(7), cpu)
    torch.manual_seed(0)
    model = soft.build()
    got = float(soft.loss(model, b, torch.float32).detach())
    # by hand: the target's logits of every position from transformers, the drafter's of every block row
    bf = soft.with_features(b)
    assert len(bf) == 7
    _, cp, tok, pos, mask, tgt, _ = bf
    with torch.no_grad():
        t_logits = hf(input_ids=b[0]).logits.float()  # (n, Lc, V)
        q = model.logits(model(bf[0], cp, tok, pos, mask)).float()  # (n, Lq, V)
    rows = (pos - 1).clamp(0, t_logits.shape[1] - 1)
    p_t = torch.softmax(torch.gather(t_logits, 1, rows[..., None].expand(-1, -1, t_logits.shape[-1])), -1)
    logq = torch.log_softmax(q, -1)
    ce = F.cross_entropy(q.view(-1, q.shape[-1]), tgt.view(-1), ignore_index=-100, reduction="none")
    sce = -(p_t * logq).sum(-1).view(-1)
    from pyllama_spec.train.objectives import position_weights

    w = position_weights(c, tgt.device).repeat(tgt.shape[1] // c.block_size)[None, :].expand_as(tgt).reshape(-1)
    w = w * (tgt.view(-1) >= 0)
    want = float(((0.5 * ce + 0.5 * sce) * w).sum() / w.sum())
    assert abs(got - want) < 1e-4 * abs(want), (got, want)
    # w = 0: the hard-label loss; and the soft part is a real difference (the target is not one-hot)
    want_hard = float((ce * w).sum() / w.sum())
    assert abs(float(hard.loss(model, b, torch.float32).detach()) - want_hard) < 1e-4 * want_hard
    assert abs(want - want_hard) > 1e-3
    stored = DFlashObjective(c, emb, head, n_blocks=4, soft_weight=0.5)
    with pytest.raises(InvalidArgumentError, match="online objective"):
        stored.loss(model, bf[:6], torch.float32)
    taps.close()


def test_soft_weight_is_checked():
    from pyllama_spec.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"soft_weight must lie in \[0, 1\]"):
        TrainConfig(soft_weight=1.5)
    with pytest.raises(InvalidArgumentError, match="trains DFlash drafters"):
        TrainConfig(kind="eagle3", soft_weight=0.5)
    assert TrainConfig(soft_weight=0.25).to_dict()["soft_weight"] == 0.25
    from pyllama_spec.train.objectives import build_objective

    with pytest.raises(InvalidArgumentError, match="train online"):  # (the stored-features pipeline)
        build_objective(TrainConfig(soft_weight=0.25), None, [], np.zeros((4, 2)), np.zeros((4, 2)), mask_token=1)


#: the online runs of the warm-restart tests: a one-layer drafter of block 4 on the tiny target, on the CPU
RUN_KW = dict(kind="dflash", batch=4, n_blocks=4, warmup=2, eval_every=5, seed=0, device="cpu", block_size=4,
              layers=LAYERS, drafter_layers=1, quant="q8_0")


def _answers_file(tmp_path, seqs):
    """``seqs`` as an answers file of pyllama_spec.train.regen (JSON lines, gzip)."""
    import gzip
    import json

    data = tmp_path / "answers.jsonl.gz"
    with gzip.open(data, "wt") as f:
        for s in seqs:
            f.write(json.dumps({"split": s["split"], "prompt_tokens": s["tokens"][:s["n_prompt"]],
                                "answer_tokens": s["tokens"][s["n_prompt"]:]}) + "\n")
    return data


def test_online_run_continues_from_its_checkpoint(tiny, seqs, tmp_path):
    """``run(init=drafter.pt)`` starts from that run's weights (with lr 1e-30 they come out as they went in)
    and keeps its mask token; a checkpoint of another shape or a file that is none is refused with
    the fix named, and the next run still works."""
    from pyllama_spec.errors import InvalidArgumentError
    from pyllama_spec.train.online import run

    data = _answers_file(tmp_path, seqs)
    kw = RUN_KW
    first = run(tiny[0], tmp_path / "a", [str(data)], TrainConfig(steps=6, lr=3e-3, **kw), progress=False,
                target_dtype="float32")
    a = torch.load(tmp_path / "a" / "drafter.pt", weights_only=True)
    rep = run(tiny[0], tmp_path / "b", [str(data)], TrainConfig(steps=3, lr=1e-30, **kw), progress=False,
              target_dtype="float32", init=tmp_path / "a" / "drafter.pt")
    b = torch.load(tmp_path / "b" / "drafter.pt", weights_only=True)
    assert rep["init"] == str(tmp_path / "a" / "drafter.pt") and first["init"] is None
    assert a["config"] == b["config"] and a["state_dict"].keys() == b["state_dict"].keys()
    for k, v in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][k], v, rtol=0, atol=1e-12, msg=k)
    with pytest.raises(InvalidArgumentError, match="another configuration.*--drafter-layers"):
        run(tiny[0], tmp_path / "c", [str(data)], TrainConfig(steps=3, lr=1e-30, **{**kw, "drafter_layers": 2}),
            progress=False, target_dtype="float32", init=tmp_path / "a" / "drafter.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(InvalidArgumentError, match="cannot be read as a torch checkpoint"):
        run(tiny[0], tmp_path / "c", [str(data)], TrainConfig(steps=3, **kw), progress=False,
            target_dtype="float32", init=tmp_path / "junk.pt")
    again = run(tiny[0], tmp_path / "d", [str(data)], TrainConfig(steps=3, lr=1e-30, **kw), progress=False,
                target_dtype="float32", init=tmp_path / "a" / "drafter.pt")
    assert again["steps"] == 3


def test_online_run_continues_from_a_drafter_gguf(tiny, seqs, tmp_path):
    """``run(init=drafter.gguf)`` (a shipped drafter is kept only as its GGUF) starts from the file's
    weights: f16 to f16 rounding, q8_0 to its block step; ``read_dflash_gguf`` gives back what the export
    wrote; a GGUF of another shape or architecture is refused with the fix named, the next run works."""
    from pyllama_spec.errors import InvalidArgumentError
    from pyllama_spec.train.export import read_dflash_gguf
    from pyllama_spec.train.online import run

    data = _answers_file(tmp_path, seqs)
    kw = RUN_KW
    run(tiny[0], tmp_path / "a", [str(data)], TrainConfig(steps=6, lr=3e-3, **kw), progress=False,
        target_dtype="float32")
    a = torch.load(tmp_path / "a" / "drafter.pt", weights_only=True)
    shape, arrays = read_dflash_gguf(tmp_path / "a" / "drafter-f16.gguf")
    assert shape == {k: a["config"][k] for k in shape} and set(arrays) == set(a["state_dict"])
    assert arrays["fc.weight"].shape == tuple(a["state_dict"]["fc.weight"].shape) == (64, 64 * len(LAYERS))
    for q, rtol in (("f16", 1e-3), ("q8_0", 1.0 / 127)):
        rep = run(tiny[0], tmp_path / q, [str(data)], TrainConfig(steps=3, lr=1e-30, **kw), progress=False,
                  target_dtype="float32", init=tmp_path / "a" / f"drafter-{q}.gguf")
        b = torch.load(tmp_path / q / "drafter.pt", weights_only=True)
        assert rep["init"].endswith(f"drafter-{q}.gguf") and b["config"] == a["config"]
        for k, v in a["state_dict"].items():
            # q8_0: each 32-weight block in steps of its largest magnitude / 127 (half a step off at most)
            scale = v.abs().max().item() if q == "q8_0" else v.abs()
            err = (b["state_dict"][k] - v).abs()
            assert bool((err <= rtol * scale + 1e-7).all()), (q, k, err.max().item())
            assert err.max().item() > 0 or v.ndim == 1, (q, k)  # the matrices came through the file's type
    with pytest.raises(InvalidArgumentError, match="another configuration.*--drafter-layers"):
        run(tiny[0], tmp_path / "c", [str(data)], TrainConfig(steps=3, lr=1e-30, **{**kw, "drafter_layers": 2}),
            progress=False, target_dtype="float32", init=tmp_path / "a" / "drafter-q8_0.gguf")
    with pytest.raises(InvalidArgumentError, match="not a DFlash drafter"):
        run(tiny[0], tmp_path / "c", [str(data)], TrainConfig(steps=3, **kw), progress=False,
            target_dtype="float32", init=tiny[0])
    with pytest.raises(FileNotFoundError):
        read_dflash_gguf(tmp_path / "none.gguf")
    again = run(tiny[0], tmp_path / "d", [str(data)], TrainConfig(steps=3, lr=1e-30, **kw), progress=False,
                target_dtype="float32", init=tmp_path / "a" / "drafter-q8_0.gguf")
    assert again["steps"] == 3


def test_grown_layers_compute_what_the_shallower_drafter_did():
    """grow_layers deepens a drafter without changing its function: the new layers' output projections
    are zero, so a 3-layer model holding a 1-layer model's weights gives the same hidden states; its
    new layers copy the last one's other weights (non-zero, so they train), and bad counts are refused."""
    from pyllama_spec.train.model import DFlashModel, grow_layers

    torch.manual_seed(0)
    kw = dict(n_embd=32, n_head=4, n_head_kv=2, head_dim=8, n_ff=64, n_vocab=50, block_size=4,
              target_layer_ids=[0, 1], mask_token_id=3)
    emb, head = torch.randn(50, 32), torch.randn(50, 32)
    small = DFlashModel(DFlashConfig(n_layer=1, **kw), emb, head)
    big = DFlashModel(DFlashConfig(n_layer=3, **kw), emb, head)
    big.load_state_dict(grow_layers(small.state_dict(), 1, 3))
    feats, ctx_pos = torch.randn(2, 6, 64), torch.arange(6).repeat(2, 1)
    toks, pos = torch.randint(0, 50, (2, 4)), torch.arange(6, 10).repeat(2, 1)
    mask = torch.ones(2, 1, 4, 10, dtype=torch.bool)
    a, b = small(feats, ctx_pos, toks, pos, mask), big(feats, ctx_pos, toks, pos, mask)
    torch.testing.assert_close(b, a, rtol=0, atol=0)
    st = big.state_dict()
    for i in (1, 2):
        assert not st[f"layers.{i}.o.weight"].any() and not st[f"layers.{i}.down.weight"].any()
        torch.testing.assert_close(st[f"layers.{i}.q.weight"], st["layers.0.q.weight"])
        assert st[f"layers.{i}.q.weight"].abs().sum() > 0
    # (a mutation: the new layers' o left as the copy changes the function)
    bad = grow_layers(small.state_dict(), 1, 2)
    bad["layers.1.o.weight"] = bad["layers.0.o.weight"].clone()
    mid = DFlashModel(DFlashConfig(n_layer=2, **kw), emb, head)
    mid.load_state_dict(bad)
    assert (mid(feats, ctx_pos, toks, pos, mask) - a).abs().max() > 1e-4
    with pytest.raises(ValueError, match="cannot grow"):
        grow_layers(small.state_dict(), 2, 1)
    with pytest.raises(ValueError, match="no layer 1"):
        grow_layers(small.state_dict(), 2, 3)


def test_online_run_grows_a_shallower_init(tiny, seqs, tmp_path):
    """``run(init=…, grow=True)`` with more --drafter-layers than the init has: the old layers come through
    (q8_0 GGUF: within its block step), the new one starts as a no-op and is recorded in the report;
    without ``grow`` the same call is refused (the layer count is part of the shape)."""
    from pyllama_spec.errors import InvalidArgumentError
    from pyllama_spec.train.online import run

    data = _answers_file(tmp_path, seqs)
    kw = RUN_KW
    run(tiny[0], tmp_path / "a", [str(data)], TrainConfig(steps=6, lr=3e-3, **kw), progress=False,
        target_dtype="float32")
    a = torch.load(tmp_path / "a" / "drafter.pt", weights_only=True)
    deeper = {**kw, "drafter_layers": 2}
    with pytest.raises(InvalidArgumentError, match="another configuration.*--drafter-layers"):
        run(tiny[0], tmp_path / "b", [str(data)], TrainConfig(steps=3, lr=1e-30, **deeper), progress=False,
            target_dtype="float32", init=tmp_path / "a" / "drafter.pt")
    for init in ("drafter.pt", "drafter-q8_0.gguf"):
        rep = run(tiny[0], tmp_path / init, [str(data)], TrainConfig(steps=3, lr=1e-30, **deeper), progress=False,
                  target_dtype="float32", init=tmp_path / "a" / init, grow=True)
        b = torch.load(tmp_path / init / "drafter.pt", weights_only=True)
        assert rep["grown_from_layers"] == 1 and b["config"]["n_layer"] == 2
        for k, v in a["state_dict"].items():
            scale = v.abs().max().item() if init.endswith("gguf") else 0.0
            assert bool(((b["state_dict"][k] - v).abs() <= scale / 127 + 1e-6).all()), (init, k)
        assert b["state_dict"]["layers.1.o.weight"].abs().max().item() < 1e-6
        assert b["state_dict"]["layers.1.down.weight"].abs().max().item() < 1e-6


def test_online_eagle3_loss_equals_stored_features_loss(tiny, seqs):
    """EAGLE-3 online: the batch holds the token ids in the features' place, and the loss with the target's
    features computed in the step equals the loss over llama.cpp's stored taps of the same rows."""
    from pyllama_spec.gguf_file import read_gguf
    from pyllama_spec.train.objectives import build_objective
    from pyllama_spec.train.online import _eagle3_objective

    hf = load_hf_target(tiny[0], dtype=torch.float32)
    layers = [0, 2, 3]
    tf = TargetFeatures(hf, layers)
    try:
        emb, head = token_matrices(hf)
        tc = TrainConfig(kind="eagle3", layers=layers, device="cpu", seed=0)
        off = build_objective(tc, read_gguf(tiny[0]), seqs, emb, head)
        on = _eagle3_objective()(off, tf)
        feats, _ = extract(tiny[0], seqs, layers, progress=False)
        idx = [0, 1, 2, 3]
        cpu = torch.device("cpu")
        b_on = on.batch(seqs, None, idx, np.random.default_rng(7), cpu)
        b_off = off.batch(seqs, feats, idx, np.random.default_rng(7), cpu)
        assert b_on[0].dtype == torch.int64 and b_on[0].shape == b_off[0].shape[:2]
        for x, y in zip(b_on[1:], b_off[1:]):  # the same tokens and step labels
            assert torch.equal(x, y)
        torch.manual_seed(0)
        model = on.build()
        l_on = float(on.loss(model, b_on, torch.float32).detach())
        l_off = float(off.loss(model, b_off, torch.float32).detach())
        assert abs(l_on - l_off) < 2e-3 * abs(l_off), (l_on, l_off)
    finally:
        tf.close()


@pytest.mark.parametrize("kind", ["eagle3", "draft"])
def test_online_run_trains_eagle3_and_draft_models(tiny, seqs, tmp_path, kind):
    """``run`` with kind eagle3 / draft: it trains (the held-out τ is measured), exports GGUFs that
    llama.cpp's drafters load and whose outputs at T = 0 are plain decoding's, and continues from its own
    drafter.pt."""
    from pyllama_spec.train.online import run

    data = _answers_file(tmp_path, seqs)
    kw = {**RUN_KW, "kind": kind, "layers": [0, 2, 3] if kind == "eagle3" else None, "drafter_layers": 1}
    rep = run(tiny[0], tmp_path / "a", [str(data)], TrainConfig(steps=8, lr=3e-3, **kw), progress=False,
              target_dtype="float32")
    assert rep["kind"] == kind and rep["steps"] == 8 and np.isfinite(rep["best_tau"])
    q8 = tmp_path / "a" / "drafter-q8_0.gguf"
    with ps.Generator(tiny[0], drafters={"d": q8}, n_ctx=512, n_batch=64) as g:
        assert g.drafters["d"].kind == ("draft-eagle3" if kind == "eagle3" else "draft-simple")
        plain = g.generate(TEXTS[0], max_tokens=16).tokens
        assert g.generate(TEXTS[0], drafter="d", n_max=3, max_tokens=16).tokens == plain
    again = run(tiny[0], tmp_path / "b", [str(data)], TrainConfig(steps=2, lr=1e-30, **kw), progress=False,
                target_dtype="float32", init=tmp_path / "a" / "drafter.pt")
    a = torch.load(tmp_path / "a" / "drafter.pt", weights_only=True)
    b = torch.load(tmp_path / "b" / "drafter.pt", weights_only=True)
    assert again["init"].endswith("drafter.pt") and a["kind"] == b["kind"] == kind
    for k, v in a["state_dict"].items():
        torch.testing.assert_close(b["state_dict"][k], v, rtol=0, atol=1e-12, msg=k)


@pytest.mark.parametrize("kind", ["eagle3", "draft"])
def test_online_run_continues_eagle3_and_draft_models_from_their_gguf(tiny, seqs, tmp_path, kind):
    """Issue 20: what a device session brings back is GGUFs (files ≤ 16 MiB, big ones in parts), so
    ``run(init=drafter-f16.gguf)`` continues an EAGLE-3 head (with its own vocabulary: the file's d2t is kept) or a
    draft model from the file's weights — f16 to f16 rounding, q8_0 to its block step — and training goes on from
    there; a GGUF of another kind or shape is refused with the fix named."""
    from pyllama_spec.errors import InvalidArgumentError
    from pyllama_spec.train.export import read_draft_gguf, read_eagle3_gguf
    from pyllama_spec.train.online import run

    data = _answers_file(tmp_path, seqs)
    kw = {**RUN_KW, "kind": kind, "layers": [0, 2, 3] if kind == "eagle3" else None, "drafter_layers": 1,
          "draft_vocab": 16 if kind == "eagle3" else 0, "draft_embd": 32 if kind == "draft" else None}
    run(tiny[0], tmp_path / "a", [str(data)], TrainConfig(steps=6, lr=3e-3, **kw), progress=False,
        target_dtype="float32")
    a = torch.load(tmp_path / "a" / "drafter.pt", weights_only=True)
    shape, arrays = (read_eagle3_gguf if kind == "eagle3" else read_draft_gguf)(tmp_path / "a" / "drafter-f16.gguf")
    assert set(arrays) == set(a["state_dict"]) and {k: a["config"][k] for k in shape if k != "d2t"} == \
        {k: v for k, v in shape.items() if k != "d2t"}
    for q, rtol in (("f16", 1e-3), ("q8_0", 1.0 / 127)):
        rep = run(tiny[0], tmp_path / q, [str(data)], TrainConfig(steps=2, lr=1e-30, **kw), progress=False,
                  target_dtype="float32", init=tmp_path / "a" / f"drafter-{q}.gguf")
        b = torch.load(tmp_path / q / "drafter.pt", weights_only=True)
        assert rep["init"].endswith(f"drafter-{q}.gguf") and b["config"] == a["config"]
        assert b["state_dict"].keys() == a["state_dict"].keys()
        for k, v in a["state_dict"].items():
            if v.dtype == torch.int64:  # the EAGLE-3 head's d2t: its own ids, exactly
                assert torch.equal(b["state_dict"][k], v)
                continue
            # q8_0: each 32-weight block in steps of its largest magnitude / 127 (half a step off at most)
            scale = v.abs().max().item() if q == "q8_0" else v.abs()
            err = (b["state_dict"][k] - v).abs()
            assert bool((err <= rtol * scale + 1e-7).all()), (q, k, err.max().item())
    on = run(tiny[0], tmp_path / "on", [str(data)], TrainConfig(steps=4, lr=3e-3, **kw), progress=False,
             target_dtype="float32", init=tmp_path / "a" / "drafter-f16.gguf")
    c = torch.load(tmp_path / "on" / "drafter.pt", weights_only=True)
    assert on["steps"] == 4 and np.isfinite(on["best_tau"]) and np.isfinite(on["history"][-1]["loss"])
    assert any(not torch.equal(c["state_dict"][k], v) for k, v in a["state_dict"].items())
    wider = {**kw, "draft_vocab": 32} if kind == "eagle3" else {**kw, "drafter_layers": 2}
    with pytest.raises(InvalidArgumentError, match="another configuration.*--drafter-layers"):
        run(tiny[0], tmp_path / "c", [str(data)], TrainConfig(steps=2, **wider), progress=False,
            target_dtype="float32", init=tmp_path / "a" / "drafter-f16.gguf")
    other = tiny[0]  # a llama GGUF: no EAGLE-3 head; and for a draft model, a DFlash drafter of the tiny target
    if kind == "draft":
        run(tiny[0], tmp_path / "d", [str(data)], TrainConfig(steps=1, **RUN_KW), progress=False,
            target_dtype="float32")
        other = tmp_path / "d" / "drafter-f16.gguf"
    with pytest.raises(InvalidArgumentError, match="not an EAGLE-3 head" if kind == "eagle3" else "not a draft model"):
        run(tiny[0], tmp_path / "c", [str(data)], TrainConfig(steps=2, **kw), progress=False,
            target_dtype="float32", init=other)


def test_online_eagle3_restart_keeps_its_own_vocabulary(tiny, seqs, tmp_path):
    """An EAGLE-3 head with its own vocabulary (draft_vocab) continued on other data: its lm_head rows belong to
    the checkpoint's ids, so the run keeps them (config, buffer and the exported GGUF's d2t) instead of the ids
    the new data would pick; ``grow`` is refused for kinds other than dflash, and without an init."""
    from gguf import GGUFReader

    from pyllama_spec.errors import InvalidArgumentError
    from pyllama_spec.train.online import run

    kw = {**RUN_KW, "kind": "eagle3", "layers": [0, 2, 3], "draft_vocab": 16}
    a_data = _answers_file(tmp_path, seqs)
    rep = run(tiny[0], tmp_path / "a", [str(a_data)], TrainConfig(steps=4, lr=3e-3, **kw), progress=False,
              target_dtype="float32")
    a = torch.load(tmp_path / "a" / "drafter.pt", weights_only=True)
    # other data: the letters text and a held-out one only (other tokens are frequent in their answers)
    b_dir = tmp_path / "other"
    b_dir.mkdir()
    b_data = _answers_file(b_dir, [s for i, s in enumerate(seqs) if i % 6 in (4, 5)])
    run(tiny[0], tmp_path / "b", [str(b_data)], TrainConfig(steps=2, lr=1e-30, **kw), progress=False,
        target_dtype="float32", init=tmp_path / "a" / "drafter.pt")
    b = torch.load(tmp_path / "b" / "drafter.pt", weights_only=True)
    assert torch.equal(b["state_dict"]["d2t"], a["state_dict"]["d2t"])
    fresh = run(tiny[0], tmp_path / "c", [str(b_data)], TrainConfig(steps=1, **kw), progress=False,
                target_dtype="float32")
    c = torch.load(tmp_path / "c" / "drafter.pt", weights_only=True)
    assert not torch.equal(c["state_dict"]["d2t"], a["state_dict"]["d2t"])  # (the test's data do pick others)
    for d in ("a", "b"):
        r = GGUFReader(str(tmp_path / d / "drafter-f16.gguf"))
        t = next(t for t in r.tensors if t.name == "d2t")
        assert list(np.asarray(t.data).reshape(-1)) == a["state_dict"]["d2t"].tolist(), d
    assert rep["kind"] == fresh["kind"] == "eagle3"
    with pytest.raises(InvalidArgumentError, match="grow deepens the DFlash drafter"):
        run(tiny[0], tmp_path / "d", [str(a_data)], TrainConfig(steps=1, **kw), progress=False,
            target_dtype="float32", init=tmp_path / "a" / "drafter.pt", grow=True)
    with pytest.raises(InvalidArgumentError, match="grow deepens the DFlash drafter"):
        run(tiny[0], tmp_path / "d", [str(a_data)], TrainConfig(steps=1, **RUN_KW), progress=False,
            target_dtype="float32", grow=True)


def test_online_run_with_soft_labels(tiny, seqs, tmp_path):
    """``run`` with ``soft_weight``: the target's forward goes to its last layer (``TargetFeatures(final=True)``)
    and the steps train; the report records the setting."""
    from pyllama_spec.train.online import run

    data = _answers_file(tmp_path, seqs)
    rep = run(tiny[0], tmp_path / "s", [str(data)], TrainConfig(steps=6, lr=3e-3, soft_weight=0.5, **RUN_KW),
              progress=False, target_dtype="float32")
    assert rep["steps"] == 6 and rep["train_config"]["soft_weight"] == 0.5
    assert np.isfinite(rep["history"][-1]["tau"]) and (tmp_path / "s" / "drafter-q8_0.gguf").exists()


def test_the_stored_features_pipeline_refuses_soft_labels_before_its_expensive_work(tiny, monkeypatch, tmp_path):
    """The stored-features pipeline cannot train soft labels: it says so before it spends the run's data
    generation (data=None) or its feature extraction (minutes to hours on a real target), not after (a review's
    find)."""
    from pyllama_spec.errors import InvalidArgumentError
    from pyllama_spec.train import data as data_mod
    from pyllama_spec.train import features as feat_mod
    from pyllama_spec.train import pipeline

    def boom(*a, **k):
        raise AssertionError("the pipeline did the expensive work before refusing soft_weight")

    monkeypatch.setattr(data_mod, "generate", boom)
    monkeypatch.setattr(feat_mod, "extract", boom)
    with pytest.raises(InvalidArgumentError, match="train online"):
        pipeline.run(tiny[0], tmp_path / "p", TrainConfig(soft_weight=0.5, device="cpu"), progress=False)


def test_the_soft_loss_keeps_two_vocabulary_sized_tensors_for_backward(tiny, seqs):
    """The soft term does not triple the (rows × vocabulary) float32 tensors autograd keeps until backward: one
    soft-target cross-entropy against (1 − w)·onehot + w·p_t keeps two (its log-softmax and the mixed target),
    where two cross-entropies kept three (the first version: +3.2 GB each at batch 32 × 32 blocks × B 16 on a
    49 152-token vocabulary; a review's find)."""
    hf, emb, head, c = _target_and_config(tiny)
    taps = TargetFeatures(hf, LAYERS, final=True)
    try:
        soft = online_objective(c, emb, head, taps, n_blocks=4, soft_weight=0.5)
        b = soft.batch(seqs, None, [0, 1, 2, 3], np.random.default_rng(7), torch.device("cpu"))
        torch.manual_seed(0)
        model = soft.build()
        n_rows, V = b[3].numel(), emb.shape[0]
        big = {}

        def pack(t):
            if (t.dtype == torch.float32 and t.numel() == n_rows * V  # (not the head, (n_embd, V) here too)
                    and t.untyped_storage().data_ptr() != model.head.untyped_storage().data_ptr()):
                big[t.untyped_storage().data_ptr()] = t.shape
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = soft.loss(model, b, torch.float32)
        loss.backward()
        assert len(big) <= 2, big
    finally:
        taps.close()
