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
    lines = capsys.readouterr().out.splitlines()
    rows = {ln.split()[0]: ln for ln in lines[1:] if ln.strip()}
    kinds = {cls.kind for cls in _REGISTRY.values()}
    assert kinds <= set(rows) | {"draft-dflash"} and "dflash" in rows  # (the dflash file is named "dflash")
    ran = [k for k, ln in rows.items() if "not run" not in ln]
    assert {"none", "dflash", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"} <= set(ran)
    assert all(rows[k].split()[-1] == "True" for k in ran)  # same tokens as plain decoding
    assert "not run" in rows["draft-eagle3"] and "not run" in rows["draft-simple"]
