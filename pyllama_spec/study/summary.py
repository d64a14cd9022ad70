"""From generations to the rows of results.json: one record per generation (``runs``), pooled
per configuration (``points``), and a cost model per drafter and setting (``cost_models``).

Everything after :func:`run_record` works from the JSON records alone, so a report can be
rebuilt from a results.json (:func:`summarize`).
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import replace
from typing import Any

from ..speculative.costmodel import (
    DRAFT_STAGES,
    CostModel,
    Measured,
    VerifyCost,
    fit_tree_row_ms,
    start_counts,
    tree_tau_from_mass,
)

#: per-step stages shown in the tables, in loop order (tokenize/prefill happen before the steps)
STEP_STAGES = ("draft", "draft_sample", "verify", "accept", "extract", "inject", "rollback", "detokenize", "other")


def run_record(rec: dict, kind: str | None) -> dict:
    """One generation as a JSON-ready dict (``rec``: what :class:`~.sweep.Runner` yields)."""
    p, res = rec["point"], rec["result"]
    s = res.stats
    steps = s.n_steps
    stage_s = res.step_timings
    spec = p.drafter is not None
    return {
        "drafter": p.drafter, "kind": kind, "n_max": p.n_max, "tree": p.tree, "n_max_ceiling": res.n_max,
        "temperature": p.temperature, "thinking": p.thinking, "run": rec["run"], "conversation": rec["conversation"],
        "turn": rec["turn"], "n_prompt": res.n_prompt, "n_generated": res.n_generated,
        "finish_reason": res.finish_reason, "generation_s": res.generation_seconds, "prefill_s": res.prefill_seconds,
        "tokens_per_s": res.tokens_per_s, "prompt_tokens_per_s": res.prompt_tokens_per_s,
        "n_steps": steps, "n_drafted": s.n_drafted, "n_accepted": s.n_accepted,
        "tau": s.mean_accepted_length, "acceptance": s.acceptance_rate if spec else None,
        "accepted_at": list(s.accepted_at), "drafted_at": list(s.drafted_at),
        "accepted_per_position": s.accepted_per_position, "mean_draft_length": s.mean_draft_length,
        "draft_length_counts": {str(k): v for k, v in sorted(Counter(s.draft_lengths).items())},
        # each step's draft tokens verified and accepted, in order: which steps began right after a whole draft was
        # taken (the cost model's start states, costmodel.Acceptance)
        "draft_lengths": list(s.draft_lengths), "acceptance_lengths": list(s.acceptance_lengths),
        "stage_ms": {k: 1e3 * v for k, v in stage_s.items()},
        "stages_ms_per_step": {k: 1e3 * v / steps if steps else 0.0 for k, v in stage_s.items()},
        "native": rec.get("native"),
        # token trees (zero / empty for chains): what the cost model predicts tree τ from
        "n_tree_steps": s.n_tree_steps, "n_tree_nodes": s.n_tree_nodes, "tree_mass": s.tree_mass,
        "spine_mass": s.spine_mass,
    }


def measured(runs: list[dict]) -> Measured:
    """Pool run records of one configuration into a cost-model input."""
    n = max((len(r["accepted_at"]) for r in runs), default=0)
    acc, dra = [0] * n, [0] * n
    stages: dict = {}
    for r in runs:
        for i, (a, d) in enumerate(zip(r["accepted_at"], r["drafted_at"])):
            acc[i] += a
            dra[i] += d
        for k, v in r["stage_ms"].items():
            stages[k] = stages.get(k, 0.0) + v
    # the start states where every run recorded its steps (bake-offs from 2026-12-07 on)
    start = (start_counts([list(zip(r["draft_lengths"], r["acceptance_lengths"])) for r in runs], n)
             if runs and all("draft_lengths" in r for r in runs) else None)
    return Measured(n_max=n, n_steps=sum(r["n_steps"] for r in runs),
                    n_generated=sum(r["n_generated"] for r in runs), n_drafted=sum(r["n_drafted"] for r in runs),
                    generation_ms=1e3 * sum(r["generation_s"] for r in runs), accepted_at=acc, drafted_at=dra,
                    stage_ms=stages, start=start)


def _key(r: Any) -> tuple:
    return (r["drafter"], r["n_max"], r["temperature"], r["thinking"], r.get("tree", 0))


def _pooled(runs: list[dict]) -> dict:
    m = measured(runs)
    gen_s = sum(r["generation_s"] for r in runs)
    pre_s = sum(r["prefill_s"] for r in runs)
    spec = runs[0]["drafter"] is not None
    return {"n_generations": len(runs), "n_generated": m.n_generated, "n_steps": m.n_steps,
            "tokens_per_s": m.n_generated / gen_s if gen_s else None,
            "prompt_tokens_per_s": sum(max(0, r["n_prompt"] - 1) for r in runs) / pre_s if pre_s else None,
            "tau": (m.n_steps + sum(r["n_accepted"] for r in runs)) / m.n_steps if m.n_steps else None,
            "acceptance": (sum(r["n_accepted"] for r in runs) / m.n_drafted if m.n_drafted else 0.0) if spec else None,
            # None where no step drafted position i (an auto point that never drafted so far): no rate, not 0
            "accepted_per_position": [a / d if d else None for a, d in zip(m.accepted_at, m.drafted_at)],
            "survival": [a / m.n_steps if m.n_steps else 0.0 for a in m.accepted_at],
            "mean_draft_length": m.n_drafted / m.n_steps if m.n_steps else 0.0,
            "ms_per_step": m.ms_per_step,
            "stages_ms_per_step": {k: m.stage_ms.get(k, 0.0) / m.n_steps if m.n_steps else 0.0 for k in STEP_STAGES}}


def summarize_points(runs: list[dict]) -> list[dict]:
    """Pool the run records per configuration, with per-run speeds, per-turn rows and the native runs."""
    groups: dict = {}
    for r in runs:
        groups.setdefault(_key(r), []).append(r)
    points = []
    for key, rs in groups.items():
        row = {"drafter": key[0], "kind": rs[0]["kind"], "n_max": key[1], "tree": key[4], "temperature": key[2],
               "thinking": key[3],
               "n_runs": len({r["run"] for r in rs}), **_pooled(rs)}
        per_run: dict[int, list[dict]] = {}
        for r in rs:
            per_run.setdefault(r["run"], []).append(r)
        speeds = [sum(x["n_generated"] for x in v) / sum(x["generation_s"] for x in v) for v in per_run.values()]
        row["tokens_per_s_runs"] = speeds
        row["tokens_per_s_sd"] = statistics.stdev(speeds) if len(speeds) > 1 else 0.0
        counts: Counter = Counter()
        for r in rs:
            counts.update({int(k): v for k, v in r["draft_length_counts"].items()})
        row["draft_length_counts"] = {str(k): v for k, v in sorted(counts.items())}
        by_turn: dict[int, list[dict]] = {}
        for r in rs:
            by_turn.setdefault(r["turn"], []).append(r)
        row["by_turn"] = [{"turn": t, "n_prompt_mean": statistics.mean(x["n_prompt"] for x in v),
                           **{k: _pooled(v)[k] for k in ("tau", "acceptance", "tokens_per_s")}}
                          for t, v in sorted(by_turn.items())]
        nat = [r["native"] for r in rs if r.get("native")]
        row["native"] = None if not nat else {
            "spec_type": nat[0]["spec_type"],
            "tokens_per_s": statistics.mean(x["tokens_per_s"] for x in nat if x["tokens_per_s"] is not None)
            if any(x["tokens_per_s"] is not None for x in nat) else None,
            "acceptance": (sum(x["n_accept"] or 0 for x in nat) / sum(x["n_drafted"] for x in nat)
                           if all(x["n_drafted"] is not None for x in nat) and sum(x["n_drafted"] for x in nat)
                           else None),
            "same_tokens": sum(x["same_tokens"] for x in nat) / len(nat), "n": len(nat)}
        points.append(row)
    for p in points:  # speed-up against plain decoding in the same setting
        base = next((q for q in points if q["drafter"] is None and q["temperature"] == p["temperature"]
                     and q["thinking"] == p["thinking"]), None)
        p["speedup"] = p["tokens_per_s"] / base["tokens_per_s"] if base and base["tokens_per_s"] else None
    return points


def cost_models(runs: list[dict], points: list[dict], verify_ms: dict | None = None) -> list[dict]:
    """Fit a :class:`CostModel` per (drafter, temperature, thinking) from its fixed-n_max chain runs; add
    ``predicted_tok_s`` (all runs), ``predicted_tok_s_at_tau`` (the step costs at the point's measured τ and
    drafted/step: the acceptance fit's error left out), ``predicted_heldout_tok_s`` (that n_max's runs left out of the
    fit) and ``break_even_tau`` to the points; return the models as dicts.

    Tree points (``tree`` > 0) are not in the fit of τ, D and W; the model predicts them
    (:func:`tree_entries`, the entry's ``trees``), with V at their row counts from their verifies
    (:func:`tree_verify_cost`, the entry's ``tree_verify``) and the drafter's extra ms per depth
    row from their draft stages (``tree_row_ms``,
    :func:`~pyllama_spec.speculative.costmodel.fit_tree_row_ms`). A tree point gets
    ``predicted_tok_s`` (at its measured τ), ``predicted_tau`` and ``predicted_tok_s_from_probs`` (τ
    from the drafter's calibrated probabilities) and ``break_even_tau``."""
    out = []
    settings = sorted({(r["drafter"], r["temperature"], r["thinking"]) for r in runs if r["drafter"] is not None},
                      key=lambda k: (k[0], k[1], str(k[2])))
    for drafter, temp, think in settings:
        same = [r for r in runs if r["temperature"] == temp and r["thinking"] == think]
        plain_runs = [r for r in same if r["drafter"] is None]
        plain = measured(plain_runs) if plain_runs else None
        by_n: dict = {}
        for r in same:
            if r["drafter"] == drafter and isinstance(r["n_max"], int) and not r.get("tree"):  # (chains only)
                by_n.setdefault(r["n_max"], []).append(r)
        if not by_n:
            continue
        meas = {n: measured(v) for n, v in by_n.items()}
        if not all(m.start for m in meas.values()):  # (a merge of parts with and without the steps recorded: the
            meas = {n: replace(m, start=None) for n, m in meas.items()}  # held-out refits pool as the whole fit does)
        model = CostModel.fit(list(meas.values()), plain)
        entry = {"drafter": drafter, "temperature": temp, "thinking": think, **model.as_dict(),
                 "measured": [{"n_max": n, "tok_s": m.tok_s, "tau": m.tau, "ms_per_step": m.ms_per_step}
                              for n, m in sorted(meas.items())]}
        entry["best_n_max_measured"] = max(meas, key=lambda n: meas[n].tok_s)
        tree_runs = [r for r in same if r["drafter"] == drafter and isinstance(r["n_max"], int) and r.get("tree")]
        if tree_runs:  # (a copy: the chains' predictions keep the chains' V)
            tm = replace(model, costs=replace(model.costs, verify=tree_verify_cost(model.costs.verify, tree_runs)))
            tm.tree_row_ms = fit_tree_row_ms(tm, _tree_draft_points(tree_runs))
            entry["tree_verify"] = tm.costs.verify.as_dict()
            entry["tree_row_ms"] = tm.tree_row_ms
            entry["trees"] = tree_entries(tm, tree_runs)
        for p in points:
            if (p["drafter"], p["temperature"], p["thinking"]) != (drafter, temp, think):
                continue
            if not isinstance(p["n_max"], int):
                continue
            if p.get("tree"):  # (a tree point: its depth's entry holds the predictions)
                depth = next(t for t in entry["trees"] if t["n_max"] == p["n_max"])
                row = next(c for c in depth["budgets"] if c["tree"] == p["tree"])
                p["predicted_tok_s"] = row["predicted_tok_s"]
                p["predicted_tau"] = row["tau_from_probs"]
                p["predicted_tok_s_from_probs"] = row["predicted_tok_s_from_probs"]
                p["break_even_tau"] = row["break_even_tau"]
                p["predicted_heldout_tok_s"] = None
                continue
            n = p["n_max"]
            p["predicted_tok_s"] = model.tok_s(n)
            # (the step costs alone, at this point's measured τ and drafted/step: which half of the model is off)
            p["predicted_tok_s_at_tau"] = (model.tok_s_at(p["tau"], p["mean_draft_length"])
                                           if p.get("tau") and p.get("mean_draft_length") is not None else None)
            p["predicted_tau"] = model.acceptance.tau(n)
            p["break_even_tau"] = model.break_even_tau(n)
            others = [m for k, m in meas.items() if k != n]
            held = None
            if others and max(m.n_max for m in others) >= n:
                held = CostModel.fit(others, plain).tok_s(n)
            p["predicted_heldout_tok_s"] = held
        out.append(entry)
    return out


def _tree_mass(runs: list[dict]) -> tuple[list, list, int]:
    """Pool the runs' ``tree_mass``, ``spine_mass`` and ``n_tree_steps`` (``SpecStats``)."""
    n = max((len(r.get("tree_mass") or []) for r in runs), default=0)
    width = max([len(row) for r in runs for row in r.get("tree_mass") or []]
                + [len(r.get("spine_mass") or []) for r in runs] + [0])
    mass = [[0.0] * width for _ in range(n)]
    spine = [0.0] * width
    for r in runs:
        for b, row in enumerate(r.get("tree_mass") or []):
            for d, v in enumerate(row):
                mass[b][d] += v
        for d, v in enumerate(r.get("spine_mass") or []):
            spine[d] += v
    return mass, spine, sum(r.get("n_tree_steps", 0) for r in runs)


def _tree_draft_points(tree_runs: list[dict]) -> list[tuple[int, float]]:
    """``(depth, drafter ms per step)`` per tree point (``draft`` + ``draft_sample`` stages)."""
    by: dict = {}
    for r in tree_runs:
        by.setdefault((r["n_max"], r["tree"]), []).append(r)
    out = []
    for (depth, _), rs in sorted(by.items()):
        n = sum(r["n_steps"] for r in rs)
        if n:
            out.append((depth, sum(r["stage_ms"].get(k, 0.0) for r in rs for k in DRAFT_STAGES) / n))
    return out


def tree_verify_cost(verify: VerifyCost, tree_runs: list[dict]) -> VerifyCost:
    """V(R) of the chains' fit with the tree points' own verifies added: ``(1 + nodes per step, verify
    ms per step)`` per (depth, budget), as the chains' points are ``(1 + drafted per step, verify ms
    per step)`` of their runs. A tree verifies more rows than any chain of a sweep; extending the
    chains' V linearly would guess, and the direct measurement (``verify_ms``) is one decode at
    depth 256, noisier on a loaded machine than a run's hundreds of steps. The tree's sequence
    bookkeeping (``seq_cp`` per branch) is inside its verify stage, so it is in V too."""
    by: dict = {}
    for r in tree_runs:
        by.setdefault((r["n_max"], r["tree"]), []).append(r)
    pts = list(zip(verify.rows, verify.ms))
    for rs in by.values():
        n_tree = sum(r.get("n_tree_steps", 0) for r in rs)
        n_steps = sum(r["n_steps"] for r in rs)
        if n_tree and n_steps:
            pts.append((1.0 + sum(r.get("n_tree_nodes", 0) for r in rs) / n_tree,
                        sum(r["stage_ms"].get("verify", 0.0) for r in rs) / n_steps))
    # points less than half a row apart are one point (their mean): two trees of 15.9 and 15.95 nodes
    # per step would otherwise set V's slope beyond them from noise
    groups: list[list[tuple[float, float]]] = []
    for r, ms in sorted(pts):
        if groups and r - groups[-1][0][0] < 0.5:
            groups[-1].append((r, ms))
        else:
            groups.append([(r, ms)])
    return VerifyCost([statistics.mean(r for r, _ in g) for g in groups],
                      [statistics.mean(m for _, m in g) for g in groups])


def tree_entries(model: CostModel, tree_runs: list[dict]) -> list[dict]:
    """The cost model's view of the tree points of one drafter and setting, per depth (n_max):

    * per budget run: measured τ and tok/s; ``predicted_tok_s`` = the model's tok/s at the
      *measured* τ (only the costs predicted); ``tau_from_probs`` = τ predicted from the drafter's
      probabilities calibrated by the chain (:func:`~pyllama_spec.speculative.costmodel.tree_tau_from_mass`,
      from the depth's largest-budget run: its first b nodes are the tree of budget b) and
      ``predicted_tok_s_from_probs`` at that τ; the break-even τ;
    * ``best_tree_measured`` / ``best_tree_predicted`` (at measured τ) / ``best_tree_from_probs`` among
      the budgets run, and ``best_budget_from_probs``: the best of every budget 1..largest (most of them
      not run) with its predicted τ and tok/s.
    """
    by: dict = {}
    for r in tree_runs:
        by.setdefault((r["n_max"], r["tree"]), []).append(r)
    out = []
    for depth in sorted({n for n, _ in by}):
        budgets = sorted(b for n, b in by if n == depth)
        meas = {b: measured(by[(depth, b)]) for b in budgets}
        tau_meas = {b: m.tau for b, m in meas.items() if m.n_steps}
        mass, spine, n_tree = _tree_mass(by[(depth, budgets[-1])])
        from_probs: list[float] = []
        if n_tree and mass and any(spine) and model.acceptance.n_max:  # (a drafter without top_logp: none)
            # the chain's survival at this depth (start states mixed as the chain's τ is), what K_d calibrates to
            surv = model.acceptance.mixed_survival(min(depth, model.acceptance.n_max))
            from_probs = tree_tau_from_mass(mass, spine, n_tree, surv)
        cap = len(from_probs)  # the most nodes the depth's largest trees held (1 deep: the drafter's candidates)
        rows = []
        for b in budgets:
            m = meas[b]
            rs = by[(depth, b)]
            n_tree = sum(r.get("n_tree_steps", 0) for r in rs)
            nodes = sum(r.get("n_tree_nodes", 0) for r in rs) / n_tree if n_tree else None  # (rows = nodes + 1)
            tp = from_probs[min(b, cap) - 1] if cap else None
            t = tau_meas.get(b)
            rows.append({"tree": b, "tau_measured": t, "tok_s_measured": m.tok_s, "nodes_per_step": nodes,
                         "ms_per_step_measured": m.ms_per_step,
                         "ms_per_step_predicted": model.tree_ms_per_step(b, t, depth, nodes) if t else None,
                         "predicted_tok_s": model.tree_tok_s(b, t, depth, nodes) if t else None,
                         "tau_from_probs": tp,
                         "predicted_tok_s_from_probs": model.tree_tok_s(b, tp, depth, min(b, cap))
                         if tp is not None else None,
                         "break_even_tau": model.tree_break_even_tau(b, t, depth, nodes) if t else None})
        entry: dict = {"n_max": depth, "budgets": rows,
                       "best_tree_measured": max(budgets, key=lambda b: meas[b].tok_s),
                       "best_tree_predicted": max(budgets, key=lambda b: next(
                           r["predicted_tok_s"] or 0.0 for r in rows if r["tree"] == b)) if tau_meas else None,
                       "best_tree_from_probs": None, "best_budget_from_probs": None}
        if from_probs:
            run = {b: from_probs[b - 1] for b in budgets if b <= cap}
            entry["best_tree_from_probs"] = model.best_tree_budget(run, depth) if run else None
            every = {b + 1: t for b, t in enumerate(from_probs)}
            best = model.best_tree_budget(every, depth)
            entry["best_budget_from_probs"] = {"tree": best, "tau": every[best],
                                               "tok_s": model.tree_tok_s(best, every[best], depth)}
            entry["tau_from_probs"] = from_probs
        out.append(entry)
    return out


def summarize(results: dict) -> dict:
    """(Re)compute ``points`` and ``cost_models`` of a results dict from its ``runs``."""
    results["points"] = summarize_points(results["runs"])
    results["cost_models"] = cost_models(results["runs"], results["points"], results.get("verify_ms"))
    return results


__all__ = ["run_record", "measured", "summarize_points", "cost_models", "tree_entries", "summarize", "STEP_STAGES"]
