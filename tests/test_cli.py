"""The command line: library errors end in one line on stderr and exit status 2 (issue 12.11:
``generate T -d dflash=<a llama model> --drafter dflash`` printed a traceback)."""
import json

import pytest

from pyllama_spec import cli


def _error_line(capsys):
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("pyllama-spec: error: ")
    return lines[0]


@pytest.mark.parametrize("argv, match", [
    (["generate", "{target}", "-d", "d=draft-dflash:{target}", "--drafter", "d", "-n", "2"], "'llama' model"),
    (["generate", "{target}", "-d", "d={qwen_dflash}", "--drafter", "d", "-n", "2"], "another target"),
    (["generate", "{missing}", "-n", "2"], "not found"),
    (["generate", "{target}", "--drafter", "ngram", "-n", "2"], "was not added"),
    (["generate", "{target}", "-n", "0"], "max_tokens"),
    (["generate", "{target}", "-c", "-5"], "n_ctx"),
    (["generate", "{target}", "-d", "eagle", "--drafter", "eagle"], "neither a known drafter kind"),
    (["bench", "{target}", "--runs", "0"], "--runs"),
    (["info", "{notgguf}"], "not a GGUF"),
])
def test_errors_are_one_line_and_status_2(tiny, tiny_qwen3, tmp_path, capsys, argv, match):
    notgguf = tmp_path / "x.gguf"
    notgguf.write_bytes(b"not a model at all")
    paths = {"target": tiny["target"], "qwen_dflash": tiny_qwen3["dflash"], "missing": tmp_path / "none.gguf",
             "notgguf": notgguf}
    rc = cli.main([a.format(**paths) for a in argv])
    assert rc == 2
    assert match in _error_line(capsys)


