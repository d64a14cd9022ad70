// Small-batch matmul kernels for sm_80+ (tuned for the H200, sm_90): see sbmm_blocks.h for the layouts.
//
// Grid: x = row tiles of 16*MT rows of each segment in turn (struct seg below), y = KSPLIT slices of k
// (atomicAdd into a zeroed dst when > 1).
// Block: NW warps that all work on the same rows and split k among themselves, interleaved in chunks of
// U units, so that together they stream one contiguous stretch of each row; their partial sums meet in
// shared memory at the end. Each lane keeps U units of raw weight and activation data in registers before
// the first mma of the chunk, so that U loads per row are in flight (bandwidth = bytes in flight / latency).
// q6_K (210-byte blocks) has the register path only (ST = 0).
// ST > 0 (q4_0 / q8_0 with U % 8 == 0, q4_K with U = 1 or 2, f16 with any U, its activations from global
// memory as on the register path): the staged path of sbmm_blocks.h instead -- each warp copies its
// chunk's weight stretch (U blocks of each of its 16*MT rows) into shared memory with 16-byte cp.async and
// builds the same A fragments from there; ST = 2 double-buffers (chunk c + 1 is in flight while chunk c is
// multiplied, Marlin's pipeline), ST = 1 loads, waits, multiplies. ST = 0 is the register path.
// SB (with ST > 0): the chunk's q8_1 activations are staged the same way (one 16-byte cp.async per 16 bytes,
// instead of 4 scattered 4-byte loads per lane, unit and column tile). ST > 0 uses dynamic shared memory of
// sbmm_smem<...>::dynamic bytes (the launcher raises the limit where it exceeds 48 KB).
// SEQ (NT = 2; the register path or the staged path with SB): the column tiles one after the other over the
// same weights of each unit -- the activations of tile 0 are loaded (from shared memory, or from global with
// the weights on the register path) and multiplied with all MT row tiles, then those of tile 1 -- so that only
// one tile's RawB is live at a time (q4_K: 8 sub-blocks x (2 ints + ds), ~24 registers a tile). The weights are
// still read from memory once per unit (kept in the staging buffer / the RawA registers), so 9..16 columns can
// run the (MT, U) of 8 columns, whose bytes in flight the NT = 2 configurations had to cut to fit 255 registers.
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

// q6_K: its scale changes every 16 values, so one mma of 16 k per scale (PTX ISA, "Matrix Fragments for
// mma.m16n8k16 with integer type": A regs = rows g / g + 8 at k 4t..4t+3, B reg = k 4t..4t+3 of column g)
__device__ __forceinline__ void mma_s8_k16(int c[4], const int a[4], const int b[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%7, %7, %7, %7};"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(0));
}

