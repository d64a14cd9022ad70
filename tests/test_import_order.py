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
# what our libraries may legitimately bind to outside themselves: the C/C++ runtimes (shared by
# soname: one copy per process, whoever loads it first), Python and OpenMP. A statically linked
# interpreter (the H200 image's python3) holds libpython itself and glibc's copy-relocated data
# (stderr, environ), so bindings to the interpreter executable are allowed too.
ALLOWED = ("libc.so", "libm.so", "libstdc++", "libgcc_s", "ld-linux", "libpython", "libgomp", "linux-vdso")
INTERPRETER = os.path.basename(os.path.realpath(sys.executable))


def test_torch_first_then_generate(tiny, tmp_path):
    log = tmp_path / "ld"
    env = {**os.environ, "LD_DEBUG": "bindings", "LD_DEBUG_OUTPUT": str(log)}
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny["target"])], capture_output=True, text=True,
                       env=env, timeout=300, cwd=tmp_path)  # (not the checkout: see test_ffi)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["4", "héllo", "wörld"]
    foreign = []
    for f in tmp_path.glob("ld.*"):
        for line in f.read_text(errors="replace").splitlines():
            if "binding file" not in line:
                continue
            src, _, rest = line.partition("binding file ")[2].partition(" [")
            dst = rest.partition(" to ")[2].partition(" [")[0]
            to_interpreter = os.path.basename(os.path.realpath(dst)) == INTERPRETER or "[GLIBC_" in line
            if any(k in os.path.basename(src) for k in OUR_LIBS) and not to_interpreter and not any(
                    k in os.path.basename(dst) for k in OUR_LIBS + ALLOWED):
                foreign.append(line.strip())
    assert not foreign, "\n".join(foreign[:10])
