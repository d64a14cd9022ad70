#!/usr/bin/env python3
"""Fetch the pinned llama.cpp source tree into ``vendor/llama.cpp``.

The tree is the ``vendor/llama.cpp/`` folder of the PyPI sdist
``llama-cpp-python==0.3.36`` (llama.cpp commit 0c1e570, 2026-10-01). It is
downloaded with pip, so the machine's own index configuration applies; the
archive's sha256 is checked before anything is extracted, and only the parts
that the build and our tools use are written (the whole tree is 176 MB, most
of it models/ and docs/).

Usage::

    python vendor/fetch_llama_cpp.py [--dest vendor/llama.cpp] [--cache DIR]

Environment: ``PYLLAMA_SPEC_CACHE`` overrides the download cache
(default ``~/.cache/pyllama_spec``).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

SDIST_NAME = "llama-cpp-python"
SDIST_VERSION = "0.3.36"
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
LLAMA_CPP_COMMIT = "0c1e570"
PREFIX = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/"

# Top-level folders of the llama.cpp tree that neither the build nor our tools read.
SKIP_TOP = {"models", "docs", "media", "app", "benches", "pocs", "skills", "licenses", "ci", "scripts"}
# Sub-folders skipped inside tools/ (web UI assets alone are 8.5 MB).
SKIP_SUB = {"tools/ui", "tools/server/public", "tools/mtmd", "tools/tts"}
MARKER = ".pyllama_spec_commit"


def default_cache() -> Path:
    return Path(os.environ.get("PYLLAMA_SPEC_CACHE", Path.home() / ".cache" / "pyllama_spec"))


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def download(cache: Path) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / SDIST_FILE
    if archive.exists() and sha256_of(archive) == SDIST_SHA256:
        return archive
    # pip prepares the sdist's metadata, which needs its build backend (scikit-build-core).
    # --no-binary names only this package, so its build requirements come as wheels; inside our
    # own build scikit-build-core is already importable and --no-build-isolation skips that step.
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", SDIST_NAME,
           f"{SDIST_NAME}=={SDIST_VERSION}", "-d", str(cache)]
    if importlib.util.find_spec("scikit_build_core") is not None:
        cmd.insert(-3, "--no-build-isolation")
    print("fetch_llama_cpp:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    digest = sha256_of(archive)
    if digest != SDIST_SHA256:
        archive.unlink(missing_ok=True)
        raise SystemExit(f"fetch_llama_cpp: sha256 mismatch for {SDIST_FILE}: got {digest}, "
                         f"expected {SDIST_SHA256}")
    return archive


def wanted(rel: str) -> bool:
    parts = rel.split("/")
    if parts[0] in SKIP_TOP:
        return False
    return not any(rel == s or rel.startswith(s + "/") for s in SKIP_SUB)


def extract(archive: Path, dest: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="llama.cpp-", dir=dest.parent))
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = []
            for m in tar.getmembers():
                if not m.name.startswith(PREFIX) or not (m.isfile() or m.isdir()):
                    continue
                rel = m.name[len(PREFIX):]
                if not rel or not wanted(rel):
                    continue
                m.name = rel
                members.append(m)
            try:
                tar.extractall(tmp, members=members, filter="data")
            except TypeError:  # Python without tarfile extraction filters (< 3.10.12 / 3.11.4)
                tar.extractall(tmp, members=members)
        (tmp / MARKER).write_text(LLAMA_CPP_COMMIT + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def is_fetched(dest: Path) -> bool:
    marker = dest / MARKER
    return marker.exists() and marker.read_text().strip() == LLAMA_CPP_COMMIT


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent / "llama.cpp")
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--force", action="store_true", help="extract again even if the tree is present")
    args = ap.parse_args(argv)
    if is_fetched(args.dest) and not args.force:
        print(f"fetch_llama_cpp: {args.dest} already holds llama.cpp {LLAMA_CPP_COMMIT}")
        return 0
    archive = download(args.cache)
    args.dest.parent.mkdir(parents=True, exist_ok=True)
    extract(archive, args.dest)
    print(f"fetch_llama_cpp: extracted llama.cpp {LLAMA_CPP_COMMIT} into {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
