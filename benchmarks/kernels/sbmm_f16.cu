// f16 weights: 32 k per unit (64 bytes per row), two m16n8k16 mma per unit.
#include "sbmm_inst.cuh"

void sbmm::register_f16() {
    add_config<W_F16, 1, 4, 4>();
    add_config<W_F16, 1, 8, 2>();
    add_config<W_F16, 2, 4, 2>();
    add_config<W_F16, 2, 8, 2>();
}
