// CPU emulation of one warp of the sbmm kernel, to check the block decoding and the fragment layout
// without a GPU (benchmarks/kernels/check_layouts.py drives it and compares with gguf-py).
//
// It calls the same per-lane loaders and epilogues as the kernel (sbmm_blocks.h), but builds the
// 16x32 A / 32x8 B matrices of each mma from the lanes' registers by the PTX ISA's fragment table,
// multiplies them, and hands each lane its C registers by the same table. The grid-level scheduling
// (warps per block, chunks, k split) is not emulated: it only changes which warp adds which units.
// With MT (q4_0 / q8_0 / q4_K): the staged load path instead (sbmm_kernel<..., ST > 0>; U = 8, for q4_K
// U = MT: U = 1 has the padded stretch rows, U = 2 a partial last chunk at k = 768): per group of
// 16*MT rows and chunk of U units, all 32 lanes run the kernel's stage_chunk into a host staging buffer
// (pre-filled with garbage, so a piece no lane copies shows), with its alignment checks, then each lane
// builds its RawA with load_a_staged from there -- the kernel's index arithmetic, run on the CPU. With
// MT suffixed b (1b, 2b): the activations staged too (stage_b_chunk / load_b_staged, SB in the kernel).
// f16 with MT h, 1h or 2h: the activations as f16 (load_b_f16, HB in the kernel), on the register or the
// staged weight path.
// SEQ (sbmm.cuh's SEQ, NT = 2): MT suffixed s (1bs, 2bs: the staged path with staged activations; s alone: the
// register path, 32 rows and U = 2 units per chunk) runs the kernel's SEQ loop instead of one pass per column
// tile: per group of rows and chunk, the weights staged (or loaded into RawA) once, then per unit tile 0's
// activations loaded and multiplied with every row tile, then tile 1's over the same RawA, into acc[MT][NT].
// SBMM_SEQ_MUTATION=1 (a check of the checks): the second tile reads the first tile's activations.
// MT 4 (q4_0 / q8_0 only: 4, 4b, 4bs): 64 rows per warp on the staged path, ggml's GGML_CUDA_SBMM_Q4_0_MT4
// configuration (q4_K's staged U = MT would be 4, which its stretch rows do not allow).
//
// usage: cpu_emulate TYPE M K N weights.bin x.bin y_out.bin dequant_out.bin [MT]
//   TYPE: f16 | q4_0 | q8_0 | q4_K | q6_K (register path only); weights: M rows in ggml's layout; x: float32 [N][K];
//   y_out: float32 [N][M]; dequant_out: float32 [M][K] (dequant_unit of every unit);
//   MT: 1 or 2 (or 1b / 2b), the staged path with 16*MT rows per warp (q4_0 / q8_0 / q4_K / f16; 4, 4b: q4_0 /
//       q8_0 only); h, 1h, 2h: f16 activations (f16 only); 1bs, 2bs, s: SEQ (q4_0 / q8_0 / q4_K; s also q6_K;
//       4bs: q4_0 / q8_0).
#include "sbmm_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

#ifndef SBMM_SEQ_MUTATION
#define SBMM_SEQ_MUTATION 0
#endif

using namespace sbmm;

