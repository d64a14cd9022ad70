// Instantiates the kernel configurations of one weight type (included by sbmm_<type>.cu).
#pragma once

#include "sbmm.cuh"
#include "sbmm_registry.h"

namespace sbmm {

template <int T, int NT, int MT, int NW, int U, int ST, bool SB, bool HB, bool SEQ = false>
void launch_sbmm(const char * W, long long row_bytes, const void * Y, long long stride_col_y, float * dst,
                 long long stride_col_dst, int m, int k, int ncols, int ksplit, cudaStream_t stream) {
    const int nunits = k / wtraits<T>::unit_k;
    const dim3 grid((m + 16 * MT - 1) / (16 * MT), ksplit, 1);
    constexpr int smem = sbmm_smem<T, NT, MT, NW, U, ST, SB>::dynamic;
    constexpr auto kernel = sbmm_kernel<T, NT, MT, NW, U, ST, SB, HB, false, SEQ>;
    if constexpr (smem > 48 * 1024) { // opt in to more than 48 KB of dynamic shared memory (once)
        static bool raised = false;
        if (!raised) {
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
            raised = true;
        }
    }
    segs sg{};
    sg.s[0] = seg{W, row_bytes, dst, stride_col_dst, nullptr, 0, m, (int) grid.x};
    sg.n = 1;
    kernel<<<grid, NW * 32, smem, stream>>>(sg, Y, stride_col_y, nunits, ncols);
}

// ST: 0 = the register load path, 1 / 2 = the staged path with 1 / 2 shared-memory buffers per warp;
// SB: the activations staged too; HB: f16 activations (f16 weights only)
template <int T, int MT, int NW, int U, int ST = 0, bool SB = false, bool HB = false> void add_config() {
    registry().push_back({T, 1, MT, NW, U, ST, SB, HB, &launch_sbmm<T, 1, MT, NW, U, ST, SB, HB>});
    registry().push_back({T, 2, MT, NW, U, ST, SB, HB, &launch_sbmm<T, 2, MT, NW, U, ST, SB, HB>});
}

// one column-tile count only (register-path configurations that spill at the other: q6_K's MT = 2 at NT = 2)
template <int T, int NT, int MT, int NW, int U> void add_config_nt() {
    registry().push_back({T, NT, MT, NW, U, 0, false, false, &launch_sbmm<T, NT, MT, NW, U, 0, false, false>});
}

// SEQ (sbmm.cuh): the two column tiles one after the other, at NT = 2 only (at NT = 1 it is the plain kernel);
// names *_seq. The register path (ST = 0) or the staged path with staged activations (SB)
template <int T, int MT, int NW, int U, int ST = 0, bool SB = false> void add_config_seq() {
    registry().push_back({T, 2, MT, NW, U, ST, SB, false, &launch_sbmm<T, 2, MT, NW, U, ST, SB, false, true>, true});
}

} // namespace sbmm
