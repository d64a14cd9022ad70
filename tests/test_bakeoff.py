"""The bake-off (pyllama_spec.study) on the tiny fixtures: the sweep runs end to end and writes
every output, the results.json keys are pinned, multi-turn history and thinking on/off reach the
prompt, and the prompt sets load."""
import csv
import importlib.util
import json

import pytest

import pyllama_spec as ps
from pyllama_spec import fixtures
from pyllama_spec.errors import InvalidArgumentError
from pyllama_spec.speculative.costmodel import VerifyCost, tree_tau_from_mass
from pyllama_spec.study.prompts import Conversation, load_prompts, parse_jsonl

THINK_TEMPLATE = (fixtures.CHATML.replace("{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}",
                                          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                                          "{% if enable_thinking is defined and not enable_thinking %}"
                                          "{{ '<think></think>' }}"
                                          "{% endif %}{% endif %}"))

#: the plots need the optional [plot] extra; everything else is checked without it
HAVE_MPL = importlib.util.find_spec("matplotlib") is not None
PLOTS = ["speed_tau_vs_n_max.png", "acceptance_per_position.png", "stage_time_per_step.png", "memory.png",
         "depth_by_turn.png", "thinking_on_off.png"]

TOP_KEYS = {"schema", "complete", "settings", "machine", "model", "notes", "memory", "verify_ms", "runs", "points",
            "cost_models", "outputs"}
RUN_KEYS = {"drafter", "kind", "n_max", "tree", "n_max_ceiling", "temperature", "thinking", "run", "conversation",
            "turn", "n_prompt", "n_generated", "finish_reason", "generation_s", "prefill_s", "tokens_per_s",
            "prompt_tokens_per_s", "n_steps", "n_drafted", "n_accepted", "tau", "acceptance", "accepted_at",
            "drafted_at", "accepted_per_position", "mean_draft_length", "draft_length_counts", "stage_ms",
            "stages_ms_per_step", "native", "n_tree_steps", "n_tree_nodes", "tree_mass", "spine_mass", "draft_lengths",
            "acceptance_lengths"}
POINT_KEYS = {"drafter", "kind", "n_max", "tree", "temperature", "thinking", "n_runs", "n_generations", "n_generated",
              "n_steps", "tokens_per_s", "prompt_tokens_per_s", "tau", "acceptance", "accepted_per_position",
              "survival", "mean_draft_length", "ms_per_step", "stages_ms_per_step", "tokens_per_s_runs",
              "tokens_per_s_sd", "draft_length_counts", "by_turn", "native", "speedup"}
PREDICTED_KEYS = {"predicted_tok_s", "predicted_tau", "break_even_tau", "predicted_heldout_tok_s",
                  "predicted_tok_s_at_tau"}
MODEL_KEYS = {"drafter", "temperature", "thinking", "costs", "acceptance", "plain_ms_per_token", "predicted",
              "best_n_max", "measured", "best_n_max_measured"}
MACHINE_KEYS = {"date", "host", "platform", "python", "cpu", "n_cpus", "load_avg", "memory_gib", "devices", "gpu",
                "system_info", "llama_cpp_build", "llama_cpp_commit", "pyllama_spec"}