namespace {

std::vector<char> read_file(const char * path) {
    FILE * f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    std::vector<char> buf((size_t) n);
    if (fread(buf.data(), 1, (size_t) n, f) != (size_t) n) {
        fprintf(stderr, "short read %s\n", path);
        exit(2);
    }
    fclose(f);
    return buf;
}

void write_file(const char * path, const void * data, size_t n) {
    FILE * f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
    fclose(f);
}

// ggml-cuda/quantize.cu quantize_q8_1 on the host (the padded tail of each column is zeros)
std::vector<block_q8_1> quantize_q8_1(const std::vector<float> & x, int n, int k, int k_padded) {
    std::vector<block_q8_1> y((size_t) n * k_padded / qk8_1);
    for (int c = 0; c < n; ++c) {
        for (int ib = 0; ib < k_padded / qk8_1; ++ib) {
            float v[qk8_1];
            float amax = 0.0f;
            float sum = 0.0f;
            for (int i = 0; i < qk8_1; ++i) {
                const int kk = ib * qk8_1 + i;
                v[i] = kk < k ? x[(size_t) c * k + kk] : 0.0f;
                amax = fmaxf(amax, fabsf(v[i]));
                sum += v[i];
            }
            const float d = amax / 127.0f;
            block_q8_1 & b = y[(size_t) c * (k_padded / qk8_1) + ib];
            for (int i = 0; i < qk8_1; ++i) {
                b.qs[i] = amax == 0.0f ? 0 : (int8_t) roundf(v[i] / d);
            }
            b.d = float_to_half(d);
            b.s = float_to_half(sum);
        }
    }
    return y;
}

// the activations as f16 (what the HB kernels read; the same rounding as load_b_f32's pack_half2)
std::vector<uint16_t> to_half(const std::vector<float> & x) {
    std::vector<uint16_t> h(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
        h[i] = float_to_half(x[i]);
    }
    return h;
}

// the PTX fragment tables (see sbmm_blocks.h); g = lane / 4, t = lane % 4. KK = 32: m16n8k32 (A regs 0..3, B
// regs 0..1); KK = 16: m16n8k16 (q6_K; A regs 0..1, B reg 0 only: the other registers must not matter, so
// they are read as nothing)
template <int KK = 32>
void mma_s8_emulated(const int a[32][4], const int b[32][2], int c[32][4]) {
    int8_t A[16][32], B[32][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 4; ++i) {
            A[g][4 * t + i] = (int8_t) (a[l][0] >> (8 * i));
            A[g + 8][4 * t + i] = (int8_t) (a[l][1] >> (8 * i));
            B[4 * t + i][g] = (int8_t) (b[l][0] >> (8 * i));
            if (KK == 32) {
                A[g][16 + 4 * t + i] = (int8_t) (a[l][2] >> (8 * i));
                A[g + 8][16 + 4 * t + i] = (int8_t) (a[l][3] >> (8 * i));
                B[16 + 4 * t + i][g] = (int8_t) (b[l][1] >> (8 * i));
            }
        }
    }
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int r = 0; r < 4; ++r) {
            const int row = g + 8 * (r / 2), col = 2 * t + r % 2;
            int s = 0;
            for (int kk = 0; kk < KK; ++kk) {
                s += (int) A[row][kk] * (int) B[kk][col];
            }
            c[l][r] = s;
        }
    }
}

void mma_f16_emulated(const int a[32][4], const int b[32][2], float d[32][4]) {
    float A[16][16], B[16][8];
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int i = 0; i < 2; ++i) {
            A[g][2 * t + i] = half_to_float((uint16_t) ((uint32_t) a[l][0] >> (16 * i)));
            A[g + 8][2 * t + i] = half_to_float((uint16_t) ((uint32_t) a[l][1] >> (16 * i)));
            A[g][2 * t + 8 + i] = half_to_float((uint16_t) ((uint32_t) a[l][2] >> (16 * i)));
            A[g + 8][2 * t + 8 + i] = half_to_float((uint16_t) ((uint32_t) a[l][3] >> (16 * i)));
            B[2 * t + i][g] = half_to_float((uint16_t) ((uint32_t) b[l][0] >> (16 * i)));
            B[2 * t + 8 + i][g] = half_to_float((uint16_t) ((uint32_t) b[l][1] >> (16 * i)));
        }
    }
    for (int l = 0; l < 32; ++l) {
        const int g = l / 4, t = l % 4;
        for (int r = 0; r < 4; ++r) {
            const int row = g + 8 * (r / 2), col = 2 * t + r % 2;
            float s = 0.0f;
            for (int kk = 0; kk < 16; ++kk) {
                s += A[row][kk] * B[kk][col];
            }
            d[l][r] += s;
        }
    }
}

