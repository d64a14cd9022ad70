// q4_K weights: one 144-byte super-block (256 values, 8 mma) per unit.
#include "sbmm_inst.cuh"

void sbmm::register_q4_K() {
    add_config<W_Q4_K, 1, 4, 1>();
    add_config<W_Q4_K, 1, 8, 1>();
    add_config<W_Q4_K, 2, 4, 1>();
    add_config<W_Q4_K, 2, 8, 1>();
    add_config<W_Q4_K, 1, 4, 2>();
    // the staged (cp.async) path (harness only: the dispatch keeps the register path above for q4_K)
    add_config<W_Q4_K, 2, 4, 1, 2>();
    add_config<W_Q4_K, 2, 4, 1, 2, true>();
    add_config<W_Q4_K, 1, 8, 1, 2, true>();
    add_config<W_Q4_K, 2, 8, 1, 1, true>();
    add_config<W_Q4_K, 2, 4, 2, 2, true>();
}
