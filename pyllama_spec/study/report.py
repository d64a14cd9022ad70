"""results.csv (one row per configuration), runs.csv (one per generation) and REPORT.md — the
study's tables as rows: speed and τ per drafter × n_max, acceptance per position, per-step stage
time, speed and acceptance per turn, memory per drafter, and the cost model's predictions."""
from __future__ import annotations

import csv
import json
from typing import Any

from .machine import machine_label, target_label
from .summary import STEP_STAGES

POINT_COLUMNS = ("drafter", "kind", "n_max", "tree", "temperature", "thinking", "n_runs", "n_generations",
                 "n_generated",
                 "tokens_per_s", "tokens_per_s_sd", "speedup", "prompt_tokens_per_s", "tau", "acceptance",
                 "mean_draft_length", "ms_per_step", "predicted_tok_s", "predicted_heldout_tok_s", "break_even_tau")
RUN_COLUMNS = ("drafter", "kind", "n_max", "tree", "temperature", "thinking", "run", "conversation", "turn", "n_prompt",
               "n_generated", "finish_reason", "tokens_per_s", "prompt_tokens_per_s", "n_steps", "n_drafted",
               "n_accepted", "tau", "acceptance", "mean_draft_length")


def _cell(v):
    return json.dumps(v) if isinstance(v, (list, dict)) else v


