"""Host cost of DFlash's constant-shape bookkeeping per step (fused injection): keep the committed rows,
pick the rows injected again before the staged ones, cut at the rollback — the copies of the first version
(whole block concatenated and copied at each of the three) against ``_RowTail`` (chunks by reference, one
copy of the injected rows). Rows as wide as a Qwen3-8B-shaped DFlash drafter's target features (5 taps ×
4096 floats = 80 KB); one row committed a step (nothing accepted), n_max 7, block 16. No model involved.

    python benchmarks/dflash_row_bookkeeping.py [--width 20480] [--block 16] [--n-max 7] [--steps 400]
"""
import argparse
import time

import numpy as np

from pyllama_spec.speculative.drafters.dflash import _RowTail


def first_version(state: dict, feats: np.ndarray, pos: np.ndarray, block: int, n_max: int) -> None:
    rec = state.get("r")
    if rec is not None and int(rec[1][-1]) + 1 == int(pos[0]):  # _remember
        f, p = np.concatenate([rec[0], feats]), np.concatenate([rec[1], pos])
    else:
        f, p = feats, pos
    state["r"] = (f[-block:].copy(), p[-block:].copy())
    rf, rp = state["r"]  # _pad_injection
    before = rp < int(pos[0])
    m = min(n_max + 1 - len(pos), int(np.count_nonzero(before)))
    if m:
        np.concatenate([rf[before][-m:], feats])
    keep = state["r"][1] < int(pos[-1]) + 1  # rollback: _rows_before
    state["r"] = (state["r"][0][keep], state["r"][1][keep])


def row_tail(state: dict, feats: np.ndarray, pos: np.ndarray, block: int, n_max: int) -> None:
    t = state.setdefault("t", _RowTail(block))
    t.add(feats, pos)
    got = t.before(int(pos[0]), n_max + 1 - len(pos))
    if got is not None:
        np.concatenate([got[0], feats])
    t.cut(int(pos[-1]) + 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=5 * 4096)
    ap.add_argument("--block", type=int, default=16)
    ap.add_argument("--n-max", type=int, default=7)
    ap.add_argument("--steps", type=int, default=400)
    a = ap.parse_args()
    rows = np.random.default_rng(0).standard_normal((a.steps + 50, 1, a.width)).astype(np.float32)
    for _ in range(2):  # (twice, alternating: the second pair is the one to read)
        for name, fn in (("first version", first_version), ("_RowTail", row_tail)):
            state: dict = {}
            for i in range(50):
                fn(state, rows[i], np.array([i], np.int32), a.block, a.n_max)
            t0 = time.perf_counter()
            for i in range(50, 50 + a.steps):
                fn(state, rows[i], np.array([i], np.int32), a.block, a.n_max)
            ms = (time.perf_counter() - t0) / a.steps * 1e3
            print(f"{name:14s} {ms:.3f} ms a step (rows of {a.width * 4 // 1024} KB, block {a.block}, n_max {a.n_max})")


if __name__ == "__main__":
    main()
