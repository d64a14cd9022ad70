#!/usr/bin/env bash
# On the H200 (run tool, carry .dev/kernels made by pack_tree.sh): llama.cpp's own op tests and op benchmark
# for MUL_MAT with the proposed patch 0008 (sbmm), beside the same build with GGML_CUDA_SBMM=0 (the
# dispatch of today). Two calls, because the build alone takes ~5 min (266 s for test-backend-ops):
#   bash benchmarks/kernels/ggml_op_check.sh build   # untar, configure, ninja test-backend-ops
#   bash benchmarks/kernels/ggml_op_check.sh test    # eval (must pass) + perf, sbmm on and off -> $OUT
#   bash benchmarks/kernels/ggml_op_check.sh f16half # f16 (f16 activations, the default) vs GGML_CUDA_SBMM_F16_HALF=0: eval + perf
#   bash benchmarks/kernels/ggml_op_check.sh defaults # the default dispatch: SBMM_FUSION + every MUL_MAT case of the 5 types
#   bash benchmarks/kernels/ggml_op_check.sh fuse    # the fusions (op SBMM_FUSION) and every MUL_MAT case: eval; perf n=1,2,8,16
#   bash benchmarks/kernels/ggml_op_check.sh topk    # patch 0012: every TOP_K case, eval + perf, GGML_CUDA_TOPK_SMALL=1 / 0
#   bash benchmarks/kernels/ggml_op_check.sh fattn   # patch 0013: FLASH_ATTN_EXT with the vector kernel to 16 rows, eval + perf
#   bash benchmarks/kernels/ggml_op_check.sh staged  # q4_0 / q8_0 with GGML_CUDA_SBMM=1: eval of the staged
#                                                    # path, perf staged vs register path vs MMVQ/MMQ -> $OUT
#   bash benchmarks/kernels/ggml_op_check.sh q6k     # q6_K with GGML_CUDA_SBMM=1: eval (MUL_MAT, SBMM_FUSION with
#                                                    # FUSE=2 and 3), perf sbmm vs MMVQ/MMQ at every q6_K shape
#   bash benchmarks/kernels/ggml_op_check.sh seq     # GGML_CUDA_SBMM_SEQ=1 (9..16 columns: the column tiles one after
#                                                    # the other): eval (SBMM_FUSION, MUL_MAT), perf n=8,9,12,16 on / off
#   bash benchmarks/kernels/ggml_op_check.sh mt4     # GGML_CUDA_SBMM_Q4_0_MT4=1 (q4_0 staged, 64 rows a block, opt-in):
#                                                    # eval (SBMM_FUSION, MUL_MAT, also with SEQ), perf q4_0 on / off
# The build stays in /tmp/lcw-sbmm while the machine is warm (h200.md: files outside the checkout persist).
# With our CUDA wheel installed (benchmarks/build_cuda_wheel.sh builds it with PYLLAMA_SPEC_OP_TESTS=ON, so
# pyllama_spec/bin/test-backend-ops is in it) no build is needed: TBO=<that program> ... test|staged
# (benchmarks/h200.sh ops does this).
set -uo pipefail
OUT="${OUT:-/tmp/sbmm_ops}"
W=/tmp/lcw-sbmm
mkdir -p "$OUT"
TARBALL="$PWD/.dev/kernels/llama.cpp-sbmm.tar.xz"
# the program: $TBO (the wheel's), else the one 'build' made on this warm machine
tbo() {
    if [ -z "${TBO:-}" ]; then
        cd "$W/llama.cpp" || { echo "run 'build' first (on this warm machine), or set TBO"; exit 1; }
        TBO=b/bin/test-backend-ops
    fi
}
# evaluate NAME SECONDS 'TYPES': the MUL_MAT op tests of those weight types -> $OUT/eval_NAME.txt, a summary line
evaluate() {
    timeout "$2" $TBO -o MUL_MAT -b CUDA0 -p "type_a=($3),type_b=f32," > "$OUT/eval_$1.txt" 2>&1
    echo "eval ($1) rc=$?: $(grep -cE '^ +MUL_MAT.*OK' "$OUT/eval_$1.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_$1.txt") FAIL"
    grep FAIL "$OUT/eval_$1.txt" | head -10
}
# perf NAME SECONDS: the op benchmark of the cases matching $P -> $OUT/perf_NAME.txt
perf() {
    timeout "$2" $TBO perf -b CUDA0 -o MUL_MAT -p "$P" 2>&1 | grep -E "MUL_MAT" > "$OUT/perf_$1.txt"
}
# the whole-graph fusions (SBMM_FUSION; FUSE=3, the default, and 2) against the CPU with the variables given:
# fusion_evals LABEL "TEST-BACKEND-OPS FILTER ARGS" VAR=VALUE...  ->  $OUT/eval_LABEL_fuse{3,2}.txt
fusion_evals() {
    local label=$1 filter=$2 f rc; shift 2
    for f in 3 2; do
        # shellcheck disable=SC2086  # (the filter's words are separate arguments)
        env "$@" GGML_CUDA_SBMM_FUSE=$f timeout 200 $TBO -o SBMM_FUSION -b CUDA0 $filter > "$OUT/eval_${label}_fuse$f.txt" 2>&1
        rc=$?
        echo "eval SBMM_FUSION ${filter:+$filter }($* GGML_CUDA_SBMM_FUSE=$f) rc=$rc: $(grep -cE '^ +SBMM_FUSION.*OK' "$OUT/eval_${label}_fuse$f.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_${label}_fuse$f.txt") FAIL"
        grep FAIL "$OUT/eval_${label}_fuse$f.txt" | head -10
    done
}

