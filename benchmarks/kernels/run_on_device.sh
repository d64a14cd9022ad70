#!/usr/bin/env bash
# One call on the H200 (run tool, from the repository root): build the sbmm benchmark for sm_90, run it for
# every weight type, Qwen3-8B shape and n = 1..16, time cuBLAS through torch beside it, and write
#   $OUT/summary.md          the tables + the issue 19 targets (what to paste into RESULTS.md)
#   $OUT/sbmm.json           every (shape, type, n, config, k split) measurement
#   $OUT/torch_cublas.json   torch F.linear f16 (cuBLAS) per (shape, n)
#   $OUT/*.txt, *.log        raw output, build log, ptxas register/spill report, nvidia-smi
#   $OUT/sbmm_results.tar.gz all of the above in one archive
# Budget: build ~1 min on 16 cores, the benchmark ~2-4 min, torch ~1 min (well under the 10-min call).
# usage: bash benchmarks/kernels/run_on_device.sh [quick]     (quick: only m=4096 k=14336, n = 1,2,4,8,16)
#        SBMM_TYPES=q4_0,q8_0 bash ... : only these weight types (the full run of all four has ~4 500
#        measurements since the staged configurations came: split it over two calls if it nears the limit)
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT="${OUT:-/tmp/sbmm_out}"
BUILD=/tmp/sbmm_build
mkdir -p "$OUT"
cd "$HERE"

ARGS=()
TARGS=()
if [ "${1:-}" = quick ]; then
    ARGS=(--shapes 4096x14336 --ncols 1,2,4,8,16)
    TARGS=(--shapes 4096x14336 --ncols 1,2,4,8,16)
fi
if [ -n "${SBMM_TYPES:-}" ]; then
    ARGS+=(--types "$SBMM_TYPES")
fi

{ nvidia-smi; nvcc --version; } > "$OUT/device.txt" 2>&1
s=$(date +%s)
build() {
    if command -v make > /dev/null; then
        make -j"$(nproc)" BUILD="$BUILD"
    else # the same commands as the Makefile, without make
        mkdir -p "$BUILD"
        local F="-arch=sm_90 -O3 -std=c++17 -lineinfo -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror"
        local L=""; printf '#include <cublas_v2.h>\n' > "$BUILD/p.cu"; nvcc -E "$BUILD/p.cu" -o /dev/null 2>/dev/null && L=-lcublas
        nvcc $F -c bench.cu -o "$BUILD/bench.o" &
        for t in f16 q4_0 q8_0 q4_K q6_K; do
            nvcc $F -Xptxas -v,-warn-spills,-warn-lmem-usage -c sbmm_$t.cu -o "$BUILD/sbmm_$t.o" 2> "$BUILD/sbmm_$t.ptxas.txt" &
        done
        wait
        nvcc -arch=sm_90 "$BUILD"/*.o $L -o "$BUILD/sbmm_bench" && echo "linked with: $L"
    fi
}
if ! build > "$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"
    echo "BUILD FAILED (log: $OUT/build.log)"
    exit 1
fi
cp "$BUILD"/*.ptxas.txt "$OUT/" 2>/dev/null || true
echo "build $(( $(date +%s) - s )) s; cuBLAS linked: $(grep -c -- -lcublas "$OUT/build.log" || true)"

# the CPU layout check (needs gguf-py: skipped where it is not installed)
if python3 -c "import gguf" 2>/dev/null; then
    timeout 120 python3 check_layouts.py > "$OUT/check_layouts.txt" 2>&1; echo "layout check rc=$?: $(tail -1 "$OUT/check_layouts.txt")"
fi

s=$(date +%s)
timeout 420 "$BUILD/sbmm_bench" "${ARGS[@]}" --json "$OUT/sbmm.json" > "$OUT/sbmm.txt" 2>&1
echo "sbmm_bench rc=$? in $(( $(date +%s) - s )) s"
grep -E "^#" "$OUT/sbmm.txt" | head -5
grep -c WRONG "$OUT/sbmm.txt" | sed 's/^/configurations with WRONG results: /'

if python3 -c "import torch" 2>/dev/null; then
    s=$(date +%s)
    timeout 150 python3 torch_ref.py "${TARGS[@]}" --json "$OUT/torch_cublas.json" > "$OUT/torch_cublas.txt" 2>&1
    echo "torch_ref rc=$? in $(( $(date +%s) - s )) s"
fi

TORCH_ARG=()
[ -s "$OUT/torch_cublas.json" ] && TORCH_ARG=(--torch "$OUT/torch_cublas.json")
if [ -s "$OUT/sbmm.json" ]; then
    # the main shape and the verdicts here (the call's output is cut at 12 000 characters); all in summary.md
    python3 summarize.py "$OUT/sbmm.json" "${TORCH_ARG[@]}" > "$OUT/summary.md" &&
        awk '/^\*\*/ {print} /^## / {show = ($0 ~ /^## (load paths, |f16 activations, )?m = 4096, k = 14336$/ || $0 ~ /^## issue 19 targets/)} show' "$OUT/summary.md"
else
    tail -30 "$OUT/sbmm.txt"
fi
tar -czf /tmp/sbmm_results.tar.gz -C "$OUT" . && mv /tmp/sbmm_results.tar.gz "$OUT/"
