"""benchmarks/lean_parts.py: the set-up's files cut into device calls of at most N bytes, in order, a file split
where a call fills up — and joined back they are the files, byte for byte."""
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_the_plan_fills_each_call_and_cuts_files_at_its_end():
    plan = runpy.run_path(str(ROOT / "benchmarks" / "lean_parts.py"))["plan"]
    # (the shapes of 2026-12-07: a 31.5 MB wheel head, SmolLM2's 98.4 MB, calls of 66.1 MB, here in MB)
    assert plan([("wheel", 31), ("smol", 98)], 66) == [[("wheel", 0, 31), ("smol", 0, 35)], [("smol", 35, 63)]]
    assert plan([("a", 0), ("b", 66), ("c", 1)], 66) == [[("b", 0, 66)], [("c", 0, 1)]]
    assert plan([("a", 5)], 2) == [[("a", 0, 2)], [("a", 2, 2)], [("a", 4, 1)]]
    with pytest.raises(ValueError, match="call_bytes"):
        plan([("a", 5)], 0)


def test_the_parts_join_back_into_the_files(tmp_path):
    files = {"wheel": bytes(range(256)) * 3, "smol": bytes(reversed(range(256))) * 5 + b"end"}
    args = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        args.append(f"{name}={tmp_path / name}")
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "lean_parts.py"), str(tmp_path / "lean"), *args,
                          "--call-bytes", "1000"], capture_output=True, text=True, check=True).stdout
    calls = [line.split("carry ")[1].split() for line in out.splitlines() if line.startswith("lean call")]
    assert [len(c) for c in calls] == [2, 1, 1]  # 768 + 232 | 1000 | 51 bytes
    for call in calls:
        assert sum(Path(p).stat().st_size for p in call) <= 1000
    for name, data in files.items():
        parts = sorted((tmp_path / "lean").glob(f"{name}.part*"))
        assert b"".join(p.read_bytes() for p in parts) == data