// The staged path: the same result layout as run(), the weights read through the staging buffer.
template <int T, int MT, bool SB>
void run_staged(int m, int k, int n, const std::vector<char> & wbytes, const std::vector<float> & x, std::vector<float> & y,
                bool hb = false) {
    const std::vector<uint16_t> xh = hb ? to_half(x) : std::vector<uint16_t>();
    constexpr int U = T == W_Q4_K ? MT : T == W_F16 ? 4 * MT : 8; // f16: 4 units (MT 1: no pad) or 8 (padded)
    constexpr int SROW = stage_traits<T, U>::sstride;
    static_assert(T != W_F16 || !SB, "f16 has no staged activations (they are f32)");
    const long long row_bytes = (long long) (k / wtraits<T>::unit_k) * wtraits<T>::unit_bytes;
    const int nunits = k / wtraits<T>::unit_k;
    const int k_padded = (k + matrix_row_padding - 1) / matrix_row_padding * matrix_row_padding;
    std::vector<block_q8_1> yq = quantize_q8_1(x, n, k, k_padded);
    const long long stride_q = k_padded / qk8_1;
    alignas(16) static char stage[16 * MT * SROW];
    alignas(16) static char bstage[8 * 2 * stage_b_traits<T == W_F16 ? W_Q8_0 : T, 8>::crow]; // NT <= 2 column tiles
    y.assign((size_t) n * m, 0.0f);
    const int NT = (n + 7) / 8;
    for (int group = 0; group < (m + 16 * MT - 1) / (16 * MT); ++group) {
        const int row_base = group * 16 * MT;
        for (int nt = 0; nt < NT; ++nt) {
            static float acc[MT][32][4];
            memset(acc, 0, sizeof(acc));
            for (int u0 = 0; u0 < nunits; u0 += U) {
                const int nu = std::min(U, nunits - u0);
                memset(stage, 0xA5, sizeof(stage));
                memset(bstage, 0xA5, sizeof(bstage));
                for (int l = 0; l < 32; ++l) {
                    stage_chunk<T, MT, U>(stage, wbytes.data(), row_bytes, row_base, m, u0, nu, l);
                    if constexpr (SB) { // the kernel stages all 8*NT columns of its tiles at once
                        if (NT == 1) {
                            stage_b_chunk<T, 1, U>(bstage, yq.data(), stride_q, n, u0, nu, l);
                        } else {
                            stage_b_chunk<T, 2, U>(bstage, yq.data(), stride_q, n, u0, nu, l);
                        }
                    }
                }
                for (int i = 0; i < nu; ++i) {
                    static RawB<T> rb[32];
                    for (int l = 0; l < 32; ++l) {
                        if constexpr (T == W_F16) {
                            if (hb) {
                                load_b_f16(rb[l], xh.data(), k, n, 8 * nt + l / 4, u0 + i, l % 4);
                            } else {
                                load_b_f32(rb[l], x.data(), k, n, 8 * nt + l / 4, u0 + i, l % 4);
                            }
                        } else if constexpr (SB) {
                            load_b_staged<T, U>(rb[l], bstage, 8 * nt + l / 4, 8 * nt + 2 * (l % 4), i, l % 4);
                        } else {
                            load_b_q8<T>(rb[l], yq.data(), stride_q, n, 8 * nt + l / 4, 8 * nt + 2 * (l % 4), u0 + i, l % 4);
                        }
                    }
                    for (int mt = 0; mt < MT; ++mt) {
                        static RawA<T> ra[32];
                        for (int l = 0; l < 32; ++l) {
                            const int g = l / 4, t = l % 4;
                            load_a_staged(ra[l], stage + (16 * mt + g) * SROW, stage + (16 * mt + g + 8) * SROW, i, t);
                        }
                        for (int sub = 0; sub < wtraits<T>::nsub; ++sub) {
                            int a[32][4], b[32][2], c[32][4];
                            for (int l = 0; l < 32; ++l) {
                                afrag(ra[l], sub, a[l]);
                                bfrag<T>(rb[l], sub, b[l]);
                            }
                            if constexpr (T == W_F16) {
                                mma_f16_emulated(a, b, acc[mt]);
                            } else {
                                mma_s8_emulated<mma_k<T>>(a, b, c);
                                for (int l = 0; l < 32; ++l) {
                                    epilogue(ra[l], rb[l], sub, c[l], acc[mt][l]);
                                }
                            }
                        }
                    }
                }
            }
            for (int mt = 0; mt < MT; ++mt) {
                for (int l = 0; l < 32; ++l) {
                    for (int r = 0; r < 4; ++r) {
                        const int row = row_base + 16 * mt + l / 4 + 8 * (r / 2);
                        const int col = 8 * nt + 2 * (l % 4) + r % 2;
                        if (row < m && col < n) {
                            y[(size_t) col * m + row] = acc[mt][l][r];
                        }
                    }
                }
            }
        }
    }
}

