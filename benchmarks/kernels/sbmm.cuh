// Small-batch matmul kernels for sm_80+ (tuned for the H200, sm_90): see sbmm_blocks.h for the layouts.
//
// Grid: x = row tiles of 16*MT rows, y = KSPLIT slices of k (atomicAdd into a zeroed dst when > 1).
// Block: NW warps that all work on the same rows and split k among themselves, interleaved in chunks of
// U units, so that together they stream one contiguous stretch of each row; their partial sums meet in
// shared memory at the end. Each lane keeps U units of raw weight and activation data in registers before
// the first mma of the chunk, so that U loads per row are in flight (bandwidth = bytes in flight / latency).
#pragma once

#include "sbmm_blocks.h"

#include <cuda_runtime.h>

namespace sbmm {

__device__ __forceinline__ void mma_s8(int c[4], const int a[4], const int b[2]) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %10, %10, %10};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(0));
}

__device__ __forceinline__ void mma_f16(float d[4], const int a[4], const int b[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// W: row-major weights, row_bytes apart (ggml nb01); Y: block_q8_1 [ncols][stride_col_y] (int8 types) or
// float [ncols][stride_col_y] (f16); dst: float, column c at dst + c * stride_col_dst (ggml nb1 / 4).
template <int T, int NT, int MT, int NW, int U>
__global__ void __launch_bounds__(NW * 32) sbmm_kernel(
        const char * __restrict__ W, long long row_bytes, const void * __restrict__ Y, long long stride_col_y,
        float * __restrict__ dst, long long stride_col_dst, int m, int nunits, int ncols) {
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;
    const int row_base = blockIdx.x * 16 * MT;

    const char * rp[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = min(row_base + 16 * mt + g + 8 * i, m - 1);
            rp[mt][i] = W + (long long) r * row_bytes;
        }
    }

    float acc[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                acc[mt][nt][r] = 0.0f;
            }
        }
    }

    const int nchunks = (nunits + U - 1) / U;
    for (int ch = blockIdx.y * NW + w; ch < nchunks; ch += gridDim.y * NW) {
        RawA<T> ra[U][MT];
        RawB<T> rb[U][NT];
#pragma unroll
        for (int i = 0; i < U; ++i) {
            const int u = ch * U + i;
            if (u < nunits) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    load_a(ra[i][mt], rp[mt][0], rp[mt][1], u, t);
                }
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    if constexpr (T == W_F16) {
                        load_b_f32(rb[i][nt], (const float *) Y, stride_col_y, ncols, 8 * nt + g, u, t);
                    } else {
                        load_b_q8<T>(rb[i][nt], (const block_q8_1 *) Y, stride_col_y, ncols, 8 * nt + g, 8 * nt + 2 * t, u, t);
                    }
                }
            }
        }
#pragma unroll
        for (int i = 0; i < U; ++i) {
            if (ch * U + i >= nunits) {
                break;
            }
#pragma unroll
            for (int s = 0; s < wtraits<T>::nsub; ++s) {
                int b[NT][2];
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    bfrag<T>(rb[i][nt], s, b[nt]);
                }
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    int a[4];
                    afrag(ra[i][mt], s, a);
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        if constexpr (T == W_F16) {
                            mma_f16(acc[mt][nt], a, b[nt]);
                        } else {
                            int c[4];
                            mma_s8(c, a, b[nt]);
                            epilogue(ra[i][mt], rb[i][nt], s, c, acc[mt][nt]);
                        }
                    }
                }
            }
        }
    }

    // combine the NW warps' partial sums and write (or add, when k is also split over the grid)
    constexpr int NE = MT * NT * 4;
    auto store = [&](int e, int l, float v) {
        const int mt = e / (NT * 4);
        const int nt = (e / 4) % NT;
        const int r = e % 4;
        const int row = row_base + 16 * mt + (l >> 2) + 8 * (r >> 1);
        const int col = 8 * nt + 2 * (l & 3) + (r & 1);
        if (row < m && col < ncols) {
            float * p = dst + (long long) col * stride_col_dst + row;
            if (gridDim.y == 1) {
                *p = v;
            } else {
                atomicAdd(p, v);
            }
        }
    };
    if constexpr (NW == 1) {
#pragma unroll
        for (int e = 0; e < NE; ++e) {
            store(e, lane, acc[e / (NT * 4)][(e / 4) % NT][e % 4]);
        }
    } else {
        __shared__ float red[NW][NE][32];
#pragma unroll
        for (int e = 0; e < NE; ++e) {
            red[w][e][lane] = acc[e / (NT * 4)][(e / 4) % NT][e % 4];
        }
        __syncthreads();
        for (int idx = threadIdx.x; idx < NE * 32; idx += NW * 32) {
            const int e = idx / 32;
            const int l = idx % 32;
            float v = 0.0f;
#pragma unroll
            for (int ww = 0; ww < NW; ++ww) {
                v += red[ww][e][l];
            }
            store(e, l, v);
        }
    }
}

} // namespace sbmm
