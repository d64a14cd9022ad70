"""Tables of the sbmm benchmark (``sbmm_bench --json``, optionally ``torch_ref.py --json``) and the issue 19
targets, as markdown.

Per (shape, weight type, n): the fastest correct sbmm configuration, its µs (kernel alone and with the
q8_1 activation quantization that ggml's MMVQ path also runs, which test-backend-ops times together), its
TB/s of weight bytes, and cuBLAS f16 beside it. Where the run has both load paths of a type (q4_0 / q8_0:
the register path, configurations without ``_st``, and the staged cp.async path, ``_st1`` / ``_st2``), a
table per shape sets the best of each side by side (same run, same weights and activations).

usage: python benchmarks/kernels/summarize.py sbmm.json [--torch torch_cublas.json]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict

# issue 19, MUL_MAT m=4096 k=14336 (test-backend-ops perf, pinned tree + our patches, H200, 2026-12-01)
GGML_TODAY = {  # µs at n = 1, 2, 4, 8
    "f16": {1: 29.8, 2: 46.2, 4: 47.0, 8: 48.6},
    "q4_0": {1: 14.6, 2: 14.7, 4: 20.4, 8: 33.1},
    "q4_K": {1: 15.8, 2: 18.7, 4: 27.2, 8: 47.0},
    "q8_0": {1: 23.3, 2: 24.9, 4: 28.0, 8: 46.0},
}
TARGET_N8 = {"f16": 35.0, "q4_0": 18.0, "q4_K": 20.0, "q8_0": 28.0}
TYPES = ("f16", "q4_0", "q8_0", "q4_K", "q6_K")  # (q6_K has no issue 19 target: no verdict row)


def load(path: str) -> list[dict]:
    with open(path) as f:
        return list(json.load(f)["records"])


def load_path(kernel: str) -> str:
    """'staged' for the cp.async configurations (``..._st1_ks2``), 'register' for the others."""
    return "staged" if re.search(r"_st\d", kernel) else "register"


def print_load_paths(recs: list[dict], shapes: list[tuple]) -> None:
    """Per shape: the best correct register-path and staged-path configuration per (type, n), side by side."""
    best: dict[tuple, dict] = {}
    for r in recs:
        if r["kernel"].startswith("sbmm_") and r.get("ok", True):
            key = (r["m"], r["k"], r["type"], r["ncols"], load_path(r["kernel"]))
            if key not in best or r["us"] < best[key]["us"]:
                best[key] = r
    for m, k in shapes:
        rows = sorted({(t, n) for (mm, kk, t, n, path) in best if (mm, kk) == (m, k) and path == "staged"},
                      key=lambda tn: (TYPES.index(tn[0]), tn[1]))
        if not rows:
            continue
        print(f"## load paths, m = {m}, k = {k}\n")
        print("| type | n | register path | µs | TB/s | staged path | µs | TB/s | register ÷ staged |")
        print("|---|---|---|---|---|---|---|---|---|")
        for t, n in rows:
            st = best[(m, k, t, n, "staged")]
            rg = best.get((m, k, t, n, "register"))
            if rg is None:
                print(f"| {t} | {n} | – | | | {st['kernel']} | {st['us']:.1f} | {st['tbps']:.2f} | |")
                continue
            print(f"| {t} | {n} | {rg['kernel']} | {rg['us']:.1f} | {rg['tbps']:.2f} | {st['kernel']} | "
                  f"{st['us']:.1f} | {st['tbps']:.2f} | {rg['us'] / st['us']:.2f} |")
        print()


def whole(r: dict) -> float:
    """A configuration's whole-op µs: the kernel + the activations' conversion (q8_1, or f16 for ``_h``)."""
    return r["us"] + r["quant_us"]


def print_f16_activations(recs: list[dict]) -> None:
    """f16 weights at m=4096 k=14336: the best configuration reading f32 activations beside the best reading
    an f16 copy (``_h``; its µs + the conversion's)."""
    rows: dict[int, dict[bool, dict]] = defaultdict(dict)
    for r in recs:
        if (r["type"] != "f16" or (r["m"], r["k"]) != (4096, 14336) or not r.get("ok", True)
                or not r["kernel"].startswith("sbmm")):
            continue
        h = "_h_" in r["kernel"]  # (names end in _ksN)
        cur = rows[r["ncols"]].get(h)
        if cur is None or r["us"] + r["quant_us"] < cur["us"] + cur["quant_us"]:
            rows[r["ncols"]][h] = r
    if not any(True in v for v in rows.values()):
        return
    print("## f16 activations, m = 4096, k = 14336\n")
    print("| n | f32 activations | µs | f16 activations | µs | + conversion µs | f32 ÷ f16 (whole op) |")
    print("|---|---|---|---|---|---|---|")
    for n in sorted(rows):
        a, b = rows[n].get(False), rows[n].get(True)
        if a is None or b is None:
            continue
        tb = whole(b)
        print(f"| {n} | {a['kernel']} | {a['us']:.1f} | {b['kernel']} | {b['us']:.1f} | {tb:.1f} | "
              f"{a['us'] / tb:.2f} |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sbmm_json")
    ap.add_argument("--torch", default="", help="torch_ref.py's JSON (cuBLAS through torch)")
    args = ap.parse_args()
    recs = load(args.sbmm_json)
    if args.torch:
        recs += load(args.torch)

    best: dict[tuple, dict] = {}
    cublas: dict[tuple, float] = {}
    wrong = [r for r in recs if not r.get("ok", True)]
    for r in recs:
        key = (r["m"], r["k"], r["type"], r["ncols"])
        if r["kernel"] in ("cublas_gemmex", "torch_linear_f16"):
            ck = (r["m"], r["k"], r["ncols"])
            cublas[ck] = min(cublas.get(ck, 1e30), r["us"])
        elif r.get("ok", True) and (key not in best or whole(r) < whole(best[key])):
            best[key] = r

    shapes = sorted({(r["m"], r["k"]) for r in recs}, key=lambda s: (s != (4096, 14336), s))
    by_shape: dict[tuple, list] = defaultdict(list)
    for key, r in best.items():
        by_shape[key[:2]].append(r)

    print("# sbmm: small-batch matmul kernels vs cuBLAS f16\n")
    if wrong:
        print(f"**{len(wrong)} configurations gave WRONG results (NMSE >= 5e-4), e.g. "
              f"{wrong[0]['type']} {wrong[0]['kernel']} n={wrong[0]['ncols']} nmse={wrong[0].get('nmse')}**\n")
    for m, k in shapes:
        print(f"## m = {m}, k = {k}\n")
        print("| type | n | best sbmm config | µs | + q8_1 µs | TB/s | cuBLAS f16 µs | ggml today µs |")
        print("|---|---|---|---|---|---|---|---|")
        for t in TYPES:
            for n in sorted({r["ncols"] for r in by_shape[(m, k)] if r["type"] == t}):
                r = best[(m, k, t, n)]
                tot = r["us"] + r["quant_us"]
                cb = cublas.get((m, k, n))
                today = GGML_TODAY.get(t, {}).get(n) if (m, k) == (4096, 14336) else None
                print(f"| {t} | {n} | {r['kernel']} | {r['us']:.1f} | {tot:.1f} | {r['tbps']:.2f} | "
                      f"{'' if cb is None else f'{cb:.1f}'} | {'' if today is None else today} |")
        print()

    print_load_paths(recs, shapes)
    print_f16_activations(recs)

    print("## issue 19 targets (m = 4096, k = 14336; sbmm µs incl. the q8_1 quantization)\n")
    print("| type | n=1 (≤ ggml today) | n=8 (target) | n=16 ÷ n=8 (≤ 1.2) | verdict |")
    print("|---|---|---|---|---|")
    for t in (t for t in TYPES if t in TARGET_N8):
        def tot(n: int, t: str = t) -> float | None:
            r = best.get((4096, 14336, t, n))
            return None if r is None else r["us"] + r["quant_us"]

        t1, t8, t16 = tot(1), tot(8), tot(16)
        if t1 is None or t8 is None or t16 is None:
            print(f"| {t} | – | – | – | not measured |")
            continue
        ok = t1 <= GGML_TODAY[t][1] and t8 <= TARGET_N8[t] and t16 / t8 <= 1.2
        print(f"| {t} | {t1:.1f} (today {GGML_TODAY[t][1]}) | {t8:.1f} (≤ {TARGET_N8[t]}) | {t16 / t8:.2f} | "
              f"{'met' if ok else 'not met'} |")


if __name__ == "__main__":
    main()