// the column tile whose activations SEQ loads for tile nt (the mutation: always the first tile's)
int seq_tile(int nt) {
    return SBMM_SEQ_MUTATION == 1 ? 0 : nt;
}

// one unit of the kernel's mma_tile (SEQ): column tile nt of unit i over the RawA of all MT row tiles
template <int T, int MT>
void mma_tile_emulated(RawA<T> (&ra)[MT][32], const RawB<T> (&rb)[32], float (&acc)[MT][2][32][4], int nt) {
    for (int sub = 0; sub < wtraits<T>::nsub; ++sub) {
        int b[32][2];
        for (int l = 0; l < 32; ++l) {
            bfrag<T>(rb[l], sub, b[l]);
        }
        for (int mt = 0; mt < MT; ++mt) {
            int a[32][4], c[32][4];
            for (int l = 0; l < 32; ++l) {
                afrag(ra[mt][l], sub, a[l]); // derived again per tile, as the kernel does
            }
            mma_s8_emulated<mma_k<T>>(a, b, c);
            for (int l = 0; l < 32; ++l) {
                epilogue(ra[mt][l], rb[l], sub, c[l], acc[mt][nt][l]);
            }
        }
    }
}

template <int T, int MT>
void store_seq(const float (&acc)[MT][2][32][4], int row_base, int m, int n, std::vector<float> & y) {
    for (int mt = 0; mt < MT; ++mt) {
        for (int nt = 0; nt < 2; ++nt) {
            for (int l = 0; l < 32; ++l) {
                for (int r = 0; r < 4; ++r) {
                    const int row = row_base + 16 * mt + l / 4 + 8 * (r / 2);
                    const int col = 8 * nt + 2 * (l % 4) + r % 2;
                    if (row < m && col < n) {
                        y[(size_t) col * m + row] = acc[mt][nt][l][r];
                    }
                }
            }
        }
    }
}

