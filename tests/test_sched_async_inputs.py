"""Patch 0014-sched-async-inputs: with GGML_SCHED_ASYNC_INPUTS=1 (read once per process, so in a child process)
the scheduler queues a GPU split's input copies on its stream and llama_context synchronizes once before writing
the next inputs. The outputs must not change: plain decoding and a DFlash chain, token for token, with the switch
on and off (on the CPU only the synchronization runs — the CPU backend copies synchronously either way —; on a GPU
build the queued copies too)."""
import json
import os
import subprocess
import sys

CODE = """
import json, sys
import pyllama_spec as ps
t, d = sys.argv[1], sys.argv[2]
with ps.Generator(t, drafters={"dflash": d}, n_ctx=512, n_batch=64, n_ubatch=32) as g:
    out = [g.generate(p, max_tokens=24, reuse_prefix=False).tokens for p in ("hello there", "def add(a, b):")]
    out += [g.generate(p, drafter="dflash", n_max=4, max_tokens=24, reuse_prefix=False).tokens
            for p in ("hello there", "def add(a, b):")]
print(json.dumps(out))
"""


def _run(tiny, tmp_path, on):
    env = {k: v for k, v in os.environ.items() if k != "GGML_SCHED_ASYNC_INPUTS"}
    if on:
        env["GGML_SCHED_ASYNC_INPUTS"] = "1"
    r = subprocess.run([sys.executable, "-c", CODE, str(tiny["target"]), str(tiny["dflash"])], capture_output=True,
                       text=True, timeout=300, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_async_inputs_give_the_same_tokens(tiny, tmp_path):
    off, on = _run(tiny, tmp_path, False), _run(tiny, tmp_path, True)
    assert all(len(x) == 24 for x in off)
    assert on == off
    assert off[2] == off[0] and off[3] == off[1]  # (the chain is plain decoding's, as everywhere)

