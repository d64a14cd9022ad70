"""Issue 12.4: importing torch before pyllama_spec crashed llama.cpp's tokenizer set-up on the H200
image. Cause: GCC emits the static locals of inline/template functions (std::regex's tables,
which the tokenizer uses) as STB_GNU_UNIQUE symbols, which the dynamic loader unifies
process-wide with the first copy loaded, libtorch's, compiled by another compiler. Our
libraries are now built with -fno-gnu-unique and linked with -Bsymbolic (CMakeLists.txt), so
their references bind to their own definitions whatever was loaded first."""
import os
import subprocess
import sys
import textwrap

import pytest

torch_spec = pytest.importorskip("torch", reason="torch is not installed")

SCRIPT = textwrap.dedent("""
    import sys
    import torch  # first, as training users do
    import pyllama_spec as ps
    gen = ps.Generator(sys.argv[1], n_ctx=256)
    r = gen.generate("hello there", max_tokens=4)
    print(len(r.tokens), gen.model.vocab.detokenize(gen.model.vocab.tokenize("héllo wörld")))
""")

OUR_LIBS = ("libllama", "libggml", "_llama.")
# What our libraries may bind to outside themselves: the libraries they *import* from, shared by
# soname (one copy per process, whoever loads it first) — the C/C++ runtimes, Python, OpenMP, and on
# CUDA builds the CUDA runtime and math libraries (on the H200 libggml-cuda.so binds to the
# libcudart.so.13 that torch's nvidia wheels loaded first: the same runtime, by design). A statically
# linked interpreter (the H200 image's python3) holds libpython itself and glibc's copy-relocated
# data (stderr, environ), so bindings to the interpreter executable are allowed too.
ALLOWED = ("libc.so", "libm.so", "libstdc++", "libgcc_s", "ld-linux", "libpython", "libgomp", "linux-vdso",
           "libcudart", "libcublas", "libcuda.so", "libnvrtc", "libnccl")
# What must never happen (the claim of this test): a symbol of our own — llama.cpp's and ggml's API,
# or a C++ inline/template static our libraries define (the regex tables of issue 12.4) — bound to
# another library's copy. Our API by name, wherever it binds; everything else by destination: no
# binding to a library outside ALLOWED (libtorch, libc10, ...).
OUR_SYMBOLS = ("llama_", "ggml_", "gguf_")
# C++ runtime statics that exist to be one per process, whose copies are interchangeable: the tag whose
# address std::make_shared compares (std::_Sp_make_shared_tag::_S_ti()::__tag). The H200 image's
# compiler links libstdc++ statically into our libraries (no libstdc++.so among their NEEDED; readelf,
# 2026-12-04), so they carry the runtime's own unique symbols, and the libcufile.so.0 that torch's cu13
# wheels load exports this one first: the extension binds to it, by design of unique symbols.
RUNTIME_TAGS = ("_ZZNSt19_Sp_make_shared_tag5_S_tiEvE5__tag",)


INTERPRETER = os.path.basename(os.path.realpath(sys.executable))


def foreign_bindings(lines, interpreter: str = "") -> list[str]:
    """The LD_DEBUG=bindings lines in which one of our libraries binds a symbol it must not share."""
    out = []
    for line in lines:
        if "binding file" not in line:
            continue
        src, _, rest = line.partition("binding file ")[2].partition(" [")
        dst = rest.partition(" to ")[2].partition(" [")[0]
        symbol = line.partition("symbol `")[2].partition("'")[0]
        if not any(k in os.path.basename(src) for k in OUR_LIBS):
            continue
        ours = any(k in os.path.basename(dst) for k in OUR_LIBS)
        if ours:
            continue
        if symbol.startswith(OUR_SYMBOLS):
            out.append(line.strip())
            continue
        if symbol in RUNTIME_TAGS:
            continue
        to_interpreter = bool(interpreter) and os.path.basename(os.path.realpath(dst)) == interpreter
        if not (to_interpreter or "[GLIBC_" in line or any(k in os.path.basename(dst) for k in ALLOWED)):
            out.append(line.strip())
    return out


def test_the_binding_rule_on_the_lines_seen():
    """The rule itself, on lines of the kinds LD_DEBUG printed (CPU machine, H200 image)."""
    lines = [
        # H200: the CUDA runtime torch loaded first serves libggml-cuda (allowed)
        "  1234: binding file /x/pyllama_spec/libggml-cuda.so [0] to /y/nvidia/cu13/lib/libcudart.so.13 [0]: "
        "normal symbol `cudaGetDeviceCount' [libcudart.so.13]",
        "  1234: binding file /x/pyllama_spec/libllama.so [0] to /lib/x86_64-linux-gnu/libstdc++.so.6 [0]: "
        "normal symbol `_ZNSt6localeC1Ev' [GLIBCXX_3.4]",
        # issue 12.4: a static of std::regex bound to libtorch's copy (forbidden)
        "  1234: binding file /x/pyllama_spec/libllama.so [0] to /y/torch/lib/libtorch_cpu.so [0]: "
        "unique symbol `_ZZNSt8__detail9_ScannerIcE12_M_eat_escapeEvE5__fctp' [GLIBCXX_3.4]",
        # one of our API symbols served by another library's copy (forbidden, even from an allowed one)
        "  1234: binding file /x/pyllama_spec/libllama.so [0] to /y/nvidia/lib/libcublas.so.13 [0]: "
        "normal symbol `ggml_backend_dev_count'",
        # H200 image (2026-12-04): make_shared's tag bound to the copy libcufile exports (allowed: one per process)
        "  1234: binding file /x/pyllama_spec/_llama.cpython-312-x86_64-linux-gnu.so [0] to "
        "/y/nvidia/cu13/lib/libcufile.so.0 [0]: normal symbol `_ZZNSt19_Sp_make_shared_tag5_S_tiEvE5__tag'",
        # bindings of other libraries are not ours to judge
        "  1234: binding file /y/torch/lib/libtorch_cpu.so [0] to /y/torch/lib/libc10.so [0]: normal symbol `x'",
    ]
    got = foreign_bindings(lines)
    assert got == [lines[2].strip(), lines[3].strip()]


def test_torch_first_then_generate(tiny, tmp_path):
    log = tmp_path / "ld"
    env = {**os.environ, "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(log)}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny["target"])], capture_output=True, text=True,
                       env=env, timeout=300, cwd=tmp_path)  # (not the checkout: see test_ffi)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["4", "héllo", "wörld"]
    foreign = []
    for f in tmp_path.glob("ld.*"):
        foreign += foreign_bindings(f.read_text(errors="replace").splitlines(), INTERPRETER)
    assert not foreign, "\n".join(foreign[:10])
