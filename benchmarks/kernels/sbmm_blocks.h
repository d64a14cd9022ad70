// Small-batch matmul (sbmm): the per-lane pieces of the kernel, written once for the GPU and the CPU.
//
// y[n, m] = x[n, k] . W[m, k]^T for n = 1..16 columns (the rows of a verify batch), W in ggml's own block
// layouts (vendor/llama.cpp/ggml/src/ggml-common.h: block_q4_0, block_q8_0, block_q4_K, block_q6_K; activations as
// block_q8_1, quantized exactly as ggml-cuda/quantize.cu quantize_q8_1 does, or f32 for f16 weights).
//
// The kernel (sbmm.cuh) runs one tensor-core mma per weight block for all columns at once:
//   int8:  mma.sync.m16n8k32.row.col.s32.s8.s8.s32  A = 16 weight rows x 32 k (one q4_0/q8_0 block, or one
//          32-value sub-block of q4_K), B = 32 k x 8 columns (one q8_1 block per column);
//   q6_K:  mma.sync.m16n8k16 s8, one per 16 values (one int8 scale each), two per q8_1 block;
//   f16:   mma.sync.m16n8k16.row.col.f32.f16.f16.f32, two per 32 k.
// Each weight block is read once from memory for all n columns and dequantized in registers (nibble masks,
// then per-row scales after the integer mma), as IST-DASLab/marlin does for 4-bit weights. Because a dot
// product is a sum over k, a lane may hold any k of its fragment as long as A and B agree; the loaders
// below choose the k order that lets each lane read contiguous bytes of ggml's blocks.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k32 / m16n8k16"), g = lane / 4, t = lane % 4:
//   s8 A regs:  0: (row g,   k 4t..4t+3)  1: (row g+8, k 4t..)  2: (row g, k 16+4t..)  3: (row g+8, k 16+4t..)
//   s8 B regs:  0: (k 4t..4t+3, col g)     1: (k 16+4t.., col g)
//   (m16n8k16 s8, q6_K: A regs 0 and 1, B reg 0 of the above: the first 16 k of the k32 layout)
//   f16 A regs: 0: (row g, k 2t,2t+1)      1: (row g+8, k 2t..)  2: (row g, k 2t+8..)   3: (row g+8, k 2t+8..)
//   f16 B regs: 0: (k 2t,2t+1, col g)      1: (k 2t+8,2t+9, col g)
//   C (s32 or f32) regs: r: row g + 8*(r/2), col 2t + r%2
// cpu_emulate.cpp builds the 16x32 / 32x8 matrices from these lane registers per that table (not from
// the loaders' own view), so a loader that disagrees with the PTX layout fails the CPU check.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define SB_HD __host__ __device__ __forceinline__
#else
#define SB_HD inline
#endif

