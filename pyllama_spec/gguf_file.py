"""Read and check a GGUF file's header in Python, before llama.cpp sees it.

llama.cpp aborts the process on some malformed or mismatched files; reading
the header first lets us raise a clear exception instead. (The ``gguf``
package's reader decodes every tokenizer string and takes ~5 s on a 49k-token
vocabulary, so this reads the header itself and skips long arrays.)
"""
from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ModelNotFoundError, NotGGUFError, TruncatedGGUFError

GGUF_MAGIC = b"GGUF"


@dataclass
class GGUFInfo:
    """What the header of a GGUF file says.

    Attributes:
        path: the file.
        metadata: key → value for scalar keys and short arrays (arrays of more than
            1024 items, such as the tokenizer's token list, are left out).
        tensors: tensor name → shape (llama.cpp order: innermost dimension first).
        file_size: bytes on disk.
        array_lengths: key → number of items, for every array (also the long ones).
        array_samples: key → ``{index: item}`` for long arrays of strings: the items at
            :func:`sample_indices` of their length (enough to compare two vocabularies).
    """
    path: Path
    metadata: dict = field(default_factory=dict)
    tensors: dict = field(default_factory=dict)
    file_size: int = 0
    array_lengths: dict = field(default_factory=dict)
    array_samples: dict = field(default_factory=dict)

    @property
    def n_tokens(self) -> int | None:
        """Length of the tokenizer's token list (``tokenizer.ggml.tokens``), or None without one."""
        return self.array_lengths.get("tokenizer.ggml.tokens")

    def token_text(self, i: int) -> str | None:
        """Text of token ``i`` when the header kept it (short vocabularies: all; long: a sample)."""
        toks = self.metadata.get("tokenizer.ggml.tokens")
        if toks is not None:
            return toks[i] if 0 <= i < len(toks) else None
        return self.array_samples.get("tokenizer.ggml.tokens", {}).get(i)

    @property
    def arch(self) -> str:
        """``general.architecture``, e.g. ``"llama"`` or ``"dflash"``."""
        return str(self.metadata.get("general.architecture", ""))

    def get(self, key: str, default: Any = None) -> Any:
        """A metadata value; ``{arch}`` in ``key`` is replaced by the architecture."""
        return self.metadata.get(key.replace("{arch}", self.arch), default)


# GGUF value types: id -> struct format (strings and arrays handled apart)
_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
# ggml type id -> (block size in elements, bytes per block), for the truncation check
_GGML_BLOCK = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
               9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
               14: (256, 210), 15: (256, 292), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8),
               28: (1, 8), 30: (1, 2)}
_MAX_ARRAY_KEPT = 1024
_N_SAMPLES = 48


def sample_indices(n: int) -> list[int]:
    """The indices of a long array whose items are kept: the first 16, the last 8 and evenly
    spaced ones between (deterministic in ``n``, so two files can be compared at the same ids)."""
    idx = set(range(min(16, n))) | set(range(max(0, n - 8), n))
    idx |= {int(i) for i in np.linspace(0, n - 1, _N_SAMPLES - 24)} if n > 0 else set()
    return sorted(idx)


