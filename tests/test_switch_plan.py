"""LLAMA_SWITCH_PLAN=worst (patches 0016 / 0017, opt-in): after a layer tap goes on or a sampler chain is attached or
detached, the next decode plans the worst-case prompt graph (as the context's first reserve ends) instead of that
graph alone, so that the graphs after it keep their buffers' addresses (RESULTS.md 19.20: a moved buffer resets a
cached CUDA graph). The variable is read once per process, so everything runs in child processes: the switch tests
of test_context.py and test_sampler.py must pass with it, and generation — plain, DFlash with its taps, a sampled
chain — must give the same tokens with it on and off."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SWITCH_TESTS = [
    "tests/test_context.py::test_taps_switched_between_decodes_of_one_shape_are_read_at_once",
    "tests/test_context.py::test_a_tap_switched_on_after_a_plan_made_without_it_is_read",
    "tests/test_sampler.py::test_a_chain_switched_between_decodes_draws_and_leaves_logits_as_without_switches",
    "tests/test_sampler.py::test_a_chain_needing_more_graph_nodes_than_planned_is_reserved_for",
]

CODE = """
import json, sys
import pyllama_spec as ps
t, d = sys.argv[1], sys.argv[2]
with ps.Generator(t, drafters={"dflash": d}, n_ctx=512, n_batch=64, n_ubatch=32) as g:
    out, acc = [], []
    for p in ("hello there", "def add(a, b):"):  # plain, DFlash (taps on), plain again (taps off), sampled (a chain)
        out.append(g.generate(p, max_tokens=20, reuse_prefix=False).tokens)
        r = g.generate(p, drafter="dflash", n_max=4, max_tokens=20, reuse_prefix=False)
        out.append(r.tokens)
        acc.append([r.stats.n_drafted, r.stats.n_accepted])  # (what the drafter read from the taps shows here)
        out.append(g.generate(p, max_tokens=20, reuse_prefix=False).tokens)
        out.append(g.generate(p, max_tokens=20, temperature=0.8, seed=3, reuse_prefix=False).tokens)
print(json.dumps([out, acc]))
"""


def _env(on: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LLAMA_SWITCH_PLAN"}
    if on:
        env["LLAMA_SWITCH_PLAN"] = "worst"
    return env


def test_the_switch_tests_pass_with_the_worst_case_plan(tmp_path):
    # (from tmp_path with the project's pytest configuration — its importlib mode —, so that the child imports the
    # installed package, as the suite itself does, not the checkout's sources without their compiled extension)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                        "-c", str(ROOT / "pyproject.toml"), *(str(ROOT / t) for t in SWITCH_TESTS)],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, env=_env(True))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert f"{len(SWITCH_TESTS)} passed" in r.stdout


def test_generation_gives_the_same_tokens_with_the_worst_case_plan(tiny, tmp_path):
    def run(on: bool) -> list:
        r = subprocess.run([sys.executable, "-c", CODE, str(tiny["target"]), str(tiny["dflash"])], capture_output=True,
                           text=True, timeout=300, cwd=tmp_path, env=_env(on))
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.strip().splitlines()[-1])

    (off, acc_off), (on, acc_on) = run(False), run(True)
    # (the random tiny target may end a generation early with its EOS)
    assert len(off) == 8 and all(0 < len(x) <= 20 for x in off) and sum(map(len, off)) > 80
    assert on == off
    assert off[1] == off[0] == off[2] and off[5] == off[4] == off[6]  # (DFlash at T = 0 is plain decoding's chain)
    # the tokens alone would not see garbage taps (the target decides them); the drafter's drafts and their
    # acceptance would: the same with the worst-case plan
    assert acc_on == acc_off and all(d > 0 for d, _ in acc_off)
