// pyllama_spec (patch 0008-cuda-sbmm-small-batch-matmul): ggml glue of the sbmm kernel (sbmm-kernel.cuh).
//
// Why: a verify batch of 2..16 rows read the same weights as a 1-row decode, but MMVQ redoes the dot
// products per column and MMF/cuBLAS do not reach the bandwidth a decode does on the H200, so a verify of
// 8 rows cost 1.6x (f16) to 3x (q4_K) a 1-row decode (issue 19). sbmm streams each weight block once,
// dequantizes it in registers and multiplies it with all columns by one mma (IST-DASLab/marlin's rules).
// The activations are quantized to q8_1 by ggml's own quantize_row_q8_1_cuda, exactly as for MMVQ.
#include "sbmm.cuh"
#include "quantize.cuh"
#include "convert.cuh"
#include "unary.cuh"
#include "sbmm-kernel.cuh"

#include <cstdlib>

namespace {

struct sbmm_env {
    int mode     = -1; // -1: auto (Hopper, the measured types and column counts), 0: off, 1: every sbmm type at 2..16
                       // columns, cc >= 8.0
    int min_cols = -1; // -1: the per-type default below
    int max_cols = -1;
    int staged   = -1; // quantized types' weight loads: -1 auto (staged_path), GGML_CUDA_SBMM_STAGE=0 the register
                       // path everywhere, =1 the staged (cp.async) path everywhere
    bool f16_half = true;  // f16: the activations converted to f16, staged weight loads (config <W_F16, NT, true>);
                           // GGML_CUDA_SBMM_F16_HALF=0: f32 activations, register loads (the first version)
    bool fuse = true;      // sibling MUL_MATs in one launch, MUL_MAT + ADD in one kernel, and the graph order that
                           // makes siblings adjacent; GGML_CUDA_SBMM_FUSE=0: one launch per MUL_MAT (for measuring)
    bool fuse_act = true;  // and the f16 activations of f16 weights written by the op before them (RMS_NORM + MUL,
                           // SwiGLU) instead of f32 + a conversion kernel: an 8-row f16 verify 5.77 vs 5.81 ms, a
                           // step at n_max 7 1.51 vs 1.62 decodes (H200, RESULTS 13.6); GGML_CUDA_SBMM_FUSE=1: the
                           // fusions without it, =2 (or unset): both
    bool fuse_q8 = true;   // and the q8_1 activations of quantized weights written by the op before them (the 145
                           // quantize_q8_1 kernels of an 8-row Q4_0 verify go): with the norm kernel over (chunks x
                           // columns) a Q4_0 verify of 8 rows 3.98 vs 4.25 ms (1.28 decodes), Q4_K_M 4.87 vs 5.26 ms
                           // with the other defaults of 2026-12-06; SBMM_FUSION 350/350 (H200, RESULTS 13.8).
                           // GGML_CUDA_SBMM_FUSE=2: without it (the default before 2026-12-06)
    int seq = -1;          // 9..16 columns (NT = 2) on the SEQ configurations below (the column tiles one after the
                           // other over the same weights, sbmm-kernel.cuh), where a type has one. Default (-1): q4_K
                           // and q6_K only, from test-backend-ops perf m = 4096, k = 14336 (H100, 2026-12-06, RESULTS
                           // 13.9): q4_K 9 / 12 / 16 columns 24.3 / 24.9 / 25.6 vs 25.3 / 26.0 / 26.6 us, q6_K 43.5 /
                           // 43.7 / 44.0 vs 46.5 / 47.0 / 50.4, while q4_0 was slower (20.5 / 21.0 / 22.9 vs 17.7 /
                           // 19.3 / 20.9) and q8_0 equal; SBMM_FUSION 350/350 (FUSE=3, 2), MUL_MAT 327/327 + 102/102
                           // (register path) with SEQ on. GGML_CUDA_SBMM_SEQ=1: every type that has one, =0: none
    bool seq_on(int t) const {
        return seq < 0 ? (t == sbmm::W_Q4_K || t == sbmm::W_Q6_K) : seq != 0;
    }
    bool q4_0_mt4 = false; // q4_0 on the staged path (2..16 columns) with 64 rows a block (MT = 4, KS = 4; the
                           // sbmm_config<W_Q4_0, NT, true, SEQ, true> below) instead of 32: half the re-reads of the
                           // activations from L2 per weight byte. GGML_CUDA_SBMM_Q4_0_MT4=1 (opt-in, default off):
                           // the harness (H100, m = 4096, k = 14336, weights from HBM, 2026-12-06e) measured 22.56 vs
                           // 23.78 us at 8 columns and 26.14 (SEQ) / 26.21 vs 27.90 at 16; not yet measured in ggml
    bool mt4_on(int t) const {
        return q4_0_mt4 && t == sbmm::W_Q4_0;
    }
    bool fold_zero = true; // where k is split over the grid, the op that writes the activations (fused_act) also
                           // zeroes the matmuls' dst instead of one cudaMemsetAsync per matrix: with FUSE=3 an 8-row
                           // Q4_0 verify ran 522 device activities, 4.37 vs 4.50 ms, logits bit-identical; SBMM_FUSION
                           // 280/280 with FUSE=2 and 3 (H200, 2026-12-04, RESULTS 13.7; f16 weights do not split k
                           // there). GGML_CUDA_SBMM_FOLD_ZERO=0: the memsets
    sbmm_env() {
        if (const char * e = getenv("GGML_CUDA_SBMM")) {
            mode = atoi(e) > 0 ? 1 : 0;
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_MIN_COLS")) {
            min_cols = std::max(1, atoi(e));
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_MAX_COLS")) {
            max_cols = std::min(16, atoi(e));
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_F16_HALF")) {
            f16_half = atoi(e) != 0;
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_STAGE")) {
            staged = atoi(e) != 0 ? 1 : 0;
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_FUSE")) {
            fuse = atoi(e) != 0;
            fuse_act = atoi(e) >= 2;  // (0: nothing fused, 1: no activations from the op before, 2: f16 ones only)
            fuse_q8 = atoi(e) >= 3;
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_SEQ")) {
            seq = atoi(e) != 0 ? 1 : 0;
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_Q4_0_MT4")) {
            q4_0_mt4 = atoi(e) != 0;
        }
        if (const char * e = getenv("GGML_CUDA_SBMM_FOLD_ZERO")) {
            fold_zero = atoi(e) != 0;
        }
    }
};

const sbmm_env & env() {
    static const sbmm_env e;
    return e;
}

int sbmm_type(ggml_type t) {
    switch (t) {
        case GGML_TYPE_F16:  return sbmm::W_F16;
        case GGML_TYPE_Q4_0: return sbmm::W_Q4_0;
        case GGML_TYPE_Q8_0: return sbmm::W_Q8_0;
        case GGML_TYPE_Q4_K: return sbmm::W_Q4_K;
        case GGML_TYPE_Q6_K: return sbmm::W_Q6_K;
        default:             return -1;
    }
}

// Where sbmm is the default on Hopper: the column counts at which it beat llama.cpp's kernels on the H200.
// f16 beats MMF at 2..16 columns (test-backend-ops perf MUL_MAT m=4096 k=14336, n=8: 37.1 vs 48.5 us; a
// Qwen3-8B-shaped f16 decode of 8 rows 6.87 vs 8.33 ms; 2026-12-02, RESULTS.md section 13). The quantized types
// take it from 2 columns since 2026-12-06 (RESULTS.md 13.8): with the siblings in one launch and the q8_1
// activations written by the norm / SwiGLU (stage 6, FUSE=3) sbmm beats MMVQ there too -- op perf at n = 2 / 3 / 4,
// us: q4_0 11.6 / 11.9 / 12.6 vs MMVQ 14.9 / 17.5 / 20.2, q4_K 13.5 / 13.6 / 14.0 vs 18.6 / 22.9 / 14.0 (sbmm from 4
// before), q8_0 17.1 / 17.8 / 18.5 vs 24.9 / 26.4 / 28.1, q6_K 29.4 / 29.4 / 29.6 vs 29.6 / 33.1 / 40.0 (n = 8: 30.9
// vs 57.7; 9..16 within 4 % of MMVQ); whole Qwen3-8B-shaped decodes, ms: Q4_0 2 / 4 rows 3.13 / 3.45 vs 3.45 / 4.39
// (1 row 3.10), Q4_K_M (q6_K attn_v / ffn_down of half the layers and the head) 2 / 4 / 8 / 16 rows 4.05 / 4.26 /
// 4.87 / 7.34 vs 4.37 / 4.34 / 5.45 / 7.36 (1 row 3.84-3.89). (On 2026-12-02, before stage 6, MMVQ had still won
// at 2..3 rows.) GGML_CUDA_SBMM_MIN_COLS / _MAX_COLS move the crossing for a measurement.
struct sbmm_cols { int lo, hi; };
sbmm_cols default_cols(int t) {
    switch (t) {
        case sbmm::W_F16:
        case sbmm::W_Q4_K:
        case sbmm::W_Q4_0:
        case sbmm::W_Q8_0:
        case sbmm::W_Q6_K: return {2, 16};
        default:           return {0, -1};
    }
}

// One configuration per (weight type, column tiles NT, load path): 16*MT rows per warp, NW warps per block
// splitting k, U units in flight per lane, ST staging buffers per warp (0: the register path), SB: the
// activations staged too, KS: the largest split of k over the grid (launch() picks the split). The register
// path's are the winners of benchmarks/kernels/run_on_device.sh on the H200 (2026-12-02, best or within 3 %
// of the best on the Qwen3-8B shapes 4096x14336, 14336x4096, 4096x4096, 1024x4096 and the 151936x4096 head;
// benchmarks/results/kernels/). The staged ones are the harness's winners at m=4096 k=14336 (2026-12-02,
// `run_on_device.sh quick`; benchmarks/results/kernels/sbmm-staged-quick.json): 54..75 KB of dynamic
// shared memory, which launch() opts in to. KS = 2 where a split of 4 measured 5..10 % slower (q4_0 n=2..16,
// q4_K n=16) than the split of 2.
template <int T, int NT, bool STAGED = false, bool SEQ = false, bool MT4 = false> struct sbmm_config;
template <> struct sbmm_config<sbmm::W_F16,  1> { static constexpr int MT = 1, NW = 8, U = 2, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_F16,  2> { static constexpr int MT = 2, NW = 4, U = 2, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_0, 1> { static constexpr int MT = 1, NW = 8, U = 4, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_0, 2> { static constexpr int MT = 2, NW = 4, U = 4, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q8_0, 1> { static constexpr int MT = 2, NW = 8, U = 2, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q8_0, 2> { static constexpr int MT = 2, NW = 8, U = 2, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_K, 1> { static constexpr int MT = 2, NW = 8, U = 1, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_K, 2> { static constexpr int MT = 2, NW = 8, U = 1, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
// q6_K: q4_K's shape where it fits (written without a GPU, 2026-12-06; measured the same day: MUL_MAT m=4096 k=14336
// 29.4..30.9 us at 2..8 columns, 46.5..50.6 at 9..16 against MMVQ's 29.6..57.7 / 48.4..49.2): 32 rows per warp at one
// column tile; 16 at two, where 32 spill (ptxas, sm_90). The register path only: its <W_Q6_K, NT, true> are the same
// register configurations, which staged_path never picks for q6_K; they exist because launch_path and split_mask_t
// instantiate both paths of every type
template <> struct sbmm_config<sbmm::W_Q6_K, 1> { static constexpr int MT = 2, NW = 8, U = 1, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q6_K, 2> { static constexpr int MT = 1, NW = 8, U = 1, ST = 0, KS = 8, FILL = 2; static constexpr bool SB = false, HB = false; };
template <> struct sbmm_config<sbmm::W_Q6_K, 1, true> : sbmm_config<sbmm::W_Q6_K, 1> {};
template <> struct sbmm_config<sbmm::W_Q6_K, 2, true> : sbmm_config<sbmm::W_Q6_K, 2> {};
template <> struct sbmm_config<sbmm::W_Q4_0, 1, true> { static constexpr int MT = 2, NW = 4, U = 8, ST = 2, KS = 2, FILL = 2; static constexpr bool SB = true , HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_0, 2, true> { static constexpr int MT = 2, NW = 4, U = 8, ST = 2, KS = 2, FILL = 2; static constexpr bool SB = true , HB = false; };
template <> struct sbmm_config<sbmm::W_Q8_0, 1, true> { static constexpr int MT = 2, NW = 4, U = 8, ST = 1, KS = 8, FILL = 2; static constexpr bool SB = true , HB = false; };
template <> struct sbmm_config<sbmm::W_Q8_0, 2, true> { static constexpr int MT = 2, NW = 4, U = 8, ST = 1, KS = 8, FILL = 2; static constexpr bool SB = true , HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_K, 1, true> { static constexpr int MT = 2, NW = 4, U = 2, ST = 2, KS = 8, FILL = 2; static constexpr bool SB = true , HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_K, 2, true> { static constexpr int MT = 2, NW = 4, U = 1, ST = 2, KS = 2, FILL = 2; static constexpr bool SB = true , HB = false; };
// f16 with f32 activations keeps the register path: its staged loads (harness configurations *_st1 / *_st2)
// won only at 1..2 columns and lost 3..8 % at 3..16 (m=4096 k=14336, H200, 2026-12-02). With the activations
// converted to f16 first (HB, the default since 2026-12-02; GGML_CUDA_SBMM_F16_HALF=0 turns it off) the staged
// loads win: 33.5 / 35.7 us at n = 8 / 16 (3.5 TB/s) against 41.2 / 47.6 with f32 activations and cuBLAS
// GemmEx's 37.0 / 34.1 (harness sbmm_mt1_nw8_u4_st2_h, k not split at 4096 rows: a split of 2 took 36.9 us;
// benchmarks/results/kernels/sbmm-f16-activations.json); in ggml, conversion included, 32.2 / 35.0 us against
// 36.8 / 42.8 with f32 activations (test-backend-ops perf, H200, RESULTS.md 13.2). FILL = 1: split k only
// while the grid has fewer blocks than SMs.
template <> struct sbmm_config<sbmm::W_F16,  1, true> { static constexpr int MT = 1, NW = 8, U = 4, ST = 2, KS = 8, FILL = 1; static constexpr bool SB = false, HB = true; };
template <> struct sbmm_config<sbmm::W_F16,  2, true> { static constexpr int MT = 1, NW = 8, U = 4, ST = 2, KS = 8, FILL = 1; static constexpr bool SB = false, HB = true; };
// SEQ (NT = 2 only; written without a GPU, measured on an H100 on 2026-12-06: the default for q4_K and q6_K, sbmm_env::seq): the column tiles one
// after the other, so that one tile's activations are live at a time and 9..16 columns may run the shape of 8
// (ptxas, sm_90, harness *_seq: registers of SEQ vs the plain NT = 2 kernel of the same shape). q4_0 / q8_0
// staged: their NT = 1 shape, which NT = 2 already had (128 / 225 registers, as plain). q4_K staged: NT = 2's
// (2, 4, 1, 2) KS = 2, 186 registers instead of 255 -- NT = 1's U = 2 spills 120 bytes with SEQ (and fits in 245
// without it). q4_K register path: its (2, 8, 1) of both tile counts (186 vs 177). q6_K: NT = 1's (2, 8, 1),
// 255 registers without spills, where the plain NT = 2 kernel spills and runs (1, 8, 1). The register paths of
// q4_0 / q8_0 (GGML_CUDA_SBMM_STAGE=0 only) and f16 have none (seq_ok): they run the plain NT = 2 kernel.
template <> struct sbmm_config<sbmm::W_Q4_0, 2, true, true> : sbmm_config<sbmm::W_Q4_0, 1, true> {};
template <> struct sbmm_config<sbmm::W_Q8_0, 2, true, true> : sbmm_config<sbmm::W_Q8_0, 1, true> {};
template <> struct sbmm_config<sbmm::W_Q4_K, 2, true, true> : sbmm_config<sbmm::W_Q4_K, 2, true> {};
template <> struct sbmm_config<sbmm::W_Q4_K, 2, false, true> : sbmm_config<sbmm::W_Q4_K, 1> {};
template <> struct sbmm_config<sbmm::W_Q6_K, 2, false, true> : sbmm_config<sbmm::W_Q6_K, 1> {};
template <> struct sbmm_config<sbmm::W_Q6_K, 2, true, true> : sbmm_config<sbmm::W_Q6_K, 1> {};
// MT4 (opt-in, GGML_CUDA_SBMM_Q4_0_MT4=1, sbmm_env::q4_0_mt4; written without a GPU, 2026-12-06): q4_0 on the staged
// path with 64 rows a block, (MT, NW, U, ST) = (4, 4, 8, 2) with staged activations, k split up to 4 ways: at 16
// columns and MT = 2 each block's re-reads of its k-slice of the activations from L2 were as many bytes as its
// weights (RESULTS.md 13.9); MT = 4 halves them. The harness's fastest at m = 4096 k = 14336 (H100, weights from HBM,
// benchmarks/results/h100_2026-12-06e/sbmm_q4_0_q8_0_quick.txt): 8 columns sbmm_mt4_nw4_u8_nt1_st2b_ks2 / _ks4
// 22.56 / 22.72 us vs 23.78 for the configuration above (KS = 2), 16 columns sbmm_mt4_nw4_u8_nt2_st2b_seq_ks4 /
// non-SEQ _ks4 26.14 / 26.21 vs 27.90. One shape for both tile counts and SEQ (as the MT = 2 one); SEQ where
// env().seq_on(W_Q4_0) (not by default). Shared memory 91 / 110 KB (NT = 1 / 2), which launch() opts in to.
template <> struct sbmm_config<sbmm::W_Q4_0, 1, true, false, true> { static constexpr int MT = 4, NW = 4, U = 8, ST = 2, KS = 4, FILL = 2; static constexpr bool SB = true , HB = false; };
template <> struct sbmm_config<sbmm::W_Q4_0, 2, true, false, true> : sbmm_config<sbmm::W_Q4_0, 1, true, false, true> {};
template <> struct sbmm_config<sbmm::W_Q4_0, 2, true, true, true> : sbmm_config<sbmm::W_Q4_0, 1, true, false, true> {};

// whether type T on the path STAGED has a SEQ configuration (above)
template <int T, bool STAGED>
constexpr bool seq_ok = T == sbmm::W_Q6_K || T == sbmm::W_Q4_K || ((T == sbmm::W_Q4_0 || T == sbmm::W_Q8_0) && STAGED);

// whether type T on the path STAGED has an MT4 configuration (above; taken where env().mt4_on(T))
template <int T, bool STAGED>
constexpr bool mt4_ok = T == sbmm::W_Q4_0 && STAGED;

// whether type t at ncols columns runs the staged weight loads (which need 16-byte aligned weights and rows).
// q4_K keeps the register path at 2..8 columns: in whole Qwen3-8B-shaped Q4_K decodes (H200, 2026-12-02,
// RESULTS.md section 13.1) it was as fast or faster there (4 rows 4.54 vs 4.92 ms, 8 rows 5.27 vs 5.29), and
// the staged path faster at 9..16 (12 rows 6.70 vs 7.23, 16 rows 7.23 vs 7.71) -- although in
// test-backend-ops, whose 33 MB of weights stay in the L2, staged won from 5 columns on. f16 stages its
// weights only with its activations converted to f16 (the default; GGML_CUDA_SBMM_F16_HALF=0: neither).
bool staged_path(int t, int64_t ncols) {
    if (t == sbmm::W_F16) {
        return env().f16_half;
    }
    if (t == sbmm::W_Q6_K) {
        return false; // q6_K has the register path only (210-byte blocks: sbmm_q6_K.cu)
    }
    if (env().staged == 0) {
        return false;
    }
    return env().staged == 1 || t != sbmm::W_Q4_K || ncols > 8;
}

// The launch's segments (sbmm::seg): weights sharing one set of activations (same type, k and row bytes),
// each with its rows, dst and optional fused ADD operand.
struct sbmm_job {
    sbmm::seg s[sbmm::max_segs];
    int n = 0;
    bool zeroed = false; // the dst of every segment whose launch splits k is already zero (fold_zero): no memset
    void add(const char * W, int64_t row_bytes, float * dst, int64_t stride_col_dst, const float * add_src,
             int64_t stride_col_add, int m) {
        GGML_ASSERT(n < sbmm::max_segs);
        s[n++] = sbmm::seg{W, (long long) row_bytes, dst, (long long) stride_col_dst, add_src, (long long) stride_col_add, m, 0};
    }
};

// the split of k over the grid that launch() makes: while the grid is short of FILL blocks per SM and each
// warp keeps >= 2 chunks (1: not split)
template <int T, int NT, bool STAGED, bool SEQ = false, bool MT4 = false>
int ksplit_of(int64_t gx, int k, int nsm) {
    using C = sbmm_config<T, NT, STAGED, SEQ, MT4>;
    const int nunits  = k / sbmm::wtraits<T>::unit_k;
    const int nchunks = (nunits + C::U - 1) / C::U;
    int ks = 1;
    while (ks < C::KS && gx * ks < C::FILL * nsm && nchunks / (C::NW * ks * 2) >= 2) {
        ks *= 2;
    }
    return ks;
}

template <int T, int NT, bool STAGED, bool SEQ = false, bool MT4 = false>
int64_t tiles_of(int64_t m) {
    using C = sbmm_config<T, NT, STAGED, SEQ, MT4>;
    return (m + 16 * C::MT - 1) / (16 * C::MT);
}

// whether a configuration has the ~5 registers that a launch of several segments needs (MS): the q4_K staged
// configurations and q8_0's register path use 245..255 and spill with it (ptxas, sm_90), so their siblings
// run as one launch each, on the one conversion of their activations; so does q4_0's staged SEQ configuration
// (8 bytes of spills with MS, none without), and q4_0's MT4 at NT = 2 (plain: 8 bytes of spills with MS; SEQ as
// the former)
template <int T, int NT, bool STAGED, bool SEQ = false, bool MT4 = false>
constexpr bool multi_seg_ok = !(T == sbmm::W_Q4_K && STAGED) && !(T == sbmm::W_Q8_0 && !STAGED) &&
                              !(SEQ && T == sbmm::W_Q4_0 && STAGED) && !(MT4 && NT == 2);

template <int T, int NT, bool STAGED, bool SEQ = false, bool MT4 = false>
void launch(sbmm_job job, const void * Y, int64_t stride_col_y, int k, int ncols, int nsm, cudaStream_t stream) {
    using C = sbmm_config<T, NT, STAGED, SEQ, MT4>;
    if constexpr (!multi_seg_ok<T, NT, STAGED, SEQ, MT4>) {
        if (job.n > 1) {
            for (int i = 0; i < job.n; ++i) {
                sbmm_job one;
                one.s[0] = job.s[i];
                one.n = 1;
                one.zeroed = job.zeroed;
                launch<T, NT, STAGED, SEQ, MT4>(one, Y, stride_col_y, k, ncols, nsm, stream);
            }
            return;
        }
    }
    const int nunits = k / sbmm::wtraits<T>::unit_k;
    int64_t gx = 0;
    for (int i = 0; i < job.n; ++i) {
        job.s[i].tiles = (int) tiles_of<T, NT, STAGED, SEQ, MT4>(job.s[i].m);
        gx += job.s[i].tiles;
    }
    const int ks = ksplit_of<T, NT, STAGED, SEQ, MT4>(gx, k, nsm);
    if (ks > 1 && !job.zeroed) { // the slices of k add into dst: zero it first (the fused-ADD callers check that add is not dst)
        for (int i = 0; i < job.n; ++i) {
            CUDA_CHECK(cudaMemsetAsync(job.s[i].dst, 0, sizeof(float) * (size_t) (ncols - 1) * job.s[i].stride_col_dst +
                                       sizeof(float) * job.s[i].m, stream));
        }
    }
    sbmm::segs sg{};
    for (int i = 0; i < job.n; ++i) {
        sg.s[i] = job.s[i];
    }
    sg.n = job.n;
    const dim3 grid((unsigned) gx, ks, 1);
    // the staged path keeps its buffers in dynamic shared memory; above 48 KB a kernel must opt in (once per
    // device and kernel)
    constexpr int smem = sbmm::sbmm_smem<T, NT, C::MT, C::NW, C::U, C::ST, C::SB>::dynamic;
    // (the largest, q4_0's MT4 at NT = 2: 4 warps x 2 buffers x (64 rows x 144 B + 16 columns x 304 B) = 110 KB)
    static_assert(smem <= 227 * 1024, "sbmm: more dynamic shared memory than a block may have (sm_90: 227 KB)");
    auto run = [&](auto kernel, bool * raised) {
        if constexpr (smem > 48 * 1024) {
            const int id = ggml_cuda_get_device();
            if (!raised[id]) {
                CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                raised[id] = true;
            }
        }
        kernel<<<grid, C::NW * 32, smem, stream>>>(sg, Y, stride_col_y, nunits, ncols);
    };
    if (job.n == 1) {
        static bool raised[GGML_CUDA_MAX_DEVICES] = {};
        run(sbmm::sbmm_kernel<T, NT, C::MT, C::NW, C::U, C::ST, C::SB, C::HB, false, SEQ>, raised);
    } else if constexpr (multi_seg_ok<T, NT, STAGED, SEQ, MT4>) {
        static bool raised[GGML_CUDA_MAX_DEVICES] = {};
        run(sbmm::sbmm_kernel<T, NT, C::MT, C::NW, C::U, C::ST, C::SB, C::HB, true, SEQ>, raised);
    }
    CUDA_CHECK(cudaGetLastError());
}

template <int T, bool STAGED, bool MT4>
void launch_nt_cfg(const sbmm_job & job, const void * Y, int64_t stride_col_y, int k, int ncols, int nsm, cudaStream_t stream) {
    if (ncols <= 8) {
        launch<T, 1, STAGED, false, MT4>(job, Y, stride_col_y, k, ncols, nsm, stream);
    } else {
        if constexpr (seq_ok<T, STAGED>) {
            if (env().seq_on(T)) {
                launch<T, 2, STAGED, true, MT4>(job, Y, stride_col_y, k, ncols, nsm, stream);
                return;
            }
        }
        launch<T, 2, STAGED, false, MT4>(job, Y, stride_col_y, k, ncols, nsm, stream);
    }
}

// the configuration by column tiles (NT), SEQ (env().seq_on) and MT4 (env().mt4_on, q4_0 staged only)
template <int T, bool STAGED = false>
void launch_nt(const sbmm_job & job, const void * Y, int64_t stride_col_y, int k, int ncols, int nsm, cudaStream_t stream) {
    if constexpr (mt4_ok<T, STAGED>) {
        if (env().mt4_on(T)) {
            launch_nt_cfg<T, STAGED, true>(job, Y, stride_col_y, k, ncols, nsm, stream);
            return;
        }
    }
    launch_nt_cfg<T, STAGED, false>(job, Y, stride_col_y, k, ncols, nsm, stream);
}

template <int T>
void launch_path(const sbmm_job & job, const void * Y, int64_t stride_col_y, int k, int ncols, int nsm, cudaStream_t stream) {
    if (staged_path(T, ncols)) {
        launch_nt<T, true>(job, Y, stride_col_y, k, ncols, nsm, stream);
    } else {
        launch_nt<T, false>(job, Y, stride_col_y, k, ncols, nsm, stream);
    }
}

// The segments of job whose launch (as launch() makes it) splits k over the grid, as a bit mask: all or none for
// one launch of several segments, each on its own where the configuration runs them one launch each
template <int T, int NT, bool STAGED, bool SEQ = false, bool MT4 = false>
unsigned split_mask_cfg(const sbmm_job & job, int k, int nsm) {
    if constexpr (!multi_seg_ok<T, NT, STAGED, SEQ, MT4>) {
        if (job.n > 1) {
            unsigned mask = 0;
            for (int i = 0; i < job.n; ++i) {
                mask |= ksplit_of<T, NT, STAGED, SEQ, MT4>(tiles_of<T, NT, STAGED, SEQ, MT4>(job.s[i].m), k, nsm) > 1 ? 1u << i : 0u;
            }
            return mask;
        }
    }
    int64_t gx = 0;
    for (int i = 0; i < job.n; ++i) {
        gx += tiles_of<T, NT, STAGED, SEQ, MT4>(job.s[i].m);
    }
    return ksplit_of<T, NT, STAGED, SEQ, MT4>(gx, k, nsm) > 1 ? (1u << job.n) - 1 : 0u;
}

// NT = 2 as launch_nt_cfg picks it (the SEQ configuration where env().seq_on(T) and the type has one)
template <int T, bool STAGED, bool MT4>
unsigned split_mask_nt2(const sbmm_job & job, int k, int nsm) {
    if constexpr (seq_ok<T, STAGED>) {
        if (env().seq_on(T)) {
            return split_mask_cfg<T, 2, STAGED, true, MT4>(job, k, nsm);
        }
    }
    return split_mask_cfg<T, 2, STAGED, false, MT4>(job, k, nsm);
}

template <int T, bool STAGED>
unsigned split_mask_path(const sbmm_job & job, int k, int ncols, int nsm) {
    if constexpr (mt4_ok<T, STAGED>) { // (as launch_nt)
        if (env().mt4_on(T)) {
            return ncols <= 8 ? split_mask_cfg<T, 1, STAGED, false, true>(job, k, nsm) : split_mask_nt2<T, STAGED, true>(job, k, nsm);
        }
    }
    return ncols <= 8 ? split_mask_cfg<T, 1, STAGED>(job, k, nsm) : split_mask_nt2<T, STAGED, false>(job, k, nsm);
}

template <int T>
unsigned split_mask_t(const sbmm_job & job, int k, int ncols, bool staged, int nsm) {
    return staged ? split_mask_path<T, true>(job, k, ncols, nsm) : split_mask_path<T, false>(job, k, ncols, nsm);
}

// split_mask_cfg for weights of sbmm type t on the configuration launch_path / launch_nt picks (staged: as run_job
// takes it, job_staged below)
unsigned split_mask(int t, const sbmm_job & job, int k, int ncols, bool staged, int nsm) {
    switch (t) {
        case sbmm::W_F16:  return split_mask_t<sbmm::W_F16>(job, k, ncols, staged, nsm);
        case sbmm::W_Q4_0: return split_mask_t<sbmm::W_Q4_0>(job, k, ncols, staged, nsm);
        case sbmm::W_Q8_0: return split_mask_t<sbmm::W_Q8_0>(job, k, ncols, staged, nsm);
        case sbmm::W_Q4_K: return split_mask_t<sbmm::W_Q4_K>(job, k, ncols, staged, nsm);
        case sbmm::W_Q6_K: return split_mask_t<sbmm::W_Q6_K>(job, k, ncols, staged, nsm);
        default:           return 0;
    }
}

// whether run_job takes the staged configurations for weights of sbmm type t on the activations src1
bool job_staged(int t, const ggml_tensor * src1) {
    return staged_path(t, src1->ne[1]) && (t != sbmm::W_F16 || ggml_is_contiguous(src1));
}

// whether run_job splits k over the grid for one matrix of m rows on the activations src1
bool splits_k(int t, int64_t m, const ggml_tensor * src1, int nsm) {
    sbmm_job one{}; // zeroed: with the SEQ branch inlined, GCC's -Wmaybe-uninitialized no longer sees that only s[0] is read
    one.add(nullptr, 0, nullptr, 0, nullptr, 0, (int) m);
    return split_mask(t, one, (int) src1->ne[0], (int) src1->ne[1], job_staged(t, src1), nsm) != 0;
}

// Runs job (its segments: weights of type src0_type with ne10 = k columns each) on the activations src1 (k x
// ncols f32), converted to f16 / quantized to q8_1 once for all the job's segments.
// act_f16 (f16 weights on the staged path only): the activations already as f16, [ncols][ne10] halves, made by
// the op before (fused_act below): no conversion here; act_q8_1 (quantized weights): the same for q8_1.
void run_job(ggml_backend_cuda_context & ctx, ggml_type src0_type, const ggml_tensor * src1, const sbmm_job & job,
             const half * act_f16 = nullptr, const void * act_q8_1 = nullptr) {
    cudaStream_t stream = ctx.stream();
    const int     nsm   = ggml_cuda_info().devices[ctx.device].nsm;
    const int     t     = sbmm_type(src0_type);
    const int64_t ne10  = src1->ne[0];
    const int64_t ne11  = src1->ne[1];
    const int     ncols = (int) ne11;
    const int     k     = (int) ne10;

    if (t == sbmm::W_F16) {
        if (act_f16 != nullptr) {
            GGML_ASSERT(job_staged(t, src1));
            launch_nt<sbmm::W_F16, true>(job, act_f16, ne10, k, ncols, nsm, stream);
        } else if (job_staged(t, src1)) {
            // the activations as f16, [ncols][ne10] halves (16-byte aligned: a pool buffer, ne10 % 256 == 0)
            ggml_cuda_pool_alloc<half> src1_f16(ctx.pool(), ne10 * ne11);
            ggml_get_to_fp16_cuda(GGML_TYPE_F32)(src1->data, src1_f16.get(), ne10 * ne11, stream);
            launch_nt<sbmm::W_F16, true>(job, src1_f16.get(), ne10, k, ncols, nsm, stream);
        } else {
            launch_nt<sbmm::W_F16>(job, src1->data, src1->nb[1] / sizeof(float), k, ncols, nsm, stream);
        }
        return;
    }

    // the activations as MMVQ has them: q8_1, each column padded to MATRIX_ROW_PADDING values (act_q8_1: made by
    // the op before, fused_act below)
    const int64_t ne10_padded = GGML_PAD(ne10, MATRIX_ROW_PADDING);
    ggml_cuda_pool_alloc<char> src1_q8_1(ctx.pool());
    if (!act_q8_1) {
        src1_q8_1.alloc(ne11 * ne10_padded * sizeof(block_q8_1) / QK8_1);
        const int64_t s11 = src1->nb[1] / sizeof(float);
        const int64_t s12 = src1->nb[2] / sizeof(float);
        const int64_t s13 = src1->nb[3] / sizeof(float);
        quantize_row_q8_1_cuda((const float *) src1->data, nullptr, src1_q8_1.get(), src0_type, ne10, s11, s12, s13,
                               ne10_padded, ne11, 1, 1, stream);
    }
    const void * y_q8_1 = act_q8_1 ? act_q8_1 : src1_q8_1.get();
    const int64_t stride_col_y = ne10_padded / QK8_1;
    switch (t) {
        case sbmm::W_Q4_0: launch_path<sbmm::W_Q4_0>(job, y_q8_1, stride_col_y, k, ncols, nsm, stream); break;
        case sbmm::W_Q8_0: launch_path<sbmm::W_Q8_0>(job, y_q8_1, stride_col_y, k, ncols, nsm, stream); break;
        case sbmm::W_Q4_K: launch_path<sbmm::W_Q4_K>(job, y_q8_1, stride_col_y, k, ncols, nsm, stream); break;
        case sbmm::W_Q6_K: launch_path<sbmm::W_Q6_K>(job, y_q8_1, stride_col_y, k, ncols, nsm, stream); break;
        default:           GGML_ABORT("sbmm: unsupported type");
    }
}

// Float regions that the op writing the activations zeroes for the matmuls after it (fold_zero): the dst of each
// segment whose k is split, as cudaMemsetAsync would (columns and the gaps between them)
struct zero_list {
    float * p[sbmm::max_segs];
    long long n[sbmm::max_segs];
    int count = 0;
};

// every thread of the grid (1-D or 2-D) a share of each region; the matmuls run after this kernel on its stream
__device__ __forceinline__ void zero_regions(const zero_list & z) {
    const long long nth = (long long) gridDim.x * gridDim.y * blockDim.x;
    const long long tid = ((long long) blockIdx.y * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
#pragma unroll
    for (int s = 0; s < sbmm::max_segs; ++s) { // (constant indices: a kernel parameter indexed at run time is
        if (s < z.count) {                     // copied to local memory)
            for (long long j = tid; j < z.n[s]; j += nth) {
                z.p[s][j] = 0.0f;
            }
        }
    }
}

// rsqrt(mean(x^2) + eps) of one column of n values, by a block of 256 threads (every thread gets it)
__device__ __forceinline__ float rms_scale_256(const float * __restrict__ xc, int n, float eps) {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < n; i += 256) {
        const float v = xc[i];
        sum += v * v;
    }
    __shared__ float partial[8];
    sum = warp_reduce_sum(sum);
    if ((threadIdx.x & 31) == 0) {
        partial[threadIdx.x >> 5] = sum;
    }
    __syncthreads();
    sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        sum += partial[i];
    }
    return rsqrtf(sum / n + eps);
}

// f16 activations written by the op that makes them (GGML_CUDA_SBMM_FUSE=2), so that f16 weights need no
// conversion kernel (145 of a Qwen3-8B-shaped verify's 594 device activities, RESULTS.md 13.5).
// RMS_NORM then MUL by the norm weight, as ggml-cuda's rms_norm_f32<..., do_multiply> computes it
// (scale = rsqrt(mean(x^2) + eps), y = scale * x * w), rounded to f16 as ggml_get_to_fp16_cuda does:
// grid (ceil(n / 256), ncols): each block of 256 threads writes 256 values of column (token) blockIdx.y and takes
// that column's scale itself (the column, 16 KB at n = 4096, is read by every block of it: from L2). One block
// per column (grid (ncols)) left 8 blocks on 132 SMs at a verify of 8 rows: 3.6 us a call, 72 calls an 8B-shaped
// verify (H200, 2026-12-04); y: [ncols][n] halves.
__global__ void __launch_bounds__(256) rms_norm_mul_to_f16(const float * __restrict__ x, long long stride_col_x,
                                                           const float * __restrict__ w, half * __restrict__ y, int n,
                                                           float eps, const zero_list z) {
    zero_regions(z);
    const float * xc = x + (long long) blockIdx.y * stride_col_x;
    const float scale = rms_scale_256(xc, n, eps);
    const int i = blockIdx.x * 256 + threadIdx.x;
    if (i < n) {
        y[(long long) blockIdx.y * n + i] = __float2half(scale * xc[i] * w[i]);
    }
}

// SwiGLU of split gate and up (ggml's GLU op, SWIGLU, not swapped): y = silu(gate) * up, [ncols][n] halves
__global__ void swiglu_to_f16(const float * __restrict__ gate, long long stride_col_g, const float * __restrict__ up,
                              long long stride_col_u, half * __restrict__ y, int n, int ncols, const zero_list z) {
    zero_regions(z);
    const long long i = (long long) blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long long) n * ncols) {
        return;
    }
    const long long c = i / n;
    const long long r = i - c * n;
    y[i] = __float2half(ggml_cuda_op_silu_single(gate[c * stride_col_g + r]) * up[c * stride_col_u + r]);
}

// q8_1 activations written by the op that makes them (GGML_CUDA_SBMM_FUSE=3), in MMVQ's layout (what
// quantize_row_q8_1_cuda writes: per column ne10_padded / 32 blocks {half2 (d, sum), int8 qs[32]}, zeros past n),
// with quantize_q8_1's arithmetic (d = amax / 127, q = roundf(v / d), sum of the float values) on the values the
// op would have written: RMS_NORM + MUL as rms_norm_mul_to_f16 computes them, on its grid (n_padded / 256, ncols;
// 8 warps, a q8_1 block per warp; n_padded % 256 == 0: every lane of a warp takes part in its reductions). With
// one block per column and 16 steps each it took 9.2 us a call, 663 of a 4 454 us Q4_0 verify of 8 rows (H200,
// 2026-12-04)
__device__ __forceinline__ void store_q8_1(block_q8_1 * yc, int i, float v) {
    const float amax = warp_reduce_max(fabsf(v));
    const float sum  = warp_reduce_sum(v);
    const float d    = amax / 127.0f;
    yc[i / QK8_1].qs[i % QK8_1] = amax == 0.0f ? 0 : (int8_t) roundf(v / d);
    if (i % QK8_1 == 0) {
        yc[i / QK8_1].ds = make_half2(d, sum);
    }
}

__global__ void __launch_bounds__(256) rms_norm_mul_to_q8_1(const float * __restrict__ x, long long stride_col_x,
                                                            const float * __restrict__ w, block_q8_1 * __restrict__ y,
                                                            int n, int n_padded, float eps, const zero_list z) {
    zero_regions(z);
    const float * xc = x + (long long) blockIdx.y * stride_col_x;
    block_q8_1 * yc = y + (long long) blockIdx.y * (n_padded / QK8_1);
    const float scale = rms_scale_256(xc, n, eps);
    const int i = blockIdx.x * 256 + threadIdx.x;
    store_q8_1(yc, i, i < n ? scale * xc[i] * w[i] : 0.0f);
}

// SwiGLU (split, not swapped) to q8_1: grid (n_padded / 256, ncols), blocks of 256 threads
__global__ void __launch_bounds__(256) swiglu_to_q8_1(const float * __restrict__ gate, long long stride_col_g,
                                                      const float * __restrict__ up, long long stride_col_u,
                                                      block_q8_1 * __restrict__ y, int n, int n_padded,
                                                      const zero_list z) {
    zero_regions(z);
    const int c = blockIdx.y;
    const int i = blockIdx.x * 256 + threadIdx.x;
    const float v = i < n ? ggml_cuda_op_silu_single(gate[(long long) c * stride_col_g + i]) * up[(long long) c * stride_col_u + i]
                          : 0.0f;
    store_q8_1(y + (long long) c * (n_padded / QK8_1), i, v);
}

// whether [a, a + na) and [b, b + nb) share a byte
bool overlaps(const void * a, size_t na, const void * b, size_t nb) {
    const char * pa = (const char *) a;
    const char * pb = (const char *) b;
    return pa < pb + nb && pb < pa + na;
}

} // namespace

bool ggml_cuda_should_use_sbmm(const ggml_tensor * src0, const ggml_tensor * src1, const ggml_tensor * dst, int cc) {
    const sbmm_env & e = env();
    if (e.mode == 0 || !GGML_CUDA_CC_IS_NVIDIA(cc) || cc < GGML_CUDA_CC_AMPERE) {
        return false;
    }
    if (e.mode < 0 && !(cc >= GGML_CUDA_CC_HOPPER && cc < GGML_CUDA_CC_HOPPER + 100)) {
        return false;
    }
    const int t = sbmm_type(src0->type);
    if (t < 0 || src1->type != GGML_TYPE_F32 || dst->type != GGML_TYPE_F32) {
        return false;
    }
    const int64_t ncols = src1->ne[1];
    sbmm_cols cols = e.mode > 0 ? sbmm_cols{2, 16} : default_cols(t);
    if (e.min_cols > 0) {
        cols.lo = e.min_cols;
    }
    if (e.max_cols > 0) {
        cols.hi = e.max_cols;
    }
    if (ncols < cols.lo || ncols > cols.hi || cols.lo > cols.hi) {
        return false;
    }
    // plain 2-D matmuls only (a verify batch's linear layers and output head), contiguous weight rows
    if (src0->ne[2] != 1 || src0->ne[3] != 1 || src1->ne[2] != 1 || src1->ne[3] != 1 || !ggml_is_contiguous(src0)) {
        return false;
    }
    if (src0->ne[0] % 256 != 0 || src0->ne[1] > INT32_MAX / 2 || src1->nb[0] != sizeof(float) || dst->nb[0] != sizeof(float)) {
        return false;
    }
    if (t == sbmm::W_Q4_K && ((uintptr_t) src0->data % 16 != 0 || src0->nb[1] % 16 != 0)) {
        return false; // the q4_K loader reads each block's 16-byte header with one 16-byte load
    }
    if (staged_path(t, ncols) && ((uintptr_t) src0->data % 16 != 0 || src0->nb[1] % 16 != 0)) {
        return false; // the staged path copies each row's stretch of U units as 16-byte pieces (cp.async)
    }
    // (staged activations, SB: the q8_1 buffer is a pool allocation, >= 128-byte aligned, with columns of a
    // multiple of 512 values = 576 bytes: 16-byte aligned whatever src1 is)
    if (t == sbmm::W_F16) { // the f16 path reads the f32 activations directly, 8 floats (2 x 16 bytes) at a time
        if (src1->nb[1] % 16 != 0 || (uintptr_t) src1->data % 16 != 0) {
            return false;
        }
    }
    return true;
}

void ggml_cuda_mul_mat_sbmm(ggml_backend_cuda_context & ctx, const ggml_tensor * src0, const ggml_tensor * src1, ggml_tensor * dst) {
    sbmm_job job;
    job.add((const char *) src0->data, src0->nb[1], (float *) dst->data, dst->nb[1] / sizeof(float), nullptr, 0, (int) src0->ne[1]);
    run_job(ctx, src0->type, src1, job);
}

// ---- fusions of a verify batch's graph (stage 6 of issue 19) ------------------------------------------------
// At 2..16 rows a Qwen3-8B-shaped f16 decode ran 953 device activities against 485 at one row (H200,
// 2026-12-03, RESULTS.md 13.4): per layer one f16 conversion of the activations per matmul (7, where 4 distinct
// inputs exist), two split-K memsets (K and V have too few rows to fill the GPU), and the residual ADDs and
// the SwiGLU that ggml fuses into mul_mat_vec_f at one row only. With ~3 us of idle GPU per activity that was
// most of what made a verify of 8 rows cost 1.28 decodes. Here: the MUL_MATs that read the same activations
// (Q, K, V; gate, up) run as one launch on one conversion, over a grid wide enough not to split k; a MUL_MAT
// whose only use is an ADD of a same-shaped tensor (the residual) writes dst = W x + residual itself.

static bool sbmm_fusable_mm(const ggml_tensor * node, int cc) {
    return node->op == GGML_OP_MUL_MAT && (node->flags & GGML_TENSOR_FLAG_COMPUTE) &&
           ggml_cuda_should_use_sbmm(node->src[0], node->src[1], node, cc);
}

// whether b can join a's launch: the same activations, weight type and row layout (same k, hence row bytes)
static bool sbmm_siblings(const ggml_tensor * a, const ggml_tensor * b) {
    return b->src[1] == a->src[1] && b->src[0]->type == a->src[0]->type && b->src[0]->ne[0] == a->src[0]->ne[0] &&
           b->src[0]->nb[1] == a->src[0]->nb[1];
}

void ggml_cuda_sbmm_group_siblings(int device, ggml_cgraph * cgraph) {
    if (!env().fuse) {
        return;
    }
    const int cc = ggml_cuda_info().devices[device].cc;
    // how far ahead to look: Qwen3's K projection comes 7 nodes after Q (q_norm, rope and V in between)
    constexpr int window = 32;
    for (int i = 0; i < cgraph->n_nodes; ++i) {
        ggml_tensor * a = cgraph->nodes[i];
        if (!sbmm_fusable_mm(a, cc)) {
            continue;
        }
        int n = 1;
        for (int j = i + 1; j < cgraph->n_nodes && j <= i + window && n < sbmm::max_segs; ++j) {
            ggml_tensor * b = cgraph->nodes[j];
            // b may move up to i + n: its activations are computed before a, its weights are not computed in
            // this graph (a leaf), so every input of b is ready there; the graph is allocated after this, in the
            // new order
            if (!sbmm_fusable_mm(b, cc) || !sbmm_siblings(a, b) || b->src[0]->op != GGML_OP_NONE) {
                continue;
            }
            if (j != i + n) {
                memmove(&cgraph->nodes[i + n + 1], &cgraph->nodes[i + n], sizeof(ggml_tensor *) * (size_t) (j - i - n));
                cgraph->nodes[i + n] = b;
            }
            ++n;
        }
        i += n - 1;
    }
}

// The job of MUL_MAT node i (sbmm takes it) writing W x + r into the ADD at node i + 1, where that ADD is the
// MUL_MAT's only use and r has the same shape (the residual). act_ready: the kernel will read activations made
// elsewhere (f16 from the op before), never src1 itself. false: no such ADD, or one the kernel cannot write.
static bool residual_job(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i, bool act_ready, sbmm_job & job) {
    const ggml_op ops[2] = { GGML_OP_MUL_MAT, GGML_OP_ADD };
    if (!ggml_can_fuse(cgraph, i, ops, 2)) {
        return false;
    }
    const ggml_tensor * a = cgraph->nodes[i];
    const ggml_tensor * src1 = a->src[1];
    const int ncols = (int) src1->ne[1];
    ggml_tensor * add = cgraph->nodes[i + 1];
    const ggml_tensor * res = add->src[0] == a ? add->src[1] : add->src[0];
    if (res == a || res->type != GGML_TYPE_F32 || add->type != GGML_TYPE_F32 || !ggml_are_same_shape(res, a) ||
        !ggml_are_same_shape(add, a) || res->nb[0] != sizeof(float) || add->nb[0] != sizeof(float) ||
        res->ne[2] != 1 || res->ne[3] != 1) {
        return false;
    }
    const int64_t m = a->src[0]->ne[1];
    const size_t dst_bytes = add->nb[1] * (size_t) (ncols - 1) + sizeof(float) * (size_t) m;
    const size_t res_bytes = res->nb[1] * (size_t) (ncols - 1) + sizeof(float) * (size_t) m;
    // where k is split the slices add into a zeroed dst: then the residual must not be dst (an in-place ADD);
    // otherwise each element of the residual is read by the thread that writes it, so dst may be the residual.
    // The kernel never reads src1 itself (it reads the f16 / q8_1 copy) except f16 with f32 activations: there
    // dst must not be src1 (which the allocator may hand to the ADD once the MUL_MAT has read it).
    const int t = sbmm_type(a->src[0]->type);
    const bool split = splits_k(t, m, src1, ggml_cuda_info().devices[ctx.device].nsm);
    if (split && overlaps(add->data, dst_bytes, res->data, res_bytes)) {
        return false;
    }
    const bool reads_src1 = !act_ready && t == sbmm::W_F16 && !job_staged(t, src1);
    if (reads_src1 && overlaps(add->data, dst_bytes, src1->data, ggml_nbytes(src1))) {
        return false;
    }
    job.add((const char *) a->src[0]->data, a->src[0]->nb[1], (float *) add->data, add->nb[1] / sizeof(float),
            (const float *) res->data, res->nb[1] / sizeof(float), (int) m);
    return true;
}

// fold_zero: the dst regions of job's split-k launches, for the op before to zero (and job marked zeroed), where
// none of them shares a byte with what that op reads (ins: x and the norm weight, or gate and up; the allocator
// may give the matmul's dst the memory of an input whose last use is that op) or with a segment's fused ADD
// operand; otherwise an empty list (launch() then zeroes with cudaMemsetAsync as before)
static zero_list fold_zeroes(sbmm_job & job, int t, int k, int ncols, int nsm, const ggml_tensor * const * ins, int n_ins) {
    zero_list z;
    if (!env().fold_zero) {
        return z;
    }
    // (run_job takes the staged f16 configuration for activations made here, quantized ones by staged_path)
    const unsigned mask = split_mask(t, job, k, ncols, t == sbmm::W_F16 || staged_path(t, ncols), nsm);
    for (int i = 0; i < job.n; ++i) {
        if (!(mask & (1u << i))) {
            continue;
        }
        const sbmm::seg & sg = job.s[i];
        const long long n = (long long) (ncols - 1) * sg.stride_col_dst + sg.m;
        for (int j = 0; j < n_ins; ++j) {
            if (overlaps(sg.dst, sizeof(float) * (size_t) n, ins[j]->data, ggml_nbytes(ins[j]))) {
                return zero_list{};
            }
        }
        for (int j = 0; j < job.n; ++j) {
            if (job.s[j].add != nullptr &&
                overlaps(sg.dst, sizeof(float) * (size_t) n, job.s[j].add,
                         sizeof(float) * (size_t) ((long long) (ncols - 1) * job.s[j].stride_col_add + job.s[j].m))) {
                return zero_list{};
            }
        }
        z.p[z.count] = sg.dst;
        z.n[z.count] = n;
        ++z.count;
    }
    job.zeroed = z.count > 0;
    return z;
}

// The activations of the MUL_MATs after node i written by node i's op itself: f16 for f16 weights (the default,
// GGML_CUDA_SBMM_FUSE=2) and q8_1 for quantized ones (GGML_CUDA_SBMM_FUSE=3). Node i is RMS_NORM followed by the
// MUL by its weight, whose every use is one of the up to 3 sibling MUL_MATs right after it (a layer's Q, K, V;
// gate, up; the output head); or a SwiGLU (split, not swapped) whose only use is the MUL_MAT right after it
// (ffn_down), with its residual ADD if there is one. Returns the nodes computed (0: none).
static int fused_act(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i, int cc) {
    ggml_tensor * node = cgraph->nodes[i];
    cudaStream_t stream = ctx.stream();
    auto f32_cols = [](const ggml_tensor * x) { // f32, rows of ne[0] contiguous values, 2-D
        return x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[2] == 1 && x->ne[3] == 1;
    };
    // the MUL_MAT reads act, and its weights take activations made here: f16 (staged path) or q8_1
    auto act_mm = [&](const ggml_tensor * mm, const ggml_tensor * act) {
        if (!sbmm_fusable_mm(mm, cc) || mm->src[1] != act) {
            return false;
        }
        const int t = sbmm_type(mm->src[0]->type);
        return t == sbmm::W_F16 ? job_staged(t, act) : env().fuse_q8;
    };
    // the activations of x (ne0 x ncols) for weights of type wt: a pool buffer that run_job reads
    struct act_buf { // (freed in reverse order of allocation, as the VMM pool requires: at most one is allocated)
        ggml_cuda_pool_alloc<half> f16;
        ggml_cuda_pool_alloc<char> q8;
        explicit act_buf(ggml_cuda_pool & pool) : f16(pool), q8(pool) {}
    };
    auto q8_bytes = [](int64_t ne0, int64_t ncols) {
        return (size_t) (ncols * GGML_PAD(ne0, MATRIX_ROW_PADDING) / QK8_1 * sizeof(block_q8_1));
    };
    if (node->op == GGML_OP_RMS_NORM && i + 2 < cgraph->n_nodes) {
        ggml_tensor * mul = cgraph->nodes[i + 1];
        if (mul->op != GGML_OP_MUL || (mul->src[0] != node && mul->src[1] != node) || !ggml_node_has_n_uses(cgraph, i, 1)) {
            return 0;
        }
        const ggml_tensor * w = mul->src[0] == node ? mul->src[1] : mul->src[0];
        const ggml_tensor * x = node->src[0];
        if (!f32_cols(x) || !f32_cols(node) || !f32_cols(mul) || !ggml_are_same_shape(mul, node) || !ggml_is_contiguous(mul) ||
            w->type != GGML_TYPE_F32 || w->ne[0] != x->ne[0] || ggml_nrows(w) != 1 || !ggml_is_contiguous(w)) {
            return 0;
        }
        int n = 0;
        while (i + 2 + n < cgraph->n_nodes && n < sbmm::max_segs && act_mm(cgraph->nodes[i + 2 + n], mul) &&
               (n == 0 || sbmm_siblings(cgraph->nodes[i + 2], cgraph->nodes[i + 2 + n]))) {
            ++n;
        }
        if (n == 0 || !ggml_node_has_n_uses(cgraph, i + 1, n)) {
            return 0; // the f32 norm output is read by something else too: it must exist
        }
        float eps;
        memcpy(&eps, node->op_params, sizeof(float));
        const int64_t ne0 = x->ne[0];
        const int64_t ncols = x->ne[1];
        const ggml_type wt = cgraph->nodes[i + 2]->src[0]->type;
        sbmm_job job;
        for (int j = 0; j < n; ++j) {
            const ggml_tensor * mm = cgraph->nodes[i + 2 + j];
            job.add((const char *) mm->src[0]->data, mm->src[0]->nb[1], (float *) mm->data, mm->nb[1] / sizeof(float),
                    nullptr, 0, (int) mm->src[0]->ne[1]);
        }
        const ggml_tensor * ins[2] = { x, w };
        const zero_list z = fold_zeroes(job, sbmm_type(wt), (int) ne0, (int) ncols, ggml_cuda_info().devices[ctx.device].nsm, ins, 2);
        act_buf act(ctx.pool());
        if (wt == GGML_TYPE_F16) {
            act.f16.alloc(ne0 * ncols);
            rms_norm_mul_to_f16<<<dim3((unsigned) ((ne0 + 255) / 256), (unsigned) ncols), 256, 0, stream>>>(
                (const float *) x->data, x->nb[1] / sizeof(float), (const float *) w->data, act.f16.get(), (int) ne0, eps, z);
        } else {
            act.q8.alloc(q8_bytes(ne0, ncols));
            rms_norm_mul_to_q8_1<<<dim3((unsigned) (GGML_PAD(ne0, MATRIX_ROW_PADDING) / 256), (unsigned) ncols), 256, 0, stream>>>(
                (const float *) x->data, x->nb[1] / sizeof(float), (const float *) w->data, (block_q8_1 *) act.q8.get(),
                (int) ne0, (int) GGML_PAD(ne0, MATRIX_ROW_PADDING), eps, z);
        }
        CUDA_CHECK(cudaGetLastError());
        run_job(ctx, wt, mul, job, act.f16.get(), act.q8.get());
        return 2 + n;
    }
    if (node->op == GGML_OP_GLU && i + 1 < cgraph->n_nodes && ggml_get_glu_op(node) == GGML_GLU_OP_SWIGLU &&
        node->src[1] != nullptr && ggml_get_op_params_i32(node, 1) == 0 && ggml_node_has_n_uses(cgraph, i, 1) &&
        act_mm(cgraph->nodes[i + 1], node)) {
        const ggml_tensor * g = node->src[0];
        const ggml_tensor * u = node->src[1];
        if (!f32_cols(g) || !f32_cols(u) || !f32_cols(node) || !ggml_is_contiguous(node) ||
            !ggml_are_same_shape(g, node) || !ggml_are_same_shape(u, node)) {
            return 0;
        }
        const ggml_tensor * mm = cgraph->nodes[i + 1];
        sbmm_job job;
        const bool with_add = residual_job(ctx, cgraph, i + 1, true, job);
        if (!with_add) {
            job.add((const char *) mm->src[0]->data, mm->src[0]->nb[1], (float *) mm->data, mm->nb[1] / sizeof(float),
                    nullptr, 0, (int) mm->src[0]->ne[1]);
        }
        const int64_t n = node->ne[0];
        const int64_t ncols = node->ne[1];
        const ggml_type wt = mm->src[0]->type;
        const ggml_tensor * ins[2] = { g, u };
        const zero_list z = fold_zeroes(job, sbmm_type(wt), (int) n, (int) ncols, ggml_cuda_info().devices[ctx.device].nsm, ins, 2);
        act_buf act(ctx.pool());
        if (wt == GGML_TYPE_F16) {
            act.f16.alloc(n * ncols);
            const int64_t total = n * ncols;
            swiglu_to_f16<<<(unsigned) ((total + 255) / 256), 256, 0, stream>>>(
                (const float *) g->data, g->nb[1] / sizeof(float), (const float *) u->data, u->nb[1] / sizeof(float),
                act.f16.get(), (int) n, (int) ncols, z);
        } else {
            const int64_t n_padded = GGML_PAD(n, MATRIX_ROW_PADDING);
            act.q8.alloc(q8_bytes(n, ncols));
            swiglu_to_q8_1<<<dim3((unsigned) (n_padded / 256), (unsigned) ncols), 256, 0, stream>>>(
                (const float *) g->data, g->nb[1] / sizeof(float), (const float *) u->data, u->nb[1] / sizeof(float),
                (block_q8_1 *) act.q8.get(), (int) n, (int) n_padded, z);
        }
        CUDA_CHECK(cudaGetLastError());
        run_job(ctx, wt, node, job, act.f16.get(), act.q8.get());
        return with_add ? 3 : 2;
    }
    return 0;
}

int ggml_cuda_sbmm_try_fuse(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i) {
    if (!env().fuse) {
        return 0;
    }
    const int cc = ggml_cuda_info().devices[ctx.device].cc;
    ggml_tensor * a = cgraph->nodes[i];
    if (env().fuse_act && (a->op == GGML_OP_RMS_NORM || a->op == GGML_OP_GLU)) {
        return fused_act(ctx, cgraph, i, cc);
    }
    if (!sbmm_fusable_mm(a, cc)) {
        return 0;
    }
    const ggml_tensor * src1 = a->src[1];

    // siblings: consecutive MUL_MATs on the same activations (adjacent after ggml_cuda_sbmm_group_siblings)
    int n = 1;
    while (i + n < cgraph->n_nodes && n < sbmm::max_segs && sbmm_fusable_mm(cgraph->nodes[i + n], cc) &&
           sbmm_siblings(a, cgraph->nodes[i + n])) {
        ++n;
    }
    if (n > 1) {
        sbmm_job job;
        for (int j = 0; j < n; ++j) {
            const ggml_tensor * mm = cgraph->nodes[i + j];
            job.add((const char *) mm->src[0]->data, mm->src[0]->nb[1], (float *) mm->data, mm->nb[1] / sizeof(float),
                    nullptr, 0, (int) mm->src[0]->ne[1]);
        }
        run_job(ctx, a->src[0]->type, src1, job);
        return n;
    }

    // MUL_MAT + ADD of a tensor of the same shape (the residual): dst = W x + residual, in the ADD's tensor
    sbmm_job job;
    if (!residual_job(ctx, cgraph, i, false, job)) {
        return 0;
    }
    run_job(ctx, a->src[0]->type, src1, job);
    return 2;
}
