"""Tabulates ``test-backend-ops perf -o MUL_MAT`` outputs side by side: one row per (weight type, columns n),
one column of µs per call per file (each file one dispatch setting, e.g. sbmm on / GGML_CUDA_SBMM=0).

usage: python benchmarks/kernels/op_perf_table.py perf_sbmm.txt perf_default.txt ...   (markdown on stdout)
Only the m = 4096, k = 14336 cases (issue 19's shape) unless --all.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

LINE = re.compile(r"MUL_MAT\(type_a=(\w+),type_b=\w+,m=(\d+),n=(\d+),k=(\d+),.*?\):\s+\d+ runs -\s+([0-9.]+) us/run")


def parse(path: Path) -> dict[tuple[str, int, int, int], float]:
    """{(type, m, n, k): µs per call} of one perf output (the last reading of a case wins)."""
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        if mm := LINE.search(line):
            t, m, n, k, us = mm.groups()
            out[(t, int(m), int(n), int(k))] = float(us)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--all", action="store_true", help="every shape, not only m=4096 k=14336")
    a = ap.parse_args(argv)
    tables = [parse(f) for f in a.files]
    keys = sorted({k for t in tables for k in t if a.all or (k[1] == 4096 and k[3] == 14336)})
    names = [f.stem for f in a.files]
    print("| type | m | n | k | " + " | ".join(f"{n} µs" for n in names) + " | best |")
    print("|---|---|---|---|" + "---|" * (len(names) + 1))
    for key in keys:
        vals = [t.get(key) for t in tables]
        have = [(v, n) for v, n in zip(vals, names) if v is not None]
        best = min(have)[1] if have else ""
        cells = " | ".join("" if v is None else f"{v:.1f}" for v in vals)
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {cells} | {best} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