class _Cursor:
    """A bounds-checked reader over the file's bytes (a truncated header raises IndexError)."""

    def __init__(self, buf: bytes) -> None:
        self.buf, self.off = buf, 0
        self.last_array_len = 0
        self.last_array_sample: dict[int, str] | None = None

    def take(self, fmt: str) -> Any:
        n = struct.calcsize("<" + fmt)
        if self.off + n > len(self.buf):
            raise IndexError("header ends early")
        vals = struct.unpack_from("<" + fmt, self.buf, self.off)
        self.off += n
        return vals[0] if len(vals) == 1 else vals

    def string(self) -> str:
        n = self.take("Q")
        if self.off + n > len(self.buf):
            raise IndexError("header ends early")
        s = bytes(self.buf[self.off:self.off + n]).decode("utf-8", "replace")
        self.off += n
        return s

    def skip_string(self) -> None:
        n = self.take("Q")
        self.off += n
        if self.off > len(self.buf):
            raise IndexError("header ends early")

    def value(self, vtype: int) -> Any:
        if vtype in _SCALAR:
            return self.take(_SCALAR[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            sub, count = self.take("I"), self.take("Q")
            self.last_array_len, self.last_array_sample = count, None
            if count > _MAX_ARRAY_KEPT:  # tokenizer lists: skip without decoding (but a sample)
                if sub == _STRING:
                    keep = set(sample_indices(count))
                    sample = {}
                    for i in range(count):
                        if i in keep:
                            sample[i] = self.string()
                        else:
                            self.skip_string()
                    self.last_array_sample = sample
                elif sub in _SCALAR:
                    self.off += count * struct.calcsize(_SCALAR[sub])
                else:
                    raise ValueError(f"nested array of type {sub}")
                return None
            items = [self.value(sub) for _ in range(count)]
            self.last_array_len, self.last_array_sample = count, None  # not a nested array's
            return items
        raise ValueError(f"unknown GGUF value type {vtype}")


def check_gguf_path(path: str | os.PathLike) -> Path:
    """Check that ``path`` is an existing file that starts with the GGUF magic.

    Raises:
        ModelNotFoundError: no such file.
        NotGGUFError: the file is not GGUF.
    """
    p = Path(path)
    if not p.is_file():
        raise ModelNotFoundError(f"model file not found: {str(p)!r} (check the path; directories are not models)")
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic != GGUF_MAGIC:
        raise NotGGUFError(f"{str(p)!r} is not a GGUF file (starts with {magic!r}, expected b'GGUF'); "
                           "convert it with llama.cpp's convert_hf_to_gguf.py")
    return p


def _parse_header(p: Path, buf: bytes, size: int) -> tuple[GGUFInfo, list[tuple[str, tuple[int, ...], int, int]], int]:
    info = GGUFInfo(path=p, file_size=size)
    cur = _Cursor(buf)
    cur.take("I")  # magic, checked already
    version, n_tensors, n_kv = cur.take("I"), cur.take("Q"), cur.take("Q")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    for _ in range(n_kv):
        key = cur.string()
        vtype = cur.take("I")
        val = cur.value(vtype)
        if vtype == _ARRAY:
            info.array_lengths[key] = cur.last_array_len
            if cur.last_array_sample is not None:
                info.array_samples[key] = cur.last_array_sample
        if val is not None:
            info.metadata[key] = val
    tensors = []
    for _ in range(n_tensors):
        name = cur.string()
        n_dims = cur.take("I")
        shape = tuple(cur.take("Q") for _ in range(n_dims))
        ttype, offset = cur.take("I"), cur.take("Q")
        tensors.append((name, shape, ttype, offset))
        info.tensors[name] = shape
    align = int(info.metadata.get("general.alignment", 32))
    return info, tensors, (cur.off + align - 1) // align * align


def _read_header(p: Path) -> tuple[GGUFInfo, list[tuple[str, tuple[int, ...], int, int]], int]:
    """Parse the header of an existing file, reading more of it until the header fits."""
    size = p.stat().st_size
    want = 8 << 20
    while True:
        with open(p, "rb") as fh:
            buf = fh.read(min(size, want))
        try:
            info, tensors, data_start = _parse_header(p, buf, size)
            break
        except IndexError as exc:
            if len(buf) < size and want < (1 << 30):
                want *= 4  # the header is longer than what was read: read more
                continue
            raise TruncatedGGUFError(f"{str(p)!r} has a truncated GGUF header ({size} bytes): {exc}; "
                                     "download or convert it again") from None
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            raise TruncatedGGUFError(f"{str(p)!r} has a damaged GGUF header: {exc}; download or convert it again") \
                from None
    return info, tensors, data_start


def read_gguf(path: str | os.PathLike) -> GGUFInfo:
    """Read the header of a GGUF file and check that all its tensor data is present.

    Arrays longer than 1024 items (the tokenizer's lists) are skipped, so this
    takes milliseconds even for large vocabularies.

    Returns:
        GGUFInfo with metadata and tensor shapes.

    Raises:
        ModelNotFoundError: no such file.
        NotGGUFError: not a GGUF file.
        TruncatedGGUFError: the header or tensor data is cut short, or the header is malformed.
    """
    p = check_gguf_path(path)
    info, tensors, data_start = _read_header(p)
    size = info.file_size
    end = data_start
    for _name, shape, ttype, offset in tensors:
        if ttype in _GGML_BLOCK:
            blk, nbytes = _GGML_BLOCK[ttype]
            n = 1
            for d in shape:
                n *= d
            end = max(end, data_start + offset + n // blk * nbytes)
    if end > size:
        raise TruncatedGGUFError(
            f"{str(p)!r} is truncated: its tensors need {end} bytes but the file has {size}; download it again")
    return info


# ggml type id -> numpy dtype, for the small tensors read whole (:func:`read_tensor`)
_NUMPY_TYPES = {0: "<f4", 1: "<f2", 24: "<i1", 25: "<i2", 26: "<i4", 27: "<i8", 28: "<f8"}


def tensor_rows(path: str | os.PathLike, name: str, rows: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Rows of a 2-D tensor of a GGUF file, as they lie in the file (read through a memory map: only those rows).

    Args:
        path: the GGUF file.
        name: a tensor of shape ``(ne0, ne1)`` in GGUF order (``ne1`` rows of ``ne0`` values).
        rows: the row indices to read (default: all).

    Returns:
        ``(array, ggml_type)``: for f32 / f16 tensors ``(len(rows), ne0)`` of that dtype; for quantized ones
        ``(len(rows), bytes_per_row)`` uint8, the blocks as stored (what ``gguf.GGUFWriter.add_tensor(..., raw_dtype=)``
        takes).

    Raises:
        KeyError: no tensor of that name.
        ValueError: not 2-D, a type this reader does not know, or a row index out of range.
        ModelNotFoundError, NotGGUFError, TruncatedGGUFError: as :func:`read_gguf`.
    """
    p, shape, ttype, offset = _locate(path, name)
    if len(shape) != 2 or ttype not in _GGML_BLOCK:
        raise ValueError(f"{name} in {p.name}: shape {shape}, ggml type {ttype}: not a 2-D tensor of a known type")
    blk, nbytes = _GGML_BLOCK[ttype]
    ne0, ne1 = shape
    row_bytes = ne0 // blk * nbytes
    m = np.memmap(p, dtype=np.uint8, mode="r", offset=offset, shape=(ne1, row_bytes))
    idx = np.arange(ne1) if rows is None else np.asarray(rows, dtype=np.int64)
    if idx.size and (idx.min() < 0 or idx.max() >= ne1):
        raise ValueError(f"row indices of {name} must lie in [0, {ne1})")
    out = np.ascontiguousarray(m[idx])
    del m
    if ttype in (0, 1):  # f32 / f16: values, not blocks
        out = out.view(_NUMPY_TYPES[ttype])
    return out, ttype


def read_tensor(path: str | os.PathLike, name: str) -> np.ndarray:
    """One unquantized tensor of a GGUF file as a numpy array (e.g. a drafter's ``d2t`` map).

    Args:
        path: the GGUF file.
        name: the tensor's name.

    Returns:
        the array, shape reversed from GGUF order (outermost dimension first), copied out of the file.

    Raises:
        KeyError: no tensor of that name.
        ValueError: a quantized (block) type, which has no numpy dtype.
        ModelNotFoundError, NotGGUFError, TruncatedGGUFError: as :func:`read_gguf`.
    """
    p, shape, ttype, offset = _locate(path, name)
    if ttype not in _NUMPY_TYPES:
        raise ValueError(f"{name} in {p.name} is of ggml type {ttype}, which has no numpy dtype")
    n = 1
    for d in shape:
        n *= d
    arr = np.fromfile(p, dtype=_NUMPY_TYPES[ttype], count=n, offset=offset)
    return arr.reshape(tuple(reversed(shape)) or (1,))


def _locate(path: str | os.PathLike, name: str) -> tuple[Path, tuple[int, ...], int, int]:
    """``(file, shape, ggml type, absolute data offset)`` of a tensor, its data checked present."""
    p = check_gguf_path(path)
    read_gguf(p)  # the data is all there
    _info, tensors, data_start = _read_header(p)
    for tname, shape, ttype, offset in tensors:
        if tname == name:
            return p, shape, ttype, data_start + offset
    raise KeyError(f"{p.name} has no tensor {name!r}")


def reader_field_value(f: Any) -> tuple[Any, Any, Any]:
    """A field of a ``gguf.GGUFReader`` as ``(value, type, sub-type)``, what ``GGUFWriter.add_key_value`` takes (to
    copy a file's keys)."""
    import gguf

    vtype = f.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        sub = f.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]) for i in f.data], vtype, sub
        return [f.parts[i].tolist()[0] for i in f.data], vtype, sub
    if vtype == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8"), vtype, None
    return f.parts[f.data[0]].tolist()[0], vtype, None


def copy_fields(reader: Any, writer: Any, skip: Iterable[str] = ()) -> None:
    """Copy every key of a ``gguf.GGUFReader`` into a ``gguf.GGUFWriter`` as it is stored, but the reader's own
    (``GGUF.*``), ``general.architecture`` (the writer was made with one) and the keys in ``skip``."""
    skip = set(skip)
    for key, f in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in skip:
            continue
        value, vtype, sub = reader_field_value(f)
        writer.add_key_value(key, value, vtype, sub_type=sub)


__all__ = ["GGUFInfo", "read_gguf", "read_tensor", "tensor_rows", "reader_field_value", "copy_fields",
           "check_gguf_path", "sample_indices"]
