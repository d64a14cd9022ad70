"""Merge the results.json of several bake-off runs of one target and prompt set (parts of a sweep
split over device calls: other drafters, other temperatures) into one folder, then render it as
``pyllama-spec bakeoff --from-json`` does (REPORT.md, CSV, plots).

    python benchmarks/merge_bakeoff.py OUT_DIR PART/results.json [PART/results.json ...] [--no-plots]

The parts must share the target, the prompt set, turns and max_tokens (checked). Their generation
records are pooled per configuration; plain decoding measured in several parts pools too (each part
is a separate process: its speed-ups are then against the plain runs of all parts).
"""
from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path

from pyllama_spec.study import write_outputs
from pyllama_spec.study.summary import summarize

SAME = ("prompts", "turns", "max_tokens", "n_ctx", "n_gpu_layers")


def merge(parts: list[dict], names: list[str]) -> dict:
    """One results dict of ``parts`` (the first's machine and settings, the others' runs added).

    Raises:
        SystemExit: the parts are of different targets or settings (named).
    """
    out = copy.deepcopy(parts[0])
    for part, name in zip(parts[1:], names[1:]):
        if part["model"]["target"] != out["model"]["target"]:
            raise SystemExit(f"{name}: another target ({part['model']['target']} vs {out['model']['target']})")
        for k in SAME:
            if part["settings"].get(k) != out["settings"].get(k):
                raise SystemExit(f"{name}: settings.{k} differs ({part['settings'].get(k)!r} vs "
                                 f"{out['settings'].get(k)!r})")
        s = out["settings"]
        for k in ("n_max", "temperature", "thinking"):
            s[k] = s[k] + [v for v in part["settings"][k] if v not in s[k]]
        s["native"] = bool(s["native"] or part["settings"]["native"])
        s["runs"] = max(s["runs"], part["settings"]["runs"])
        s["wall_s"] = s.get("wall_s", 0.0) + part["settings"].get("wall_s", 0.0)
        out["model"]["drafters"].update(part["model"]["drafters"])
        for k, v in part["verify_ms"].items():
            out["verify_ms"].setdefault(k, v)
        mem = part.get("memory", {})
        out["memory"].setdefault("drafters", {}).update(mem.get("drafters", {}))
        out["memory"].setdefault("target", mem.get("target"))
        out["notes"] += [n for n in part["notes"] if n not in out["notes"]]
        out["runs"] += part["runs"]
    # a part cut short (its call's time ran out: results.json keeps the finished points) makes the whole
    # incomplete, and the notes say which
    cut = [n for p, n in zip(parts, names) if not p.get("complete", True)]
    out["complete"] = not cut
    out["notes"].append(f"merged from {len(parts)} runs (one device call each): {', '.join(names)}"
                        + (f"; cut short (its finished points only): {', '.join(cut)}" if cut else ""))
    return summarize(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("parts", nargs="+")
    ap.add_argument("--no-plots", action="store_true")
    a = ap.parse_args()
    parts = [json.loads(Path(p).read_text()) for p in a.parts]
    res = merge(parts, [str(Path(p).parent.name) for p in a.parts])
    paths = write_outputs(res, a.out, plots=not a.no_plots)
    print(f"{len(res['runs'])} generations from {len(parts)} parts into {a.out}: {paths}")


if __name__ == "__main__":
    main()
