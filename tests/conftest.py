"""Shared fixtures: tiny GGUF models written by pyllama_spec.fixtures (deterministic, made once
per session), SmolLM2-135M-Instruct fetched through pip (cached), and the native programs."""
from __future__ import annotations

import pytest

import pyllama_spec as ps
from pyllama_spec import fixtures


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    """Paths and vocabulary facts of the tiny llama target and its random DFlash drafter (block 8)."""
    d = tmp_path_factory.mktemp("tiny")
    info = fixtures.write_tiny_target(d / "target.gguf", arch="llama", n_layer=4, n_embd=64, seed=1)
    fixtures.write_dflash_drafter(d / "dflash.gguf", target=d / "target.gguf", n_layer=2, block_size=8, seed=2)
    return {"target": d / "target.gguf", "dflash": d / "dflash.gguf", "dir": d, **info}


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory):
    d = tmp_path_factory.mktemp("tinyq")
    info = fixtures.write_tiny_target(d / "target.gguf", arch="qwen3", n_layer=6, n_embd=64, seed=3)
    fixtures.write_dflash_drafter(d / "dflash.gguf", target=d / "target.gguf", n_layer=1, block_size=16,
                                  target_layers=[1, 3, 5], seed=4)
    return {"target": d / "target.gguf", "dflash": d / "dflash.gguf", **info}


@pytest.fixture(scope="session")
def tiny_model(tiny):
    return ps.Model(tiny["target"])


@pytest.fixture(scope="session")
def tiny_gen(tiny):
    """A Generator over the tiny target with the DFlash and n-gram drafters (shared: generate()
    keeps only the prefix the caches hold exactly as a cold run builds it, so results do not
    depend on the calls before)."""
    gen = ps.Generator(tiny["target"], drafters={"dflash": tiny["dflash"], "ngram": "ngram"},
                       n_ctx=1024, n_batch=64, n_ubatch=32)
    yield gen
    gen.close()


@pytest.fixture(scope="session")
def smollm2():
    from pyllama_spec.assets import smollm2_path

    try:
        return smollm2_path()
    except ps.ModelNotFoundError as exc:  # no package registry on this machine
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def smol_gen(smollm2):
    from pyllama_spec.assets import random_dflash_for_smollm2

    gen = ps.Generator(smollm2, drafters={"dflash": random_dflash_for_smollm2()}, n_ctx=2048, n_batch=256)
    yield gen
    gen.close()


#: On the CPU backend llama.cpp's results do not depend on the batch shape, so speculative decoding
#: reproduces plain decoding token for token. On CUDA a batch of k rows may run other kernels than a
#: batch of one (mmvq vs mmq, cuBLAS), so logits differ in the last bits and a near-tie can flip a
#: greedy token: the outputs then agree only up to that point (llama.cpp's own programs behave alike).
EXACT = not ps.supports_gpu_offload()


def assert_same_tokens(ours, ref, min_prefix: int = 12):
    """Token equality on the CPU; on a GPU build, agreement over at least the first ``min_prefix``."""
    if EXACT:
        assert ours == ref
        return
    n = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    assert n >= min(min_prefix, len(ref)), (n, ours[:n + 3], ref[:n + 3])


def first_difference(ours, ref) -> int | None:
    """Index of the first token where two sequences differ (the shorter's length if one is a prefix of
    the other and they differ in length), or None when they are equal."""
    if list(ours) == list(ref):
        return None
    return next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))


def top2_margin(ctx, tokens) -> float:
    """The target's greedy margin after ``tokens`` (top-1 minus top-2 logit, relative to the largest
    |logit|), decoded from an empty cache of ``ctx`` in chunks of its ``n_batch`` (the cache is
    cleared again afterwards, so a Generator over ``ctx`` starts cold next)."""
    import numpy as np

    ctx.memory.clear()
    try:
        toks = [int(t) for t in tokens]
        for i in range(0, len(toks), ctx.n_batch):
            ctx.decode(toks[i:i + ctx.n_batch], logits="last")
        row = np.sort(np.asarray(ctx.logits()[-1], dtype=np.float64))
    finally:
        ctx.memory.clear()
    return float((row[-1] - row[-2]) / max(1.0, np.abs(row).max()))


#: a greedy choice whose top-2 logits are closer than this (relative to the largest |logit|) is a
#: near-tie: other kernels for another batch shape (GPU) may flip it. The same bound as the GPU
#: tolerance of :func:`close_logits` (two runs whose logits may differ by 3 % of the largest may
#: choose differently where the top two are that close); on the H200 (2026-12-02) SmolLM2's answer to
#: "Say hello." parted from plain decoding at a margin of 0.021 after verify batches of 8 rows had
#: written the earlier positions' cache entries.
NEAR_TIE = 3e-2


def assert_same_tokens_but_near_ties(ctx, prompt, ours, ref, *, exact: bool | None = None):
    """Token equality on the CPU. On a GPU build: equality up to the first difference, and there the
    reference's own choice must have been a near-tie (:data:`NEAR_TIE`, measured by ``ctx``'s target
    after ``prompt + ref[:j]``) — only a flipped near-tie may part two runs; a wrong cache would part
    them at a clear choice. ``exact`` overrides :data:`EXACT` (to test this rule on the CPU)."""
    if EXACT if exact is None else exact:
        assert list(ours) == list(ref)
        return
    j = first_difference(ours, ref)
    if j is None:
        return
    # (j may be the shorter's length: one run ended there, at an EOS the other did not choose)
    margin = top2_margin(ctx, list(prompt) + list(ref[:j]))
    assert margin < NEAR_TIE, (f"the runs part at token {j} where the reference's choice is clear "
                               f"(margin {margin:.3g}): {ours[:j + 2]} vs {ref[:j + 2]}")


def close_logits(a, b):
    """Logits equal up to f16-KV rounding (CPU), or up to kernel differences (GPU)."""
    import numpy as np

    tol = 1e-2 if EXACT else 3e-2 * float(np.abs(b).max())
    np.testing.assert_allclose(a, b, rtol=1e-2, atol=tol)
    same = np.argmax(np.atleast_2d(a), axis=-1) == np.argmax(np.atleast_2d(b), axis=-1)
    assert same.mean() >= (1.0 if EXACT else 0.9)


def native_or_skip(name: str):
    from pyllama_spec.native import find_program

    try:
        return find_program(name)
    except ps.UnsupportedError as exc:
        pytest.skip(str(exc))


def child_result(script: str, *args, cwd, timeout: int = 300) -> dict:
    """Run ``script`` (``python -c``, with ``args``) in a child process that imports this checkout's package and
    prints ``RESULT <json>``; the parsed JSON. An abort in llama.cpp there fails the test instead of ending the
    run. ``cwd`` must not be the checkout: ``-c`` puts the working directory first on ``sys.path``."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(ps.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, "-c", script, *map(str, args)], check=False, capture_output=True, text=True,
                       timeout=timeout, env=env, cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(next(line for line in r.stdout.splitlines() if line.startswith("RESULT "))[7:])
