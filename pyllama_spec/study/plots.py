"""The bake-off's PNG plots (matplotlib, the optional ``[plot]`` extra). Each has axis labels with
units, a title naming the model, the machine and the date, and a legend."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .machine import machine_label, target_label
from .summary import STEP_STAGES


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _title(ax_or_fig: Any, what: str, results: dict, fig: Any = False) -> None:
    """Title ``what`` over "target · machine · date"; where that line is wider than the figure (one
    narrow panel and a long ``general.name``: savefig cut it off at both sides) the target gets a
    line of its own."""
    m, model = results["machine"], results["model"]
    parts = (target_label(model), machine_label(m), m["date"].split()[0])
    text = (ax_or_fig.suptitle(f"{what}\n{' · '.join(parts)}", fontsize=11) if fig
            else ax_or_fig.set_title(f"{what}\n{' · '.join(parts)}", fontsize=10))
    figure = ax_or_fig if fig else ax_or_fig.figure
    if text.get_window_extent(figure.canvas.get_renderer()).width > 0.96 * figure.bbox.width:
        text.set_text(f"{what}\n{parts[0]}\n{parts[1]} · {parts[2]}")


def _setting(p: Any) -> str:
    th = {True: ", thinking on", False: ", thinking off", None: ""}[p["thinking"]]
    return f"T={p['temperature']:g}{th}"


def _settings(points: Any) -> list:
    return sorted({(p["temperature"], p["thinking"]) for p in points}, key=lambda k: (k[0], str(k[1])))


def _fixed(points, drafter, setting):
    return sorted([p for p in points if p["drafter"] == drafter and isinstance(p["n_max"], int) and not p.get("tree")
                   and (p["temperature"], p["thinking"]) == setting], key=lambda p: p["n_max"])


def _grid(plt: Any, n: int, width: float, height: float, **kw: Any) -> tuple[Any, Any]:
    """A figure of ``n`` panels, up to three a row (a whole sweep's nine drafters in one row were 5 400 px wide:
    2026-12-07), ``width`` × ``height`` inches in all; the unused cells hidden. Returns (figure, 2-D axes)."""
    ncol = min(3, n)
    fig, axes = plt.subplots(-(-n // ncol), ncol, figsize=(width, height), squeeze=False, **kw)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def _drafters(points: Any) -> list:
    return sorted({p["drafter"] for p in points if p["drafter"]})


def acceptance_per_position(results: Any, out: Path, plt: Any) -> Path | None:
    pts = results["points"]
    drafters = _drafters(pts)
    if not drafters:
        return None
    s0 = _settings(pts)[0]
    ncol, nrow = min(3, len(drafters)), -(-len(drafters) // 3)
    fig, axes = _grid(plt, len(drafters), 5.5 * ncol, 3.6 * nrow + 0.6)
    for ax, d in zip(axes.flat, drafters):
        for p in _fixed(pts, d, s0):
            app = [float("nan") if x is None else x for x in p["accepted_per_position"]]  # None: never drafted
            ax.plot(range(1, len(app) + 1), app, marker="o", ms=3, label=f"n_max {p['n_max']}")
        ax.set_xlabel("draft position i (token)")
        ax.set_ylabel("P(tokens 1..i accepted | drafted at i)")
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{d} ({_setting({'temperature': s0[0], 'thinking': s0[1]})})", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    _title(fig, "Acceptance per draft position", results, fig=True)
    fig.tight_layout()
    path = out / "acceptance_per_position.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def speed_and_tau(results: Any, out: Path, plt: Any) -> Path | None:
    from matplotlib.lines import Line2D

    pts = results["points"]
    drafters = _drafters(pts)
    if not drafters:
        return None
    cms = {(c["drafter"], c["temperature"], c["thinking"]): c for c in results.get("cost_models", [])}
    settings = _settings(pts)
    colors = dict(zip(drafters, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, axes = plt.subplots(len(settings), 2, figsize=(12, 3.9 * len(settings) + 0.9), squeeze=False)
    for (a1, a2), s in zip(axes, settings):
        plain = next((p for p in pts if p["drafter"] is None and (p["temperature"], p["thinking"]) == s), None)
        for d in drafters:
            c = colors[d]
            fx = _fixed(pts, d, s)
            if fx:
                ns = [p["n_max"] for p in fx]
                ys = [p["tokens_per_s"] for p in fx]
                sd = [p["tokens_per_s_sd"] for p in fx]
                a1.plot(ns, [p["tau"] for p in fx], marker="o", color=c)
                a2.errorbar(ns, ys, yerr=[[min(e, y) for e, y in zip(sd, ys)], sd], marker="o", color=c, capsize=3)
            cm = cms.get((d, *s))
            if cm:
                pr = cm["predicted"]
                a1.plot([x["n_max"] for x in pr], [x["tau"] for x in pr], ls="--", color=c, alpha=0.8)
                a2.plot([x["n_max"] for x in pr], [x["tok_s"] for x in pr], ls="--", color=c, alpha=0.8)
            auto = next((p for p in pts if p["drafter"] == d and p["n_max"] == "auto"
                         and (p["temperature"], p["thinking"]) == s), None)
            if auto:
                a1.scatter([auto["mean_draft_length"]], [auto["tau"]], marker="*", s=170, color=c, edgecolor="k",
                           zorder=5)
                a2.scatter([auto["mean_draft_length"]], [auto["tokens_per_s"]], marker="*", s=170, color=c,
                           edgecolor="k", zorder=5)
        if plain:
            a2.axhline(plain["tokens_per_s"], color="gray", ls=":")
        a1.axhline(1.0, color="gray", ls=":")
        label = _setting({"temperature": s[0], "thinking": s[1]})
        a1.set_title(f"τ vs n_max ({label})", fontsize=10)
        bars = "; bars: ± sd over runs" if results["settings"].get("runs", 1) > 1 else ""
        a2.set_title(f"tokens/s vs n_max ({label}{bars})", fontsize=10)
        a1.set_xlabel("n_max (draft tokens per step)")
        a1.set_ylabel("τ (tokens committed per verify step)")
        a2.set_xlabel("n_max (draft tokens per step)")
        a2.set_ylabel("generation speed (tokens/s)")
        a2.set_ylim(bottom=0)
        for a in (a1, a2):
            a.grid(alpha=0.3)
    handles = [Line2D([], [], color=colors[d], marker="o", label=d) for d in drafters] + [
        Line2D([], [], color="k", marker="o", label="measured"),
        Line2D([], [], color="k", ls="--", label="cost model prediction"),
        Line2D([], [], color="k", marker="*", ls="", ms=12, label="n_max=auto (x = mean draft length)"),
        Line2D([], [], color="gray", ls=":", label="plain decoding")]
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize=8, frameon=False)
    _title(fig, "Draft length sweep", results, fig=True)
    fig.tight_layout(rect=(0, 0.9 / (3.9 * len(settings) + 0.9), 1, 1))
    path = out / "speed_tau_vs_n_max.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def stage_time(results: Any, out: Path, plt: Any) -> Path:
    """stage_time_per_step.png: a stacked bar of the ms per verify step by stage for every point of the first
    setting — one panel per drafter (plain's bar first in each, the y axis shared), up to three panels a row:
    a whole sweep's ~60 bars in one row were unreadable (5 400 px wide, the H100 sweep of 2026-12-07)."""
    pts = [p for p in results["points"] if (p["temperature"], p["thinking"]) == _settings(results["points"])[0]]
    order = lambda p: (isinstance(p["n_max"], str), p["n_max"] if isinstance(p["n_max"], int) else 0)  # noqa: E731
    plain = [p for p in pts if p["drafter"] is None]
    groups = [(d, plain + sorted([p for p in pts if p["drafter"] == d], key=order)) for d in _drafters(pts)]
    groups = groups or [("plain", plain)]
    ncol, nrow = min(3, len(groups)), -(-len(groups) // 3)
    widest = max(len(g) for _, g in groups)
    fig, axes = _grid(plt, len(groups), max(6.5, ncol * (0.62 * widest + 1.4)), 3.3 * nrow + 1.3, sharey=True)
    cmap = plt.get_cmap("tab10")
    used: dict = {}
    for ax, (name, grp) in zip(axes.flat, groups):
        bottom = [0.0] * len(grp)
        for j, st in enumerate(STEP_STAGES):
            vals = [max(0.0, p["stages_ms_per_step"].get(st, 0.0)) for p in grp]
            if not any(v > 0 for v in vals):
                continue
            used[st] = ax.bar(range(len(grp)), vals, bottom=bottom, color=cmap(j % 10))
            bottom = [b + v for b, v in zip(bottom, vals)]
        for x, p in enumerate(grp):
            ax.text(x, bottom[x], f"τ {p['tau']:.2f}", ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(grp)))
        ax.set_xticklabels(["plain" if p["drafter"] is None else str(p["n_max"]) for p in grp], fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("n_max")
        ax.grid(axis="y", alpha=0.3)
    for ax in axes[:, 0]:
        ax.set_ylabel("time per verify step (ms)")
    order_st = [st for st in STEP_STAGES if st in used]
    fig.legend([used[st] for st in order_st], order_st, loc="lower center", ncol=min(len(order_st), 11),
               fontsize=8, frameon=False)
    _title(fig, f"Where a step's time goes ({_setting(pts[0])}; τ above each bar)", results, fig=True)
    fig.tight_layout(rect=(0, 0.05 if nrow > 1 else 0.09, 1, 1))
    path = out / "stage_time_per_step.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def memory(results: Any, out: Path, plt: Any) -> Path:
    mem = results["memory"]
    comps = [("target", mem["target"])] + [(n, d) for n, d in mem["drafters"].items()]
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(comps) + 2), 4.4))
    bottom = [0.0] * len(comps)
    for key, lab in (("weights_mib", "weights"), ("kv_cache_mib", "KV cache"), ("compute_mib", "compute buffers")):
        vals = [c.get(key, 0.0) for _, c in comps]
        ax.bar(range(len(comps)), vals, bottom=bottom, label=lab)
        bottom = [b + v for b, v in zip(bottom, vals)]
    for x, b in enumerate(bottom):
        ax.text(x, b, f"{b:.1f}" if b < 100 else f"{b:.0f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(comps)))
    ax.set_xticklabels([n for n, _ in comps])
    ax.set_xlabel("component")
    ax.set_ylabel("memory (MiB)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    _title(ax, f"Memory per component (n_ctx {results['settings']['n_ctx']})", results)
    fig.tight_layout()
    path = out / "memory.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def depth(results: Any, out: Path, plt: Any) -> Path | None:
    pts = results["points"]
    if max((len(p["by_turn"]) for p in pts), default=0) < 2:
        return None
    s0 = _settings(pts)[0]
    sel = [p for p in pts if (p["temperature"], p["thinking"]) == s0]
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    spec = [p for p in sel if p["drafter"] is not None]
    style = {id(p): "-" for p in spec}
    if len(spec) > 16:
        # a whole sweep has ~60 series, a tangle no one can read (the H100 sweep of 2026-12-07): per drafter its
        # fastest fixed n_max (solid) and auto (dashed), in the drafter's colour; every point stays in REPORT.md
        keep, colour, label = [], {}, {}
        for i, d in enumerate(_drafters(spec)):
            mine = [p for p in spec if p["drafter"] == d]
            fixed = [p for p in mine if isinstance(p["n_max"], int)]
            shown = [(max(fixed, key=lambda p: p["tokens_per_s"]), "-")] if fixed else []
            shown += [(p, "--") for p in mine if p["n_max"] == "auto"]
            for p, ls in shown:
                keep.append(p)
                style[id(p)], colour[id(p)] = ls, cycle[i % len(cycle)]
                label[id(p)] = f"{d} n_max {p['n_max']}" + (" (fastest fixed)" if ls == "-" else "")
        sel = [p for p in sel if p["drafter"] is None] + keep
        spec = keep
    else:
        # one colour per series, the same in both panels (plain, gray and dotted, is only on the right:
        # it drafts nothing, so it has no acceptance)
        colour = {id(p): cycle[i % len(cycle)] for i, p in enumerate(spec)}
        label = {id(p): f"{p['drafter']} n_max {p['n_max']}" for p in spec}
    # many series: one legend beside the right panel, in columns, and the figure tall enough for it (inside
    # the left panel it covered the data: the H100 sweep of 2026-12-06); each panel its own while they are few
    ncol = 1 if len(sel) <= 16 else 2 if len(sel) <= 40 else 3
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13.5 + 2.2 * (ncol - 1), max(4.4, 0.17 * -(-len(sel) // ncol) + 1.2)))
    for p in sel:
        turns = [b["turn"] for b in p["by_turn"]]
        lab = "plain" if p["drafter"] is None else label[id(p)]
        c = colour.get(id(p), "gray")
        a2.plot(turns, [b["tokens_per_s"] for b in p["by_turn"]], marker="o", ms=3, label=lab, color=c,
                ls=":" if p["drafter"] is None else style[id(p)])
        if p["drafter"] is not None:
            a1.plot(turns, [b["acceptance"] for b in p["by_turn"]], marker="o", ms=3, label=lab, color=c,
                    ls=style[id(p)])
    ctx = [int(b["n_prompt_mean"]) for b in pts[0]["by_turn"]]
    for a in (a1, a2):
        a.set_xticks(range(1, len(ctx) + 1))
        a.set_xticklabels([f"{t + 1}\n(≈{c} tok)" for t, c in enumerate(ctx)])
        a.set_xlabel("turn (mean prompt length, tokens)")
        a.grid(alpha=0.3)
    a2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=ncol)
    if spec and ncol == 1:
        a1.legend(fontsize=7, loc="best")
    a1.set_ylabel("acceptance (accepted / drafted)")
    a1.set_ylim(0, 1.02)
    a2.set_ylabel("generation speed (tokens/s)")
    a1.set_title("acceptance vs context depth", fontsize=10)
    a2.set_title("tokens/s vs context depth", fontsize=10)
    _title(fig, f"Multi-turn chat ({_setting({'temperature': s0[0], 'thinking': s0[1]})})", results, fig=True)
    fig.tight_layout()
    path = out / "depth_by_turn.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def thinking(results: Any, out: Path, plt: Any) -> Path | None:
    pts = results["points"]
    values = sorted({p["thinking"] for p in pts if p["thinking"] is not None})
    if len(values) < 2:
        return None
    groups = sorted({(p["drafter"], p["n_max"], p["temperature"]) for p in pts},
                    key=lambda g: (g[2], g[0] is not None, g[0] or "", str(g[1])))
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(max(8, 0.55 * len(groups) + 2), 8.5))
    w = 0.8 / len(values)
    for j, v in enumerate(values):
        sel = [next((p for p in pts if (p["drafter"], p["n_max"], p["temperature"]) == g and p["thinking"] == v), None)
               for g in groups]
        xs = [i + (j - (len(values) - 1) / 2) * w for i in range(len(groups))]
        lab = "thinking on" if v else "thinking off"
        a1.bar(xs, [p["tau"] if p else 0 for p in sel], width=w, label=lab)
        a2.bar(xs, [p["tokens_per_s"] if p else 0 for p in sel], width=w, label=lab)
    names = [("plain" if d is None else f"{d} {n}") + f"\nT={t:g}" for d, n, t in groups]
    for a in (a1, a2):
        a.set_xticks(range(len(groups)))
        a.set_xticklabels(names, fontsize=7)
        a.set_xlabel("drafter, n_max, temperature")
        a.grid(axis="y", alpha=0.3)
        a.legend(fontsize=8)
    a1.set_ylabel("τ (tokens committed per verify step)")
    a2.set_ylabel("generation speed (tokens/s)")
    _title(fig, "Thinking on vs off", results, fig=True)
    fig.tight_layout()
    path = out / "thinking_on_off.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_all(results: dict, out: Any) -> list[Path]:
    """Every plot that the results have data for; returns the files written."""
    plt = _plt()
    out = Path(out)
    made = [f(results, out, plt) for f in (speed_and_tau, acceptance_per_position, stage_time, memory, depth, thinking)]
    return [p for p in made if p is not None]


__all__ = ["draw_all"]
