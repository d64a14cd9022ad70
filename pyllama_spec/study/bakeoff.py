"""``bakeoff()``: run the sweep, write results.json, results.csv, REPORT.md and the plots."""
from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from ..drafter_specs import parse_drafter_specs
from ..errors import InvalidArgumentError
from ..speculative.tree import TREE_BUDGET_MAX
from .machine import machine_info
from .prompts import load_prompts
from .summary import run_record, summarize
from .sweep import Runner, drafter_file, interleaved, make_points, parse_n_max, parse_thinking, thinking_effect

log = logging.getLogger("pyllama_spec")

#: bumped when a key of results.json changes meaning or disappears (tests pin the keys)
SCHEMA = "pyllama_spec.bakeoff/1"


def _specs(drafters: Any) -> dict[str, Any]:
    """``{name: spec}`` from a dict, or from ``"name=path"`` / ``"name=kind:path"`` / ``"kind"`` strings
    (the CLI's ``-d``, read as ``pyllama-spec generate`` reads it)."""
    if drafters is None:
        return {}
    if isinstance(drafters, dict):
        return dict(drafters)
    return parse_drafter_specs([str(item) for item in drafters])


def _atomic_json(results: dict, path: Path) -> None:
    """Write ``results`` to ``path`` so that a reader (or a Ctrl-C) never sees half a file: a
    temporary file beside it, flushed to disk, then renamed over it (``os.replace`` is atomic)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(results, f, indent=1, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _done_key(rec: dict) -> tuple:
    """The (point, run) a run record belongs to (a resume skips by it and the conversation)."""
    return (rec["drafter"], rec["n_max"], rec.get("tree", 0), rec["temperature"], rec["thinking"], rec["run"])


def _finished_pairs(records: list[dict], n_conversations: int) -> int:
    """How many (point, run) pairs have every conversation recorded."""
    convs: dict = {}
    for r in records:
        convs.setdefault(_done_key(r), set()).add(r["conversation"])
    return sum(len(c) >= n_conversations for c in convs.values())


#: settings a resumed sweep must share with the results.json it continues (``runs`` may grow)
_RESUME_KEYS = ("n_max", "tree", "prompts", "n_conversations", "turns", "thinking", "temperature", "max_tokens",
                "native", "seed", "verify_reps", "n_ctx", "n_gpu_layers")


def _load_resume(path: Path, settings: dict, model: dict) -> dict | None:
    """The earlier results.json in ``path`` to continue, or None when there is none.

    Raises:
        InvalidArgumentError: it is unreadable, or was made with other settings / another target or
            drafters (the message names what differs).
    """
    if not path.exists():
        return None
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError) as exc:
        raise InvalidArgumentError(f"--resume: {path} is not a readable results.json ({exc}); move it away or "
                                   "drop --resume") from None
    if old.get("schema") != SCHEMA:
        raise InvalidArgumentError(f"--resume: {path} has schema {old.get('schema')!r}, this version writes {SCHEMA!r}")
    differ = [k for k in _RESUME_KEYS if json.loads(json.dumps(old["settings"].get(k), default=str))
              != json.loads(json.dumps(settings.get(k), default=str))]
    if old["model"].get("target") != model["target"]:
        differ.append("target")
    old_d = {n: d.get("spec") for n, d in old["model"].get("drafters", {}).items()}
    new_d = {n: d.get("spec") for n, d in model["drafters"].items()}
    if old_d != new_d:
        differ.append("drafters")
    if differ:
        was = "; ".join(f"{k} {old['settings'].get(k, old['model'].get(k))!r}" for k in differ)
        raise InvalidArgumentError(f"--resume: {path} was made with other {', '.join(differ)} (it has {was}); "
                                   "give the same settings, or another --out to start afresh")
    return old


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
            resume: bool = False, tree: Any = ()) -> dict:
    """Compare drafters on one target: every drafter × n_max × thinking × temperature, plus plain
    decoding, over a prompt set of (multi-turn) chats, ``runs`` times.

    With ``out``, results.json is written (atomically) each time a point's run finishes, so an
    interrupted sweep (Ctrl-C: ``KeyboardInterrupt`` is re-raised after the write) leaves a readable
    results.json with ``"complete": false`` holding every finished point; ``resume=True`` continues
    it, running only the (point, run) pairs it lacks.

    Args:
        target: the target ``.gguf``, or a model name of :mod:`pyllama_spec.assets` (``"smollm2"``).
        drafters: ``{name: spec}`` as :class:`~pyllama_spec.Generator` takes them (a ``.gguf`` path, a
            kind such as ``"ngram"``, ``(kind, kwargs)``), or CLI-style ``["dflash=path.gguf", "ngram"]``;
            a bare kind that needs a file (``"dflash"``) is the drafter shipped for the target
            (:func:`~pyllama_spec.drafter_specs.with_shipped_drafters`).
        n_max: draft lengths (ints, and ``"auto"`` for the per-step choice); clamped per drafter.
        prompts: ``"builtin:coding-chat"``, ``"builtin:mixed"``, a ``.jsonl`` path, or a list of strings.
        turns: most user turns per conversation (None: all); each turn's history holds the
            model's own earlier answers.
        thinking: ``"on,off"``, ``[True, False]``, or None (not passed to the chat template); values
            that the template ignores collapse to None, with a note.
        temperature: sampling temperatures (0 = greedy).
        runs: repetitions of every point (the points interleaved: every point on each conversation in
            turn, :func:`~pyllama_spec.study.sweep.interleaved`).
        max_tokens: tokens per answer.
        native: also run llama.cpp's own program per point and turn (greedy points; needs the
            package built with ``PYLLAMA_SPEC_NATIVE_TOOLS=ON``).
        out: folder for results.json, results.csv, REPORT.md and the PNGs (None: write nothing).
        plots: draw the PNGs (needs matplotlib: ``pip install pyllama_spec[plot]``).
        seed: base seed of the sampled points.
        n_ctx, n_gpu_layers, generator_kwargs: the :class:`~pyllama_spec.Generator`.
        progress: a tqdm bar over the preparation (verify-cost measurement, warm-ups) and one over
            the sweep, with its ETA.
        verify_reps: repetitions per row count of the direct verify-cost measurement (``verify_ms``).
        resume: continue the sweep of ``out/results.json`` (same settings; ``runs`` may be larger):
            its finished (point, run) pairs are kept, not run again; its verify costs are reused.
        tree: token-tree node budgets (ints, or ``"4,16"``): each is a point of its own at every int
            n_max (its depth) of the drafters that draft trees (draft-dflash, DFlash2, draft-eagle3); the
            target context is then sized for the largest (``Generator(tree=...)``) for every point. The cost model is
            fitted on the chains and predicts the trees (``cost_models[i]["trees"]``: tok/s at the
            measured τ, τ and tok/s from the drafter's calibrated probabilities, the budget it picks).

    Returns:
        The results dict written to results.json: ``schema``, ``complete``, ``settings``, ``machine``,
        ``model``, ``notes``, ``memory``, ``verify_ms``, ``runs`` (one record per generation),
        ``points`` (pooled per configuration), ``cost_models``, ``outputs``.

    Raises:
        InvalidArgumentError: bad settings (named); ``resume`` without ``out``, or with an
        ``out/results.json`` of other settings. UnsupportedError: ``native`` without the programs.
        ModelNotFoundError: an unknown target name, or no shipped drafter for a bare kind.
        KeyboardInterrupt: after writing what finished.
    """
    from tqdm.auto import tqdm

    from ..assets import resolve_model
    from ..drafter_specs import with_shipped_drafters
    from ..generator import Generator

    if not isinstance(runs, int) or runs < 1:
        raise InvalidArgumentError(f"runs must be an int ≥ 1, got {runs!r}")
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise InvalidArgumentError(f"max_tokens must be an int ≥ 1, got {max_tokens!r}")
    if turns is not None and (not isinstance(turns, int) or turns < 1):
        raise InvalidArgumentError(f"turns must be an int ≥ 1 or None, got {turns!r}")
    if resume and out is None:
        raise InvalidArgumentError("resume=True continues out/results.json: give out (--out FOLDER)")
    n_max_values = parse_n_max(n_max)
    temps = [float(t) for t in (str(temperature).split(",") if isinstance(temperature, (str, int, float))
                                else temperature)]
    if any(t < 0 for t in temps):
        raise InvalidArgumentError(f"temperatures must be ≥ 0, got {temps}")
    thinking_values = parse_thinking(thinking)
    trees = parse_trees(tree)
    convs = load_prompts(prompts)
    target = resolve_model(target, progress=progress)
    specs = with_shipped_drafters(target, _specs(drafters))
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
    log.info("bakeoff: loading %s and %d drafter(s)", Path(target).name, len(specs))
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
            notes.append(f"--tree {trees}: no drafter here drafts token trees (draft-dflash, DFlash2 and draft-eagle3 "
                         "do); no tree points")
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
        model = {"target": os.fspath(target), "target_desc": gen.model.description, "target_name": gen.model.name,
                 "target_label": gen.model.label, "target_arch": gen.model.arch, "n_vocab": gen.model.n_vocab,
                 "drafters": {n: {"spec": str(specs[n]) if not isinstance(specs[n], (str, os.PathLike)) else
                                  os.fspath(specs[n]), "kind": d.kind, "file": files.get(n),
                                  "n_max_limit": d.n_max_limit, "description": getattr(getattr(d, "model", None),
                                                                                      "description", None)}
                              for n, d in gen.drafters.items()}}
        settings: dict[str, Any] = {"n_max": n_max_values, "tree": trees,
                    "prompts": prompts if isinstance(prompts, str) else "inline",
                    "n_conversations": len(convs), "turns": turns, "thinking": thinking_values,
                    "temperature": temps, "runs": runs, "max_tokens": max_tokens, "native": native, "seed": seed,
                    "verify_reps": verify_reps, "n_ctx": n_ctx, "n_gpu_layers": n_gpu_layers, "sync_stages": True,
                    "wall_s": 0.0}
        old = _load_resume(Path(out) / "results.json", settings, model) if resume else None
        records: list[dict] = []
        if old is not None:
            records = list(old["runs"])
            machine = old["machine"]
            notes = list(dict.fromkeys(old["notes"] + notes))
            notes.append(f"resumed on {time.strftime('%Y-%m-%d %H:%M %Z')} with {_finished_pairs(records, len(convs))} "
                         f"(point, run) pairs already finished: points measured in different sessions met the "
                         f"machine in different states (load); compare them with care")
            settings["wall_s"] = old["settings"].get("wall_s", 0.0)
        # interleaved (sweep.interleaved): every point on each conversation in turn; a conversation's
        # turns are saved together, so the unit a resume skips is (point, run, conversation)
        done = {_done_key(r) + (r["conversation"],) for r in records}
        todo = [(run, ci, p) for run, ci, p in interleaved(points, runs, len(runner.convs))
                if (p.drafter, p.n_max, p.tree, p.temperature, p.thinking, run, runner.convs[ci].id) not in done]
        settings["order"] = "interleaved"

        t0 = time.time()

        def results_now(complete: bool) -> dict:
            res = {"schema": SCHEMA, "complete": complete,
                   "settings": {**settings, "wall_s": settings["wall_s"] + time.time() - t0},
                   "machine": machine, "model": model, "notes": notes, "memory": gen.memory_report(),
                   "verify_ms": verify_ms, "runs": records, "outputs": {}}
            return summarize(res)

        n_saved = [len(records)]  # records on disk (a Ctrl-C's message counts those)

        def save() -> None:
            if out is not None:
                Path(out).mkdir(parents=True, exist_ok=True)
                _atomic_json(results_now(False), Path(out) / "results.json")
                n_saved[0] = len(records)

        # the verify cost per row count, measured directly (V(R) of the cost model; n_max="auto" uses it),
        # and warm-ups (first-call costs: graph reserve, page faults); a resumed sweep keeps its costs
        # (a tree verifies budget + 1 rows: the cost model's tree predictions read V there)
        max_rows = 1 + max(max(p.tree, gen.resolve_n_max(p.drafter, p.n_max)) for p in points)
        verify_ms = dict(old["verify_ms"]) if old is not None and old.get("verify_ms") else {}
        steps = [(k, d) for k, d in [("plain", None), *((n, n) for n in gen.drafters)] if k not in verify_ms]
        per_point = runner.generations_per_run
        total = len(points) * runs * per_point
        try:
            save()  # from the start: the settings, no runs yet (a Ctrl-C always leaves a results.json)
            with tqdm(total=len(steps) + (1 + len(gen.drafters) if todo else 0), desc="preparing", unit="step",
                      disable=not progress or not (todo or steps), dynamic_ncols=True) as prep:
                for key, taps_of in steps:
                    prep.set_postfix_str(f"verify cost of 1..{max_rows} rows, {key} taps")
                    verify_ms[key] = gen.verify_ms(max_rows, drafter=taps_of, reps=verify_reps)
                    prep.update(1)
                save()  # (a resume reuses the verify costs)
                for warm in [None, *gen.drafters] if todo else []:
                    prep.set_postfix_str(f"warm-up {warm or 'plain'}")
                    gen.generate("Hello", drafter=warm, max_tokens=8)
                    prep.update(1)

            with tqdm(total=total, initial=total - len(todo) * per_point, desc="bakeoff", unit="gen",
                      disable=not progress, dynamic_ncols=True) as bar:
                def on_generation(point, rec):
                    bar.set_postfix_str(f"{point.label} T={point.temperature} run {rec['run'] + 1}", refresh=False)
                    bar.update(1)

                runner.on_generation = on_generation
                for i, (run, ci, point) in enumerate(todo):
                    bar.set_postfix_str(f"{point.label} T={point.temperature} run {run + 1}")
                    kind = gen.drafters[point.drafter].kind if point.drafter else None
                    records += [run_record(r, kind) for r in runner.run_conversation(point, run, runner.convs[ci])]
                    if i + 1 == len(todo) or todo[i + 1][:2] != (run, ci):
                        save()  # what finished is on disk: a Ctrl-C loses at most this conversation's points
        except KeyboardInterrupt:
            if out is None:
                raise
            n_done = _finished_pairs(records[:n_saved[0]], len(runner.convs))
            raise KeyboardInterrupt(f"{Path(out) / 'results.json'} holds {n_done} of {len(points) * runs} (point, "
                                    "run) pairs; the same command with --resume (resume=True) continues") from None
        results = results_now(True)
    finally:
        gen.close()

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
        _atomic_json(results, out / "results.json")

    dump()  # the measurements first: a failing plot must not lose them
    if plots:
        from .plots import draw_all

        paths["plots"] = [p.name for p in draw_all(results, out)]
        dump()
    write_csv(results, out / "results.csv")
    write_report(results, out / "REPORT.md")
    return paths


__all__ = ["bakeoff", "write_outputs", "SCHEMA"]
