"""CPU check of the sbmm kernel's block decoding and mma fragment layout against gguf-py (no GPU needed).

Builds ``cpu_emulate.cpp`` (the kernel's own per-lane loaders/epilogues from ``sbmm_blocks.h``, one warp
emulated lane by lane, the mma done by the PTX fragment table), feeds it random blocks in ggml's layouts
and compares:

1. its plain dequantization with ``gguf.quants.dequantize`` (must agree to float rounding);
2. its matmul on *exact* activations (integers in [-127, 127] with one +-127 per 32-block, so q8_1 is
   lossless: d = 1, q = x, and the block sums fit a half exactly) with float64 ``dequantize(W) @ x``:
   must agree to float rounding, so any wrong nibble, scale, sub-block or fragment lane shows;
3. its matmul on random normal activations with the float64 reference: NMSE below 5e-4 (the error
   test-backend-ops allows for MUL_MAT), the q8_1 rounding of the activations being the only loss.

q4_0, q8_0 and q4_K are checked four times more, through the staged load path (``staged1`` / ``staged2``:
16 / 32 rows per warp, the kernel's ``stage_chunk`` copying 16-byte pieces into a staging buffer and
``load_a_staged`` reading the fragments back, alignment asserted; ``staged1b`` / ``staged2b``: the
activations staged too, ``stage_b_chunk`` / ``load_b_staged``), and f16 five times more: ``staged1`` /
``staged2`` (4 / 8 units per chunk, the second with padded stretch rows; its f32 activations are never
staged) and with its activations as f16 (``load_b_f16``, the kernel's HB) on the register path
(``registersh``) and both staged paths (``staged1h`` / ``staged2h``); then a deliberate mutation (the
emulator rebuilt with ``SBMM_STAGE_INDEX_SKEW=1``, an off-by-one in the staging piece index) must fail
every staged check it runs, and so must an off-by-one in the activations' piece index alone
(``SBMM_STAGE_B_INDEX_SKEW=1``) in the ``…b`` checks. q6_K (register path only): ``check_q6_K``, every column
count 1..16 on three shapes, and two mutations of its own. SEQ (sbmm.cuh: at NT = 2 the column tiles one after the
other over the same weights): ``check_seq``, the emulator's SEQ loop (``seq1b`` / ``seq2b``: the staged path with
staged activations, ``seqregs``: the register path with 32 rows and 2 units per chunk) at 9..16 columns, and the
mutation ``SBMM_SEQ_MUTATION=1`` (the second tile reads the first tile's activations) caught by all it runs.
MT = 4 (64 rows per warp, ggml's opt-in ``GGML_CUDA_SBMM_Q4_0_MT4=1``): ``check_mt4``, q4_0 and q8_0 on the
staged path (``staged4``, ``staged4b``) and its SEQ loop (``seq4b``), with the three mutations above. (It runs last,
so the checks before it draw the same random numbers as without it.)

usage: python benchmarks/kernels/check_layouts.py [--cxx g++]   (exit status 1 on any failure)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize

HERE = Path(__file__).resolve().parent
QTYPES = {"q4_0": QT.Q4_0, "q8_0": QT.Q8_0, "q4_K": QT.Q4_K, "q6_K": QT.Q6_K}
# bytes per block and values per block, ggml-common.h
BLOCK = {"q4_0": (18, 32), "q8_0": (34, 32), "q4_K": (144, 256), "q6_K": (210, 256), "f16": (2, 1)}


def random_weights(wtype: str, m: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Random rows in ggml's block layout, as uint8 [m, row_bytes]; scales are valid, positive halves
    of a realistic size, every other byte is random (all nibble/scale-bit patterns occur)."""
    nbytes, nvals = BLOCK[wtype]
    if wtype == "f16":
        return (rng.standard_normal((m, k)) * 0.05).astype(np.float16).view(np.uint8).reshape(m, 2 * k)
    nb = k // nvals
    raw = rng.integers(0, 256, size=(m, nb, nbytes), dtype=np.uint8)

    def halves(lo: float, hi: float) -> np.ndarray:
        return rng.uniform(lo, hi, size=(m, nb)).astype(np.float16).view(np.uint8).reshape(m, nb, 2)

    if wtype == "q4_0":
        raw[:, :, 0:2] = halves(0.002, 0.02)
    elif wtype == "q8_0":
        raw[:, :, 0:2] = halves(0.0005, 0.002)
        q = raw[:, :, 2:].view(np.int8)
        q[q == -128] = -127  # ggml's quantizer never writes -128
    elif wtype == "q4_K":
        raw[:, :, 0:2] = halves(0.0005, 0.003)  # d
        raw[:, :, 2:4] = halves(0.0005, 0.003)  # dmin
    elif wtype == "q6_K":
        raw[:, :, 208:210] = halves(0.00001, 0.0001)  # d (the int8 scales, ql and qh stay random)
    return raw.reshape(m, nb * nbytes)


