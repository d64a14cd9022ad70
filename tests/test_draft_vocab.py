"""A DFlash drafter with a reduced draft vocabulary (FR-Spec; ``pyllama_spec.draft_vocab``): its own head of the
target's most frequent rows and a ``d2t`` map, which llama.cpp's DFlash graph scatters back to target ids."""
import gzip
import json
import os

import gguf
import numpy as np
import pytest

import pyllama_spec as ps
from pyllama_spec import draft_vocab as dv
from pyllama_spec.gguf_file import copy_fields, read_tensor, tensor_rows


def _answers(path, records):
    with gzip.open(path, "wt") as f:
        for split, toks in records:
            f.write(json.dumps({"split": split, "answer_tokens": toks, "prompt_tokens": [1, 2]}) + "\n")
    return path


def test_counts_and_ranking(tmp_path):
    p = _answers(tmp_path / "a.jsonl.gz", [("train", [5, 5, 5, 2, 2, 9]), ("heldout", [7, 7, 7, 7]),
                                           ("train", [2, 0])])
    c = dv.token_counts([p], 10)
    assert c.tolist() == [1, 0, 3, 0, 0, 3, 0, 0, 0, 1]  # the held-out record is left out
    assert dv.token_counts([p], 10, split=None)[7] == 4
    # by count, ties to the lower id: 2 and 5 (3 each), then 0 and 9 (1 each)
    assert dv.kept_tokens(c, 3).tolist() == [0, 2, 5]
    assert dv.kept_tokens(c, 4, always=[8]).tolist() == [0, 2, 5, 8]  # 8 never seen, kept all the same
    assert dv.kept_tokens(c, 10).tolist() == list(range(10))
    with pytest.raises(ValueError, match="keep must be an int between 1"):
        dv.kept_tokens(c, 0, always=[3])
    for bad in (11, 2.5, True, None, "8"):
        with pytest.raises(ValueError, match="keep must be an int between"):
            dv.kept_tokens(c, bad)
    assert dv.kept_tokens(c, np.int64(3)).tolist() == [0, 2, 5]
    for bad_counts in (-np.arange(10), np.arange(10) + 0.5, np.zeros((2, 5), np.int64), []):
        with pytest.raises(ValueError, match="counts must"):
            dv.kept_tokens(bad_counts, 3)
    # bad answer files: the file, the line and the bad id named
    with pytest.raises(ValueError, match=r"a.jsonl.gz, line 1: token id 9 outside a 8-token vocabulary"):
        dv.token_counts([p], 8)
    assert dv.token_counts(p, 10).sum() == 8  # one file, not a list
    lines = {"json.jsonl": '{"split": "train", "answer_tokens": [1,\n', "list.jsonl": '[1, 2]\n',
             "float.jsonl": '{"split": "train", "answer_tokens": [1.5]}\n',
             "neg.jsonl": '\n{"split": "train", "answer_tokens": [3, -1]}\n'}
    for name, text in lines.items():
        (tmp_path / name).write_text(text)
    for name, msg in (("json.jsonl", "line 1: not JSON"), ("list.jsonl", "line 1: a JSON list, not an object"),
                      ("float.jsonl", "must be a list of integer token ids"), ("neg.jsonl", "line 2: token id -1")):
        with pytest.raises(ValueError, match=msg):
            dv.token_counts([tmp_path / name], 10)


class _Recorder:
    """Record ``(n_past, draft tokens)`` of every ``propose`` of a drafter."""

    def __init__(self, drafter):
        self.calls = []
        orig = drafter.propose

        def propose(last_token, n_past, *args, **kw):
            d = orig(last_token, n_past, *args, **kw)
            self.calls.append((n_past, list(d.tokens)))
            return d

        drafter.propose = propose
        self.stop = lambda: drafter.__dict__.pop("propose", None)


