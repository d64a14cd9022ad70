// The list of compiled kernel configurations (one translation unit per weight type fills it).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

namespace sbmm {

// Launches y = x . W^T for `ncols` columns. ksplit > 1 splits k over the grid (dst must be zeroed first).
using launch_fn = void (*)(const char * W, long long row_bytes, const void * Y, long long stride_col_y, float * dst,
                           long long stride_col_dst, int m, int k, int ncols, int ksplit, cudaStream_t stream);

struct KernelConfig {
    int type;       // WType
    int nt;         // column tiles of 8: 1 serves ncols 1..8, 2 serves 1..16
    int mt;         // 16-row tiles per warp
    int nw;         // warps per block (they split k)
    int u;          // units per chunk (loads in flight per lane and row)
    int st;         // 0: register loads; 1 / 2: staged through shared memory (cp.async), 1 / 2 buffers per warp
    bool sb;        // the activations staged too (st > 0 only)
    bool hb;        // f16 activations (f16 weights only; the benchmark converts them and counts that as quant_us)
    launch_fn launch;
    bool seq = false; // the column tiles one after the other (sbmm.cuh's SEQ; nt == 2)
    // the register path keeps its old names (so runs before and after the staged path compare by name)
    std::string name() const {
        return "sbmm_mt" + std::to_string(mt) + "_nw" + std::to_string(nw) + "_u" + std::to_string(u) + "_nt" + std::to_string(nt) +
               (st > 0 ? "_st" + std::to_string(st) : "") + (sb ? "b" : "") + (hb ? "_h" : "") + (seq ? "_seq" : "");
    }
};

std::vector<KernelConfig> & registry();

void register_f16();
void register_q4_0();
void register_q8_0();
void register_q4_K();
void register_q6_K();

} // namespace sbmm
