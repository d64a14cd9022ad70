"""Pack the files a GPU session needs (our CUDA wheel, SmolLM2, Qwen2.5-Coder) into as few device calls as
possible: each call carries at most 64 MiB *with the work tree*, so calls made while the tree is emptied of its
tracked files (``benchmarks/lean_tree.sh on``) can carry ~63 MiB of parts instead of the ~15 MB a 51 MB checkout
leaves. The files are cut at call boundaries, so a call may end one file and start the next.

    python benchmarks/lean_parts.py OUT_DIR NAME=FILE [NAME=FILE ...] [--call-bytes N]

Writes OUT_DIR/NAME.partNN (numbered per name, in order) and prints one line per call: the paths to carry.
On the device each lean call copies what it carries into /tmp/w (``cp .dev/lean/* /tmp/w/``), where
``h200.sh install`` (the wheel: NAME ``wheel``) and the phases (``smol``, ``qwen``: ``device_smol.sh parts_cat``)
find and join them. Standard library only.
"""
from __future__ import annotations

import argparse
from pathlib import Path

CALL_BYTES = 64 * 2**20 - 1_000_000  # (64 MiB less a margin: the emptied tree keeps its .gitignore files)


def plan(sizes: list[tuple[str, int]], call_bytes: int) -> list[list[tuple[str, int, int]]]:
    """The calls: each a list of ``(name, offset, length)`` pieces, in order, ``sum(length) <= call_bytes``.

    Raises:
        ValueError: ``call_bytes`` is not positive.
    """
    if call_bytes <= 0:
        raise ValueError(f"call_bytes must be positive, not {call_bytes}")
    calls: list[list[tuple[str, int, int]]] = [[]]
    room = call_bytes
    for name, size in sizes:
        off = 0
        while off < size:
            if room == 0:
                calls.append([])
                room = call_bytes
            n = min(room, size - off)
            calls[-1].append((name, off, n))
            off += n
            room -= n
    return [c for c in calls if c]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("files", nargs="+", metavar="NAME=FILE")
    ap.add_argument("--call-bytes", type=int, default=CALL_BYTES)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    files = dict(f.split("=", 1) for f in a.files)
    calls = plan([(n, Path(p).stat().st_size) for n, p in files.items()], a.call_bytes)
    counters: dict[str, int] = {}
    for i, call in enumerate(calls):
        paths = []
        for name, off, n in call:
            k = counters.get(name, 0)
            counters[name] = k + 1
            dst = out / f"{name}.part{k:02d}"
            with open(files[name], "rb") as src, open(dst, "wb") as d:
                src.seek(off)
                d.write(src.read(n))
            paths.append(str(dst))
        print(f"lean call {i + 1}: carry {' '.join(paths)}")
    for name, k in counters.items():
        print(f"{name}: {k} part(s)")


if __name__ == "__main__":
    main()