__device__ __forceinline__ void mma_f16(float d[4], const int a[4], const int b[2]) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait() { // all but the newest N groups are done
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// bytes per stretch row of the staged path (0: the register path, where stage_traits does not apply)
template <int T, int U, int ST> struct stage_srow { static constexpr int value = stage_traits<T, U>::sstride; };
template <int T, int U> struct stage_srow<T, U, 0> { static constexpr int value = 0; };
template <int T, int U, bool SB> struct stage_crow { static constexpr int value = stage_b_traits<T, U>::crow; };
template <int T, int U> struct stage_crow<T, U, false> { static constexpr int value = 0; };

// Shared memory of a configuration: per warp ST buffers of weights (16*MT stretch rows) and, with SB,
// activations (8*NT columns); after the main loop the NW warps' partial sums reuse it.
template <int T, int NT, int MT, int NW, int U, int ST, bool SB> struct sbmm_smem {
    static constexpr int ne = MT * NT * 4;
    static constexpr int srow = stage_srow<T, U, ST>::value;
    static constexpr int crow = stage_crow<T, U, SB>::value;
    static constexpr int a_buf = 16 * MT * srow;      // one weight buffer of one warp
    static constexpr int b_buf = 8 * NT * crow;       // one activation buffer of one warp
    static constexpr int stage = NW * ST * (a_buf + b_buf);
    static constexpr int red = NW > 1 ? NW * ne * 32 * (int) sizeof(float) : 0;
    static constexpr int bytes = stage > red ? stage : red;
    static constexpr int dynamic = ST > 0 ? bytes : 0; // the launch's dynamic shared memory
    static_assert(ST > 0 || !SB, "SB (staged activations) needs the staged weights (ST > 0)");
};

// One weight matrix of a launch. A launch covers 1..max_segs matrices that read the same activations (a
// layer's Q, K and V projections, or gate and up): one kernel instead of one per matrix, and a grid of all
// their row tiles, wide enough that k need not be split over the grid (no zeroing of dst, no atomics).
// W: row-major weights, row_bytes apart (ggml nb01); dst: float, column c at dst + c * stride_col_dst (ggml
// nb1 / 4); add (nullable): dst = W y + add, column c at add + c * stride_col_add (the fused residual ADD;
// where k is split over the grid, dst must be zeroed first and must not be add); m rows in tiles of 16*MT.
struct seg {
    const char * W;
    long long row_bytes;
    float * dst;
    long long stride_col_dst;
    const float * add;
    long long stride_col_add;
    int m;
    int tiles;
};
constexpr int max_segs = 3;
struct segs {
    seg s[max_segs];
    int n;
};

// Y: block_q8_1 [ncols][stride_col_y] (int8 types) or float [ncols][stride_col_y] (f16), shared by all segments.
// HB (f16 only): the activations are f16 ([ncols][stride_col_y] halves), not f32 -- half the bytes per column.
// The segment of this block (x tiles run over the segments in order) and its first tile's x.
__device__ __forceinline__ int seg_of_block(const segs & sg, int & bx) {
    bx = blockIdx.x;
    int si = 0;
#pragma unroll
    for (int i = 1; i < max_segs; ++i) {
        if (i < sg.n && si == i - 1 && bx >= sg.s[i - 1].tiles) {
            bx -= sg.s[i - 1].tiles;
            si = i;
        }
    }
    return si;
}

// Segment si of sg, read with constant indices only (a dynamic index would copy the parameters to local
// memory); the fields a caller does not use cost no registers.
__device__ __forceinline__ seg pick_seg(const segs & sg, int si) {
    seg r = sg.s[0];
#pragma unroll
    for (int i = 1; i < max_segs; ++i) {
        if (si == i) {
            r = sg.s[i];
        }
    }
    return r;
}

// The work of one block: rows row_base.. of one segment (sbmm_kernel below picks it). A function of its own so
// that the weights and dst reach the loads as __restrict__ parameters, as they did when they were the
// kernel's (read-only weight loads: ld.global.nc).
template <int T, int NT, int MT, int NW, int U, int ST, bool SB, bool HB, bool SEQ = false>
__device__ __forceinline__ void sbmm_block(
        const char * __restrict__ W, long long row_bytes, const void * __restrict__ Y, long long stride_col_y,
        const segs & sg, int si, int m, int row_base, int nunits, int ncols) {
    static_assert(!HB || T == W_F16, "HB: f16 activations, for f16 weights");
    // the staged path without SB loads the activations of all U units from global memory before the wait (their
    // latency hidden behind the cp.async of the weights); SEQ would have to wait for tile 1's inside the loop
    static_assert(!SEQ || ST == 0 || SB, "SEQ: the register path or the staged path with staged activations (SB)");
    const int lane = threadIdx.x & 31;
    const int w = threadIdx.x >> 5;
    const int g = lane >> 2;
    const int t = lane & 3;

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

    // the mma of unit (chunk, i) for all tiles: the same for both load paths
    auto mma_unit = [&](const RawA<T> (&ra)[MT], const RawB<T> (&rb)[NT]) {
#pragma unroll
        for (int s = 0; s < wtraits<T>::nsub; ++s) {
            int b[NT][2];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                bfrag<T>(rb[nt], s, b[nt]);
            }
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                int a[4];
                afrag(ra[mt], s, a);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    if constexpr (T == W_F16) {
                        mma_f16(acc[mt][nt], a, b[nt]);
                    } else {
                        int c[4];
                        if constexpr (mma_k<T> == 16) {
                            mma_s8_k16(c, a, b[nt]);
                        } else {
                            mma_s8(c, a, b[nt]);
                        }
                        epilogue(ra[mt], rb[nt], s, c, acc[mt][nt]);
                    }
                }
            }
        }
    };
    // SEQ: the mma of unit (chunk, i) for column tile nt only (rb: that tile's activations); the A fragments
    // are derived again per tile from the RawA that stays live (afrag: a few integer ops)
    auto mma_tile = [&](const RawA<T> (&ra)[MT], const RawB<T> & rb, int nt) {
#pragma unroll
        for (int s = 0; s < wtraits<T>::nsub; ++s) {
            int b[2];
            bfrag<T>(rb, s, b);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                int a[4];
                afrag(ra[mt], s, a);
                if constexpr (T == W_F16) {
                    mma_f16(acc[mt][nt], a, b);
                } else {
                    int c[4];
                    if constexpr (mma_k<T> == 16) {
                        mma_s8_k16(c, a, b);
                    } else {
                        mma_s8(c, a, b);
                    }
                    epilogue(ra[mt], rb, s, c, acc[mt][nt]);
                }
            }
        }
    };
    // the activations of unit u for column tile nt (SEQ loads one tile at a time)
    auto load_b1 = [&](RawB<T> & rb, int nt, int u) {
        if constexpr (T == W_F16 && HB) {
            load_b_f16(rb, (const uint16_t *) Y, stride_col_y, ncols, 8 * nt + g, u, t);
        } else if constexpr (T == W_F16) {
            load_b_f32(rb, (const float *) Y, stride_col_y, ncols, 8 * nt + g, u, t);
        } else {
            load_b_q8<T>(rb, (const block_q8_1 *) Y, stride_col_y, ncols, 8 * nt + g, 8 * nt + 2 * t, u, t);
        }
    };
    auto load_b = [&](RawB<T> (&rb)[NT], int u) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            if constexpr (T == W_F16 && HB) {
                load_b_f16(rb[nt], (const uint16_t *) Y, stride_col_y, ncols, 8 * nt + g, u, t);
            } else if constexpr (T == W_F16) {
                load_b_f32(rb[nt], (const float *) Y, stride_col_y, ncols, 8 * nt + g, u, t);
            } else {
                load_b_q8<T>(rb[nt], (const block_q8_1 *) Y, stride_col_y, ncols, 8 * nt + g, 8 * nt + 2 * t, u, t);
            }
        }
    };

    // shared memory: the staging buffers (ST > 0, dynamic), then (after a __syncthreads) the partial sums
    using SM = sbmm_smem<T, NT, MT, NW, U, ST, SB>;
    constexpr int NE = SM::ne;
    constexpr int SROW = SM::srow;
    char * smem;
    if constexpr (ST > 0) {
        extern __shared__ __align__(16) char sbmm_dyn_smem[];
        smem = sbmm_dyn_smem;
    } else {
        __shared__ __align__(16) char sbmm_red_smem[SM::bytes > 0 ? SM::bytes : 16];
        smem = sbmm_red_smem;
    }

    const int nchunks = (nunits + U - 1) / U;
    if constexpr (ST == 0 && SEQ) {
        // the weights of the chunk's U units and tile 0's activations in flight together (as at NT = 1), tile
        // 1's loaded after tile 0's mmas (activations: 1/8..1/2 of a unit's weight bytes, mostly from the L2)
        for (int ch = blockIdx.y * NW + w; ch < nchunks; ch += gridDim.y * NW) {
            RawA<T> ra[U][MT];
            RawB<T> rb[U];
#pragma unroll
            for (int i = 0; i < U; ++i) {
                const int u = ch * U + i;
                if (u < nunits) {
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        load_a(ra[i][mt], rp[mt][0], rp[mt][1], u, t);
                    }
                    load_b1(rb[i], 0, u);
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                if (nt > 0) {
#pragma unroll
                    for (int i = 0; i < U; ++i) {
                        if (ch * U + i < nunits) {
                            load_b1(rb[i], nt, ch * U + i);
                        }
                    }
                }
#pragma unroll
                for (int i = 0; i < U; ++i) {
                    if (ch * U + i >= nunits) {
                        break;
                    }
                    mma_tile(ra[i], rb[i], nt);
                }
            }
        }
    } else if constexpr (ST == 0) {
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
                    load_b(rb[i], u);
                }
            }