def write_csv(results: dict, path: Any) -> None:
    """results.csv: one row per configuration (the point columns, stage ms per step, per-position
    acceptance); runs.csv beside it: one row per generation."""
    pts = results["points"]
    n_pos = max((len(p["accepted_per_position"]) for p in pts), default=0)
    cols = list(POINT_COLUMNS) + [f"ms_{s}" for s in STEP_STAGES] + [f"acc_pos{i + 1}" for i in range(n_pos)] + [
        "native_tokens_per_s", "native_acceptance", "native_same_tokens"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for p in pts:
            nat = p.get("native") or {}
            app = p["accepted_per_position"]
            w.writerow([_cell(p.get(c)) for c in POINT_COLUMNS] + [p["stages_ms_per_step"].get(s) for s in STEP_STAGES]
                       + [app[i] if i < len(app) else "" for i in range(n_pos)]
                       + [nat.get("tokens_per_s"), nat.get("acceptance"), nat.get("same_tokens")])
    with open(str(path).replace("results.csv", "runs.csv") if str(path).endswith("results.csv")
              else str(path) + ".runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(RUN_COLUMNS)
        for r in results["runs"]:
            w.writerow([_cell(r.get(c)) for c in RUN_COLUMNS])


def _f(v, fmt="{:.2f}", none="–"):
    if v is None or (isinstance(v, float) and v != v):
        return none
    return fmt.format(v)


def _n(count: Any, word: str) -> str:
    """``"1 run"``, ``"3 runs"``."""
    return f"{count} {word}{'' if count == 1 else 's'}"


def _table(header: Any, rows: Any) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out + [""]


def _setting(p: Any) -> str:
    th = {True: "thinking on", False: "thinking off", None: ""}[p["thinking"]]
    return f"T={p['temperature']:g}" + (f", {th}" if th else "")


def _name(p: Any) -> str:
    return (p["drafter"] or "plain") + (f" tree {p['tree']}" if p.get("tree") else "")


def _order(points):
    return sorted(points, key=lambda p: (p["temperature"], str(p["thinking"]), p["drafter"] is not None,
                                         p["drafter"] or "", isinstance(p["n_max"], str), p["n_max"]
                                         if isinstance(p["n_max"], int) else 0, p.get("tree") or 0))


def _drafted_positions(p: Any) -> int:
    """How many draft positions the point's steps used (an "auto" ceiling can lie far beyond them)."""
    if p["n_max"] != "auto":
        return len(p["accepted_per_position"])
    counts = {int(k): v for k, v in (p.get("draft_length_counts") or {}).items() if v}
    return max(counts, default=0)


def _err(pred: Any, meas: Any) -> str:
    return _f((pred / meas - 1) * 100 if pred and meas else None, "{:+.0f}%")


def _tree_tables(cms: list[dict]) -> list[str]:
    """The token-tree section: per (depth, budget) measured against predicted, then the budget picked."""
    L = ["## Token trees: the cost model's prediction and the budget it picks", "",
         "A tree step verifies nodes + 1 rows (V at those rows from the trees' own verifies), makes one drafter call "
         "(the chain's at that depth, plus R ms per depth row for what a tree's call adds, fitted from the trees' "
         "draft stages) and commits τ tokens. *at measured τ*: the cost model's tok/s with the tree's "
         "measured τ (tests the costs); *τ from probs*: τ predicted from the drafter's path probabilities, "
         "calibrated per depth so that its own chain gets the chain runs' measured survival (Σ over nodes of "
         "P(path accepted), EAGLE-2 / DDTree; from the depth's largest tree, whose first b nodes are the tree of "
         "budget b), and the tok/s at that τ. Break-even τ = the τ a budget needs to match plain decoding.", ""]
    rows = []
    for cm in cms:
        for t in cm["trees"]:
            for b in t["budgets"]:
                rows.append([_setting(cm), cm["drafter"], t["n_max"], b["tree"], _f(b["nodes_per_step"], "{:.1f}"),
                             _f(b["ms_per_step_measured"], "{:.1f}"), _f(b["ms_per_step_predicted"], "{:.1f}"),
                             _f(b["tau_measured"]), _f(b["tau_from_probs"]), _f(b["break_even_tau"]),
                             _f(b["tok_s_measured"], "{:.1f}"), _f(b["predicted_tok_s"], "{:.1f}"),
                             _err(b["predicted_tok_s"], b["tok_s_measured"]),
                             _f(b["predicted_tok_s_from_probs"], "{:.1f}"),
                             _err(b["predicted_tok_s_from_probs"], b["tok_s_measured"])])
    L += _table(["setting", "drafter", "depth (n_max)", "budget", "nodes/step", "ms/step", "pred. ms/step (at τ)",
                 "τ", "τ from probs", "break-even τ",
                 "tok/s", "pred. at measured τ", "error", "pred. from probs", "error"], rows)
    rows = []
    for cm in cms:
        chain = next((x for x in cm["predicted"] if x["n_max"] == cm["best_n_max"]), None)
        for t in cm["trees"]:
            every = t.get("best_budget_from_probs") or {}
            rows.append([_setting(cm), cm["drafter"], t["n_max"], t["best_tree_measured"], t["best_tree_predicted"],
                         t["best_tree_from_probs"] or "–",
                         (f"{every['tree']} (τ {every['tau']:.2f}, {every['tok_s']:.1f} tok/s)" if every else "–"),
                         f"n_max {cm['best_n_max']} ({_f(chain and chain['tok_s'], '{:.1f}')} tok/s)",
                         _f(cm.get("tree_row_ms"), "{:.3f}")])
    L += _table(["setting", "drafter", "depth (n_max)", "best budget measured", "picked (at measured τ)",
                 "picked (τ from probs)", "picked of every budget (τ from probs)", "best chain predicted",
                 "R ms/row"], rows)
    return L


def write_report(results: dict, path: Any) -> None:
    """REPORT.md from a results dict."""
    m, s, model = results["machine"], results["settings"], results["model"]
    pts = _order(results["points"])
    runs = s["runs"]
    L = [f"# Drafter bake-off: {target_label(model)} on {machine_label(m)}", "",
         f"{m['date']} · llama.cpp `{m['llama_cpp_build']}` · pyllama_spec {m['pyllama_spec']} · "
         f"{m['cpu']}, {_n(m['n_cpus'], 'CPU')}" + (f", 1-min load {m['load_avg']:.1f} at start"
                                                   if m.get("load_avg") is not None else "")
         + (f" · GPU: {m['gpu']}" if m.get("gpu") else ""),
         "", f"Target `{model['target']}`; drafters: "
         + ", ".join(f"**{n}** ({d['kind']}" + (f", `{d['file']}`" if d.get("file") else "") + ")"
                     for n, d in model["drafters"].items()) + ".", "",
         f"Prompts `{s['prompts']}` ({_n(s['n_conversations'], 'conversation')}, up to "
         f"{_n(s['turns'], 'turn') if s['turns'] else 'all turns'}, each turn's history = the model's own earlier "
         f"answers), {_n(s['max_tokens'], 'token')} per answer, "
         + (f"{runs} runs per point" if runs != 1 else "1 run per point")
         + (" (interleaved: every point on each conversation in turn)" if s.get("order") == "interleaved"
            else " (alternating)" if runs != 1 else "")
         + f", n_max {s['n_max']}, temperature {s['temperature']}, thinking {s['thinking']}, "
         f"stage clocks synchronized. tokens/s = tokens committed ÷ seconds after prefill, pooled over every "
         f"generation of a point" + (" (± the standard deviation over runs)" if runs > 1 else "")
         + "; τ = tokens committed per verify step; acceptance = accepted ÷ drafted.", ""]
    if not results.get("complete", True):
        L += ["**Incomplete**: the sweep was interrupted; these tables hold the points that finished "
              "(`pyllama-spec bakeoff ... --resume` continues it; a merged sweep names its cut part in the notes).",
              ""]
    if results["notes"]:
        L += ["Notes:", ""] + [f"- {n}" for n in results["notes"]] + [""]

    L += ["## Speed and τ per drafter × n_max", "",
          "Predicted = the cost model fitted on all of this drafter's runs; held-out = fitted without "
          "this n_max's runs (a real prediction); error at its τ = the step costs alone, fitted on all runs (this "
          "one included: in-sample), at the point's measured τ and drafted/step — the part of the prediction's "
          "error that the acceptance curve does not explain. "
          "Break-even τ = the τ this n_max needs to match plain decoding.", ""]
    rows = []
    for p in pts:
        nat = p.get("native") or {}
        err = (p.get("predicted_tok_s") / p["tokens_per_s"] - 1) * 100 if p.get("predicted_tok_s") else None
        at = p.get("predicted_tok_s_at_tau")
        err_at = (at / p["tokens_per_s"] - 1) * 100 if at and p["tokens_per_s"] else None
        rows.append([_setting(p), _name(p), p["n_max"] if p["drafter"] else "–",
                     _f(p["tokens_per_s"], "{:.1f}") + (f" ± {_f(p['tokens_per_s_sd'], '{:.1f}')}"
                                                         if p["n_runs"] > 1 else ""),
                     _f(p.get("speedup")), _f(p["tau"]), _f(p["acceptance"], "{:.1%}"),
                     _f(p["mean_draft_length"]), _f(p.get("predicted_tok_s"), "{:.1f}"), _f(err, "{:+.0f}%"),
                     _f(err_at, "{:+.0f}%"), _f(p.get("predicted_heldout_tok_s"), "{:.1f}"),
                     _f(p.get("break_even_tau")),
                     _f(nat.get("tokens_per_s"), "{:.1f}"), _f(nat.get("acceptance"), "{:.1%}"),
                     _f(nat.get("same_tokens"), "{:.0%}")])
    L += _table(["setting", "drafter", "n_max", "tok/s", "× plain", "τ", "acceptance", "drafted/step",
                 "predicted tok/s", "pred. error", "error at its τ", "held-out pred.", "break-even τ",
                 "llama.cpp tok/s", "llama.cpp acc.", "same tokens"], rows)

    cms = results.get("cost_models", [])
    if cms:
        L += ["## Best n_max per drafter", ""]
        rows = []
        for cm in cms:
            auto = next((p for p in pts if p["drafter"] == cm["drafter"] and p["n_max"] == "auto"
                         and p["temperature"] == cm["temperature"] and p["thinking"] == cm["thinking"]), None)
            best = next((x for x in cm["measured"] if x["n_max"] == cm["best_n_max_measured"]), None)
            pbest = next((x for x in cm["predicted"] if x["n_max"] == cm["best_n_max"]), None)
            rows.append([_setting(cm), cm["drafter"], cm["best_n_max_measured"], _f(best and best["tok_s"], "{:.1f}"),
                         cm["best_n_max"], _f(pbest and pbest["tok_s"], "{:.1f}"),
                         _f(auto and auto["tokens_per_s"], "{:.1f}"),
                         _f(auto and best and auto["tokens_per_s"] / best["tok_s"] - 1, "{:+.1%}"),
                         _f(auto and auto["mean_draft_length"])])
        L += _table(["setting", "drafter", "best measured n_max", "its tok/s", "best predicted n_max",
                     "predicted tok/s", "auto tok/s", "auto vs best fixed", "auto drafted/step"], rows)

    tree_cms = [cm for cm in cms if cm.get("trees")]
    if tree_cms:
        L += _tree_tables(tree_cms)

    spec_pts = [p for p in pts if p["drafter"] and p["accepted_per_position"]]
    if spec_pts:
        n_pos = max(_drafted_positions(p) for p in spec_pts)
        L += ["## Acceptance per position", "",
              "Fraction of steps that drafted position i whose tokens up to i were all accepted.", ""]
        L += _table(["setting", "drafter", "n_max"] + [str(i + 1) for i in range(n_pos)],
                    [[_setting(p), _name(p), p["n_max"]] + [_f(x) for x in p["accepted_per_position"][:n_pos]]
                     + [""] * (n_pos - len(p["accepted_per_position"][:n_pos])) for p in spec_pts])

    L += ["## Time per step by stage (ms)", "",
          "After prefill; `other` = Python glue between stages. ms/step × steps = generation time.", ""]
    L += _table(["setting", "drafter", "n_max"] + list(STEP_STAGES) + ["total"],
                [[_setting(p), _name(p), p["n_max"] if p["drafter"] else "–"]
                 + [_f(p["stages_ms_per_step"].get(k), "{:.3f}") for k in STEP_STAGES]
                 + [_f(p["ms_per_step"], "{:.3f}")]
                 for p in pts])

    turns = max((len(p["by_turn"]) for p in pts), default=0)
    if turns > 1:
        L += ["## Per turn (context depth)", "",
              "Turn t's prompt holds the earlier turns and answers. Cells: generation tok/s / τ / acceptance.", ""]
        cols = [f"turn {t + 1} (≈{int(p0)} tok)" for t, p0 in enumerate(b["n_prompt_mean"] for b in pts[0]["by_turn"])]
        L += _table(["setting", "drafter", "n_max", "prompt tok/s"] + cols,
                    [[_setting(p), _name(p), p["n_max"] if p["drafter"] else "–",
                      _f(p["prompt_tokens_per_s"], "{:.0f}")]
                     + [f"{_f(b['tokens_per_s'], '{:.1f}')} / {_f(b['tau'])} / {_f(b['acceptance'], '{:.0%}')}"
                        for b in p["by_turn"]] for p in pts])

    mem = results["memory"]
    L += ["## Memory (MiB)", "", "Weights, KV cache and compute buffers of each component (llama.cpp's "
          "memory breakdown, summed over devices).", ""]
    rows = [["target", _f(mem["target"].get("weights_mib"), "{:.1f}"), _f(mem["target"].get("kv_cache_mib"), "{:.1f}"),
             _f(mem["target"].get("compute_mib"), "{:.1f}"), _f(sum(mem["target"].values()), "{:.1f}")]]
    for n, d in mem["drafters"].items():
        rows.append([n, _f(d.get("weights_mib", 0.0), "{:.1f}"), _f(d.get("kv_cache_mib", 0.0), "{:.1f}"),
                     _f(d.get("compute_mib", 0.0), "{:.1f}"), _f(sum(d.values()) if d else 0.0, "{:.1f}")])
    L += _table(["component", "weights", "KV cache", "compute", "total"], rows)

    if cms:
        L += ["## Cost model", "",
              "T(n) = V(1 + d(n)) + D0 + D1·d(n) + W0 + W1·τ(n) ms per step, tok/s = 1000·τ(n)/T(n), with τ(n) and "
              "d(n) from the measured per-position acceptance (pyllama_spec/speculative/costmodel.py has the "
              "derivation)" + ("; that acceptance split by how each step began — right after a whole draft was "
                               "taken or not — and mixed by how often a step at n_max = n begins so (\"Start "
                               "states\")" if all(cm["acceptance"].get("by_start") for cm in cms) else "")
              + ". V(R) points are (rows per verify, ms); T₁ = plain ms per token.", ""]
        L += _table(["setting", "drafter", "V(R) points", "D0 ms", "D1 ms/token", "W0 ms", "W1 ms/token", "T₁ ms"],
                    [[_setting(cm), cm["drafter"],
                      " ".join(f"({r:.1f}, {v:.2f})" for r, v in zip(cm["costs"]["verify"]["rows"],
                                                                   cm["costs"]["verify"]["ms"])),
                      _f(cm["costs"]["draft_call_ms"], "{:.3f}"), _f(cm["costs"]["draft_token_ms"], "{:.3f}"),
                      _f(cm["costs"]["other_step_ms"], "{:.3f}"), _f(cm["costs"]["other_token_ms"], "{:.3f}"),
                      _f(cm["plain_ms_per_token"], "{:.3f}")] for cm in cms])
        vm = results.get("verify_ms") or {}
        if vm:
            L += ["Verify cost measured directly (ms for R = 1, 2, … rows at depth 256, the drafter's taps on):", ""]
            L += _table(["taps of", *[str(i + 1) for i in range(len(next(iter(vm.values()))))]],
                        [[k] + [_f(x) for x in v] for k, v in vm.items()])

    plots = results.get("outputs", {}).get("plots") or []
    if plots:
        L += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    with open(path, "w") as f:
        f.write("\n".join(L))


__all__ = ["write_csv", "write_report", "POINT_COLUMNS", "RUN_COLUMNS"]
