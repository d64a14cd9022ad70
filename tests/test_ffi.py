"""The extension matches the pinned llama.cpp and the public surface is what we export."""
import re

import pytest

import pyllama_spec as ps
from pyllama_spec._ffi import ffi, lib


def test_commit_and_patches_baked_in():
    from pyllama_spec import _pin

    built = ffi.string(lib.pyls_llama_cpp_commit()).decode()
    assert built == _pin.marker() == "+".join((_pin.LLAMA_CPP_COMMIT, *_pin.PATCHES))
    assert ps.LLAMA_CPP_COMMIT == _pin.LLAMA_CPP_COMMIT and re.fullmatch(r"[0-9a-f]{7,40}", ps.LLAMA_CPP_COMMIT)


def test_stale_extension_is_refused():
    import pytest

    from pyllama_spec import _ffi

    with pytest.raises(ImportError, match="rebuild"):
        _ffi._verify_build("abc1234", "abc1234+0001-some-patch")
    _ffi._verify_build("abc+p", "abc+p")


def test_every_listed_patch_is_in_vendor_patches():
    from pathlib import Path

    from pyllama_spec import _pin

    patches = Path(__file__).resolve().parents[1] / "vendor" / "patches"
    assert sorted(p.stem for p in patches.glob("*.patch")) == sorted(_pin.PATCHES)
    for name in _pin.PATCHES:
        head = (patches / f"{name}.patch").read_text().split("\n--- ", 1)[0]
        assert re.search(r"^Why:", head, re.M) and re.search(r"^Measured\b[^:]*:", head, re.M), \
            f"{name}.patch must say why and what it measured"


def test_struct_layout_comes_from_the_header():
    # API mode: field offsets are the compiler's, so the defaults read back as llama.cpp sets them
    p = lib.llama_context_default_params()
    assert (p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max) == (512, 2048, 512, 1)
    assert p.ctx_other == ffi.NULL and p.type_k == lib.GGML_TYPE_F16
    m = lib.llama_model_default_params()
    assert m.use_extra_bufts is True and m.vocab_only is False


def test_exported_members():
    """``__all__`` is exactly the package's public names; submodules are attributes too (any of them
    may have been imported by an earlier test), so modules are left out of the comparison."""
    import types

    exported = set(ps.__all__)
    public = {n for n in dir(ps) if not n.startswith("_") and not isinstance(getattr(ps, n), types.ModuleType)}
    assert exported - {"__version__"} == public
    for name in exported:
        assert getattr(ps, name) is not None


def test_documented_submodules_are_attributes(tmp_path):
    """Issue 12/13.8: ``import pyllama_spec as ps; ps.assets.smollm2_path()`` raised AttributeError."""
    import subprocess
    import sys

    code = ("import pyllama_spec as ps; print(callable(ps.assets.smollm2_path), "
            "callable(ps.fixtures.write_tiny_target), callable(ps.native.find_program), "
            "callable(ps.pairing.check_dflash_pair))")
    # cwd outside the checkout: `python -c` puts the working directory first on sys.path, and the
    # source tree has no compiled extension in a clean clone
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["True"] * 4
    with pytest.raises(AttributeError):
        _ = ps.no_such_module


def test_system_info_and_devices():
    assert "CPU" in ps.system_info()
    devs = ps.devices()
    assert devs and devs[0]["type"] in ("cpu", "gpu", "accel")


def test_llama_log_reaches_python_logging(tiny, caplog):
    import logging

    ps.set_llama_log_level(logging.INFO)
    try:
        with caplog.at_level(logging.INFO, logger="pyllama_spec.llama_cpp"):
            ps.Model(tiny["target"])
    finally:
        ps.set_llama_log_level(logging.WARNING)
    lines = [r.getMessage() for r in caplog.records if r.name == "pyllama_spec.llama_cpp"]
    assert any("llama_model_loader" in m for m in lines)
    assert all("\n" not in m for m in lines)  # fragments are joined into whole lines


def test_the_shim_header_is_its_cdef():
    """Issue 13.5: the cdef of our extern "C" shim is read from shim.h itself (no hand copy)."""
    import importlib.util
    import re
    from pathlib import Path

    native = Path(ps.__file__).parent / "_native"
    spec = importlib.util.spec_from_file_location("build_ffi", native / "build_ffi.py")
    build_ffi = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build_ffi)
    header = (native / "shim.h").read_text()
    cdef = build_ffi.shim_cdef(header)
    code = [ln for ln in cdef.splitlines() if not ln.lstrip().startswith(("/*", "//"))]
    assert not any(ln.lstrip().startswith(("#", 'extern "C"', "}")) for ln in code)
    names = re.findall(r"\b(pyls_\w+)\s*\(", header)
    assert len(names) >= 14 and set(names) == set(re.findall(r"\b(pyls_\w+)\s*\(", cdef))
    for name in names:  # every shim function is reachable from Python: the built extension is current
        assert hasattr(lib, name), name
    assert not (native / "decl" / "taps.h").exists()
