#!/usr/bin/env python3
"""Fetch the pinned llama.cpp source tree into ``vendor/llama.cpp`` and apply our patches.

The pin is ``pyllama_spec/_pin.py``: the tree is the ``vendor/llama.cpp/`` folder of the
PyPI sdist ``llama-cpp-python==0.3.36`` (llama.cpp commit 0c1e570, 2026-10-01). It is
downloaded with pip, so the machine's own index configuration applies; the archive's
sha256 is checked before anything is extracted, and only the parts that the build and
our tools use are written (the whole tree is 176 MB, most of it models/ and docs/).
Then the patches listed in ``_pin.PATCHES`` (``vendor/patches/NAME.patch``, unified
diffs against the tree's root, each headed by why and what it measured) are applied in
order with ``patch -p1`` (or ``git apply``); a patch that does not apply stops the build.

The tree's marker file ``.pyllama_spec_commit`` holds ``_pin.marker()`` (commit + patch
names) and the sha256 of the patch contents: when either changes, the tree is made
again, and only the files whose bytes differ are rewritten, so an incremental build
recompiles just what a patch touched.

Usage::

    python vendor/fetch_llama_cpp.py [--dest vendor/llama.cpp] [--cache DIR] [--force]

Environment: ``PYLLAMA_SPEC_CACHE`` overrides the download cache
(default ``~/.cache/pyllama_spec``).
"""
from __future__ import annotations

import argparse
import filecmp
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PATCH_DIR = HERE / "patches"


def _load_pin() -> dict:
    # pyllama_spec/_pin.py is plain assignments: run it without importing the package
    ns: dict = {}
    exec((HERE.parent / "pyllama_spec" / "_pin.py").read_text(), ns)
    return ns


PIN = _load_pin()
SDIST_NAME = PIN["SDIST_NAME"]
SDIST_VERSION = PIN["SDIST_VERSION"]
SDIST_FILE = f"llama_cpp_python-{SDIST_VERSION}.tar.gz"
SDIST_SHA256 = PIN["SDIST_SHA256"]
LLAMA_CPP_COMMIT = PIN["LLAMA_CPP_COMMIT"]
PATCHES = tuple(PIN["PATCHES"])
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
    if parts[0] in SKIP_TOP or parts[0] == ".git":  # .git: a stale submodule pointer of the sdist
        return False
    return not any(rel == s or rel.startswith(s + "/") for s in SKIP_SUB)


def patch_files() -> list[Path]:
    """The patch files of ``_pin.PATCHES``, in order.

    Raises:
        SystemExit: a listed patch is missing, or ``vendor/patches`` holds one that is not listed.
    """
    files = [PATCH_DIR / f"{name}.patch" for name in PATCHES]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise SystemExit(f"fetch_llama_cpp: patches listed in pyllama_spec/_pin.py are missing: {missing}")
    unlisted = sorted(p.stem for p in PATCH_DIR.glob("*.patch") if p.stem not in PATCHES)
    if unlisted:
        raise SystemExit(f"fetch_llama_cpp: vendor/patches holds patches not listed in pyllama_spec/_pin.py "
                         f"PATCHES: {unlisted}; add them there (in order) or remove them")
    return files


def marker_text() -> str:
    """``_pin.marker()`` and, on a second line, the sha256 of the patch contents."""
    h = hashlib.sha256()
    for f in patch_files():
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return "+".join((LLAMA_CPP_COMMIT, *PATCHES)) + "\n" + h.hexdigest() + "\n"


def apply_patches(tree: Path) -> None:
    """Apply ``_pin.PATCHES`` to ``tree`` in order (``patch -p1``, else ``git apply``)."""
    for f in patch_files():
        if shutil.which("patch"):
            cmd = ["patch", "-p1", "--forward", "--batch", "--no-backup-if-mismatch", "-s", "-d", str(tree), "-i", str(f)]
        elif shutil.which("git"):
            cmd = ["git", "apply", "--whitespace=nowarn", "--directory", ".", str(f)]
        else:
            raise SystemExit("fetch_llama_cpp: neither `patch` nor `git` is installed; one is needed to apply "
                             "vendor/patches to llama.cpp")
        r = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"fetch_llama_cpp: {f.name} does not apply to llama.cpp {LLAMA_CPP_COMMIT}:\n"
                             f"{r.stdout}{r.stderr}")
        print(f"fetch_llama_cpp: applied {f.name}", flush=True)


def sync_tree(src: Path, dest: Path) -> int:
    """Make ``dest`` a copy of ``src``, rewriting only files whose bytes differ (their mtimes
    tell CMake what to rebuild). Returns the number of files written or removed."""
    changed = 0
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (dest / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            s, d = Path(root) / name, dest / rel / name
            if not d.is_file() or not filecmp.cmp(s, d, shallow=False):
                shutil.copy2(s, d)
                changed += 1
    for root, dirs, files in os.walk(dest, topdown=False):
        rel = Path(root).relative_to(dest)
        for name in files:
            if not (src / rel / name).exists():
                (Path(root) / name).unlink()
                changed += 1
        if not (src / rel).exists():
            Path(root).rmdir()
    return changed


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
        apply_patches(tmp)
        (tmp / MARKER).write_text(marker_text())
        if dest.exists():
            n = sync_tree(tmp, dest)
            print(f"fetch_llama_cpp: {n} files of {dest} changed", flush=True)
        else:
            tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def is_fetched(dest: Path) -> bool:
    """``dest`` holds the pinned tree with exactly the current patches applied."""
    marker = dest / MARKER
    return marker.exists() and marker.read_text() == marker_text()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dest", type=Path, default=HERE / "llama.cpp")
    ap.add_argument("--cache", type=Path, default=default_cache())
    ap.add_argument("--force", action="store_true", help="extract again even if the tree is present")
    args = ap.parse_args(argv)
    if is_fetched(args.dest) and not args.force:
        print(f"fetch_llama_cpp: {args.dest} already holds llama.cpp {marker_text().splitlines()[0]}")
        return 0
    archive = download(args.cache)
    args.dest.parent.mkdir(parents=True, exist_ok=True)
    extract(archive, args.dest)
    print(f"fetch_llama_cpp: llama.cpp {marker_text().splitlines()[0]} is in {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
