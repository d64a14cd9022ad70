"""``bakeoff()``: run the sweep, write results.json, results.csv, REPORT.md and the plots."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from ..speculative.tree import TREE_BUDGET_MAX
from .machine import machine_info
from .prompts import load_prompts
from .summary import run_record, summarize
from .sweep import Runner, drafter_file, make_points, parse_n_max, parse_thinking, thinking_effect

log = logging.getLogger("pyllama_spec")

#: bumped when a key of results.json changes meaning or disappears (tests pin the keys)
SCHEMA = "pyllama_spec.bakeoff/1"


def _specs(drafters: Any) -> dict[str, Any]:
    """``{name: spec}`` from a dict, or from ``"name=path"`` / ``"name=kind:path"`` / ``"kind"`` strings
    (the CLI's ``-d``, read as ``pyllama-spec generate`` reads it)."""
    from ..cli import _drafter_specs

    if drafters is None:
        return {}
    if isinstance(drafters, dict):
        return dict(drafters)
    return _drafter_specs([str(item) for item in drafters])


def parse_trees(values: Any) -> list[int]:
    """Node budgets from ``"4,16"``, an int or a list (empty: none).

    Raises:
        InvalidArgumentError: a budget that is not an int in [1, TREE_BUDGET_MAX].
    """
    if values is None or values == "" or values == ():
        return []
    items = values.split(",") if isinstance(values, str) else [values] if isinstance(values, int) else list(values)
    out = []
    for v in items:
        try:
            b = int(str(v).strip())
        except ValueError:
            raise InvalidArgumentError(f"tree budgets are ints in [1, {TREE_BUDGET_MAX}], got {v!r}") from None
        if not 1 <= b <= TREE_BUDGET_MAX:
            raise InvalidArgumentError(f"tree budgets are ints in [1, {TREE_BUDGET_MAX}], got {b}")
        out.append(b)
    return list(dict.fromkeys(out))


def bakeoff(target: str | os.PathLike, drafters: Any = None, *, n_max: Any = (1, 2, 3, 4, 7, 15),
            prompts: Any = "builtin:coding-chat", turns: int | None = 4, thinking: Any = None,
            temperature: Any = (0.0,), runs: int = 3, max_tokens: int = 128, native: bool = False,
            out: Any = None, plots: bool = True, seed: int = 0, n_ctx: int = 4096, n_gpu_layers: int = -1,
            progress: bool = True, verify_reps: int = 3, generator_kwargs: dict | None = None,
            tree: Any = ()) -> dict:
    """Compare drafters on one target: every drafter × n_max × thinking × temperature, plus plain
    decoding, over a prompt set of (multi-turn) chats, ``runs`` times.

    Args:
        target: the target ``.gguf``.
        drafters: ``{name: spec}`` as :class:`~pyllama_spec.Generator` takes them (a ``.gguf`` path, a
            kind such as ``"ngram"``, ``(kind, kwargs)``), or CLI-style ``["dflash=path.gguf", "ngram"]``.
        n_max: draft lengths (ints, and ``"auto"`` for the per-step choice); clamped per drafter.
        prompts: ``"builtin:coding-chat"``, ``"builtin:mixed"``, a ``.jsonl`` path, or a list of strings.
        turns: most user turns per conversation (None: all); each turn's history holds the
            model's own earlier answers.
        thinking: ``"on,off"``, ``[True, False]``, or None (not passed to the chat template); values
            that the template ignores collapse to None, with a note.
        temperature: sampling temperatures (0 = greedy).
        runs: repetitions of every point (runs alternate over the points).
        max_tokens: tokens per answer.
        native: also run llama.cpp's own program per point and turn (greedy points; needs the
            package built with ``PYLLAMA_SPEC_NATIVE_TOOLS=ON``).
        out: folder for results.json, results.csv, REPORT.md and the PNGs (None: write nothing).
        plots: draw the PNGs (needs matplotlib: ``pip install pyllama_spec[plot]``).
        seed: base seed of the sampled points.
        n_ctx, n_gpu_layers, generator_kwargs: the :class:`~pyllama_spec.Generator`.
        progress: a tqdm bar over the whole sweep, with its ETA.
        verify_reps: repetitions per row count of the direct verify-cost measurement (``verify_ms``).
        tree: token-tree node budgets (ints, or ``"4,16"``): each is a point of its own at every int
            n_max (its depth) of the drafters that draft trees (draft-dflash); the target context is
            then sized for the largest (``Generator(tree=...)``) for every point. The cost model is
            fitted on chains only (trees get no prediction yet).

    Returns:
        The results dict written to results.json: ``schema``, ``settings``, ``machine``, ``model``,
        ``notes``, ``memory``, ``verify_ms``, ``runs`` (one record per generation), ``points``
        (pooled per configuration), ``cost_models``, ``outputs``.

    Raises:
        InvalidArgumentError: bad settings (named); UnsupportedError: ``native`` without the programs.
    """
    from tqdm.auto import tqdm

    from ..generator import Generator

    if not isinstance(runs, int) or runs < 1:
        raise InvalidArgumentError(f"runs must be an int ≥ 1, got {runs!r}")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be an int ≥ 1, got {max_tokens!r}")
    if turns is not None and (not isinstance(turns, int) or turns < 1):
        raise InvalidArgumentError(f"turns must be an int ≥ 1 or None, got {turns!r}")
    n_max_values = parse_n_max(n_max)
    temps = [float(t) for t in (str(temperature).split(",") if isinstance(temperature, (str, int, float))
                                else temperature)]
    if any(t < 0 for t in temps):
        raise InvalidArgumentError(f"temperatures must be ≥ 0, got {temps}")
    thinking_values = parse_thinking(thinking)
    trees = parse_trees(tree)
    convs = load_prompts(prompts)
    specs = _specs(drafters)
    if native:
        from ..native import find_program

        find_program("llama-speculative-simple")
        find_program("llama-completion")
    if plots and out is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InvalidArgumentError("plots need matplotlib: pip install 'pyllama_spec[plot]' (or pass "
                                       "plots=False / --no-plots)") from None

    notes = []
    machine = machine_info()
    gkw = dict(generator_kwargs or {})
    if trees:
        gkw["tree"] = max(trees)
    gen = Generator(target, drafters=specs, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, **gkw)
    try:
        if thinking_values != [None] and not thinking_effect(gen):
            notes.append(f"thinking {thinking!r} has no effect: the chat template of {Path(target).name} does not "
                         "read enable_thinking; those points were run once, without it")
            thinking_values = [None]
        points, clamp_notes = make_points(gen, n_max_values, temps, thinking_values, trees)
        if trees and not any(p.tree for p in points):
            notes.append(f"--tree {trees}: no drafter here drafts token trees (draft-dflash does); no tree points")
        notes += clamp_notes
        files = {name: drafter_file(gen, name, spec) for name, spec in specs.items()}
        runner = Runner(gen, convs, turns=turns, max_tokens=max_tokens, seed=seed, native=native,
                        drafter_files=files, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers)
        if native:
            for name in gen.drafters:
                if all(runner.native_plan(p) is None for p in points if p.drafter == name):
                    notes.append(f"--native: no llama.cpp program mode reproduces drafter {name!r} "
                                 f"(kind {gen.drafters[name].kind!r}); no native rows for it")
            if any(t > 0 for t in temps):
                notes.append("--native runs only the greedy (temperature 0) points: llama.cpp's programs are run "
                             "with --temp 0")

        # the verify cost per row count, measured directly (V(R) of the cost model; n_max="auto" uses it)
        max_rows = 1 + max(gen.resolve_n_max(p.drafter, p.n_max) for p in points)
        verify_ms = {"plain": gen.verify_ms(max_rows, reps=verify_reps)}
        for name in gen.drafters:
            verify_ms[name] = gen.verify_ms(max_rows, drafter=name, reps=verify_reps)
        for warm in [None, *gen.drafters]:  # warm-up: first-call costs (graph reserve, page faults)
            gen.generate("Hello", drafter=warm, max_tokens=8)

        total = len(points) * runs * runner.generations_per_run
        bar = tqdm(total=total, desc="bakeoff", unit="gen", disable=not progress, dynamic_ncols=True)
        records = []
        t0 = time.time()

        def on_generation(point, rec):
            bar.set_postfix_str(f"{point.label} T={point.temperature} run {rec['run'] + 1}", refresh=False)
            bar.update(1)

        runner.on_generation = on_generation
        try:
            for run in range(runs):
                for point in points:
                    kind = gen.drafters[point.drafter].kind if point.drafter else None
                    records += [run_record(r, kind) for r in runner.run_point(point, run)]
        finally:
            bar.close()
        memory = gen.memory_report()
        model = {"target": os.fspath(target), "target_desc": gen.model.description, "target_arch": gen.model.arch,
                 "n_vocab": gen.model.n_vocab,
                 "drafters": {n: {"spec": str(specs[n]) if not isinstance(specs[n], (str, os.PathLike)) else
                                  os.fspath(specs[n]), "kind": d.kind, "file": files.get(n),
                                  "n_max_limit": d.n_max_limit, "description": getattr(getattr(d, "model", None),
                                                                                      "description", None)}
                              for n, d in gen.drafters.items()}}
    finally:
        gen.close()

    results = {
        "schema": SCHEMA,
        "settings": {"n_max": n_max_values, "tree": trees, "prompts": prompts if isinstance(prompts, str) else "inline",
                     "n_conversations": len(convs), "turns": turns, "thinking": thinking_values,
                     "temperature": temps, "runs": runs, "max_tokens": max_tokens, "native": native, "seed": seed,
                     "verify_reps": verify_reps, "n_ctx": n_ctx, "n_gpu_layers": n_gpu_layers, "sync_stages": True,
                     "wall_s": time.time() - t0},
        "machine": machine, "model": model, "notes": notes, "memory": memory, "verify_ms": verify_ms,
        "runs": records, "outputs": {},
    }
    summarize(results)
    if out is not None:
        write_outputs(results, out, plots=plots)
    return results


def write_outputs(results: dict, out: Any, *, plots: bool = True) -> dict:
    """Write results.json, results.csv, REPORT.md (and the PNGs) into ``out``; returns the paths."""
    from .report import write_csv, write_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Any] = {"json": "results.json", "csv": "results.csv", "report": "REPORT.md"}
    results["outputs"] = paths

    def dump():
        with open(out / "results.json", "w") as f:
            json.dump(results, f, indent=1, default=str)

    dump()  # the measurements first: a failing plot must not lose them
    if plots:
        from .plots import draw_all

        paths["plots"] = [p.name for p in draw_all(results, out)]
        dump()
    write_csv(results, out / "results.csv")
    write_report(results, out / "REPORT.md")
    return paths


__all__ = ["bakeoff", "write_outputs", "SCHEMA"]
