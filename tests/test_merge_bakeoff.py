"""benchmarks/merge_bakeoff.py: a sweep split over device calls merges back into the same tables — the
committed CPU bake-off split in two by drafter and merged gives its points again."""
import copy
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _merge_module():
    spec = importlib.util.spec_from_file_location("merge_bakeoff", ROOT / "benchmarks" / "merge_bakeoff.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parts_merge_into_the_whole():
    whole = json.loads((ROOT / "benchmarks" / "bakeoff" / "cpu-mixed" / "results.json").read_text())
    a, b = copy.deepcopy(whole), copy.deepcopy(whole)
    # part a: plain and n_max 1, 2; part b: plain again (another process) and the rest
    a["runs"] = [r for r in whole["runs"] if r["drafter"] is None or r["n_max"] in (1, 2)]
    b["runs"] = [r for r in whole["runs"] if r["drafter"] is None or r["n_max"] not in (1, 2)]
    a["settings"]["n_max"], b["settings"]["n_max"] = [1, 2], [3, 4, 7, "auto"]
    merged = _merge_module().merge([a, b], ["a", "b"])
    assert merged["settings"]["n_max"] == [1, 2, 3, 4, 7, "auto"]
    assert len(merged["runs"]) == len(a["runs"]) + len(b["runs"])
    key = lambda p: (str(p["drafter"]), str(p["n_max"]), p["temperature"])  # noqa: E731
    got = {key(p): p for p in merged["points"]}
    for p in whole["points"]:
        q = got[key(p)]
        assert q["tau"] == pytest.approx(p["tau"])
        if p["drafter"] is None:  # plain measured in both parts: its runs counted twice, same speed
            assert q["n_generated"] == 2 * p["n_generated"]
            assert q["tokens_per_s"] == pytest.approx(p["tokens_per_s"])
        else:
            assert q["tokens_per_s"] == pytest.approx(p["tokens_per_s"]) and q["speedup"] == pytest.approx(p["speedup"])
    assert merged["notes"][-1].startswith("merged from 2 runs")


def test_parts_of_other_settings_do_not_merge():
    whole = json.loads((ROOT / "benchmarks" / "bakeoff" / "cpu-mixed" / "results.json").read_text())
    other = copy.deepcopy(whole)
    other["settings"]["max_tokens"] = 128
    with pytest.raises(SystemExit, match="settings.max_tokens differs"):
        _merge_module().merge([whole, other], ["a", "b"])


def test_a_part_cut_short_makes_the_merge_incomplete_and_is_named():
    whole = json.loads((ROOT / "benchmarks" / "bakeoff" / "cpu-mixed" / "results.json").read_text())
    a, b = copy.deepcopy(whole), copy.deepcopy(whole)
    b["complete"] = False  # its call's time ran out: the finished points only
    merged = _merge_module().merge([a, b], ["done", "cut"])
    assert merged["complete"] is False
    assert merged["notes"][-1].endswith("cut short (its finished points only): cut")
    assert _merge_module().merge([a, copy.deepcopy(whole)], ["a", "b"]).get("complete", True) is True
