// f16 weights: 32 k per unit (64 bytes per row), two m16n8k16 mma per unit.
#include "sbmm_inst.cuh"

void sbmm::register_f16() {
    add_config<W_F16, 1, 4, 4>();
    add_config<W_F16, 1, 8, 2>();
    add_config<W_F16, 2, 4, 2>();
    add_config<W_F16, 2, 8, 2>();
    // the staged (cp.async) weight loads (f32 activations from global memory as above), for the side-by-side run
    add_config<W_F16, 1, 4, 4, 2>();
    add_config<W_F16, 1, 8, 4, 2>();
    add_config<W_F16, 2, 4, 4, 2>();
    add_config<W_F16, 2, 8, 2, 2>();
    add_config<W_F16, 1, 4, 8, 2>();
    add_config<W_F16, 2, 4, 8, 1>();
    add_config<W_F16, 1, 8, 8, 1>();
    // f16 activations (converted once per call, as ggml's cuBLAS path converts them): names *_h
    add_config<W_F16, 1, 8, 2, 0, false, true>();
    add_config<W_F16, 2, 4, 2, 0, false, true>();
    add_config<W_F16, 2, 8, 2, 0, false, true>();
    add_config<W_F16, 2, 8, 2, 2, false, true>();
    add_config<W_F16, 2, 4, 4, 2, false, true>();
    add_config<W_F16, 1, 8, 4, 2, false, true>();
}