@pytest.fixture(scope="module")
def think_target(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("think")
    fixtures.write_tiny_target(d / "target.gguf", arch="llama", n_layer=4, n_embd=64, seed=1,
                               chat_template=THINK_TEMPLATE)
    return d / "target.gguf"


@pytest.fixture(scope="module")
def sweep(think_target, tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("bakeoff")
    prompts = out / "prompts.jsonl"
    prompts.write_text(json.dumps({"messages": [{"role": "system", "content": "be brief"},
                                                {"role": "user", "content": "def add(a, b):"},
                                                {"role": "assistant", "content": "ignored"},
                                                {"role": "user", "content": "more"}]}) + "\n")
    # the tiny target's weights with a template that reads enable_thinking; the drafter reads its layers
    res = ps.bakeoff(think_target, {"dflash": str(tiny["dflash"]), "ngram": "ngram"}, n_max=[1, 3, 9, "auto"],
                     prompts=str(prompts), turns=2, thinking="on,off", temperature=[0.0, 0.8], runs=2,
                     max_tokens=8, out=out, n_ctx=512, progress=False, verify_reps=1, plots=HAVE_MPL)
    return res, out


def test_sweep_writes_every_output(sweep):
    res, out = sweep
    for name in ("results.json", "results.csv", "runs.csv", "REPORT.md"):
        assert (out / name).stat().st_size > 0, name
    if HAVE_MPL:
        assert res["outputs"]["plots"] == PLOTS
        for name in PLOTS:
            assert (out / name).stat().st_size > 0, name
    # points: plain + dflash {1, 3, 7 (9 clamped), auto} + ngram {1, 3, 9, auto}, × 2 temperatures × 2 thinking
    assert len(res["points"]) == 9 * 4
    assert len(res["runs"]) == 9 * 4 * 2 * 2  # × runs × (1 conversation × 2 turns)
    assert any("clamped to 7" in n for n in res["notes"])
    assert json.loads((out / "results.json").read_text())["schema"] == "pyllama_spec.bakeoff/1"
    with open(out / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(res["points"]) and "acc_pos9" in rows[0] and "ms_verify" in rows[0]
    report = (out / "REPORT.md").read_text()
    for heading in ("Speed and τ per drafter × n_max", "Best n_max per drafter", "Acceptance per position",
                    "Time per step by stage", "Per turn (context depth)", "Memory (MiB)", "Cost model"):
        assert f"## {heading}" in report
    assert "thinking on" in report and "thinking off" in report
    # acceptance per position: as many columns as positions drafted (an auto ceiling of 31 is not drafted)
    drafted = [len(p["accepted_per_position"]) if p["n_max"] != "auto" else
               max((int(k) for k, v in p["draft_length_counts"].items() if v), default=0)
               for p in res["points"] if p["drafter"] and p["accepted_per_position"]]
    section = report.split("## Acceptance per position")[1]
    header = next(line for line in section.splitlines() if line.startswith("|"))
    assert header.count("|") - 1 == 3 + max(drafted) and max(drafted) < 31


def test_undrafted_positions_have_no_rate():
    """A position no step drafted (an auto point that stopped short) has no rate: None, "–" in the report,
    never a measured-looking 0.00."""
    from pyllama_spec.study.summary import _pooled

    run = {"drafter": "dflash", "n_max": 3, "n_generated": 10, "n_steps": 4, "n_drafted": 6, "n_accepted": 3,
           "accepted_at": [2, 1, 0], "drafted_at": [4, 2, 0], "generation_s": 0.5, "prefill_s": 0.1,
           "n_prompt": 9, "stage_ms": {}}
    pt = _pooled([run])
    assert pt["accepted_per_position"] == [0.5, 0.5, None]
    assert pt["tau"] == (4 + 3) / 4 and pt["acceptance"] == 0.5


def test_results_schema_is_stable(sweep):
    res, _ = sweep
    assert set(res) == TOP_KEYS
    assert set(res["machine"]) == MACHINE_KEYS and res["machine"]["llama_cpp_build"] == ps._ffi.LLAMA_CPP_BUILD
    assert set(res["memory"]) == {"target", "drafters"} and set(res["memory"]["drafters"]) == {"dflash", "ngram"}
    # ngram auto: up to 31 drafts
    assert set(res["verify_ms"]) == {"plain", "dflash", "ngram"} and len(res["verify_ms"]["plain"]) == 32
    for r in res["runs"]:
        assert set(r) == RUN_KEYS
    for p in res["points"]:
        fixed = p["drafter"] is not None and isinstance(p["n_max"], int) and not p["tree"]
        assert set(p) == POINT_KEYS | (PREDICTED_KEYS if fixed else set()), p["drafter"]
        assert set(p["by_turn"][0]) == {"turn", "n_prompt_mean", "tau", "acceptance", "tokens_per_s"}
    for cm in res["cost_models"]:
        assert set(cm) == MODEL_KEYS
    assert {(c["drafter"], c["temperature"], c["thinking"]) for c in res["cost_models"]} == {
        (d, t, th) for d in ("dflash", "ngram") for t in (0.0, 0.8) for th in (True, False)}


def test_sweep_values_hang_together(sweep):
    res, _ = sweep
    for r in res["runs"]:
        assert r["n_steps"] + r["n_accepted"] >= r["n_generated"] >= 1
        assert r["tau"] >= 1.0
        if r["drafter"] is None:
            assert r["n_drafted"] == 0 and r["acceptance"] is None
        else:
            assert 0.0 <= r["acceptance"] <= 1.0 and len(r["accepted_at"]) == r["n_max_ceiling"]
            assert max(map(int, r["draft_length_counts"])) <= r["n_max_ceiling"]
        # each step's draft tokens and accepted ones, in order: the counters' totals
        assert len(r["draft_lengths"]) == len(r["acceptance_lengths"]) == r["n_steps"]
        assert sum(r["draft_lengths"]) == r["n_drafted"] and sum(r["acceptance_lengths"]) == r["n_accepted"]
        assert all(0 <= a <= d for a, d in zip(r["acceptance_lengths"], r["draft_lengths"]))
    # the cost models split the steps by how they began (costmodel.Acceptance.by_start)
    assert all(set(cm["acceptance"]["by_start"]) == {"R", "F"} for cm in res["cost_models"])
    # thinking off adds "<think></think>" to the prompt; turn 2 carries turn 1's answer
    by = {(r["drafter"], r["n_max"], r["temperature"], r["thinking"], r["run"], r["conversation"], r["turn"]): r
          for r in res["runs"]}
    for k, r in by.items():
        if k[3] is False and k[6] == 1:
            assert r["n_prompt"] > by[(*k[:3], True, *k[4:])]["n_prompt"]
        if k[6] == 2:
            assert r["n_prompt"] > by[(*k[:6], 1)]["n_prompt"] + 4
    for p in res["points"]:
        assert p["n_runs"] == 2 and len(p["tokens_per_s_runs"]) == 2 and [b["turn"] for b in p["by_turn"]] == [1, 2]
        if p["drafter"] is None:
            assert p["speedup"] == pytest.approx(1.0)
    # the step costs alone at a point's measured τ and drafted/step: T = V(1 + d) + D0 + D1·d + W0 + W1·τ
    checked = 0
    for p in res["points"]:
        if p.get("predicted_tok_s_at_tau") is None:
            continue
        checked += 1
        cm = next(c for c in res["cost_models"] if (c["drafter"], c["temperature"], c["thinking"])
                  == (p["drafter"], p["temperature"], p["thinking"]))
        c, d, tau = cm["costs"], p["mean_draft_length"], p["tau"]
        v = VerifyCost(c["verify"]["rows"], c["verify"]["ms"])(1.0 + d)
        ms = v + c["draft_call_ms"] + c["draft_token_ms"] * d + c["other_step_ms"] + c["other_token_ms"] * tau
        assert p["predicted_tok_s_at_tau"] == pytest.approx(1e3 * tau / ms)
    assert checked > 0  # (every drafting point of a fitted drafter has one)


def test_greedy_points_are_lossless_across_drafters(think_target, tiny):
    res = ps.bakeoff(think_target, [f"dflash={tiny['dflash']}", "ngram"], n_max="2,auto", prompts=["hello there"],
                     runs=1, max_tokens=12, progress=False, out=None, thinking=None, verify_reps=1)
    # greedy: every drafter commits the same tokens as plain decoding, so the same count per turn
    gens = {(r["drafter"], r["n_max"]): r["n_generated"] for r in res["runs"]}
    assert len(set(gens.values())) == 1 and len(gens) == 5
    assert res["notes"] == []


def test_cli_bakeoff(think_target, tiny, tmp_path, capsys):
    from pyllama_spec.cli import main

    rc = main(["bakeoff", str(think_target), "-d", f"dflash={tiny['dflash']}", "--n-max", "2", "--prompts",
               "builtin:mixed", "--turns", "1", "--runs", "1", "-n", "6", "--out", str(tmp_path), "--no-plots",
               "--no-progress", "-c", "1024"])
    assert rc == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert len(res["runs"]) == 2 * 8 and res["outputs"] == {"json": "results.json", "csv": "results.csv",
                                                            "report": "REPORT.md"}
    assert "best n_max measured 2" in capsys.readouterr().out
    assert main(["bakeoff", str(think_target), "--n-max", "0", "--out", str(tmp_path)]) == 2
    # --from-json rebuilds the tables from the runs alone: the same report, no model loaded
    again = tmp_path / "again"
    assert main(["bakeoff", "--from-json", str(tmp_path / "results.json"), "--out", str(again), "--no-plots"]) == 0
    assert (again / "REPORT.md").read_text() == (tmp_path / "REPORT.md").read_text()
    assert (again / "results.csv").read_text() == (tmp_path / "results.csv").read_text()
    assert main(["bakeoff", "--out", str(again)]) == 2
    assert "give the target .gguf" in capsys.readouterr().err


def test_thinking_without_effect_is_noted(tiny):
    res = ps.bakeoff(tiny["target"], {"ngram": "ngram"}, n_max=[2], prompts=["hi"], thinking="on,off", runs=1,
                     max_tokens=4, progress=False)
    assert any("has no effect" in n for n in res["notes"])
    assert {p["thinking"] for p in res["points"]} == {None}


def test_prompt_sets_load():
    for name in ("coding-chat", "mixed"):
        convs = load_prompts(f"builtin:{name}")
        assert convs and all(c.turns and all(t.strip() for t in c.turns) for c in convs)
    assert [len(c.turns) for c in load_prompts("builtin:coding-chat")] == [4, 4]
    assert len(load_prompts("builtin:mixed")) == 8
    c = Conversation("x", ["q1", "q2"], system="s")
    assert c.messages(["a1"]) == [{"role": "system", "content": "s"}, {"role": "user", "content": "q1"},
                                  {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]
    assert parse_jsonl('{"prompt": "raw text"}')[0].raw
    with pytest.raises(InvalidArgumentError, match="prompts:2"):
        parse_jsonl('{"turns": ["a"]}\n{"turns": []}')
    with pytest.raises(InvalidArgumentError, match="builtin:coding-chat"):
        load_prompts("builtin:nope")
    with pytest.raises(FileNotFoundError):
        load_prompts("/nonexistent.jsonl")


@pytest.mark.parametrize("kw, match", [({"runs": 0}, "runs"), ({"n_max": "x"}, "n_max"),
                                       ({"thinking": "maybe"}, "thinking"), ({"temperature": [-1]}, "temperatures"),
                                       ({"turns": 0}, "turns")])
def test_bad_settings_are_named(tiny, kw, match):
    with pytest.raises(InvalidArgumentError, match=match):
        ps.bakeoff(tiny["target"], {"ngram": "ngram"}, progress=False, **kw)


def _small(target, out, **kw):
    """A sweep of 2 runs × (plain, ngram n_max 1, ngram n_max 2) over 2 one-turn prompts: 6 (point, run) pairs."""
    args = dict(n_max=[1, 2], prompts=["hello there", "def add(a, b):"], runs=2, max_tokens=6, out=out, n_ctx=512,
                progress=False, verify_reps=1, plots=False)
    return ps.bakeoff(target, ["ngram"], **{**args, **kw})


def test_points_are_interleaved_per_conversation(tiny, tmp_path):
    """Every point answers a conversation before the next conversation starts, the order reversed on
    every other conversation (sweep.interleaved): a busy machine's drift hits every point alike. (The
    points one after another put 13 % between auto and plain on the 2-core CPU, 2026-12-02.)"""
    from pyllama_spec.study.sweep import interleaved

    res = _small(tiny["target"], tmp_path)
    order = [(r["drafter"], r["n_max"], r["run"], r["conversation"]) for r in res["runs"]]
    c0, c1 = sorted({r["conversation"] for r in res["runs"]}, key=[r["conversation"] for r in res["runs"]].index)
    fwd = [(None, 0), ("ngram", 1), ("ngram", 2)]
    want = [(d, n, run, c) for run in (0, 1) for c, pts in ((c0, fwd), (c1, fwd[::-1])) for d, n in pts]
    assert order == want
    assert res["settings"]["order"] == "interleaved"
    assert "(interleaved: every point on each conversation in turn)" in (tmp_path / "REPORT.md").read_text()
    assert interleaved(["a", "b"], 1, 3) == [(0, 0, "a"), (0, 0, "b"), (0, 1, "b"), (0, 1, "a"), (0, 2, "a"),
                                            (0, 2, "b")]


def test_interrupted_sweep_leaves_results_and_resumes(tiny, tmp_path, monkeypatch):
    """Ctrl-C during a conversation: results.json (written atomically after every point answered a
    conversation) holds the conversations before it, is marked incomplete and renders; resume=True
    runs only the rest and gives the whole sweep."""
    from pyllama_spec.study import sweep as sweep_mod
    from pyllama_spec.study.summary import summarize

    real = sweep_mod.Runner.run_conversation
    calls = []

    def interrupting(self, point, run, conv):
        if len(calls) == 4:
            raise KeyboardInterrupt  # as Ctrl-C during the 2nd conversation's 2nd point
        calls.append((point.label, run, conv.id))
        return real(self, point, run, conv)

    monkeypatch.setattr(sweep_mod.Runner, "run_conversation", interrupting)
    with pytest.raises(KeyboardInterrupt, match="holds 0 of 6"):
        _small(tiny["target"], tmp_path)
    part = json.loads((tmp_path / "results.json").read_text())
    c0 = calls[0][2]
    assert part["complete"] is False and len(part["runs"]) == 3  # the first conversation, every point
    assert {(r["drafter"], r["n_max"], r["run"], r["conversation"]) for r in part["runs"]} == {
        (None, 0, 0, c0), ("ngram", 1, 0, c0), ("ngram", 2, 0, c0)}
    assert not list(tmp_path.glob(".results.json*"))  # no temporary file left behind
    from pyllama_spec.study.report import write_report

    write_report(summarize(part), tmp_path / "partial.md")  # readable: the report renders from it
    assert "**Incomplete**" in (tmp_path / "partial.md").read_text()

    calls.clear()
    monkeypatch.setattr(sweep_mod.Runner, "run_conversation", lambda self, p, r, c: calls.append((p.label, r))
                        or real(self, p, r, c))
    res = _small(tiny["target"], tmp_path, resume=True)
    assert calls == [("ngram n_max=2", 0), ("ngram n_max=1", 0), ("plain", 0),  # only what was missing
                     ("plain", 1), ("ngram n_max=1", 1), ("ngram n_max=2", 1),
                     ("ngram n_max=2", 1), ("ngram n_max=1", 1), ("plain", 1)]
    assert res["complete"] is True and len(res["runs"]) == 6 * 2
    assert res["runs"][:3] == part["runs"]  # the finished conversations are kept as they were
    assert res["verify_ms"] == part["verify_ms"] and any("resumed" in n for n in res["notes"])
    assert json.loads((tmp_path / "results.json").read_text())["complete"] is True
    assert all(p["n_runs"] == 2 for p in res["points"])
    # resuming a finished sweep runs nothing; other settings are refused, naming what differs
    calls.clear()
    assert len(_small(tiny["target"], tmp_path, resume=True)["runs"]) == 12 and calls == []
    with pytest.raises(InvalidArgumentError, match="other max_tokens"):
        _small(tiny["target"], tmp_path, resume=True, max_tokens=7)
    with pytest.raises(InvalidArgumentError, match="give out"):
        _small(tiny["target"], None, resume=True)


def test_cli_ctrl_c_then_resume(tiny, tmp_path, monkeypatch, capsys):
    """The command line: Ctrl-C exits 130 with results.json on disk and says how to continue."""
    from pyllama_spec.cli import main
    from pyllama_spec.study import sweep as sweep_mod

    real = sweep_mod.Runner.run_conversation
    n = []

    def interrupting(self, point, run, conv):
        if len(n) == 2 * 7:  # 7 of the 8 conversations answered by both points
            raise KeyboardInterrupt
        n.append(1)
        return real(self, point, run, conv)

    monkeypatch.setattr(sweep_mod.Runner, "run_conversation", interrupting)
    argv = ["bakeoff", str(tiny["target"]), "-d", "ngram", "--n-max", "2", "--prompts", "builtin:mixed", "--turns",
            "1", "--runs", "1", "-n", "4", "--out", str(tmp_path), "--no-plots", "--no-progress", "-c", "1024"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert "--resume" in err and "0 of 2" in err
    assert len(json.loads((tmp_path / "results.json").read_text())["runs"]) == 14
    monkeypatch.setattr(sweep_mod.Runner, "run_conversation", real)
    assert main(argv + ["--resume"]) == 0
    res = json.loads((tmp_path / "results.json").read_text())
    assert res["complete"] is True and len(res["runs"]) == 16


def test_report_names_the_model_and_the_cpu_and_counts_right(tiny, tmp_path):
    """Headings and titles: the GGUF's general.name and the CPU's name (backend.cpu_name, the one
    source); one run: "1 run per point", no "± 0.0"."""
    from pyllama_spec.study.machine import machine_label

    res = _small(tiny["target"], tmp_path, runs=1, prompts=["hello there"])
    assert res["model"]["target_name"] == "pyllama_spec tiny llama target"
    assert res["model"]["target_label"].startswith("pyllama_spec tiny llama target, ")
    assert res["machine"]["cpu"] == ps.cpu_name()
    report = (tmp_path / "REPORT.md").read_text()
    heading = f"# Drafter bake-off: {res['model']['target_label']} on {machine_label(res['machine'])}"
    assert report.splitlines()[0] == heading
    # the machine is the GPU where the run offloaded to one, else the CPU's name without its (R)/(TM) marks
    if res["machine"].get("gpu"):
        assert report.splitlines()[0].endswith(f" on {res['machine']['gpu']}")
    else:
        cpu = ps.cpu_name().replace("(R)", "").replace("(TM)", "").replace(" Processor", "").replace(" CPU", "")
        assert " ".join(cpu.split()) in report.splitlines()[0]
    assert "1 run per point" in report and "1 runs" not in report and "± 0.0" not in report
    assert "1 conversation," in report and "up to 4 turns" in report


def test_machine_label_and_cpu_name():
    intel = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n" \
            "model name\t: Intel(R) Xeon(R) Processor\n\nprocessor\t: 1\nmodel name\t: other\n"
    amd = "vendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\nmodel name\t: AMD EPYC\n"
    odd = "vendor_id\t: AuthenticAMD\ncpu family\t: 99\nmodel\t\t: 1\nmodel name\t: AMD Future\n"
    assert ps.backend.cpu_name(intel) == "Intel(R) Xeon(R) Processor (Sapphire Rapids)"
    assert ps.backend.cpu_name(amd) == "AMD EPYC (Zen 4)"
    assert ps.backend.cpu_name(odd) == "AMD Future (family 99, model 1)"
    from pyllama_spec.study.machine import machine_label

    assert machine_label({"cpu": ps.backend.cpu_name(intel), "n_cpus": 2}) == "Intel Xeon (Sapphire Rapids), 2 cores"
    assert machine_label({"cpu": "X", "n_cpus": 1, "gpu": None}) == "X, 1 core"
    assert machine_label({"cpu": "X", "n_cpus": 16, "gpu": "NVIDIA H200"}) == "NVIDIA H200"


@pytest.mark.skipif(not HAVE_MPL, reason="needs matplotlib (the [plot] extra)")
def test_depth_plot_legends_and_colours_match(sweep, tmp_path, monkeypatch):
    """depth_by_turn.png: both panels have a legend and a series has one colour in both (the left
    panel has no plain line, which shifted its colours by one against the right panel's legend)."""
    import matplotlib.pyplot as plt

    from pyllama_spec.study import plots

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    res, _ = sweep
    assert plots.depth(res, tmp_path, plt) == tmp_path / "depth_by_turn.png"
    a1, a2 = figs[-1].axes[:2]
    assert a1.get_legend() is not None and a2.get_legend() is not None
    left = {ln.get_label(): ln.get_color() for ln in a1.get_lines()}
    right = {ln.get_label(): ln.get_color() for ln in a2.get_lines()}
    assert "plain" in right and "plain" not in left and len(left) == len(right) - 1 >= 2
    assert all(right[k] == c for k, c in left.items())
    assert len(set(left.values())) == len(left)  # distinct series, distinct colours
    assert [t.get_text() for t in a1.get_legend().get_texts()] == list(left)
    sub = figs[-1]._suptitle.get_text()
    assert res["model"]["target_label"] in sub
    plt.close("all")


def test_a_part_without_recorded_steps_turns_the_start_states_off_for_its_drafter_everywhere():
    """A merge of an old part (runs without their steps' lengths) and a new one: the drafter's fit pools as before,
    and so does every held-out refit — the one without the old part's n_max would otherwise use the start states
    (a synthetic drafter whose steps accept 0.45 after a partly rejected draft and 0.8 after a whole one)."""
    import numpy as np

    from pyllama_spec.study.summary import cost_models

    rng = np.random.default_rng(0)

    def run(n, steps=3000, recorded=True):
        seq, whole = [], False
        for _ in range(steps):
            a = 0
            while a < n and rng.random() < (0.8 if whole else 0.45):
                a += 1
            seq.append((n, a))
            whole = a == n
        acc = [sum(1 for _, a in seq if a > i) for i in range(n)]
        r = {"drafter": "d", "n_max": n, "tree": 0, "temperature": 0.0, "thinking": None, "n_steps": steps,
             "n_generated": steps + sum(a for _, a in seq), "n_drafted": n * steps,
             "n_accepted": sum(a for _, a in seq),
             "generation_s": 1e-3 * steps * (1.0 + 0.1 * n), "accepted_at": acc, "drafted_at": [steps] * n,
             "stage_ms": {"verify": steps * (1.0 + 0.05 * n), "draft": steps * 0.1 * n}}
        if recorded:
            r["draft_lengths"], r["acceptance_lengths"] = [d for d, _ in seq], [a for _, a in seq]
        return r

    def points(runs):
        return [{"drafter": "d", "n_max": r["n_max"], "temperature": 0.0, "thinking": None, "tree": 0,
                 "tau": r["n_generated"] / r["n_steps"], "mean_draft_length": float(r["n_max"])} for r in runs]

    new = [run(n) for n in (1, 2, 4, 8)]
    mixed = [run(1, recorded=False)] + new[1:]
    old = [{k: v for k, v in r.items() if k not in ("draft_lengths", "acceptance_lengths")} for r in mixed]
    got, ref, states = points(mixed), points(old), points(new)
    (cm,), _, _ = cost_models(mixed, got), cost_models(old, ref), cost_models(new, states)
    assert not cm["acceptance"]["by_start"]
    for p, q in zip(got, ref):
        assert p["predicted_tau"] == pytest.approx(q["predicted_tau"], rel=1e-12)
        assert p["predicted_heldout_tok_s"] == pytest.approx(q["predicted_heldout_tok_s"], rel=1e-12)
    # (with every part recorded the states do change n_max 1's held-out prediction: what the check above guards)
    assert abs(states[0]["predicted_heldout_tok_s"] / ref[0]["predicted_heldout_tok_s"] - 1) > 0.01


@pytest.mark.skipif(not HAVE_MPL, reason="needs matplotlib (the [plot] extra)")
def test_a_whole_sweeps_plots_stay_readable(sweep, tmp_path, monkeypatch):
    """Nine drafters (a whole GPU sweep): depth_by_turn.png draws per drafter only its fastest fixed n_max (solid)
    and auto (dashed) in the drafter's colour, plus plain; stage_time_per_step.png has a panel per drafter (up to
    three a row), each with plain's bar first and the drafter's n_max in order."""
    import copy

    import matplotlib.pyplot as plt

    from pyllama_spec.study import plots

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    res = copy.deepcopy(sweep[0])
    s0 = plots._settings(res["points"])[0]  # the setting both plots draw
    base = [p for p in res["points"] if p["drafter"] == "dflash" and (p["temperature"], p["thinking"]) == s0]
    plain = [p for p in res["points"] if p["drafter"] is None]
    pts = list(plain)
    for k in range(9):  # nine drafters, the k-th one's n_max 3 the fastest
        for p in base:
            q = copy.deepcopy(p)
            q["drafter"] = f"d{k}"
            q["tokens_per_s"] = 100.0 + (50.0 if q["n_max"] == 3 else 0.0) + k
            pts.append(q)
    res["points"] = pts
    plots.depth(res, tmp_path, plt)
    a1, a2 = figs[-1].axes[:2]
    right = {ln.get_label(): (ln.get_color(), ln.get_linestyle()) for ln in a2.get_lines()}
    assert len(right) == 1 + 2 * 9 and "plain" in right
    for k in range(9):
        fast, auto = right[f"d{k} n_max 3 (fastest fixed)"], right[f"d{k} n_max auto"]
        assert fast[0] == auto[0] and (fast[1], auto[1]) == ("-", "--")
    assert len({right[f"d{k} n_max auto"][0] for k in range(9)}) == 9  # a colour per drafter
    plots.stage_time(res, tmp_path, plt)
    axes = [ax for ax in figs[-1].axes if ax.get_visible()]
    assert len(axes) == 9 and [ax.get_title() for ax in axes] == [f"d{k}" for k in range(9)]
    n_max = [str(p["n_max"]) for p in sorted(base, key=lambda p: (isinstance(p["n_max"], str), str(p["n_max"])))]
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["plain"] + n_max  # (plain of that setting)
    plots.acceptance_per_position(res, tmp_path, plt)
    axes = [ax for ax in figs[-1].axes if ax.get_visible()]
    assert len(axes) == 9 and figs[-1].get_size_inches()[0] <= 3 * 5.5  # three panels a row
    plt.close("all")


@pytest.mark.skipif(not HAVE_MPL, reason="needs matplotlib (the [plot] extra)")
def test_plot_titles_fit_their_figure(sweep, tmp_path, monkeypatch):
    """A long target name (the shipped SmolLM2's general.name) in a one-panel plot: the title lines
    stay inside the figure (the CPU bake-off of 2026-12-02 had them cut off at both sides)."""
    import copy

    import matplotlib.pyplot as plt

    from pyllama_spec.study import plots

    figs = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figs.append(fig))
    res = copy.deepcopy(sweep[0])
    res["model"]["target_label"] = "Smollm2 135M 8k Lc100K Mix1 Ep2, Q4_1"
    res["machine"].update(cpu="AMD EPYC (Zen 4)", n_cpus=2, gpu=None)
    # one drafter, four points: the narrow figures of the CPU bake-off
    res["points"] = [p for p in res["points"] if p["drafter"] in (None, "dflash") and p["n_max"] in (0, 1, 3, "auto")]
    res["memory"]["drafters"] = {"dflash": res["memory"]["drafters"]["dflash"]}
    for draw in (plots.acceptance_per_position, plots.stage_time, plots.memory):
        draw(res, tmp_path, plt)
        fig = figs[-1]
        title = fig._suptitle if fig._suptitle is not None else fig.axes[0].title
        box = title.get_window_extent(fig.canvas.get_renderer())
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (draw.__name__, box)
        assert "Smollm2 135M 8k Lc100K Mix1 Ep2, Q4_1" in title.get_text()
        assert "AMD EPYC (Zen 4), 2 cores" in title.get_text()
    plt.close("all")


def test_ctrl_c_while_preparing_leaves_a_results_json(tiny, tmp_path, monkeypatch):
    """Ctrl-C before any point ran (during the verify-cost measurement): results.json is there,
    with the settings and no runs, and a resume starts from it."""
    calls = []

    def interrupted(self, *a, **k):
        calls.append(1)
        raise KeyboardInterrupt

    real = ps.Generator.verify_ms
    monkeypatch.setattr(ps.Generator, "verify_ms", interrupted)
    with pytest.raises(KeyboardInterrupt, match="holds 0 of 6"):
        _small(tiny["target"], tmp_path)
    part = json.loads((tmp_path / "results.json").read_text())
    assert part["complete"] is False and part["runs"] == [] and part["settings"]["runs"] == 2
    monkeypatch.setattr(ps.Generator, "verify_ms", real)
    res = _small(tiny["target"], tmp_path, resume=True)
    assert res["complete"] is True and len(res["runs"]) == 12


def test_bakeoff_tree_points(tiny):
    """--tree: a point per budget for the tree drafter only (the n-gram drafter drafts chains), lossless at
    T = 0, kept out of the chain cost model; bad budgets are named."""
    res = ps.bakeoff(tiny["target"], {"dflash": str(tiny["dflash"]), "ngram": "ngram"}, n_max=[3],
                     prompts=["def add(a, b):"], turns=1, runs=1, max_tokens=8, n_ctx=512, progress=False,
                     verify_reps=1, plots=False, tree="4,8")
    pts = {(p["drafter"], p["tree"]): p for p in res["points"]}
    assert set(pts) == {(None, 0), ("dflash", 0), ("dflash", 4), ("dflash", 8), ("ngram", 0)}
    assert res["settings"]["tree"] == [4, 8]
    runs = {(r["drafter"], r["tree"]): r for r in res["runs"]}
    for d, t in pts:
        assert runs[(d, t)]["n_generated"] == 8
    # the cost model predicts the tree points from the chain's fit (the numbers recomputed from its parts)
    cm = next(c for c in res["cost_models"] if c["drafter"] == "dflash")
    (depth,) = cm["trees"]
    assert depth["n_max"] == 3 and [b["tree"] for b in depth["budgets"]] == [4, 8]
    v = VerifyCost(cm["tree_verify"]["rows"], cm["tree_verify"]["ms"])  # (the chains' V with the trees' points)
    c = cm["costs"]
    d3 = sum(cm["acceptance"]["drafted"][:3])
    for b in depth["budgets"]:
        r = runs[("dflash", b["tree"])]
        assert r["n_tree_nodes"] == b["tree"] * r["n_tree_steps"] and len(r["tree_mass"]) == b["tree"]
        assert b["nodes_per_step"] == b["tree"]
        ms = (v(1 + b["tree"]) + c["draft_call_ms"] + c["draft_token_ms"] * d3 + cm["tree_row_ms"] * 3
              + c["other_step_ms"])
        assert b["predicted_tok_s"] == pytest.approx(1e3 * b["tau_measured"] / (ms + c["other_token_ms"]
                                                                                  * b["tau_measured"]))
        assert 1.0 <= b["tau_from_probs"] <= 4.0
        p = pts[("dflash", b["tree"])]
        assert p["predicted_tok_s"] == b["predicted_tok_s"] and p["predicted_tau"] == b["tau_from_probs"]
    assert depth["best_tree_predicted"] in (4, 8) and len(depth["tau_from_probs"]) == 8
    big = runs[("dflash", 8)]  # τ from probabilities: from the largest tree's records
    assert depth["tau_from_probs"] == pytest.approx(tree_tau_from_mass(
        big["tree_mass"], big["spine_mass"], big["n_tree_steps"], cm["acceptance"]["survival"]))
    assert depth["tau_from_probs"] == sorted(depth["tau_from_probs"])  # more nodes never predict less
    with pytest.raises(InvalidArgumentError, match="tree budgets"):
        ps.bakeoff(tiny["target"], {"ngram": "ngram"}, tree="0", progress=False)


def test_tree_predictions_in_the_summary_by_hand():
    """The summary's tree predictions from run records of a known machine: V(R) = 2 + .5 R,
    D(d) = 1 + .2 d, W(τ) = .3 + .1 τ ms; chains at n_max 1, 2 with survival .7, .35; one tree point
    (depth 2, budget 3) whose every step drafts nodes of path probability .6 (depth 1), .3 (depth 2),
    .2 (depth 1) and the chain .6, .3, and commits τ = 2.3."""
    from pyllama_spec.study.summary import cost_models

    S = 1000

    def rec(n_max, tree, acc, n_drafted, stage_per_step, **extra):
        gen = S + sum(acc) if n_max else S
        return {"drafter": "dflash" if n_max else None, "n_max": n_max, "tree": tree, "temperature": 0.0,
                "thinking": None, "n_steps": S, "n_generated": gen, "n_drafted": n_drafted, "accepted_at": acc,
                "drafted_at": [S] * n_max, "stage_ms": {k: S * v for k, v in stage_per_step.items()},
                "generation_s": S * sum(stage_per_step.values()) / 1e3, **extra}

    def chain(n, surv):
        tau = 1 + sum(surv)
        return rec(n, 0, [round(S * x) for x in surv], S * n,
                   {"verify": 2 + 0.5 * (n + 1), "draft": 1 + 0.2 * n, "other": 0.3 + 0.1 * tau})

    runs = [rec(0, 0, [], 0, {"verify": 2.5, "other": 0.3}),  # plain: T₁ = 2.8 ms per token
            chain(1, [0.7]), chain(2, [0.7, 0.35]),
            rec(2, 3, [800, 500], 2 * S, {"verify": 2 + 0.5 * 4, "draft": 1 + 0.2 * 2, "draft_sample": 0.5 * 2,
                                          "other": 0.3 + 0.1 * 2.3},
                n_tree_steps=S, n_tree_nodes=3 * S, tree_mass=[[0.6 * S, 0.0], [0.0, 0.3 * S], [0.2 * S, 0.0]],
                spine_mass=[0.6 * S, 0.3 * S])]
    points = [{"drafter": r["drafter"], "n_max": r["n_max"], "tree": r["tree"], "temperature": 0.0, "thinking": None}
              for r in runs]
    (cm,) = cost_models(runs, points)
    (depth,) = cm["trees"]
    (b3,) = depth["budgets"]
    # calibration K = (.7 / .6, .35 / .3): τ(1) = 1.7, τ(2) = 2.05 (the chain's), τ(3) = 2.05 + .2 · .7 / .6
    assert depth["tau_from_probs"] == pytest.approx([1.7, 2.05, 2.05 + 0.2 * 0.7 / 0.6])
    assert b3["tau_measured"] == pytest.approx(2.3) and b3["nodes_per_step"] == 3
    # the tree's drafter call: the chain's D(2) = 1.4 ms and .5 ms more per depth row (its draft_sample)
    assert cm["tree_row_ms"] == pytest.approx(0.5)
    # at the measured τ: V(4) + D(2) + .5·2 + W(2.3) = 4 + 1.4 + 1 + .53 ms, which is what the run took
    assert b3["predicted_tok_s"] == pytest.approx(2300 / 6.93) and b3["tok_s_measured"] == pytest.approx(2300 / 6.93)
    tp = 2.05 + 0.2 * 0.7 / 0.6
    assert b3["predicted_tok_s_from_probs"] == pytest.approx(1e3 * tp / (4 + 2.4 + 0.3 + 0.1 * tp))
    assert b3["break_even_tau"] == pytest.approx(6.93 / 2.8)  # T_tree at the measured τ ÷ T₁
    # every budget 1..3 from the probabilities: 1700 / 5.87, 2050 / 6.405, 2283 / 6.928 ms → 3
    assert depth["best_budget_from_probs"]["tree"] == 3 and depth["best_tree_measured"] == 3
    tree_pt = points[-1]
    assert tree_pt["predicted_tok_s"] == pytest.approx(2300 / 6.93) and tree_pt["predicted_tau"] == pytest.approx(tp)
    # the chains keep their own V (the tree's verifies do not move the chains' predictions)
    assert points[1]["predicted_tok_s"] == pytest.approx(1700 / (3.0 + 1.2 + 0.47))
    assert cm["costs"]["verify"]["rows"] == [1.0, 2.0, 3.0] and cm["tree_verify"]["rows"] == [1.0, 2.0, 3.0, 4.0]


def test_tree_verify_points_half_a_row_apart_are_one():
    from pyllama_spec.study.summary import tree_verify_cost

    def run(n_max, nodes, ms):
        return {"n_max": n_max, "tree": 16 if nodes > 10 else 8, "n_steps": 10, "n_tree_steps": 10,
                "n_tree_nodes": round(10 * nodes),
                "stage_ms": {"verify": 10 * ms}}

    v = tree_verify_cost(VerifyCost([1, 3], [2.0, 4.0]),
                         [run(3, 15.9, 80.0), run(7, 16.2, 70.0), run(7, 8.0, 9.0)])
    assert v.rows == pytest.approx([1.0, 3.0, 9.0, 17.05]) and v.ms == pytest.approx([2.0, 4.0, 9.0, 75.0])