// SEQ on the staged path with staged activations (sbmm_block<..., ST > 0, SB = true, SEQ = true>, NT = 2): U as
// run_staged's. Per chunk: the weights of 16*MT rows and the activations of both column tiles staged once; per
// unit i: RawA of every row tile read once from the buffer, then for nt = 0, 1: tile nt's RawB (load_b_staged)
// and the mmas of all row tiles.
template <int T, int MT>
void run_staged_seq(int m, int k, int n, const std::vector<char> & wbytes, const std::vector<float> & x,
                    std::vector<float> & y) {
    constexpr int U = T == W_Q4_K ? MT : 8;
    constexpr int SROW = stage_traits<T, U>::sstride;
    const long long row_bytes = (long long) (k / wtraits<T>::unit_k) * wtraits<T>::unit_bytes;
    const int nunits = k / wtraits<T>::unit_k;
    const int k_padded = (k + matrix_row_padding - 1) / matrix_row_padding * matrix_row_padding;
    std::vector<block_q8_1> yq = quantize_q8_1(x, n, k, k_padded);
    const long long stride_q = k_padded / qk8_1;
    alignas(16) static char stage[16 * MT * SROW];
    alignas(16) static char bstage[8 * 2 * stage_b_traits<T, U>::crow];
    y.assign((size_t) n * m, 0.0f);
    for (int group = 0; group < (m + 16 * MT - 1) / (16 * MT); ++group) {
        const int row_base = group * 16 * MT;
        static float acc[MT][2][32][4];
        memset(acc, 0, sizeof(acc));
        for (int u0 = 0; u0 < nunits; u0 += U) {
            const int nu = std::min(U, nunits - u0);
            memset(stage, 0xA5, sizeof(stage));
            memset(bstage, 0xA5, sizeof(bstage));
            for (int l = 0; l < 32; ++l) {
                stage_chunk<T, MT, U>(stage, wbytes.data(), row_bytes, row_base, m, u0, nu, l);
                stage_b_chunk<T, 2, U>(bstage, yq.data(), stride_q, n, u0, nu, l);
            }
            for (int i = 0; i < nu; ++i) {
                static RawA<T> ra[MT][32];
                for (int mt = 0; mt < MT; ++mt) {
                    for (int l = 0; l < 32; ++l) {
                        const int g = l / 4, t = l % 4;
                        load_a_staged(ra[mt][l], stage + (16 * mt + g) * SROW, stage + (16 * mt + g + 8) * SROW, i, t);
                    }
                }
                for (int nt = 0; nt < 2; ++nt) {
                    static RawB<T> rb[32];
                    const int ct = seq_tile(nt);
                    for (int l = 0; l < 32; ++l) {
                        load_b_staged<T, U>(rb[l], bstage, 8 * ct + l / 4, 8 * ct + 2 * (l % 4), i, l % 4);
                    }
                    mma_tile_emulated<T, MT>(ra, rb, acc, nt);
                }
            }
        }
        store_seq<T, MT>(acc, row_base, m, n, y);
    }
}

// SEQ on the register path (sbmm_block<..., ST = 0, SEQ = true>, NT = 2) with MT = 2, U = 2 (k = 768 of q4_K /
// q6_K: 3 units, a partial last chunk): per chunk, the weights of its U units and tile 0's activations loaded,
// the mmas of tile 0 for every unit, then tile 1's activations of every unit loaded and their mmas.
template <int T>
void run_seq(int m, int k, int n, const std::vector<char> & wbytes, const std::vector<float> & x, std::vector<float> & y) {
    constexpr int MT = 2, U = 2;
    const long long row_bytes = (long long) (k / wtraits<T>::unit_k) * wtraits<T>::unit_bytes;
    const int nunits = k / wtraits<T>::unit_k;
    const int k_padded = (k + matrix_row_padding - 1) / matrix_row_padding * matrix_row_padding;
    std::vector<block_q8_1> yq = quantize_q8_1(x, n, k, k_padded);
    const long long stride_q = k_padded / qk8_1;
    y.assign((size_t) n * m, 0.0f);
    for (int group = 0; group < (m + 16 * MT - 1) / (16 * MT); ++group) {
        const int row_base = group * 16 * MT;
        static float acc[MT][2][32][4];
        memset(acc, 0, sizeof(acc));
        for (int u0 = 0; u0 < nunits; u0 += U) {
            static RawA<T> ra[U][MT][32];
            static RawB<T> rb[U][32];
            for (int i = 0; i < U && u0 + i < nunits; ++i) {
                for (int l = 0; l < 32; ++l) {
                    const int g = l / 4, t = l % 4;
                    for (int mt = 0; mt < MT; ++mt) {
                        const int r0 = std::min(row_base + 16 * mt + g, m - 1), r1 = std::min(row_base + 16 * mt + g + 8, m - 1);
                        load_a(ra[i][mt][l], wbytes.data() + r0 * row_bytes, wbytes.data() + r1 * row_bytes, u0 + i, t);
                    }
                    load_b_q8<T>(rb[i][l], yq.data(), stride_q, n, g, 2 * t, u0 + i, t);
                }
            }
            for (int nt = 0; nt < 2; ++nt) {
                if (nt > 0) {
                    const int ct = seq_tile(nt);
                    for (int i = 0; i < U && u0 + i < nunits; ++i) {
                        for (int l = 0; l < 32; ++l) {
                            const int g = l / 4, t = l % 4;
                            load_b_q8<T>(rb[i][l], yq.data(), stride_q, n, 8 * ct + g, 8 * ct + 2 * t, u0 + i, t);
                        }
                    }
                }
                for (int i = 0; i < U && u0 + i < nunits; ++i) {
                    mma_tile_emulated<T, MT>(ra[i], rb[i], acc, nt);
                }
            }
        }
        store_seq<T, MT>(acc, row_base, m, n, y);
    }
}