@pytest.fixture(scope="module")
def reduced(tiny, tmp_path_factory):
    """The tiny target's random DFlash drafter with its whole vocabulary as an identity map, and with 64 of its 264
    tokens (every third id from 1, plus the end-of-generation id)."""
    d = tmp_path_factory.mktemp("dv")
    eog = dv.eog_ids(tiny["target"])
    keep = np.unique(np.array([*range(1, 264, 3)][:63] + eog, dtype=np.int64))
    paths = {"all": dv.write_reduced_vocab(tiny["dflash"], tiny["target"], np.arange(264), d / "all.gguf"),
             "part": dv.write_reduced_vocab(tiny["dflash"], tiny["target"], keep, d / "part.gguf")}
    return {**paths, "keep": keep, "dir": d}


def test_the_file_holds_the_target_rows(tiny, reduced):
    head = {t.name: t for t in gguf.GGUFReader(str(tiny["target"])).tensors}["output.weight"]
    r = {t.name: t for t in gguf.GGUFReader(str(reduced["part"])).tensors}
    assert read_tensor(reduced["part"], "d2t").tolist() == reduced["keep"].tolist()
    assert r["output.weight"].tensor_type == head.tensor_type
    np.testing.assert_array_equal(np.asarray(r["output.weight"].data), np.asarray(head.data)[reduced["keep"]])
    src = {t.name: t for t in gguf.GGUFReader(str(reduced["all"])).tensors}
    drafter = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(str(tiny["dflash"])).tensors}
    for name, arr in drafter.items():  # every tensor of the drafter copied as it was
        np.testing.assert_array_equal(np.asarray(src[name].data), arr)


def test_identity_map_drafts_as_the_borrowed_head(tiny, reduced):
    """A map of the whole vocabulary in id order: the same head rows, so the same drafts at every step."""
    gen = ps.Generator(tiny["target"], drafters={"full": tiny["dflash"], "all": reduced["all"]}, n_ctx=512,
                       n_batch=64)
    runs = {}
    for name in ("full", "all"):
        rec = _Recorder(gen.drafters[name])
        r = gen.generate("once upon a time", drafter=name, n_max=6, max_tokens=40)
        rec.stop()
        runs[name] = (r.tokens, rec.calls)
    assert runs["full"] == runs["all"] and len(runs["full"][1]) >= 5
    gen.close()


def test_reduced_head_drafts_within_its_vocabulary_and_stays_lossless(tiny, reduced):
    """The kept rows are the target head's own: each kept token's logit equals the borrowed head's, so a row's draft is
    the best kept token; the target still decides every token (T = 0: plain decoding's tokens)."""
    gen = ps.Generator(tiny["target"], drafters={"full": tiny["dflash"], "part": reduced["part"]}, n_ctx=512,
                       n_batch=64)
    assert gen.drafters["part"].draft_vocab == len(reduced["keep"])
    assert gen.drafters["full"].draft_vocab == 264
    plain = gen.generate("the quick brown fox", max_tokens=40).tokens
    cands = {}
    for name in ("full", "part"):
        dr = gen.drafters[name]
        dr.p_min = 1e-9  # (reads each row's top-10 candidates and their logits, the cut never taken)
        calls, orig = {}, dr.propose

        def propose(last, n_past, n_max, *a, _dr=dr, _orig=orig, _calls=calls, **kw):
            d = _orig(last, n_past, n_max, *a, **kw)
            _calls[n_past] = (list(d.tokens), [tuple(np.asarray(v).copy() for v in _dr.ctx.sampled_candidates(i))
                                                for i in range(1, len(d.tokens) + 1)])
            return d

        dr.propose = propose
        try:
            assert gen.generate("the quick brown fox", drafter=name, n_max=6, max_tokens=40).tokens == plain
        finally:
            dr.__dict__.pop("propose", None)
            dr.p_min = 0.0
        cands[name] = calls
    kept = set(reduced["keep"].tolist())
    common = sorted(set(cands["full"]) & set(cands["part"]))
    assert len(common) >= 10
    n_rows = n_best = 0
    for n in common:
        for (fi, fl), (pi, pl), tok in zip(cands["full"][n][1], cands["part"][n][1], cands["part"][n][0]):
            assert set(pi.tolist()) <= kept and tok == int(pi[np.argmax(pl)])
            full = dict(zip(fi.tolist(), fl.tolist()))
            for t, v in zip(pi.tolist(), pl.tolist()):  # the same logit where both heads list the token
                if t in full:
                    assert v == pytest.approx(full[t], rel=1e-5, abs=1e-5)
            in_kept = [(v, t) for t, v in full.items() if t in kept]
            if in_kept:  # the full head's best kept candidate is the reduced head's draft
                assert tok == max(in_kept)[1]
                n_best += 1
            n_rows += 1
    assert n_rows >= 30 and n_best >= 10
    gen.close()