#pragma unroll
            for (int i = 0; i < U; ++i) {
                if (ch * U + i >= nunits) {
                    break;
                }
                mma_unit(ra[i], rb[i]);
            }
        }
    } else {
        static_assert(ST == 1 || ST == 2, "ST: 0 (registers), 1 or 2 staging buffers per warp");
        char * const wstage = smem + w * ST * SM::a_buf;
        char * const bstage = smem + NW * ST * SM::a_buf + w * ST * SM::b_buf; // SB only
        const int ch0 = blockIdx.y * NW + w;
        const int cstride = gridDim.y * NW;
        // one commit group per call (empty past the last chunk), so that wait_group counts chunks
        auto issue = [&](int ch, int buf) {
            if (ch < nchunks) {
                const int u0 = ch * U;
                const int nu = nunits - u0 < U ? nunits - u0 : U;
                stage_chunk<T, MT, U>(wstage + buf * SM::a_buf, W, row_bytes, row_base, m, u0, nu, lane);
                if constexpr (SB) {
                    stage_b_chunk<T, NT, U>(bstage + buf * SM::b_buf, (const block_q8_1 *) Y, stride_col_y, ncols, u0, nu, lane);
                }
            }
            cp_async_commit();
        };
        if constexpr (ST == 2) {
            issue(ch0, 0);
        }
        int buf = 0;
        for (int ch = ch0; ch < nchunks; ch += cstride) {
            if constexpr (ST == 2) {
                issue(ch + cstride, buf ^ 1); // the buffer the previous chunk used (done: __syncwarp below)
            } else {
                issue(ch, 0);
            }
            RawB<T> rb[SB ? 1 : U][NT]; // the register-loaded activations (!SB)
            if constexpr (!SB) {
#pragma unroll
                for (int i = 0; i < U; ++i) {
                    if (ch * U + i < nunits) {
                        load_b(rb[i], ch * U + i);
                    }
                }
            }
            cp_async_wait<ST - 1>(); // this lane's pieces of chunk ch have landed ...
            __syncwarp();            // ... and every lane's are visible to the warp
            const char * sb = wstage + buf * SM::a_buf;
            const char * sbb = bstage + buf * SM::b_buf;
#pragma unroll
            for (int i = 0; i < U; ++i) {
                if (ch * U + i >= nunits) {
                    break;
                }
                RawA<T> ra[MT];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    load_a_staged(ra[mt], sb + (16 * mt + g) * SROW, sb + (16 * mt + g + 8) * SROW, i, t);
                }
                if constexpr (SEQ) {
                    // one tile's activations at a time from the staging buffer, over the same RawA
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        RawB<T> rbs;
                        load_b_staged<T, U>(rbs, sbb, 8 * nt + g, 8 * nt + 2 * t, i, t);
                        mma_tile(ra, rbs, nt);
                    }
                } else if constexpr (SB) {
                    RawB<T> rbs[NT];
#pragma unroll
                    for (int nt = 0; nt < NT; ++nt) {
                        load_b_staged<T, U>(rbs[nt], sbb, 8 * nt + g, 8 * nt + 2 * t, i, t);
                    }
                    mma_unit(ra, rbs);
                } else {
                    mma_unit(ra, rb[i]);
                }
            }
            __syncwarp(); // every lane has read the buffer before it is refilled
            if constexpr (ST == 2) {
                buf ^= 1;
            }
        }
        if constexpr (NW > 1) {
            __syncthreads(); // the partial sums below reuse the staging memory of other warps
        }
    }

    // combine the NW warps' partial sums and write (or add, when k is also split over the grid)
    // dst and add of segment si, read from the kernel parameters only now (constant indices): nothing of them
    // is live in the main loop, where the largest configurations use all 255 registers
    const seg out = pick_seg(sg, si);
    float * dst = out.dst;
    const long long stride_col_dst = out.stride_col_dst;
    const float * add = out.add; // may be dst (an in-place ADD): no __restrict__ on either
    const long long stride_col_add = out.stride_col_add;
    auto store = [&](int e, int l, float v) {
        const int mt = e / (NT * 4);
        const int nt = (e / 4) % NT;
        const int r = e % 4;
        const int row = row_base + 16 * mt + (l >> 2) + 8 * (r >> 1);
        const int col = 8 * nt + 2 * (l & 3) + (r & 1);
        if (row < m && col < ncols) {
            float * p = dst + (long long) col * stride_col_dst + row;
            // the fused ADD: each element of add is read by the one thread that writes that element of dst
            // (dst may be add itself: ggml's allocator lets an ADD overwrite its input), and by one slice of k
            if (add != nullptr && blockIdx.y == 0) {
                v += add[(long long) col * stride_col_add + row];
            }
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
        float (*red)[NE][32] = (float (*)[NE][32]) smem;
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

// MS: the launch may hold several segments (sg.n > 1). Without it the kernel reads segment 0's weights, rows
// and dst straight from its parameters (the constant bank), as when they were plain parameters: the segment
// choice costs ~5 registers, which the largest configurations (255 registers) do not have to spare.
// SEQ: the column tiles one after the other (see the top of this file).
template <int T, int NT, int MT, int NW, int U, int ST = 0, bool SB = false, bool HB = false, bool MS = false,
          bool SEQ = false>
__global__ void __launch_bounds__(NW * 32) sbmm_kernel(
        const segs sg, const void * __restrict__ Y, long long stride_col_y, int nunits, int ncols) {
    if constexpr (!MS) {
        sbmm_block<T, NT, MT, NW, U, ST, SB, HB, SEQ>(sg.s[0].W, sg.s[0].row_bytes, Y, stride_col_y, sg, 0, sg.s[0].m,
                                                      blockIdx.x * 16 * MT, nunits, ncols);
    } else {
        int bx;
        const int si = seg_of_block(sg, bx);
        const seg in = pick_seg(sg, si);
        sbmm_block<T, NT, MT, NW, U, ST, SB, HB, SEQ>(in.W, in.row_bytes, Y, stride_col_y, sg, si, in.m, bx * 16 * MT, nunits,
                                                      ncols);
    }
}

} // namespace sbmm