# show_perf LABEL TITLE [LABEL TITLE ...]: each perf() file under its title
show_perf() {
    while [ $# -ge 2 ]; do
        echo "## $2"; cat "$OUT/perf_$1.txt"; shift 2
    done
}

case "${1:-}" in
build)
    [ -f "$TARBALL" ] || { echo "carry .dev/kernels (benchmarks/kernels/pack_tree.sh makes it)"; exit 1; }
    rm -rf "$W" && mkdir -p "$W" && tar -xJf "$TARBALL" -C "$W"
    cd "$W/llama.cpp"
    cmake -S . -B b -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_TESTS=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_OPENSSL=OFF > "$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
    s=$(date +%s)
    ninja -C b test-backend-ops > "$OUT/build.log" 2>&1 || { grep -B2 -A8 "error" "$OUT/build.log" | head -60; exit 1; }
    echo "build $(( $(date +%s) - s )) s"
    ;;
test)
    tbo
    # correctness of every MUL_MAT case of the four types (our new 1..16-column cases among them), vs the CPU
    evaluate sbmm 300 'f16|q4_0|q8_0|q4_K'
    P='type_a=(f16|q4_0|q4_K|q8_0),type_b=f32,m=4096,n=[0-9]+,k=14336,'
    perf sbmm 150; GGML_CUDA_SBMM=0 perf default 150
    echo "## sbmm (patch 0008)"; cat "$OUT/perf_sbmm.txt"
    echo "## GGML_CUDA_SBMM=0 (today's dispatch)"; cat "$OUT/perf_default.txt"
    ;;
staged)
    tbo
    # GGML_CUDA_SBMM=1: sbmm at every 2..16 columns for the quantized types, the staged (cp.async) path unless
    # _STAGE=0; beside the register path and MMVQ/MMQ, for where the default's column range should start
    GGML_CUDA_SBMM=1 evaluate staged 240 'q4_0|q8_0|q4_K'
    P='type_a=(q4_0|q8_0|q4_K),type_b=f32,m=4096,n=[0-9]+,k=14336,'
    GGML_CUDA_SBMM=1 perf staged 100
    GGML_CUDA_SBMM=1 GGML_CUDA_SBMM_STAGE=0 perf register 100
    GGML_CUDA_SBMM=0 perf mmvq 100
    echo "## sbmm, staged loads (GGML_CUDA_SBMM=1)"; cat "$OUT/perf_staged.txt"
    echo "## sbmm, register loads (GGML_CUDA_SBMM=1 GGML_CUDA_SBMM_STAGE=0)"; cat "$OUT/perf_register.txt"
    echo "## MMVQ/MMQ (GGML_CUDA_SBMM=0)"; cat "$OUT/perf_mmvq.txt"
    ;;