def test_bad_maps_are_refused_before_llama_cpp(tiny, reduced, tmp_path):
    """Ids out of range or repeated would write out of bounds / drop rows in ggml_set_rows: refused at load."""
    gen = ps.Generator(tiny["target"], n_ctx=256, n_batch=32)

    def with_d2t(ids, name, head=None):
        src = gguf.GGUFReader(str(reduced["part"]))
        w = gguf.GGUFWriter(str(tmp_path / name), "dflash")
        copy_fields(src, w)
        for t in src.tensors:
            if t.name == "d2t":
                w.add_tensor("d2t", np.asarray(ids, dtype=np.int64))
            elif t.name == "output.weight" and head is not None:
                w.add_tensor("output.weight", head)
            else:
                w.add_tensor(t.name, np.asarray(t.data), raw_shape=t.data.shape, raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return tmp_path / name

    n = len(reduced["keep"])
    bad_range = reduced["keep"].copy()
    bad_range[-1] = 264
    bad_repeat = reduced["keep"].copy()
    bad_repeat[1] = bad_repeat[0]
    for ids, name in ((bad_range, "range.gguf"), (bad_repeat, "repeat.gguf")):
        with pytest.raises(ps.DrafterMismatchError, match="repeat or leave the target's 264-token vocabulary"):
            gen.add_drafter("bad", with_d2t(ids, name))
        assert "bad" not in gen.drafters
    with pytest.raises(ps.DrafterMismatchError, match="one row per d2t id"):
        gen.add_drafter("bad", with_d2t(reduced["keep"][: n - 1], "short.gguf"))
    with pytest.raises(ps.DrafterMismatchError, match="one row per d2t id, at least one"):
        gen.add_drafter("bad", with_d2t([], "empty.gguf", head=np.zeros((0, 64), np.float32)))
    with pytest.raises(ps.DrafterMismatchError, match="output head is 32 wide, its hidden size 64"):
        gen.add_drafter("bad", with_d2t(reduced["keep"], "narrow.gguf", head=np.zeros((n, 32), np.float32)))
    gen.add_drafter("part", reduced["part"])  # the Generator is still usable
    assert len(gen.generate("hello", drafter="part", max_tokens=6).tokens) == 6
    gen.close()


def test_writer_refuses_wrong_inputs(tiny, reduced, tmp_path):
    from pyllama_spec import drafter_fixtures

    x = tmp_path / "x.gguf"
    with pytest.raises(ps.ModelLoadError, match="not 'dflash'"):
        dv.write_reduced_vocab(tiny["target"], tiny["target"], [1, 2], x)
    with pytest.raises(ps.ModelLoadError, match="already has an output head"):
        dv.write_reduced_vocab(reduced["part"], tiny["target"], [1, 2], x)
    with pytest.raises(ValueError, match="within"):
        dv.write_reduced_vocab(tiny["dflash"], tiny["target"], [1, 264], x)
    with pytest.raises(ValueError, match="repeat"):
        dv.write_reduced_vocab(tiny["dflash"], tiny["target"], [1, 1], x)
    for ids in ([1.7, 2.2], [True, False], [[1, 2]], ["1"], []):
        with pytest.raises(ValueError, match="non-empty vector of integer token ids"):
            dv.write_reduced_vocab(tiny["dflash"], tiny["target"], ids, x)
    (tmp_path / "not.gguf").write_bytes(b"hello world, not a model")
    with pytest.raises(ps.NotGGUFError):
        dv.write_reduced_vocab(tmp_path / "not.gguf", tiny["target"], [1, 2], x)
    with pytest.raises(ps.NotGGUFError):
        dv.write_reduced_vocab(tiny["dflash"], tmp_path / "not.gguf", [1, 2], x)
    # another target of the same width but another vocabulary
    other = tmp_path / "other.gguf"
    ps.fixtures.write_tiny_target(other, n_layer=4, n_embd=64, seed=1, extra_tokens=[f"<x{i}>" for i in range(4)])
    with pytest.raises(ps.ModelLoadError, match="tokenizer has 264 tokens, .*other.gguf's head 268"):
        dv.write_reduced_vocab(tiny["dflash"], other, [1, 2], x)
    # DSpark: its Markov head has a row per token too
    drafter_fixtures.write_dspark_drafter(tmp_path / "ds.gguf", target=tiny["target"])
    with pytest.raises(ps.ModelLoadError, match="DSpark"):
        dv.write_reduced_vocab(tmp_path / "ds.gguf", tiny["target"], [1, 2], x)
    # never over an input file (the drafter read through a memory map while written over: SIGBUS)
    import shutil

    shutil.copy(tiny["dflash"], tmp_path / "d.gguf")
    shutil.copy(tiny["target"], tmp_path / "t.gguf")
    for out in (tmp_path / "d.gguf", tmp_path / "t.gguf"):
        with pytest.raises(ValueError, match="itself: write the reduced drafter to a new file"):
            dv.write_reduced_vocab(tmp_path / "d.gguf", tmp_path / "t.gguf", [1, 2], out)
    assert (tmp_path / "d.gguf").read_bytes() == tiny["dflash"].read_bytes()
    assert not list(tmp_path.glob(".*.tmp")) and not x.exists()  # nothing half-written left behind


def test_command_line(tiny, tmp_path, capsys):
    p = _answers(tmp_path / "a.jsonl.gz", [("train", [3, 3, 4, 10, 10, 10]), ("heldout", [5])])
    out = tmp_path / "d.gguf"
    assert dv.main(["--drafter", str(tiny["dflash"]), "--target", str(tiny["target"]), "--counts", str(p),
                    "--keep", "8", "-o", str(out)]) == 0
    rep = json.loads(capsys.readouterr().out)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # (not mkstemp's private 0600: a model file others may read)
    assert rep["keep"] == 8 and rep["n_vocab"] == 264 and rep["answer_tokens"] == 6 and rep["coverage"] == 1.0
    ids = read_tensor(out, "d2t")
    assert {3, 4, 10}.issubset(set(ids.tolist())) and len(ids) == 8
    assert dv.main(["--drafter", str(tiny["target"]), "--target", str(tiny["target"]), "--counts", str(p),
                    "--keep", "8", "-o", str(out)]) == 2
    assert "not 'dflash'" in capsys.readouterr().err
    # nothing counted (only held-out records; a held-out split is not the ranking's): refused, --split '' named
    held = _answers(tmp_path / "h.jsonl.gz", [("heldout", [3, 4])])
    args = ["--drafter", str(tiny["dflash"]), "--target", str(tiny["target"]), "--keep", "8", "-o", str(out)]
    assert dv.main([*args, "--counts", str(held)]) == 2
    assert "no answer tokens were counted" in capsys.readouterr().err
    assert dv.main([*args, "--counts", str(held), "--split", ""]) == 0
    capsys.readouterr()
    # counts saved as .npy: checked as counts
    np.save(tmp_path / "c.npy", np.arange(264))
    assert dv.main([*args, "--counts", str(tmp_path / "c.npy")]) == 0
    assert read_tensor(out, "d2t").tolist() == list(range(256, 264))  # the 8 largest counts (the eog id 258 among them)
    capsys.readouterr()
    np.save(tmp_path / "neg.npy", -np.arange(264.0) + 0.5)
    assert dv.main([*args, "--counts", str(tmp_path / "neg.npy")]) == 2
    assert "neg.npy: counts must" in capsys.readouterr().err


def test_shipped_counts():
    c = ps.assets.smollm2_token_counts()
    assert c.shape == (49152,) and c.dtype == np.int64
    assert int(c.sum()) == 22_772_879 and int((c > 0).sum()) == 39_644  # RESULTS.md 15.8's train answers
    # the most written token of SmolLM2's answers: the one the answers are made of most
    assert c[dv.kept_tokens(c, 1)].tolist() == [c.max()]


@pytest.mark.smollm2
def test_shipped_drafter_with_a_reduced_vocabulary(smollm2):
    path = ps.assets.smollm2_dflash_path(draft_vocab=8192)
    assert path.name == "smollm2-135m-instruct-dflash-q8_0-v8192.gguf"
    ids = read_tensor(path, "d2t")
    assert len(ids) == 8192 and set(dv.eog_ids(smollm2)) <= set(ids.tolist())
    # the head rows as SmolLM2 stores them (Q8_0 blocks of its tied token_embd), read by gguf-py for reference
    emb = {t.name: t for t in gguf.GGUFReader(str(smollm2)).tensors}["token_embd.weight"]
    own, ttype = tensor_rows(path, "output.weight")
    assert ttype == int(emb.tensor_type) == 8 and own.shape == (8192, 612)
    np.testing.assert_array_equal(own, np.asarray(emb.data)[ids])
    counts = ps.assets.smollm2_token_counts()
    assert counts[ids].sum() / counts.sum() == pytest.approx(0.9686, abs=1e-4)  # coverage of the train answers
    mtime = path.stat().st_mtime_ns
    assert ps.assets.smollm2_dflash_path(draft_vocab=8192) == path and path.stat().st_mtime_ns == mtime  # reused
    for bad in (1, 49153, 8192.0, True):
        with pytest.raises(ValueError, match="draft_vocab must be an int"):
            ps.assets.smollm2_dflash_path(draft_vocab=bad)
    gen = ps.Generator(smollm2, drafters={"full": ps.assets.smollm2_dflash_path(), "v8192": path}, n_ctx=1024,
                       n_gpu_layers=0)
    msgs = [{"role": "user", "content": "Write a Python function that reverses a string."}]
    plain = gen.generate(messages=msgs, max_tokens=48)
    res = {k: gen.generate(messages=msgs, drafter=k, n_max=3, max_tokens=48) for k in ("full", "v8192")}
    # tokens: plain decoding's up to a batch-shape near-tie (README, Known issues), and the two drafters' the same
    assert res["v8192"].tokens == res["full"].tokens
    assert res["v8192"].tokens[:16] == plain.tokens[:16]
    assert res["v8192"].stats.mean_accepted_length > 1.5  # it still drafts what the target writes
    gen.close()


def test_entropy_of_rows_with_fewer_kept_tokens_than_candidates():
    """A reduced vocabulary of fewer tokens than the 10 candidates a row reads: the rest come back at -inf."""
    from pyllama_spec.speculative.drafters.dflash import _entropy, _top_prob

    lg = np.array([[2.0, 1.0, -np.inf, -np.inf], [0.0, 0.0, 0.0, 0.0]])
    p = np.exp([2.0, 1.0]) / np.exp([2.0, 1.0]).sum()
    np.testing.assert_allclose(_entropy(lg), [-(p * np.log(p)).sum(), np.log(4)])
    np.testing.assert_allclose(_top_prob(lg), [p[0], 0.25])


def test_head_rows_copied_from_another_target_are_refused(tiny, reduced, tmp_path):
    """The same shape and vocabulary, other weights: the reduced drafter would load and draft with the first target's
    rows; a sample of its rows is compared with this target's head at load."""
    other = tmp_path / "other.gguf"
    ps.fixtures.write_tiny_target(other, arch="llama", n_layer=4, n_embd=64, seed=7)
    gen = ps.Generator(other, n_ctx=256, n_batch=32)
    with pytest.raises(ps.DrafterMismatchError, match="copied from another target's head than other.gguf's"):
        gen.add_drafter("part", reduced["part"])
    gen.add_drafter("full", tiny["dflash"])  # (the borrowing drafter has no rows of its own to compare)
    gen.add_drafter("mine", dv.write_reduced_vocab(tiny["dflash"], other, reduced["keep"], tmp_path / "mine.gguf"))
    assert len(gen.generate("hello", drafter="mine", max_tokens=6).tokens) == 6
    gen.close()