template <int T>
void run(int m, int k, int n, const std::vector<char> & wbytes, const std::vector<float> & x, std::vector<float> & y,
         std::vector<float> & dq, bool hb = false) {
    constexpr int UK = wtraits<T>::unit_k;
    const std::vector<uint16_t> xh = hb ? to_half(x) : std::vector<uint16_t>();
    const long long row_bytes = (long long) (k / UK) * wtraits<T>::unit_bytes;
    if ((long long) wbytes.size() != row_bytes * m) {
        fprintf(stderr, "weights: %zu bytes, expected %lld\n", wbytes.size(), row_bytes * m);
        exit(2);
    }
    const int nunits = k / UK;

    // plain dequantization
    dq.assign((size_t) m * k, 0.0f);
    for (int r = 0; r < m; ++r) {
        for (int u = 0; u < nunits; ++u) {
            dequant_unit_any<T>(wbytes.data() + r * row_bytes, u, &dq[(size_t) r * k + (size_t) u * UK]);
        }
    }

    const int k_padded = (k + matrix_row_padding - 1) / matrix_row_padding * matrix_row_padding;
    std::vector<block_q8_1> yq = quantize_q8_1(x, n, k, k_padded);
    const long long stride_q = k_padded / qk8_1;

    y.assign((size_t) n * m, 0.0f);
    const int NT = (n + 7) / 8;
    for (int tile = 0; tile < (m + 15) / 16; ++tile) {
        for (int nt = 0; nt < NT; ++nt) {
            float acc[32][4] = {};
            for (int u = 0; u < nunits; ++u) {
                static RawA<T> ra[32];
                static RawB<T> rb[32];
                for (int l = 0; l < 32; ++l) {
                    const int g = l / 4, t = l % 4;
                    const int r0 = std::min(tile * 16 + g, m - 1), r1 = std::min(tile * 16 + g + 8, m - 1);
                    load_a(ra[l], wbytes.data() + r0 * row_bytes, wbytes.data() + r1 * row_bytes, u, t);
                    if constexpr (T == W_F16) {
                        if (hb) {
                            load_b_f16(rb[l], xh.data(), k, n, 8 * nt + g, u, t);
                        } else {
                            load_b_f32(rb[l], x.data(), k, n, 8 * nt + g, u, t);
                        }
                    } else {
                        load_b_q8<T>(rb[l], yq.data(), stride_q, n, 8 * nt + g, 8 * nt + 2 * t, u, t);
                    }
                }
                for (int s = 0; s < wtraits<T>::nsub; ++s) {
                    int a[32][4], b[32][2];
                    for (int l = 0; l < 32; ++l) {
                        afrag(ra[l], s, a[l]);
                        bfrag<T>(rb[l], s, b[l]);
                    }
                    if constexpr (T == W_F16) {
                        mma_f16_emulated(a, b, acc);
                    } else {
                        int c[32][4];
                        mma_s8_emulated<mma_k<T>>(a, b, c);
                        for (int l = 0; l < 32; ++l) {
                            epilogue(ra[l], rb[l], s, c[l], acc[l]);
                        }
                    }
                }
            }
            for (int l = 0; l < 32; ++l) {
                for (int r = 0; r < 4; ++r) {
                    const int row = tile * 16 + l / 4 + 8 * (r / 2);
                    const int col = 8 * nt + 2 * (l % 4) + r % 2;
                    if (row < m && col < n) {
                        y[(size_t) col * m + row] = acc[l][r];
                    }
                }
            }
        }
    }
}

} // namespace

