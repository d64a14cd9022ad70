"""Patch 0008 (the sbmm small-batch matmul kernels in ggml-cuda) on a machine without a GPU: the kernel's
block decoding and mma fragment layout against gguf-py (benchmarks/kernels/check_layouts.py: the kernel's
own per-lane code run on the CPU), and the listed patch being exactly what the kernel sources make (the
kernel is single-sourced in benchmarks/kernels/; an edit there without make_patch.py would ship stale code).
The kernels' GPU numbers and test-backend-ops results: benchmarks/kernels/README.md, RESULTS.md section 13."""
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "benchmarks" / "kernels"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a host C++ compiler")
def test_kernel_block_decoding_matches_gguf_py():
    pytest.importorskip("gguf")
    res = subprocess.run([sys.executable, str(KERNELS / "check_layouts.py")], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines[-1] == "all layout checks passed"
    # every weight type, both shapes and the column counts that cross the 8-column tile were checked, the
    # quantized types also through the staged (shared-memory) load paths: weights with 16 / 32 rows per warp
    # (staged1, staged2), and weights + activations (staged1b, staged2b); f16 through the staged weight loads
    # (its f32 activations are never staged), and with f16 activations on both paths (registersh, staged*h)
    ok_all = [ln for ln in lines if ln.startswith("ok ")]
    assert len(ok_all) == 534
    # MT = 4 (64 rows per warp; ggml's opt-in GGML_CUDA_SBMM_Q4_0_MT4=1): q4_0 / q8_0 staged, without and with staged
    # activations (n = 1, 3, 8, 9, 16) and SEQ (9..16), 3 shapes each; its three mutations caught by all 14 checks
    mt4 = [ln for ln in ok_all if ln.split()[2] in ("staged4", "staged4b", "seq4b")]
    assert len(mt4) == 108 and {ln.split()[1] for ln in mt4} == {"q4_0", "q8_0"}
    assert len([ln for ln in mt4 if ln.split()[2] == "seq4b"]) == 48
    assert len([ln for ln in lines if ln.startswith("caught MT4 ")]) == 14
    ok_all = [ln for ln in ok_all if ln not in mt4]
    assert len(ok_all) == 426
    # SEQ (the NT = 2 column tiles one after the other): 9..16 columns, q4_0 / q8_0 / q4_K on the staged path
    # with staged activations (16 / 32 rows per warp) and the register path, 2 shapes; q6_K's register path, 3
    seq = [ln for ln in ok_all if ln.split()[2].startswith("seq")]
    assert len(seq) == 168 and {ln.split()[2] for ln in seq} == {"seq1b", "seq2b", "seqregs"}
    assert {int(re.search(r"n=\s*(\d+)", ln).group(1)) for ln in seq} == set(range(9, 17))
    assert len([ln for ln in seq if ln.split()[1] == "q6_K"]) == 24
    assert {ln.split()[1] for ln in seq if ln.split()[2] == "seq2b"} == {"q4_0", "q8_0", "q4_K"}
    # ... and the tile 1 multiplied with tile 0's activations (SBMM_SEQ_MUTATION=1) is caught by all 20 it runs
    assert len([ln for ln in lines if ln.startswith("caught SEQ second-tile mutation")]) == 20
    ok = [ln for ln in ok_all if ln not in seq]
    assert len(ok) == 258 and {ln.split()[1] for ln in ok} == {"f16", "q4_0", "q8_0", "q4_K", "q6_K"}
    # q6_K (register path only): every column count 1..16 on three shapes
    q6 = [ln for ln in ok if ln.split()[1] == "q6_K"]
    assert len(q6) == 48 and {ln.split()[2] for ln in q6} == {"registers"}
    staged = [ln for ln in ok if ln.split()[2].startswith("staged")]
    assert len(staged) == 160 and {ln.split()[1] for ln in staged} == {"f16", "q4_0", "q8_0", "q4_K"}
    assert {ln.split()[2] for ln in staged} == {"staged1", "staged2", "staged1b", "staged2b", "staged1h", "staged2h"}
    assert {ln.split()[2] for ln in ok if ln.split()[1] == "f16"} == {
        "registers", "registersh", "staged1", "staged2", "staged1h", "staged2h"}
    # an off-by-one in the staging piece index (of everything / of the activations only) is caught by every
    # staged check it runs
    caught = [ln for ln in lines if ln.startswith("caught staging-index mutation")]
    caught_b = [ln for ln in lines if ln.startswith("caught activation-staging-index mutation")]
    assert len(caught) == 16 and len(caught_b) == 6 and not any(ln.startswith("MISSED") for ln in lines)
    # q6_K: a wrong qh index and the other half's scale are each caught by all 6 checks they run
    assert len([ln for ln in lines if ln.startswith("caught q6_K ")]) == 12


def test_listed_patch_is_what_the_kernel_sources_make():
    from pyllama_spec import _pin

    assert "0008-cuda-sbmm-small-batch-matmul" in _pin.PATCHES
    if not (ROOT / "vendor" / "llama.cpp" / "ggml" / "src" / "ggml-cuda" / "ggml-cuda.cu").exists():
        pytest.skip("vendor/llama.cpp is not fetched (python vendor/fetch_llama_cpp.py)")
    spec = importlib.util.spec_from_file_location("make_patch", KERNELS / "make_patch.py")
    mp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mp)
    made = mp.build_patch()
    listed = (ROOT / "vendor" / "patches" / "0008-cuda-sbmm-small-batch-matmul.patch").read_text()
    assert made == listed, "run: python benchmarks/kernels/make_patch.py --check, then vendor/fetch_llama_cpp.py"