namespace sbmm {

// ---- ggml's block layouts (ggml-common.h), byte for byte -------------------------------------------------
// (lower-case names: ggml defines QK4_0 etc. as macros, and this header is also compiled inside ggml-cuda)
constexpr int qk4_0 = 32;
constexpr int qk8_0 = 32;
constexpr int qk8_1 = 32;
constexpr int qk_k = 256;
constexpr int k_scale_size = 12;
// ggml-cuda pads each quantized activation column to a multiple of this many values (ggml-cuda/common.cuh)
constexpr int matrix_row_padding = 512;

struct block_q4_0 {            // x = (q - 8) * d
    uint16_t d;                // ggml_half delta
    uint8_t qs[qk4_0 / 2];     // element j in the low nibble of qs[j], element j + 16 in the high nibble
};
struct block_q8_0 {            // x = q * d
    uint16_t d;
    int8_t qs[qk8_0];
};
struct alignas(4) block_q8_1 { // ggml: union { struct { half d; half s; }; half2 ds; }: 4-byte aligned
    uint16_t d;                // delta = amax / 127
    uint16_t s;                // sum of the (unquantized) values of the block, as quantize_q8_1 writes it
    int8_t qs[qk8_1];
};
struct alignas(4) block_q4_K { // x = d * sc[j] * q - dmin * m[j], 8 sub-blocks j of 32
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[k_scale_size]; // 6-bit scales and mins, packed as get_scale_min_k4 reads them
    uint8_t qs[qk_k / 2];         // sub-blocks 2p (low nibbles) and 2p+1 (high nibbles) share qs[32p..32p+31]
};
static_assert(sizeof(block_q4_0) == 18, "wrong q4_0 block size/padding");
static_assert(sizeof(block_q8_0) == 34, "wrong q8_0 block size/padding");
static_assert(sizeof(block_q8_1) == 36, "wrong q8_1 block size/padding");
struct block_q6_K {            // x = d * scales[j] * (q - 32), 16 groups j of 16; 210 bytes: only 2-byte aligned
    uint8_t ql[qk_k / 2];      // low 4 bits: values 128n + 32a + l (a = 0, 1) in ql[64n + 32a + l], low nibble;
                               // values 128n + 64 + 32a + l in the high nibble of the same byte
    uint8_t qh[qk_k / 4];      // high 2 bits: value 128n + 32j + l in bits 2j..2j+1 of qh[32n + l]
    int8_t scales[qk_k / 16];  // value v has scale scales[v / 16]
    uint16_t d;
};
static_assert(sizeof(block_q4_K) == 144, "wrong q4_K block size/padding");
static_assert(sizeof(block_q6_K) == 210, "wrong q6_K block size/padding");

enum WType : int { W_F16 = 0, W_Q4_0 = 1, W_Q8_0 = 2, W_Q4_K = 3, W_Q6_K = 4 };

// One "unit" is what a warp consumes per step along k for one 16-row tile: a q4_0/q8_0 block (32 values),
// a q4_K / q6_K super-block (256 values), or 32 f16 values; nsub: mma steps per unit and 16x8 tile; mma_k: the k
// of each integer mma (32; 16 for q6_K, whose scale changes every 16 values: one mma may not mix two scales).
template <int T> struct wtraits;
template <> struct wtraits<W_F16>  { static constexpr int unit_k = 32;  static constexpr int unit_bytes = 64;  static constexpr int nsub = 2; static constexpr const char * name = "f16"; };
template <> struct wtraits<W_Q4_0> { static constexpr int unit_k = 32;  static constexpr int unit_bytes = 18;  static constexpr int nsub = 1; static constexpr const char * name = "q4_0"; };
template <> struct wtraits<W_Q8_0> { static constexpr int unit_k = 32;  static constexpr int unit_bytes = 34;  static constexpr int nsub = 1; static constexpr const char * name = "q8_0"; };
template <> struct wtraits<W_Q4_K> { static constexpr int unit_k = 256; static constexpr int unit_bytes = 144; static constexpr int nsub = 8; static constexpr const char * name = "q4_K"; };
template <> struct wtraits<W_Q6_K> { static constexpr int unit_k = 256; static constexpr int unit_bytes = 210; static constexpr int nsub = 16; static constexpr const char * name = "q6_K"; };
template <int T> constexpr int mma_k = T == W_Q6_K ? 16 : 32;

// ---- scalar helpers ------------------------------------------------------------------------------------
SB_HD float half_to_float(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { // subnormal: normalize
            exp = 127 - 15 + 1;
            while ((man & 0x400u) == 0) {
                man <<= 1;
                exp--;
            }
            man &= 0x3FFu;
            bits = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
#endif
}

SB_HD uint16_t float_to_half(float f) { // round to nearest even, as __float2half_rn
#ifdef __CUDA_ARCH__
    return __half_as_ushort(__float2half_rn(f));
#else
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7FFFFFFFu;
    if (absx >= 0x7F800000u) { // inf / nan
        return (uint16_t) (sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
    }
    if (absx >= 0x477FF000u) { // rounds to >= 65520: overflow to inf
        return (uint16_t) (sign | 0x7C00u);
    }
    if (absx < 0x38800000u) { // result is subnormal (or zero) in half
        if (absx < 0x33000000u) {
            return (uint16_t) sign;
        }
        const uint32_t e = absx >> 23;
        const uint32_t m = (absx & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126 - e; // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) {
            r++;
        }
        return (uint16_t) (sign | r);
    }
    uint32_t r = absx - 0x38000000u; // rebias exponent 127 -> 15
    const uint32_t rem = r & 0x1FFFu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) {
        r++;
    }
    return (uint16_t) (sign | r);
#endif
}

SB_HD uint32_t pack_half2(float lo, float hi) {
    return (uint32_t) float_to_half(lo) | ((uint32_t) float_to_half(hi) << 16);
}

// ggml-cuda/common.cuh get_int_b2 / get_int_b4: 32 bits from 2-byte / 4-byte aligned storage
SB_HD int get_int_b2(const void * x, int i32) {
    const uint16_t * x16 = (const uint16_t *) x;
    return (int) ((uint32_t) x16[2 * i32 + 0] | ((uint32_t) x16[2 * i32 + 1] << 16));
}
SB_HD int get_int_b4(const void * x, int i32) {
    return ((const int *) x)[i32];
}
// The same for the weights, which no kernel writes: read-only loads (ld.global.nc) on the GPU. The kernel
// picks its weight matrix from a list (sbmm.cuh, struct segs), so the compiler no longer sees a __restrict__
// kernel parameter and would otherwise issue plain loads.
SB_HD uint16_t ro_u16(const uint16_t * p) {
#ifdef __CUDA_ARCH__
    return __ldg(p);
#else
    return *p;
#endif
}
SB_HD int get_int_b2_ro(const void * x, int i32) {
    const uint16_t * x16 = (const uint16_t *) x;
    return (int) ((uint32_t) ro_u16(x16 + 2 * i32 + 0) | ((uint32_t) ro_u16(x16 + 2 * i32 + 1) << 16));
}

// ggml-quants.c get_scale_min_k4: the 6-bit scale and min of sub-block j (0..7) of a q4_K super-block,
// read from its 12 scale bytes given as 3 ints.
SB_HD void q4k_scale_min(const int sc3[3], int j, int & sc, int & mn) {
    uint8_t q[12];
    memcpy(q, sc3, 12);
    if (j < 4) {
        sc = q[j] & 63;
        mn = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        mn = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

// ---- weight fragments: what lane (g, t) reads for rows g and g + 8 of a 16-row tile, one unit ----------
// rA is the raw data kept in registers between the load (issued early, for memory-level parallelism) and
// the mma; afrag turns it into the A registers of sub-step s < wtraits<T>::nsub.
template <int T> struct RawA;
template <> struct RawA<W_Q4_0> { int q[2]; uint16_t d[2]; };
template <> struct RawA<W_Q8_0> { int q[2][2]; uint16_t d[2]; };
template <> struct RawA<W_Q4_K> { int q[2][4][2]; int sc[2][3]; uint16_t d[2]; uint16_t dmin[2]; };
template <> struct RawA<W_F16>  { uint32_t h[2][4]; };
// q6_K, rows g / g + 8 (i): ql[i][n][a][h] = ints 16n + 8a + 4h + t of ql, qh[i][n][h] = ints 8n + 4h + t of qh,
// sc[i] = the 16 int8 scales, d[i]
template <> struct RawA<W_Q6_K> { int ql[2][2][2][2]; int qh[2][2][2]; int sc[2][4]; uint16_t d[2]; };


// row0 / row1: the first byte of rows g and g + 8; u: unit index along k.
SB_HD void load_a(RawA<W_Q4_0> & r, const char * row0, const char * row1, int u, int t) {
    const block_q4_0 * b0 = (const block_q4_0 *) row0 + u;
    const block_q4_0 * b1 = (const block_q4_0 *) row1 + u;
    r.q[0] = get_int_b2_ro(b0->qs, t); // bytes 4t..4t+3: elements 4t.. (low nibbles), 16+4t.. (high)
    r.q[1] = get_int_b2_ro(b1->qs, t);
    r.d[0] = ro_u16(&b0->d);
    r.d[1] = ro_u16(&b1->d);
}
SB_HD void load_a(RawA<W_Q8_0> & r, const char * row0, const char * row1, int u, int t) {
    const block_q8_0 * b0 = (const block_q8_0 *) row0 + u;
    const block_q8_0 * b1 = (const block_q8_0 *) row1 + u;
    r.q[0][0] = get_int_b2_ro(b0->qs, t);
    r.q[0][1] = get_int_b2_ro(b0->qs, t + 4);
    r.q[1][0] = get_int_b2_ro(b1->qs, t);
    r.q[1][1] = get_int_b2_ro(b1->qs, t + 4);
    r.d[0] = ro_u16(&b0->d);
    r.d[1] = ro_u16(&b1->d);
}
SB_HD void load_a(RawA<W_Q4_K> & r, const char * row0, const char * row1, int u, int t) {
    // 144-byte blocks in rows of k/256 * 144 bytes: 16-byte aligned wherever the weights are (the dispatch
    // checks), so the 16-byte header (d, dmin, 12 scale bytes) is one load and each 8 bytes of qs one more:
    // 10 loads per lane and unit instead of 26 (the kernel is bound by load instructions, not by HBM)
    const block_q4_K * b[2] = {(const block_q4_K *) row0 + u, (const block_q4_K *) row1 + u};
    for (int i = 0; i < 2; ++i) {
#ifdef __CUDA_ARCH__
        const uint4 h = __ldg((const uint4 *) b[i]);
        r.d[i] = (uint16_t) (h.x & 0xFFFF);
        r.dmin[i] = (uint16_t) (h.x >> 16);
        r.sc[i][0] = (int) h.y;
        r.sc[i][1] = (int) h.z;
        r.sc[i][2] = (int) h.w;
        for (int p = 0; p < 4; ++p) { // bytes 32p + 8t .. 32p + 8t + 7 of qs
            const int2 v = __ldg((const int2 *) (b[i]->qs + 32 * p + 8 * t));
            r.q[i][p][0] = v.x;
            r.q[i][p][1] = v.y;
        }
#else
        for (int p = 0; p < 4; ++p) { // bytes 32p + 8t .. 32p + 8t + 7 of qs
            r.q[i][p][0] = get_int_b4(b[i]->qs, 8 * p + 2 * t);
            r.q[i][p][1] = get_int_b4(b[i]->qs, 8 * p + 2 * t + 1);
        }
        for (int j = 0; j < 3; ++j) {
            r.sc[i][j] = get_int_b4(b[i]->scales, j);
        }
        r.d[i] = b[i]->d;
        r.dmin[i] = b[i]->dmin;
#endif
    }
}
// 32 bits at int i32 of x, which is 2-byte aligned: one 32-bit load where x is 4-byte aligned (a4), two 16-bit
// loads otherwise. q6_K blocks are 210 bytes, so in rows of an even number of blocks (k % 512 == 0) every other
// block is 4-byte aligned; a4 is the same for a warp's rows there (a uniform branch), and for odd rows it is
// only slower. The emulator takes the same branch and checks the alignment the 32-bit load needs.
SB_HD int get_int_b2_or_b4_ro(const void * x, int i32, bool a4) {
    if (a4) {
#ifdef __CUDA_ARCH__
        return __ldg((const int *) x + i32);
#else
        if ((uintptr_t) x & 3) {
            fprintf(stderr, "sbmm: 32-bit load of a q6_K block that is not 4-byte aligned\n");
            abort();
        }
        return get_int_b4(x, i32);
#endif
    }
    return get_int_b2_ro(x, i32);
}
#ifndef SBMM_Q6K_MUTATION
#define SBMM_Q6K_MUTATION 0 // check_layouts.py's q6_K mutation checks build the emulator with 1 (the high bits read
#endif                      // from the next lane's int of qh) and 2 (the scale of the other half): both must fail
SB_HD void load_a(RawA<W_Q6_K> & r, const char * row0, const char * row1, int u, int t) {
    // Lane t holds, of each 32-value group (one q8_1 block) and each half h of it (16 values, one scale), the
    // values 16h + 4t .. 16h + 4t + 3: the k order of the m16n8k16 mma (A reg: row, k 4t..4t+3), and 4 bytes
    // in a row of both ql and qh. 12 ints of quants + 4 of scales (all 16, each lane: 4 loads instead of a
    // shuffle) + d per row.
    const block_q6_K * b[2] = {(const block_q6_K *) (row0 + (long long) u * 210),
                               (const block_q6_K *) (row1 + (long long) u * 210)};
    for (int i = 0; i < 2; ++i) {
        const bool a4 = ((uintptr_t) b[i] & 3) == 0;
        for (int n = 0; n < 2; ++n) {
            for (int h = 0; h < 2; ++h) {
                r.ql[i][n][0][h] = get_int_b2_or_b4_ro(b[i]->ql, 16 * n + 4 * h + t, a4);
                r.ql[i][n][1][h] = get_int_b2_or_b4_ro(b[i]->ql, 16 * n + 8 + 4 * h + t, a4);
                r.qh[i][n][h] = get_int_b2_or_b4_ro(b[i]->qh, 8 * n + 4 * h + (t + (SBMM_Q6K_MUTATION == 1)) % 4, a4);
            }
        }
        for (int j = 0; j < 4; ++j) {
            r.sc[i][j] = get_int_b2_or_b4_ro(b[i]->scales, j, a4);
        }
        r.d[i] = ro_u16(&b[i]->d);
    }
}
SB_HD void load_a(RawA<W_F16> & r, const char * row0, const char * row1, int u, int t) {
    // 8 contiguous halves (16 bytes) at k = 32u + 8t of each row
#ifdef __CUDA_ARCH__
    const uint4 v0 = __ldg((const uint4 *) row0 + 4 * u + t);
    const uint4 v1 = __ldg((const uint4 *) row1 + 4 * u + t);
    r.h[0][0] = v0.x; r.h[0][1] = v0.y; r.h[0][2] = v0.z; r.h[0][3] = v0.w;
    r.h[1][0] = v1.x; r.h[1][1] = v1.y; r.h[1][2] = v1.z; r.h[1][3] = v1.w;
#else
    memcpy(r.h[0], row0 + 64 * u + 16 * t, 16);
    memcpy(r.h[1], row1 + 64 * u + 16 * t, 16);
#endif
}

SB_HD void afrag(const RawA<W_Q4_0> & r, int s, int a[4]) {
    (void) s;
    a[0] = r.q[0] & 0x0F0F0F0F;        // row g,   logical k 4t..    = elements 4t..4t+3
    a[1] = r.q[1] & 0x0F0F0F0F;        // row g+8
    a[2] = (r.q[0] >> 4) & 0x0F0F0F0F; // row g,   logical k 16+4t.. = elements 16+4t..
    a[3] = (r.q[1] >> 4) & 0x0F0F0F0F; // row g+8
}
SB_HD void afrag(const RawA<W_Q8_0> & r, int s, int a[4]) {
    (void) s;
    a[0] = r.q[0][0];
    a[1] = r.q[1][0];
    a[2] = r.q[0][1];
    a[3] = r.q[1][1];
}
SB_HD void afrag(const RawA<W_Q4_K> & r, int s, int a[4]) {
    // sub-block s = 2p + h: nibble h of qs[32p..]; logical k-int t = physical bytes 8t..8t+3,
    // logical k-int t+4 = physical bytes 8t+4..8t+7 (the B loader uses the same order)
    const int p = s >> 1;
    const int sh = 4 * (s & 1);
    a[0] = (r.q[0][p][0] >> sh) & 0x0F0F0F0F;
    a[1] = (r.q[1][p][0] >> sh) & 0x0F0F0F0F;
    a[2] = (r.q[0][p][1] >> sh) & 0x0F0F0F0F;
    a[3] = (r.q[1][p][1] >> sh) & 0x0F0F0F0F;
}
// q6_K: 4 values 0..63 per int to 4 int8 values q - 32, exactly: the bytes of q | 0x80808080 are 128..191, so
// subtracting 32 from each borrows from no neighbour; the xor returns the sign bit (MMVQ's __vsubss4 the SWAR way)
SB_HD int q6_minus_32(int q) {
    return (int) ((((uint32_t) q | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
}
SB_HD void afrag(const RawA<W_Q6_K> & r, int s, int a[4]) {
    // step s = 2 * (4n + j) + h: 32-value group 4n + j (q8_1 block 8u + 4n + j), half h; the group's low bits are
    // nibble j / 2 of ql[64n + 32 (j % 2) + ..], its high bits bits 2j..2j+1 of qh[32n + ..]. The k16 mma reads
    // a[0] (row g) and a[1] (row g + 8) only.
    const int h = s & 1;
    const int j = (s >> 1) & 3;
    const int n = s >> 3;
    for (int i = 0; i < 2; ++i) {
        const int lo = (r.ql[i][n][j & 1][h] >> (4 * (j >> 1))) & 0x0F0F0F0F;
        const int hi = ((r.qh[i][n][h] >> (2 * j)) & 0x03030303) << 4;
        a[i] = q6_minus_32(lo | hi);
    }
    a[2] = 0;
    a[3] = 0;
}
SB_HD void afrag(const RawA<W_F16> & r, int s, int a[4]) {
    // mma s of the unit: logical k (2t, 2t+1) = physical 32u + 8t + 4s + (0, 1); (2t+8, 2t+9) = ... + (2, 3)
    a[0] = (int) r.h[0][2 * s + 0];
    a[1] = (int) r.h[1][2 * s + 0];
    a[2] = (int) r.h[0][2 * s + 1];
    a[3] = (int) r.h[1][2 * s + 1];
}

// ---- staged weight loads (Marlin's way: sbmm_kernel<..., ST = 1 or 2>, q4_0 / q8_0) -----------------------
// The register path above reads q4_0 / q8_0 blocks (18 / 34 bytes, so only 2-byte aligned) with 16-bit loads
// of 8 different rows per warp instruction: on the H200 that runs at 0.7-1.1 TB/s, bound by load
// instructions and L1 wavefronts, not by HBM. The staged path copies a warp's chunk of U consecutive units
// (U % 8 == 0) of each of its 16*MT rows -- one contiguous stretch of U * unit_bytes bytes per row (8 q4_0
// blocks = 144 bytes = 9 x 16 B, 8 q8_0 blocks = 272 = 17 x 16 B) -- into shared memory with 16-byte
// cp.async (each 16 B of HBM read once, by one lane, with consecutive lanes on consecutive pieces), then each
// lane builds exactly the RawA the register path builds, from shared memory (load_a_staged). Alignment: a
// stretch starts at unit u0 = chunk * U, byte u0 * unit_bytes (a multiple of 144 / 272, so of 16), in a row
// of row_bytes = (k / 32) * unit_bytes bytes (k % 256 == 0: a multiple of 16): so the weights' base address
// and row stride must be 16-byte aligned, which the dispatch checks (ggml_cuda_should_use_sbmm).
// In shared memory the stretch rows lie back to back (row rl at rl * SROW): piece p of a chunk is stretch
// row p / P, piece p % P, at byte 16 * p (linear: conflict-free); the stretch rows of 144 / 272 bytes put
// the 8 rows g of a lane-read instruction on banks 4g.. (conflict-free too). q4_K (144-byte blocks, always
// 16-byte aligned, U = 1 or 2) takes the same path, and so does f16 (64-byte units: any U; the lanes' 16-byte
// reads of one row cover 64 bytes, so the stretch rows are padded to an odd multiple of 64 bytes, putting rows
// g and g + 1 of a quarter-warp's 128-byte phase on distinct banks).
#ifdef __CUDA_ARCH__
#define SB_UNROLL _Pragma("unroll")
#else
#define SB_UNROLL
#endif
#ifndef SBMM_STAGE_INDEX_SKEW
#define SBMM_STAGE_INDEX_SKEW 0 // check_layouts.py's mutation check builds the emulator with 1: an off-by-one
#endif                          // in the piece index, which its staged checks must catch
#ifndef SBMM_STAGE_B_INDEX_SKEW
#define SBMM_STAGE_B_INDEX_SKEW 0 // the same for the staged activations only
#endif

// q4_K (144-byte blocks, so any U): its stretch rows are read with 16- and 8-byte ld.shared; for U = 1 they
// are padded to 160 bytes (40 words: the 4 rows of a half-warp's 8-byte reads on distinct banks; 288 bytes,
// U = 2, already are).
template <int T, int U> struct stage_traits {
    static_assert(T == W_Q4_0 || T == W_Q8_0 || T == W_Q4_K || T == W_F16, "the staged path: q4_0, q8_0, q4_K, f16");
    static_assert(T == W_Q4_K ? (U == 1 || U == 2) : T == W_F16 ? U >= 1 : U % 8 == 0,
                  "a stretch of U blocks is a whole number of 16-byte pieces only for U % 8 == 0 (q4_0, q8_0)");
    static constexpr int srow = U * wtraits<T>::unit_bytes;               // bytes of one row's stretch
    static constexpr int pieces = srow / 16;                              // 16-byte pieces per stretch row
    static constexpr int pad = T == W_Q4_K && U == 1 ? 16 : T == W_F16 && srow % 128 == 0 ? 64 : 0;
    static constexpr int sstride = srow + pad;                            // shared-memory bytes per row
};

// piece p of a chunk -> (stretch row rl, piece j of that row); the piece of the row it is copied from is
// src_piece(j): j itself (the mutation check's SBMM_STAGE_INDEX_SKEW = 1 makes it j + 1, an off-by-one)
SB_HD void stage_piece(int p, int pieces, int & rl, int & j) {
    rl = p / pieces;
    j = p - rl * pieces;
}
SB_HD int src_piece(int j, int pieces) {
    return (j + SBMM_STAGE_INDEX_SKEW) % pieces;
}

SB_HD void copy16(char * dst_smem, const char * src) {
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned) __cvta_generic_to_shared(dst_smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
#else
    if (((uintptr_t) dst_smem | (uintptr_t) src) & 15) { // what cp.async requires: the emulator checks it
        fprintf(stderr, "sbmm: copy16 of a piece that is not 16-byte aligned\n");
        abort();
    }
    memcpy(dst_smem, src, 16);
#endif
}

// This lane's share of staging the chunk at units u0 .. u0 + nu - 1 (nu % 8 == 0) of the rows row_base ..
// row_base + 16*MT - 1 (clamped to m - 1, as the register path clamps them; the store drops those rows)
// into buf (16*MT stretch rows, stage_traits<T, U>::sstride bytes apart).
template <int T, int MT, int U>
SB_HD void stage_chunk(char * buf, const char * W, long long row_bytes, int row_base, int m, int u0, int nu, int lane) {
    constexpr int P = stage_traits<T, U>::pieces;
    constexpr int NP = 16 * MT * P;
    const int pv = nu * wtraits<T>::unit_bytes / 16; // valid pieces per stretch row
SB_UNROLL
    for (int q = 0; q < (NP + 31) / 32; ++q) {
        const int p = lane + 32 * q;
        if (p < NP) {
            int rl, j;
            stage_piece(p, P, rl, j);
            if (j < pv) {
                const int r = row_base + rl < m ? row_base + rl : m - 1;
                copy16(buf + rl * stage_traits<T, U>::sstride + 16 * j,
                       W + (long long) r * row_bytes + (long long) u0 * wtraits<T>::unit_bytes + 16 * src_piece(j, P));
            }
        }
    }
}

SB_HD void ld_vec(const char * p, uint32_t * v, int n) { // n = 2 / 4 words, p 8 / 16-byte aligned
#ifdef __CUDA_ARCH__
    if (n == 4) {
        const uint4 x = *(const uint4 *) p;
        v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
    } else {
        const uint2 x = *(const uint2 *) p;
        v[0] = x.x; v[1] = x.y;
    }
#else
    if ((uintptr_t) p & (4 * n - 1)) {
        fprintf(stderr, "sbmm: %d-byte shared-memory read that is not %d-byte aligned\n", 4 * n, 4 * n);
        abort();
    }
    memcpy(v, p, 4 * (size_t) n);
#endif
}
SB_HD uint32_t ld32(const char * p) { // p 4-byte aligned (the emulator checks it)
#ifdef __CUDA_ARCH__
    return *(const uint32_t *) p;
#else
    if ((uintptr_t) p & 3) {
        fprintf(stderr, "sbmm: 32-bit shared-memory read that is not 4-byte aligned\n");
        abort();
    }
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}
// 32 / 16 bits at p (2-byte aligned) by 4-byte aligned reads; a2: p % 4 == 2 (the stretch rows are 16-byte
// aligned and the unit index is unrolled, so the kernel knows a2 at compile time)
SB_HD int ld_int_staged(const char * p, bool a2) {
    if (!a2) {
        return (int) ld32(p);
    }
    return (int) ((ld32(p - 2) >> 16) | (ld32(p + 2) << 16));
}
SB_HD uint16_t ld_half_staged(const char * p, bool a2) {
    return a2 ? (uint16_t) (ld32(p - 2) >> 16) : (uint16_t) (ld32(p) & 0xFFFFu);
}

// unit i (0 .. U-1) of the chunk for this lane's rows: s0 / s1 = their stretch rows in shared memory (rows
// 16*mt + g and 16*mt + g + 8); the same RawA as load_a on the unit in global memory.
SB_HD void load_a_staged(RawA<W_Q4_0> & r, const char * s0, const char * s1, int i, int t) {
    const int o = i * wtraits<W_Q4_0>::unit_bytes; // block i: d at o, qs at o + 2
    const bool qa = ((o + 2) & 3) != 0;
    const bool da = (o & 3) != 0;
    r.q[0] = ld_int_staged(s0 + o + 2 + 4 * t, qa);
    r.q[1] = ld_int_staged(s1 + o + 2 + 4 * t, qa);
    r.d[0] = ld_half_staged(s0 + o, da);
    r.d[1] = ld_half_staged(s1 + o, da);
}
SB_HD void load_a_staged(RawA<W_Q4_K> & r, const char * s0, const char * s1, int i, int t) {
    // as load_a's device branch: the 16-byte header (d, dmin, 12 scale bytes), then 8 bytes of qs per p
    const char * b[2] = {s0 + i * wtraits<W_Q4_K>::unit_bytes, s1 + i * wtraits<W_Q4_K>::unit_bytes};
    for (int k = 0; k < 2; ++k) {
        uint32_t h[4];
        ld_vec(b[k], h, 4);
        r.d[k] = (uint16_t) (h[0] & 0xFFFFu);
        r.dmin[k] = (uint16_t) (h[0] >> 16);
        r.sc[k][0] = (int) h[1];
        r.sc[k][1] = (int) h[2];
        r.sc[k][2] = (int) h[3];
        for (int p = 0; p < 4; ++p) {
            uint32_t v[2];
            ld_vec(b[k] + 16 + 32 * p + 8 * t, v, 2);
            r.q[k][p][0] = (int) v[0];
            r.q[k][p][1] = (int) v[1];
        }
    }
}
SB_HD void load_a_staged(RawA<W_F16> & r, const char * s0, const char * s1, int i, int t) {
    // as load_a: 8 contiguous halves (16 bytes) at k = 32i + 8t of the stretch of each row
    ld_vec(s0 + 64 * i + 16 * t, r.h[0], 4);
    ld_vec(s1 + 64 * i + 16 * t, r.h[1], 4);
}
SB_HD void load_a_staged(RawA<W_Q8_0> & r, const char * s0, const char * s1, int i, int t) {
    const int o = i * wtraits<W_Q8_0>::unit_bytes;
    const bool qa = ((o + 2) & 3) != 0;
    const bool da = (o & 3) != 0;
    r.q[0][0] = ld_int_staged(s0 + o + 2 + 4 * t, qa);
    r.q[0][1] = ld_int_staged(s0 + o + 2 + 16 + 4 * t, qa);
    r.q[1][0] = ld_int_staged(s1 + o + 2 + 4 * t, qa);
    r.q[1][1] = ld_int_staged(s1 + o + 2 + 16 + 4 * t, qa);
    r.d[0] = ld_half_staged(s0 + o, da);
    r.d[1] = ld_half_staged(s1 + o, da);
}

// ---- activation fragments: column c of the B tile (lane's g), plus the scales of its C columns ----------
// For the int8 types, y is block_q8_1 [ncols][stride_col_y blocks]; for f16, float [ncols][stride_col_y].
// cB: the column this lane loads for B (tile base + g); c0: the first of the two C columns it owns
// (tile base + 2t). Columns >= ncols read nothing and contribute zero.
template <int T> struct RawB;
template <> struct RawB<W_Q4_0> { int q[2]; uint32_t ds[2]; };
template <> struct RawB<W_Q8_0> { int q[2]; uint32_t ds[2]; };
template <> struct RawB<W_Q4_K> { int q[8][2]; uint32_t ds[8][2]; };
// q6_K: q[s][h] = int 4h + t of q8_1 block 8u + s; d2[s] = the d of that block in columns c0 (low half) and c0 + 1
// (high half): its epilogue needs no block sum, and the packing saves 8 registers per column tile (the NT = 2
// configurations spilled without it)
template <> struct RawB<W_Q6_K> { int q[8][2]; uint32_t d2[8]; };
template <> struct RawB<W_F16>  { uint32_t h[4]; };

SB_HD uint32_t ds_of(const block_q8_1 * b) {
    return (uint32_t) b->d | ((uint32_t) b->s << 16);
}

template <int T>
SB_HD void load_b_q8(RawB<T> & r, const block_q8_1 * y, long long stride_col_y, int ncols, int cB, int c0, int u, int t) {
    if constexpr (T == W_Q6_K) {
        // bytes 4t..4t+3 of each half of 16 values (its k16 mma): ints t and t + 4, as q4_0 / q8_0
        for (int s = 0; s < 8; ++s) {
            const int ib = 8 * u + s;
            if (cB < ncols) {
                const block_q8_1 * b = y + cB * stride_col_y + ib;
                r.q[s][0] = get_int_b4(b->qs, t);
                r.q[s][1] = get_int_b4(b->qs, t + 4);
            } else {
                r.q[s][0] = 0;
                r.q[s][1] = 0;
            }
            uint32_t d2 = 0;
            for (int j = 0; j < 2; ++j) {
                d2 |= c0 + j < ncols ? (ds_of(y + (c0 + j) * stride_col_y + ib) & 0xFFFFu) << (16 * j) : 0u;
            }
            r.d2[s] = d2;
        }
    } else if constexpr (T == W_Q4_K) {
        for (int s = 0; s < 8; ++s) {
            const int ib = 8 * u + s;
            if (cB < ncols) {
                const block_q8_1 * b = y + cB * stride_col_y + ib;
                r.q[s][0] = get_int_b4(b->qs, 2 * t);
                r.q[s][1] = get_int_b4(b->qs, 2 * t + 1);
            } else {
                r.q[s][0] = 0;
                r.q[s][1] = 0;
            }
            for (int j = 0; j < 2; ++j) {
                r.ds[s][j] = c0 + j < ncols ? ds_of(y + (c0 + j) * stride_col_y + ib) : 0u;
            }
        }
    } else {
        if (cB < ncols) {
            const block_q8_1 * b = y + cB * stride_col_y + u;
            r.q[0] = get_int_b4(b->qs, t);
            r.q[1] = get_int_b4(b->qs, t + 4);
        } else {
            r.q[0] = 0;
            r.q[1] = 0;
        }
        for (int j = 0; j < 2; ++j) {
            r.ds[j] = c0 + j < ncols ? ds_of(y + (c0 + j) * stride_col_y + u) : 0u;
        }
    }
}

// Staged activations (SB, with the staged weights): the chunk's q8_1 blocks u0 .. u0 + U - 1 of each of the
// 8*NT columns of the warp's column tiles (U * 36 contiguous bytes per column; 16-byte aligned: the q8_1
// buffer is, and its column stride is a multiple of 512 values = 16 blocks = 576 bytes) are copied the same
// way, columns >= ncols zero-filled (as load_b_q8 zeroes them), one column at c * crow; the 16 bytes of
// padding per column put the 8 columns g of a lane-read instruction on distinct banks (76 words apart).
template <int T, int U> struct stage_b_traits {
    static constexpr int bpu = wtraits<T>::unit_k / qk8_1; // q8_1 blocks per unit: 1, or 8 for q4_K
    static_assert(U * bpu % 4 == 0, "a chunk's q8_1 blocks are whole 16-byte pieces only for U * bpu % 4 == 0");
    static constexpr int pieces = U * bpu * (int) sizeof(block_q8_1) / 16;
    static constexpr int crow = U * bpu * (int) sizeof(block_q8_1) + 16;
};

SB_HD void copy16_zfill(char * dst_smem, const char * src, bool valid) { // !valid: 16 zero bytes
#ifdef __CUDA_ARCH__
    const unsigned s = (unsigned) __cvta_generic_to_shared(dst_smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0) : "memory");
#else
    if (((uintptr_t) dst_smem | (uintptr_t) src) & 15) {
        fprintf(stderr, "sbmm: copy16 of a piece that is not 16-byte aligned\n");
        abort();
    }
    if (valid) {
        memcpy(dst_smem, src, 16);
    } else {
        memset(dst_smem, 0, 16);
    }
#endif
}

template <int T, int NT, int U>
SB_HD void stage_b_chunk(char * buf, const block_q8_1 * y, long long stride_col_y, int ncols, int u0, int nu, int lane) {
    using BT = stage_b_traits<T, U>;
    constexpr int P = BT::pieces;
    constexpr int NP = 8 * NT * P;
    const int pv = nu * BT::bpu * (int) sizeof(block_q8_1) / 16; // nu % 8 == 0, or q4_K
SB_UNROLL
    for (int q = 0; q < (NP + 31) / 32; ++q) {
        const int p = lane + 32 * q;
        if (p < NP) {
            int c, j;
            stage_piece(p, P, c, j);
            if (j < pv) {
                const char * src = (const char *) (y + (long long) (c < ncols ? c : 0) * stride_col_y + u0 * BT::bpu) +
                                    16 * ((src_piece(j, P) + SBMM_STAGE_B_INDEX_SKEW) % P);
                copy16_zfill(buf + c * BT::crow + 16 * j, src, c < ncols);
            }
        }
    }
}

// unit i of the chunk: the same RawB as load_b_q8 (cB, c0 relative to the staged columns: 8*nt + g, 8*nt + 2t)
template <int T, int U>
SB_HD void load_b_staged(RawB<T> & r, const char * buf, int cB, int c0, int i, int t) {
    constexpr int CROW = stage_b_traits<T, U>::crow;
    constexpr int QB = (int) sizeof(block_q8_1);
    if constexpr (T == W_Q4_K) { // sub-block s = q8_1 block 8i + s: ints 2t, 2t + 1 of qs (as load_b_q8)
        for (int s = 0; s < 8; ++s) {
            const char * b = buf + cB * CROW + (8 * i + s) * QB;
            r.q[s][0] = (int) ld32(b + 4 + 8 * t);
            r.q[s][1] = (int) ld32(b + 8 + 8 * t);
            for (int j = 0; j < 2; ++j) {
                r.ds[s][j] = ld32(buf + (c0 + j) * CROW + (8 * i + s) * QB);
            }
        }
    } else {
        const char * b = buf + cB * CROW + i * QB;
        r.q[0] = (int) ld32(b + 4 + 4 * t);
        r.q[1] = (int) ld32(b + 4 + 16 + 4 * t);
        for (int j = 0; j < 2; ++j) {
            r.ds[j] = ld32(buf + (c0 + j) * CROW + i * QB);
        }
    }
}

SB_HD void load_b_f32(RawB<W_F16> & r, const float * y, long long stride_col_y, int ncols, int cB, int u, int t) {
    if (cB < ncols) {
        const float * p = y + cB * stride_col_y + 32 * u + 8 * t;
#ifdef __CUDA_ARCH__
        const float4 f0 = *((const float4 *) p + 0);
        const float4 f1 = *((const float4 *) p + 1);
        r.h[0] = pack_half2(f0.x, f0.y);
        r.h[1] = pack_half2(f0.z, f0.w);
        r.h[2] = pack_half2(f1.x, f1.y);
        r.h[3] = pack_half2(f1.z, f1.w);
#else
        for (int i = 0; i < 4; ++i) {
            r.h[i] = pack_half2(p[2 * i], p[2 * i + 1]);
        }
#endif
    } else {
        r.h[0] = r.h[1] = r.h[2] = r.h[3] = 0u;
    }
}

// f16 activations (HB; in the ggml patch behind GGML_CUDA_SBMM_F16_HALF=1): the same 8 halves as load_b_f32 makes, read as one 16-byte load
// from an f16 copy of the activations ([ncols][stride_col_y] halves; 16-byte aligned: stride % 8 == 0)
SB_HD void load_b_f16(RawB<W_F16> & r, const uint16_t * y, long long stride_col_y, int ncols, int cB, int u, int t) {
    if (cB < ncols) {
        const uint16_t * p = y + cB * stride_col_y + 32 * u + 8 * t;
#ifdef __CUDA_ARCH__
        const uint4 v = *(const uint4 *) p;
        r.h[0] = v.x; r.h[1] = v.y; r.h[2] = v.z; r.h[3] = v.w;
#else
        memcpy(r.h, p, 16);
#endif
    } else {
        r.h[0] = r.h[1] = r.h[2] = r.h[3] = 0u;
    }
}

template <int T> SB_HD void bfrag(const RawB<T> & r, int s, int b[2]) {
    if constexpr (T == W_Q4_K) {
        b[0] = r.q[s][0];
        b[1] = r.q[s][1];
    } else if constexpr (T == W_Q6_K) { // step s = 2 * group + half; the k16 mma reads b[0] only
        b[0] = r.q[s >> 1][s & 1];
        b[1] = 0;
    } else if constexpr (T == W_F16) {
        b[0] = (int) r.h[2 * s + 0];
        b[1] = (int) r.h[2 * s + 1];
    } else {
        (void) s;
        b[0] = r.q[0];
        b[1] = r.q[1];
    }
}

// ---- epilogue of one integer mma: scale its s32 results into the f32 accumulators -----------------------
// c[r]: row g + 8*(r/2) (weight row index 0/1 of RawA), column 2t + r%2 (ds index of RawB).
SB_HD float ds_d(uint32_t ds) { return half_to_float((uint16_t) (ds & 0xFFFFu)); }
SB_HD float ds_s(uint32_t ds) { return half_to_float((uint16_t) (ds >> 16)); }

SB_HD void epilogue(const RawA<W_Q4_0> & a, const RawB<W_Q4_0> & b, int s, const int c[4], float acc[4]) {
    (void) s;
    for (int r = 0; r < 4; ++r) {
        const float dw = half_to_float(a.d[r >> 1]);
        const uint32_t ds = b.ds[r & 1];
        // vecdotq.cuh vec_dot_q4_0_q8_1_impl: d4 * (sumi * d8 - 8 * s8), the -8 applied through the sum
        acc[r] += dw * ((float) c[r] * ds_d(ds) - 8.0f * ds_s(ds));
    }
}
SB_HD void epilogue(const RawA<W_Q8_0> & a, const RawB<W_Q8_0> & b, int s, const int c[4], float acc[4]) {
    (void) s;
    for (int r = 0; r < 4; ++r) {
        acc[r] += half_to_float(a.d[r >> 1]) * ds_d(b.ds[r & 1]) * (float) c[r];
    }
}
SB_HD void epilogue(const RawA<W_Q4_K> & a, const RawB<W_Q4_K> & b, int s, const int c[4], float acc[4]) {
    for (int i = 0; i < 2; ++i) { // weight row g (i = 0) or g + 8 (i = 1)
        int sc, mn;
        q4k_scale_min(a.sc[i], s, sc, mn);
        const float dsc = half_to_float(a.d[i]) * (float) sc;
        const float dmn = half_to_float(a.dmin[i]) * (float) mn;
        for (int j = 0; j < 2; ++j) {
            const uint32_t ds = b.ds[s][j];
            // sum_k (d*sc*q - dmin*m) * x = d*sc * d8 * sumi - dmin*m * sum(x); the sum is q8_1's s
            acc[2 * i + j] += dsc * ds_d(ds) * (float) c[2 * i + j] - dmn * ds_s(ds);
        }
    }
}

SB_HD void epilogue(const RawA<W_Q6_K> & a, const RawB<W_Q6_K> & b, int s, const int c[4], float acc[4]) {
    // step s: 16 values of one scale, scales[s] (s = 2 * group + half, group = q8_1 block); the -32 is already in
    // the int8 fragment (q6_minus_32). It cannot go through q8_1's sum as q4_K's dmin does: that sum covers the
    // block's 32 values, which have two different scales here.
    for (int i = 0; i < 2; ++i) {
        const int ss = SBMM_Q6K_MUTATION == 2 ? s ^ 1 : s;
        const int sc = (int) (int8_t) (a.sc[i][ss >> 2] >> (8 * (ss & 3)));
        const float dsc = half_to_float(a.d[i]) * (float) sc;
        for (int j = 0; j < 2; ++j) {
            acc[2 * i + j] += dsc * half_to_float((uint16_t) (b.d2[s >> 1] >> (16 * j))) * (float) c[2 * i + j];
        }
    }
}

// ---- plain dequantization (the reference; also checked against gguf-py on the CPU) ---------------------
// Writes unit u of a row as unit_k floats.
SB_HD void dequant_unit(const block_q4_0 * b, float * out) {
    const float d = half_to_float(b->d);
    for (int j = 0; j < 16; ++j) {
        out[j] = (float) ((b->qs[j] & 0xF) - 8) * d;
        out[j + 16] = (float) ((b->qs[j] >> 4) - 8) * d;
    }
}
SB_HD void dequant_unit(const block_q8_0 * b, float * out) {
    const float d = half_to_float(b->d);
    for (int j = 0; j < 32; ++j) {
        out[j] = (float) b->qs[j] * d;
    }
}
SB_HD void dequant_unit(const block_q4_K * b, float * out) {
    const float d = half_to_float(b->d);
    const float dmin = half_to_float(b->dmin);
    int sc3[3];
    memcpy(sc3, b->scales, 12);
    for (int p = 0; p < 4; ++p) {
        int sc0, m0, sc1, m1;
        q4k_scale_min(sc3, 2 * p, sc0, m0);
        q4k_scale_min(sc3, 2 * p + 1, sc1, m1);
        for (int l = 0; l < 32; ++l) {
            out[64 * p + l] = d * (float) sc0 * (float) (b->qs[32 * p + l] & 0xF) - dmin * (float) m0;
            out[64 * p + 32 + l] = d * (float) sc1 * (float) (b->qs[32 * p + l] >> 4) - dmin * (float) m1;
        }
    }
}
SB_HD void dequant_unit(const block_q6_K * b, float * out) { // ggml-quants.c dequantize_row_q6_K
    const float d = half_to_float(b->d);
    for (int n = 0; n < 2; ++n) {
        const uint8_t * ql = b->ql + 64 * n;
        const uint8_t * qh = b->qh + 32 * n;
        const int8_t * sc = b->scales + 8 * n;
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            out[128 * n + l] = d * (float) sc[is] * (float) q1;
            out[128 * n + l + 32] = d * (float) sc[is + 2] * (float) q2;
            out[128 * n + l + 64] = d * (float) sc[is + 4] * (float) q3;
            out[128 * n + l + 96] = d * (float) sc[is + 6] * (float) q4;
        }
    }
}
SB_HD void dequant_unit(const uint16_t * h, float * out) {
    for (int j = 0; j < 32; ++j) {
        out[j] = half_to_float(h[j]);
    }
}

template <int T> SB_HD void dequant_unit_any(const char * row, int u, float * out) {
    if constexpr (T == W_Q4_0) {
        dequant_unit((const block_q4_0 *) row + u, out);
    } else if constexpr (T == W_Q8_0) {
        dequant_unit((const block_q8_0 *) row + u, out);
    } else if constexpr (T == W_Q4_K) {
        dequant_unit((const block_q4_K *) row + u, out);
    } else if constexpr (T == W_Q6_K) {
        dequant_unit((const block_q6_K *) row + u, out);
    } else {
        dequant_unit((const uint16_t *) row + 32 * u, out);
    }
}

} // namespace sbmm