fuse)
    tbo
    # the fusions (stage 6): sibling MUL_MATs as one launch of 2 / 3 segments, MUL_MAT + ADD in the kernel,
    # against the CPU (op SBMM_FUSION, whole graphs); then every MUL_MAT case (single launches), the changed kernel
    timeout 200 $TBO -o SBMM_FUSION -b CUDA0 > "$OUT/eval_fuse.txt" 2>&1
    echo "eval (fuse) rc=$?: $(grep -cE '^ +SBMM_FUSION.*OK' "$OUT/eval_fuse.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_fuse.txt") FAIL"
    grep FAIL "$OUT/eval_fuse.txt" | head -10
    # and without the f16 activations written by the RMS_NORM + MUL / SwiGLU before the matmuls (default: with)
    GGML_CUDA_SBMM_FUSE=1 timeout 200 $TBO -o SBMM_FUSION -b CUDA0 > "$OUT/eval_fuse1.txt" 2>&1
    echo "eval (GGML_CUDA_SBMM_FUSE=1) rc=$?: $(grep -cE '^ +SBMM_FUSION.*OK' "$OUT/eval_fuse1.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_fuse1.txt") FAIL"
    grep FAIL "$OUT/eval_fuse1.txt" | head -10
    # and with the q8_1 activations of quantized weights written the same way (GGML_CUDA_SBMM_FUSE=3, off by default)
    GGML_CUDA_SBMM_FUSE=3 timeout 200 $TBO -o SBMM_FUSION -b CUDA0 > "$OUT/eval_fuse3.txt" 2>&1
    echo "eval (GGML_CUDA_SBMM_FUSE=3) rc=$?: $(grep -cE '^ +SBMM_FUSION.*OK' "$OUT/eval_fuse3.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_fuse3.txt") FAIL"
    grep FAIL "$OUT/eval_fuse3.txt" | head -10
    # (the split-k dst zeroed by that op instead of a memset per matrix is the default since 2026-12-04: the two
    # evals above cover it.) And the quantized types from 2 columns (GGML_CUDA_SBMM_MIN_COLS=2; by default q4_0 /
    # q8_0 start at 5, q4_K at 4): the fused launches at 2 columns, which a lower default crossing would take,
    # with the f16 activations' path (FUSE=2) and with q8_1 activations from the op before (FUSE=3)
    for f in 2 3; do
        GGML_CUDA_SBMM_FUSE=$f GGML_CUDA_SBMM_MIN_COLS=2 timeout 200 $TBO -o SBMM_FUSION -b CUDA0 > "$OUT/eval_fuse${f}c2.txt" 2>&1
        echo "eval (GGML_CUDA_SBMM_FUSE=$f GGML_CUDA_SBMM_MIN_COLS=2) rc=$?: $(grep -cE '^ +SBMM_FUSION.*OK' "$OUT/eval_fuse${f}c2.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_fuse${f}c2.txt") FAIL"
        grep FAIL "$OUT/eval_fuse${f}c2.txt" | head -10
    done
    evaluate sbmm 300 'f16|q4_0|q8_0|q4_K'
    P='type_a=(f16|q4_0|q4_K|q8_0),type_b=f32,m=4096,n=(1|2|8|16),k=14336,'
    perf sbmm 100
    echo "## sbmm (patch 0008, segments)"; cat "$OUT/perf_sbmm.txt"
    # the quantized types at 2..4 columns: the default (MMVQ there) beside sbmm (GGML_CUDA_SBMM_MIN_COLS=2)
    P='type_a=(q4_0|q4_K|q8_0),type_b=f32,m=4096,n=(2|3|4),k=14336,'
    perf default_2to4 60; GGML_CUDA_SBMM_MIN_COLS=2 perf mincols2 60
    echo "## 2..4 columns, default"; cat "$OUT/perf_default_2to4.txt"
    echo "## 2..4 columns, GGML_CUDA_SBMM_MIN_COLS=2"; cat "$OUT/perf_mincols2.txt"
    ;;