def dequant_ref(wtype: str, w: np.ndarray, k: int) -> np.ndarray:
    """float64 [m, k] from gguf-py (the reference implementation of the layouts)."""
    if wtype == "f16":
        return w.view(np.float16).reshape(w.shape[0], k).astype(np.float64)
    return dequantize(w, QTYPES[wtype]).astype(np.float64).reshape(w.shape[0], k)


def exact_activations(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Integers that q8_1 represents exactly: |x| <= 127, each 32-block holds a +-127 (so d = 1) and
    its sum is within +-2048 (exact in half)."""
    x = rng.integers(-127, 128, size=(n, k // 32, 32)).astype(np.float32)
    pos = rng.integers(0, 32, size=(n, k // 32))
    sign = rng.choice([-127.0, 127.0], size=(n, k // 32))
    np.put_along_axis(x, pos[..., None], sign[..., None], axis=2)
    s = x.sum(axis=2)
    while (np.abs(s) > 2048).any():  # rare: redraw the offending blocks' free values
        bad = np.abs(s) > 2048
        x[bad] = np.clip(x[bad] * 0.5, -127, 127).round()
        x[bad, 0] = 127.0
        s = x.sum(axis=2)
    return x.reshape(n, k)


def run_emulator(exe: Path, wtype: str, w: np.ndarray, x: np.ndarray, tmp: Path,
                 mt: str = "") -> tuple[np.ndarray, np.ndarray]:
    """y [n, m] and the plain dequantization [m, k] from cpu_emulate; mt: the staged path (see check_one)."""
    m = w.shape[0]
    n, k = x.shape
    (tmp / "w.bin").write_bytes(np.ascontiguousarray(w).tobytes())
    (tmp / "x.bin").write_bytes(np.ascontiguousarray(x, dtype=np.float32).tobytes())
    subprocess.run(
        [str(exe), wtype, str(m), str(k), str(n), str(tmp / "w.bin"), str(tmp / "x.bin"), str(tmp / "y.bin"),
         str(tmp / "dq.bin")] + ([mt] if mt else []),
        check=True,
    )
    y = np.fromfile(tmp / "y.bin", dtype=np.float32).reshape(n, m)
    dq = np.fromfile(tmp / "dq.bin", dtype=np.float32).reshape(m, k)
    return y, dq


def check_one(exe: Path, wtype: str, mt: str, w: np.ndarray, wref: np.ndarray, n: int, rng: np.random.Generator,
              tmp: Path) -> tuple[bool, str]:
    """The three comparisons of the module docstring for one (weights, n); mt ("1", "2b", ...): the staged
    path with 16 * int(mt[0]) rows per warp, suffix b: the activations staged too ("": the register path)."""
    k = wref.shape[1]
    xe = exact_activations(n, k, rng)
    ye, dq = run_emulator(exe, wtype, w, xe, tmp, mt)
    dq_err = float(np.abs(dq - wref).max() / np.abs(wref).max())
    ref = xe.astype(np.float64) @ wref.T
    ex_err = float(np.abs(ye - ref).max() / np.abs(ref).max())
    xr = rng.standard_normal((n, k)).astype(np.float32)
    yr, _ = run_emulator(exe, wtype, w, xr, tmp, mt)
    refr = xr.astype(np.float64) @ wref.T
    nmse = float(((yr - refr) ** 2).sum() / (refr**2).sum())
    ok = dq_err < 1e-6 and ex_err < 2e-6 and nmse < 5e-4
    if mt.endswith("s"):  # SEQ: "1bs" / "2bs" the staged path, "s" the register path
        path = f"seq{mt[:-1]}" if len(mt) > 1 else "seqregs"
    else:
        path = f"staged{mt}" if mt and mt != "h" else "registers" + mt
    return ok, (f"{wtype:5s} {path:9s} m={w.shape[0]:3d} k={k:4d} n={n:2d}  dequant vs gguf {dq_err:.1e}  "
                f"exact-x matmul {ex_err:.1e}  random-x NMSE {nmse:.1e}")


def build(cxx: str, out: Path, *defines: str) -> Path:
    subprocess.run([cxx, "-O2", "-std=c++17", "-Wall", "-Wextra", "-Werror", *defines, "-o", str(out),
                    str(HERE / "cpu_emulate.cpp")], check=True)
    return out


def check_q6_K(cxx: str, exe: Path, rng: np.random.Generator, tmp: Path) -> int:
    """q6_K (register path only, one m16n8k16 mma per 16 values): the checks of check_one at every column count
    1..16 on three shapes -- k = 768 (3 blocks of 210 bytes: rows of 630 bytes, so the block's 2- / 4-byte
    alignment alternates by row and by block, both load branches of get_int_b2_or_b4_ro), k = 512 (rows of 420
    bytes: the alignment alternates by block only), k = 256 (one block); m = 40 / 24: partial 16-row tiles --
    then the two mutations of SBMM_Q6K_MUTATION (a wrong qh index, the other half's scale) must fail every check
    they run. Returns the number of failures (a passing check of a mutant counts as one)."""
    failures = 0
    for m, k in ((40, 768), (24, 512), (16, 256)):
        w = random_weights("q6_K", m, k, rng)
        wref = dequant_ref("q6_K", w, k)
        for n in range(1, 17):
            ok, line = check_one(exe, "q6_K", "", w, wref, n, rng, tmp)
            failures += not ok
            print(f"{'ok  ' if ok else 'FAIL'} {line}")
    for mutation, what in ((1, "qh-index"), (2, "scale-index")):
        mut = build(cxx, tmp / f"cpu_emulate_q6k_mut{mutation}", f"-DSBMM_Q6K_MUTATION={mutation}")
        for m, k in ((40, 768), (24, 512)):
            w = random_weights("q6_K", m, k, rng)
            wref = dequant_ref("q6_K", w, k)
            for n in (1, 8, 16):
                ok, line = check_one(mut, "q6_K", "", w, wref, n, rng, tmp)
                failures += ok
                print(f"{'MISSED' if ok else 'caught'} q6_K {what} mutation: {line}")
    return failures


def check_seq(cxx: str, exe: Path, rng: np.random.Generator, tmp: Path) -> int:
    """SEQ (NT = 2, the column tiles one after the other over the same staged weights / RawA registers): the
    checks of check_one at every column count 9..16 -- q4_0 / q8_0 / q4_K on the staged path with staged
    activations (16 and 32 rows per warp: ``seq1b`` / ``seq2b``) and on the register path (``seqregs``), q6_K on
    the register path, on the shapes of the other checks (q6_K: of check_q6_K) -- then the mutation
    SBMM_SEQ_MUTATION=1 (tile 1 multiplied with tile 0's activations) must fail every check it runs (n = 9, 16).
    Returns the number of failures (a passing check of a mutant counts as one)."""
    failures = 0
    cases = [(wtype, (m, k), ("1bs", "2bs", "s"))
             for wtype in ("q4_0", "q8_0", "q4_K") for m, k in ((40, 768), (16, 256))]
    cases += [("q6_K", (m, k), ("s",)) for m, k in ((40, 768), (24, 512), (16, 256))]
    for wtype, (m, k), mts in cases:
        w = random_weights(wtype, m, k, rng)
        wref = dequant_ref(wtype, w, k)
        for mt in mts:
            for n in range(9, 17):
                ok, line = check_one(exe, wtype, mt, w, wref, n, rng, tmp)
                failures += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {line}")
    mut = build(cxx, tmp / "cpu_emulate_seq_mut", "-DSBMM_SEQ_MUTATION=1")
    for wtype, mts in (("q4_0", ("1bs", "2bs", "s")), ("q8_0", ("1bs", "2bs", "s")), ("q4_K", ("1bs", "2bs", "s")),
                       ("q6_K", ("s",))):
        w = random_weights(wtype, 40, 768, rng)
        wref = dequant_ref(wtype, w, 768)
        for mt in mts:
            for n in (9, 16):
                ok, line = check_one(mut, wtype, mt, w, wref, n, rng, tmp)
                failures += ok
                print(f"{'MISSED' if ok else 'caught'} SEQ second-tile mutation: {line}")
    return failures


def check_mt4(cxx: str, exe: Path, rng: np.random.Generator, tmp: Path) -> int:
    """MT = 4 (64 rows per warp and staging buffer; ggml's q4_0 configuration under GGML_CUDA_SBMM_Q4_0_MT4=1, and
    the harness's q4_0 / q8_0 (4, 4, 8, ST) candidates): the checks of check_one for q4_0 and q8_0 on the staged
    path without and with staged activations (``staged4``, ``staged4b``: n = 1, 3, 8, 9, 16) and the SEQ loop
    (``seq4b``: n = 9..16), on m = 40 (one partial 64-row group), 72 (a whole group and 8 rows of the next) and
    128 (two whole groups, k = 512: 2 chunks of 8 units); then the staging-index mutation
    (SBMM_STAGE_INDEX_SKEW=1), the activations' (SBMM_STAGE_B_INDEX_SKEW=1) and the SEQ second-tile mutation
    (SBMM_SEQ_MUTATION=1) must fail every check they run. Returns the number of failures (a passing check of a
    mutant counts as one)."""
    failures = 0
    for wtype in ("q4_0", "q8_0"):
        for m, k in ((40, 768), (72, 768), (128, 512)):
            w = random_weights(wtype, m, k, rng)
            wref = dequant_ref(wtype, w, k)
            for mt, ns in (("4", (1, 3, 8, 9, 16)), ("4b", (1, 3, 8, 9, 16)), ("4bs", range(9, 17))):
                for n in ns:
                    ok, line = check_one(exe, wtype, mt, w, wref, n, rng, tmp)
                    failures += not ok
                    print(f"{'ok  ' if ok else 'FAIL'} {line}")
    mutants = (("staging-index", "-DSBMM_STAGE_INDEX_SKEW=1", (("4", 8), ("4b", 8), ("4bs", 16))),
               ("activation-staging-index", "-DSBMM_STAGE_B_INDEX_SKEW=1", (("4b", 8), ("4bs", 16))),
               ("SEQ second-tile", "-DSBMM_SEQ_MUTATION=1", (("4bs", 9), ("4bs", 16))))
    for i, (what, define, runs) in enumerate(mutants):
        mut = build(cxx, tmp / f"cpu_emulate_mt4_mut{i}", define)
        for wtype in ("q4_0", "q8_0"):
            w = random_weights(wtype, 72, 768, rng)
            wref = dequant_ref(wtype, w, 768)
            for mt, n in runs:
                ok, line = check_one(mut, wtype, mt, w, wref, n, rng, tmp)
                failures += ok
                print(f"{'MISSED' if ok else 'caught'} MT4 {what} mutation: {line}")
    return failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cxx", default="g++", help="host C++ compiler for cpu_emulate.cpp")
    args = ap.parse_args()
    rng = np.random.default_rng(19)
    failures = 0
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        exe = build(args.cxx, tmp / "cpu_emulate")
        # m = 40: a partial last 16-row tile (and 32-row group); k = 768: the q8_1 padding (to 1024), 3 q4_K
        # super-blocks, 3 chunks of 8 units for the staged path
        for wtype in ("q4_0", "q8_0", "q4_K", "f16"):
            for m, k in ((40, 768), (16, 256)):
                w = random_weights(wtype, m, k, rng)
                wref = dequant_ref(wtype, w, k)
                for mt in ("", "1", "2", "1b", "2b") if wtype != "f16" else ("", "1", "2", "h", "1h", "2h"):
                    for n in (1, 3, 8, 9, 16):
                        ok, line = check_one(exe, wtype, mt, w, wref, n, rng, tmp)
                        failures += not ok
                        print(f"{'ok  ' if ok else 'FAIL'} {line}")
        # the mutation check: an off-by-one in the staging piece index must fail every staged check
        mut = build(args.cxx, tmp / "cpu_emulate_mut", "-DSBMM_STAGE_INDEX_SKEW=1")
        for wtype in ("q4_0", "q8_0", "q4_K", "f16"):
            w = random_weights(wtype, 40, 768, rng)
            wref = dequant_ref(wtype, w, 768)
            for mt in ("1", "2", "1b", "2b") if wtype != "f16" else ("1", "2", "1h", "2h"):
                ok, line = check_one(mut, wtype, mt, w, wref, 8, rng, tmp)
                failures += ok
                print(f"{'MISSED' if ok else 'caught'} staging-index mutation: {line}")
        mut_b = build(args.cxx, tmp / "cpu_emulate_mut_b", "-DSBMM_STAGE_B_INDEX_SKEW=1")
        for wtype in ("q4_0", "q8_0", "q4_K"):
            w = random_weights(wtype, 40, 768, rng)
            wref = dequant_ref(wtype, w, 768)
            for mt in ("1b", "2b"):
                ok, line = check_one(mut_b, wtype, mt, w, wref, 8, rng, tmp)
                failures += ok
                print(f"{'MISSED' if ok else 'caught'} activation-staging-index mutation: {line}")
        failures += check_q6_K(args.cxx, exe, rng, tmp)
        failures += check_seq(args.cxx, exe, rng, tmp)
        failures += check_mt4(args.cxx, exe, rng, tmp)
    print("all layout checks passed" if failures == 0 else f"{failures} layout checks FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