def test_generate_json(tiny, capsys):
    rc = cli.main(["generate", str(tiny["target"]), "-d", f"dflash={tiny['dflash']}", "--drafter", "dflash",
                   "-n", "6", "--n-max", "3", "--raw", "-p", "hello", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["n_max"] == 3 and out["drafter"] == "dflash" and len(out["tokens"]) == 6
    assert out["stats"]["n_accepted"] + out["stats"]["n_steps"] == out["n_generated"]
    assert out["sampling"]["temperature"] == 0.0


def test_bench_all_kinds_lists_every_registered_kind(tiny, capsys):
    """`bench --all-kinds`: every kind that needs no file runs beside the given ones (each row a
    lossless run: same tokens as plain at T = 0), every kind that needs a file is listed with why."""
    from pyllama_spec.speculative.drafters import _REGISTRY

    rc = cli.main(["bench", str(tiny["target"]), "-d", f"dflash={tiny['dflash']}", "--all-kinds", "--runs", "1",
                   "-n", "12", "--raw", "-p", "hello hello hello"])
    assert rc == 0
    out = capsys.readouterr().out
    lines = out.split("\n\n")[0].splitlines()  # the table (footnotes follow after a blank line)
    rows = {ln.split()[0]: ln for ln in lines[1:] if ln.strip()}
    kinds = {cls.kind for cls in _REGISTRY.values()}
    assert kinds <= set(rows) | {"draft-dflash"} and "dflash" in rows  # (the dflash file is named "dflash")
    ran = [k for k, ln in rows.items() if "not run" not in ln]
    assert {"none", "dflash", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"} <= set(ran)
    assert all(rows[k].split()[-1] == "True" for k in ran)  # same tokens as plain decoding
    assert "not run" in rows["draft-eagle3"] and "not run" in rows["draft-simple"]


@pytest.fixture
def named_tiny(tiny, tmp_path, monkeypatch):
    """The tiny target as a named model "tiny" of pyllama_spec.assets (in a cache of its own), with
    the tiny DFlash drafter as its shipped drafter."""
    import hashlib
    import shutil

    from pyllama_spec import assets

    monkeypatch.setenv("PYLLAMA_SPEC_CACHE", str(tmp_path / "cache"))
    f = assets.cache_dir() / "tiny-target.gguf"
    shutil.copy(tiny["target"], f)
    monkeypatch.setitem(assets.MODELS, "tiny", assets.ModelAsset(
        name="tiny", filename=f.name, sha256=hashlib.sha256(f.read_bytes()).hexdigest(), size=f.stat().st_size,
        parts=(), description="the tiny test target", chat=True, license="none"))
    monkeypatch.setitem(assets.SHIPPED_DRAFTERS, "tiny", {"draft-dflash": lambda: tiny["dflash"]})
    return f


def test_named_models_resolve_everywhere(named_tiny, tiny, capsys, tmp_path):
    """A name of pyllama_spec.assets goes wherever a path goes; -d dflash alone is the shipped drafter
    and generate uses the first -d; `models` lists names, sizes, cache state and shipped drafters."""
    assert cli.main(["info", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "pyllama_spec tiny llama target (tiny-target.gguf, the named model 'tiny')" in out
    assert f"draft-dflash ({tiny['dflash']})" in out and f"CPU: {cli_cpu()}" in out
    assert cli.main(["generate", "tiny", "-d", "dflash", "-n", "6", "--raw", "-p", "hello", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["drafter"] == "dflash" and res["stats"]["n_drafted"] > 0
    assert cli.main(["generate", "tiny", "-d", "dflash", "--drafter", "none", "-n", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["drafter"] is None
    assert cli.main(["models", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["tiny"]["cached"] is True and rows["tiny"]["size"] == named_tiny.stat().st_size
    assert rows["tiny"]["drafters"] == {"draft-dflash": str(tiny["dflash"])}
    assert rows["smollm2"]["drafters"].keys() == {"draft-dflash", "draft-simple", "draft-eagle3"}
    assert rows["smollm2"]["size"] == 98_362_432
    assert cli.main(["models"]) == 0
    table = capsys.readouterr().out
    assert table.splitlines()[0].split() == ["name", "size", "cached", "drafters", "shipped", "model"]
    assert any(ln.split()[:3] == ["smollm2", "98", "MB"] and ln.split()[4:7] == ["dflash,", "draft,", "eagle3"]
               for ln in table.splitlines())
    # what is not there is named, with what is
    assert cli.main(["generate", "tiny", "-d", "eagle3", "-n", "2"]) == 2
    line = _error_line(capsys)
    assert "no draft-eagle3 drafter ships for 'tiny'" in line and "tiny: draft-dflash" in line and "-d NAME=" in line
    assert cli.main(["info", "tinyy"]) == 2
    assert "one of the named models: smollm2" in _error_line(capsys)
    # the bake-off takes names too
    assert cli.main(["bakeoff", "tiny", "-d", "dflash", "--n-max", "2", "--prompts", "builtin:mixed", "--turns", "1",
                     "--runs", "1", "-n", "3", "--out", str(tmp_path / "b"), "--no-plots", "--no-progress",
                     "-c", "1024"]) == 0
    res = json.loads((tmp_path / "b" / "results.json").read_text())
    assert res["model"]["target"] == str(named_tiny)
    assert res["model"]["drafters"]["dflash"]["file"] == str(tiny["dflash"])


def cli_cpu():
    import pyllama_spec as ps

    return ps.cpu_name()


def test_help_has_examples(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and "pyllama-spec generate smollm2 -d dflash" in out and "--resume" in out


def test_bench_shows_progress_and_explains_itself(tiny, capsys):
    """bench: a progress bar on stderr from the start (warm-up included); footnotes after the table."""
    rc = cli.main(["bench", str(tiny["target"]), "-d", "ngram", "--runs", "1", "-n", "6", "--raw", "-p", "a b a b"])
    assert rc == 0
    cap = capsys.readouterr()
    assert "bench" in cap.err and "3/3" in cap.err
    rc = cli.main(["bench", str(tiny["target"]), "-d", "ngram", "--runs", "1", "-n", "6", "--no-progress"])
    assert rc == 0 and "bench" not in capsys.readouterr().err


def test_bench_notes_say_where_runs_part_and_where_time_goes(tiny_gen):
    from pyllama_spec.cli import bench_notes

    plain = tiny_gen.generate("hello world", max_tokens=8, reuse_prefix=False)
    spec = tiny_gen.generate("hello world", drafter="dflash", n_max=3, max_tokens=8, reuse_prefix=False)
    assert spec.tokens == plain.tokens  # (f32 fixtures: no batch-shape differences)
    spec.tokens = spec.tokens[:3] + [(spec.tokens[3] + 1) % tiny_gen.model.n_vocab] + spec.tokens[4:]
    notes = bench_notes(tiny_gen, {None: plain, "dflash": spec}, {None: 100.0, "dflash": 50.0}, 0.0)
    assert len(notes) == 2
    assert notes[0].startswith("* same tokens False (dflash): the first 3 generated tokens agree; at token 4")
    assert "top-2 logit margin there is" in notes[0]
    assert ("near-tie" in notes[0]) and ("Known issues" in notes[0] or "please report" in notes[0])
    assert notes[1].startswith("* dflash is 0.50× plain: a step costs") and "Per step, ms: " in notes[1]
    assert "verify" in notes[1] and ("Expected on a CPU" in notes[1] or "step_cost.py" in notes[1])
    # nothing to explain: no notes; a drafter that drafted nothing is said to be noise; sampled runs
    # that differ get the sampling note, not a margin
    same = tiny_gen.generate("hello world", drafter="dflash", n_max=3, max_tokens=8, reuse_prefix=False)
    assert bench_notes(tiny_gen, {None: plain, "dflash": same}, {None: 1.0, "dflash": 2.0}, 0.0) == []
    idle = bench_notes(tiny_gen, {None: plain, "ngram": plain}, {None: 1.0, "ngram": 0.9}, 0.0)
    assert idle == ["* ngram drafted no token (as an n-gram drafter does when the prompt and answer hold no repeat): "
                    "it decoded as plain decoding does, so its 0.90× is noise"]
    assert "the runs sample" in bench_notes(tiny_gen, {None: plain, "dflash": spec}, {None: 1.0, "dflash": 2.0},
                                            0.8)[0]


def test_drafter_as_target_on_the_command_line(tiny, capsys):
    assert cli.main(["generate", str(tiny["dflash"]), "-n", "2"]) == 2
    line = _error_line(capsys)
    assert "not a target model" in line and "-d dflash=" in line and "ctx_other" not in line