int main(int argc, char ** argv) {
    if (argc != 9 && argc != 10) {
        fprintf(stderr, "usage: %s TYPE M K N weights.bin x.bin y_out.bin dequant_out.bin [MT]\n", argv[0]);
        return 2;
    }
    std::string arg = argc == 10 ? argv[9] : "";
    const bool seq = !arg.empty() && arg.back() == 's'; // SEQ (the column tiles one after the other)
    if (seq) {
        arg.pop_back();
    }
    const bool hb = !arg.empty() && arg.back() == 'h'; // f16 activations (f16 only)
    const std::string staged = hb ? arg.substr(0, arg.size() - 1) : arg;
    const int mt_staged = staged.empty() ? 0 : atoi(staged.c_str());
    const bool sb = staged.size() == 2 && staged[1] == 'b';
    if (!staged.empty() && ((mt_staged != 1 && mt_staged != 2 && mt_staged != 4) || staged.size() != (sb ? 2u : 1u))) {
        fprintf(stderr, "MT (the staged path) must be 1, 2, 4, 1b, 2b or 4b (f16 also h, 1h, 2h)\n");
        return 2;
    }
    const std::string type = argv[1];
    if (mt_staged == 4 && type != "q4_0" && type != "q8_0") {
        fprintf(stderr, "MT 4 (64 rows per warp): q4_0 / q8_0 only\n");
        return 2;
    }
    if (hb && (type != "f16" || sb)) {
        fprintf(stderr, "h (f16 activations) is for f16 weights, without b\n");
        return 2;
    }
    if (seq && (type == "f16" || (!arg.empty() && !sb))) {
        fprintf(stderr, "s (SEQ): q4_0 / q8_0 / q4_K / q6_K, on the register path (s) or with staged activations (1bs, 2bs)\n");
        return 2;
    }
    const int m = atoi(argv[2]), k = atoi(argv[3]), n = atoi(argv[4]);
    if (m <= 0 || k <= 0 || n <= 0 || n > 16 || k % 256 != 0) {
        fprintf(stderr, "need M > 0, K a multiple of 256, 1 <= N <= 16\n");
        return 2;
    }
    const std::vector<char> w = read_file(argv[5]);
    const std::vector<char> xb = read_file(argv[6]);
    if (xb.size() != (size_t) n * k * sizeof(float)) {
        fprintf(stderr, "x: %zu bytes, expected %zu\n", xb.size(), (size_t) n * k * sizeof(float));
        return 2;
    }
    std::vector<float> x((size_t) n * k);
    memcpy(x.data(), xb.data(), xb.size());
    std::vector<float> y, dq;
    if (argc == 10 && type == "f16" && sb) {
        fprintf(stderr, "f16 has no staged activations (MT 1 or 2, not 1b / 2b)\n");
        return 2;
    }
    if (seq) { // the plain dequantization (dq) from run(), then the SEQ loop's y
        auto go = [&](auto tag) {
            constexpr int T = decltype(tag)::value;
            run<T>(m, k, n, w, x, y, dq);
            if constexpr (T == W_Q6_K) {
                run_seq<T>(m, k, n, w, x, y);
            } else {
                if (mt_staged == 1) {
                    run_staged_seq<T, 1>(m, k, n, w, x, y);
                } else if (mt_staged == 2) {
                    run_staged_seq<T, 2>(m, k, n, w, x, y);
                } else if (mt_staged == 4) {
                    if constexpr (T == W_Q4_0 || T == W_Q8_0) {
                        run_staged_seq<T, 4>(m, k, n, w, x, y);
                    }
                } else {
                    run_seq<T>(m, k, n, w, x, y);
                }
            }
        };
        if (type == "q4_0") {
            go(std::integral_constant<int, W_Q4_0>());
        } else if (type == "q8_0") {
            go(std::integral_constant<int, W_Q8_0>());
        } else if (type == "q4_K") {
            go(std::integral_constant<int, W_Q4_K>());
        } else if (type == "q6_K" && arg.empty()) {
            go(std::integral_constant<int, W_Q6_K>());
        } else {
            fprintf(stderr, "SEQ: unknown type %s (q6_K: s only)\n", type.c_str());
            return 2;
        }
    } else if (type == "f16") {
        run<W_F16>(m, k, n, w, x, y, dq, hb);
        if (mt_staged == 1) {
            run_staged<W_F16, 1, false>(m, k, n, w, x, y, hb);
        } else if (mt_staged == 2) {
            run_staged<W_F16, 2, false>(m, k, n, w, x, y, hb);
        }
    } else if (type == "q4_0") {
        run<W_Q4_0>(m, k, n, w, x, y, dq); // also the plain dequantization (dq) for the staged run
        if (mt_staged == 1) {
            sb ? run_staged<W_Q4_0, 1, true>(m, k, n, w, x, y) : run_staged<W_Q4_0, 1, false>(m, k, n, w, x, y);
        } else if (mt_staged == 2) {
            sb ? run_staged<W_Q4_0, 2, true>(m, k, n, w, x, y) : run_staged<W_Q4_0, 2, false>(m, k, n, w, x, y);
        } else if (mt_staged == 4) {
            sb ? run_staged<W_Q4_0, 4, true>(m, k, n, w, x, y) : run_staged<W_Q4_0, 4, false>(m, k, n, w, x, y);
        }
    } else if (type == "q8_0") {
        run<W_Q8_0>(m, k, n, w, x, y, dq);
        if (mt_staged == 1) {
            sb ? run_staged<W_Q8_0, 1, true>(m, k, n, w, x, y) : run_staged<W_Q8_0, 1, false>(m, k, n, w, x, y);
        } else if (mt_staged == 2) {
            sb ? run_staged<W_Q8_0, 2, true>(m, k, n, w, x, y) : run_staged<W_Q8_0, 2, false>(m, k, n, w, x, y);
        } else if (mt_staged == 4) {
            sb ? run_staged<W_Q8_0, 4, true>(m, k, n, w, x, y) : run_staged<W_Q8_0, 4, false>(m, k, n, w, x, y);
        }
    } else if (type == "q4_K") {
        run<W_Q4_K>(m, k, n, w, x, y, dq);
        if (mt_staged == 1) {
            sb ? run_staged<W_Q4_K, 1, true>(m, k, n, w, x, y) : run_staged<W_Q4_K, 1, false>(m, k, n, w, x, y);
        } else if (mt_staged == 2) {
            sb ? run_staged<W_Q4_K, 2, true>(m, k, n, w, x, y) : run_staged<W_Q4_K, 2, false>(m, k, n, w, x, y);
        }
    } else if (type == "q6_K") {
        if (!staged.empty()) {
            fprintf(stderr, "q6_K has the register path only (no MT)\n");
            return 2;
        }
        run<W_Q6_K>(m, k, n, w, x, y, dq);
    } else {
        fprintf(stderr, "unknown type %s\n", type.c_str());
        return 2;
    }
    write_file(argv[7], y.data(), y.size() * sizeof(float));
    write_file(argv[8], dq.data(), dq.size() * sizeof(float));
    return 0;
}