q6k)
    tbo
    # q6_K (Q4_K_M's output head and the attn_v / ffn_down of half its layers): sbmm takes it only with
    # GGML_CUDA_SBMM=1 until this has run. Every q6_K MUL_MAT case (1..16 columns among them) and its SBMM_FUSION
    # cases (FUSE=2, the default, and 3: q8_1 activations from the op before) against the CPU, then the op benchmark
    # at m = 4096 k = 14336 (n = 1..16) and the Qwen3-8B shapes: sbmm (GGML_CUDA_SBMM=1) vs MMVQ/MMQ (=0)
    GGML_CUDA_SBMM=1 evaluate q6k 240 'q6_K'
    for f in 2 3; do
        GGML_CUDA_SBMM=1 GGML_CUDA_SBMM_FUSE=$f timeout 200 $TBO -o SBMM_FUSION -b CUDA0 -p "type=q6_K," > "$OUT/eval_q6k_fuse$f.txt" 2>&1
        echo "eval SBMM_FUSION q6_K (GGML_CUDA_SBMM_FUSE=$f) rc=$?: $(grep -cE '^ +SBMM_FUSION.*OK' "$OUT/eval_q6k_fuse$f.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_q6k_fuse$f.txt") FAIL"
        grep FAIL "$OUT/eval_q6k_fuse$f.txt" | head -10
    done
    P='type_a=q6_K,type_b=f32,'
    GGML_CUDA_SBMM=1 perf q6k_sbmm 150; GGML_CUDA_SBMM=0 perf q6k_mmvq 150
    echo "## q6_K, sbmm (GGML_CUDA_SBMM=1)"; cat "$OUT/perf_q6k_sbmm.txt"
    echo "## q6_K, MMVQ/MMQ (GGML_CUDA_SBMM=0)"; cat "$OUT/perf_q6k_mmvq.txt"
    ;;
seq)
    tbo
    # GGML_CUDA_SBMM_SEQ=1 (since 2026-12-06 the default for q4_K and q6_K; =1 adds q4_0 / q8_0): the NT = 2 launches (9..16 columns) of q4_0 / q8_0 /
    # q4_K (staged) and q6_K (registers) on the SEQ kernel. The fusions (whole graphs; FUSE=3, the default, and 2)
    # and every MUL_MAT case of those types against the CPU, also q4_K on the register path (GGML_CUDA_SBMM_STAGE=0:
    # its SEQ (2, 8, 1)); then the op benchmark at 8 columns (NT = 1, unchanged: the reference) and 9, 12, 16, with
    # it and without
    fusion_evals seq "" GGML_CUDA_SBMM_SEQ=1
    GGML_CUDA_SBMM_SEQ=1 evaluate seq 300 'q4_0|q8_0|q4_K|q6_K'
    GGML_CUDA_SBMM_SEQ=1 GGML_CUDA_SBMM_STAGE=0 evaluate seq_register 200 'q4_K'
    P='type_a=(q4_0|q4_K|q8_0|q6_K),type_b=f32,m=4096,n=(8|9|12|16),k=14336,'
    GGML_CUDA_SBMM_SEQ=1 perf seq 100; GGML_CUDA_SBMM_SEQ=0 perf noseq 100
    show_perf seq "GGML_CUDA_SBMM_SEQ=1" noseq "GGML_CUDA_SBMM_SEQ=0"
    ;;
mt4)
    tbo
    # GGML_CUDA_SBMM_Q4_0_MT4=1 (opt-in, default off): q4_0 on the staged path with 64 rows a block (MT = 4, KS = 4;
    # at 9..16 columns its SEQ kernel where GGML_CUDA_SBMM_SEQ=1). The q4_0 fusions (whole graphs; FUSE=3, the
    # default, and 2) and every q4_0 MUL_MAT case against the CPU, with SEQ off (the default for q4_0) and on; then
    # the op benchmark of q4_0 at 2..16 columns, m = 4096 k = 14336 (ops/table.md) and the k = 4096 shapes (raw files;
    # op_perf_table.py --all), MT4 off (the default: MT = 2, KS = 2) / on / on with SEQ
    fusion_evals mt4 "-p type=q4_0," GGML_CUDA_SBMM_Q4_0_MT4=1
    GGML_CUDA_SBMM_Q4_0_MT4=1 evaluate mt4 200 'q4_0'
    GGML_CUDA_SBMM_Q4_0_MT4=1 GGML_CUDA_SBMM_SEQ=1 evaluate mt4_seq 200 'q4_0'
    P='type_a=q4_0,type_b=f32,m=[0-9]+,n=(2|4|8|9|12|16),k=(14336|4096),'
    perf mt2 100; GGML_CUDA_SBMM_Q4_0_MT4=1 perf mt4 100; GGML_CUDA_SBMM_Q4_0_MT4=1 GGML_CUDA_SBMM_SEQ=1 perf mt4_seq 100
    show_perf mt2 "q4_0, default (MT = 2)" mt4 "q4_0, GGML_CUDA_SBMM_Q4_0_MT4=1" \
        mt4_seq "q4_0, GGML_CUDA_SBMM_Q4_0_MT4=1 GGML_CUDA_SBMM_SEQ=1"
    ;;
