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
    // SEQ (the column tiles one after the other, NT = 2 only, names *_seq): the NT = 2 staged default's shape
    // (2, 4, 1, 2), (2, 8, 1, 1) and the register path's (2, 8, 1). Not the NT = 1 staged winner's (2, 4, 2, 2):
    // 250 registers at NT = 1, its SEQ spills 120 bytes (ptxas, sm_90: the 8 more accumulators)
    add_config_seq<W_Q4_K, 2, 4, 1, 2, true>();
    add_config_seq<W_Q4_K, 2, 8, 1, 1, true>();
    add_config_seq<W_Q4_K, 2, 8, 1>();
    // (MT = 4, RESULTS.md 13.9: (4, 4, 1, 2)b spills 4 bytes at NT = 1, 336 at NT = 2 and 880 with SEQ (ptxas,
    // sm_90, 2026-12-06): q4_K's 144-byte blocks leave no room for 64 rows a block)
}