defaults)
    tbo
    # the dispatch as it is by default (since 2026-12-06: every sbmm type from 2 columns, q8_1 activations from the
    # op before): the whole-graph fusions and every MUL_MAT case of the five types, against the CPU (~2 min)
    timeout 200 $TBO -o SBMM_FUSION -b CUDA0 > "$OUT/eval_fuse_defaults.txt" 2>&1
    echo "eval (fuse, defaults) rc=$?: $(grep -cE '^ +SBMM_FUSION.*OK' "$OUT/eval_fuse_defaults.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_fuse_defaults.txt") FAIL"
    grep FAIL "$OUT/eval_fuse_defaults.txt" | head -10
    evaluate defaults 300 'f16|q4_0|q8_0|q4_K|q6_K'
    ;;
f16half)
    tbo
    # f16 with its activations converted to f16 and the weights staged (the default since 2026-12-02) vs the
    # first version's f32 activations and register loads (GGML_CUDA_SBMM_F16_HALF=0); both evaluated
    evaluate f16half 200 'f16'
    GGML_CUDA_SBMM_F16_HALF=0 evaluate f16f32 200 'f16'
    P='type_a=f16,type_b=f32,m=4096,n=[0-9]+,k=14336,'
    perf f16half 100; GGML_CUDA_SBMM_F16_HALF=0 perf f16 100
    ;;
fattn)
    tbo
    # patch 0013: the vector flash-attention kernel for up to 16 query rows (GGML_CUDA_FATTN_VEC_MAX_ROWS) against
    # the CPU, head sizes 64 (SmolLM2) and 128 (Qwen3); then the op benchmark of the 128 cases, on and off
    for hs in 64 128; do
        GGML_CUDA_FATTN_VEC_MAX_ROWS=16 GGML_CUDA_FATTN_VEC_MAX_KV=1000000 timeout 240 $TBO -o FLASH_ATTN_EXT -b CUDA0 \
            -p "hsk=$hs,hsv=$hs," > "$OUT/eval_fattn_vec$hs.txt" 2>&1
        echo "eval FLASH_ATTN_EXT hsk=$hs (vector kernel to 16 rows) rc=$?: $(grep -cE '^ +FLASH_ATTN_EXT.*OK' "$OUT/eval_fattn_vec$hs.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_fattn_vec$hs.txt") FAIL"
        grep FAIL "$OUT/eval_fattn_vec$hs.txt" | head -10
    done
    for v in 16 0; do
        echo "## perf FLASH_ATTN_EXT hsk=128, GGML_CUDA_FATTN_VEC_MAX_ROWS=$v"
        GGML_CUDA_FATTN_VEC_MAX_ROWS=$v timeout 150 $TBO perf -b CUDA0 -o FLASH_ATTN_EXT -p "hsk=128,hsv=128," 2>&1 \
            | grep -E "FLASH_ATTN_EXT" | tee "$OUT/perf_fattn$v.txt" | head -30
    done
    ;;
topk)
    tbo
    # patch 0012 (one-pass top-k for k <= 32 of long rows): every TOP_K case against the CPU, with it and without
    # (GGML_CUDA_TOPK_SMALL=0: the whole-row sort), then the op benchmark of a draft block's rows side by side
    for v in 1 0; do
        GGML_CUDA_TOPK_SMALL=$v timeout 200 $TBO -o TOP_K -b CUDA0 > "$OUT/eval_topk$v.txt" 2>&1
        echo "eval TOP_K (GGML_CUDA_TOPK_SMALL=$v) rc=$?: $(grep -cE '^ +TOP_K.*OK' "$OUT/eval_topk$v.txt") OK, $(grep -cE 'FAIL' "$OUT/eval_topk$v.txt") FAIL"
        grep FAIL "$OUT/eval_topk$v.txt" | head -10
    done
    for v in 1 0; do
        echo "## perf TOP_K, GGML_CUDA_TOPK_SMALL=$v"
        GGML_CUDA_TOPK_SMALL=$v timeout 150 $TBO perf -b CUDA0 -o TOP_K 2>&1 | grep -E "TOP_K" | tee "$OUT/perf_topk$v.txt" \
            | grep -E "ne=\[(49152|151936|65000|200000|202048),[0-9]+,1,1\],k=(1|4|8|10|16|20|32|40)," | head -40
    done
    ;;
*)
    echo "usage: bash benchmarks/kernels/ggml_op_check.sh build|test|staged|q6k|seq|mt4|defaults|f16half|fuse|topk|fattn"; exit 2 ;;
esac
