// q4_0 weights: one 18-byte block per unit.
#include "sbmm_inst.cuh"

void sbmm::register_q4_0() {
    add_config<W_Q4_0, 1, 4, 8>();
    add_config<W_Q4_0, 1, 8, 4>();
    add_config<W_Q4_0, 2, 4, 4>();
    add_config<W_Q4_0, 2, 8, 4>();
    // the staged (cp.async) path beside the register path above, for the side-by-side H200 run
    add_config<W_Q4_0, 1, 8, 8, 2>();
    add_config<W_Q4_0, 2, 4, 8, 2>();
    add_config<W_Q4_0, 2, 8, 8, 1>();
    add_config<W_Q4_0, 1, 8, 8, 1>();
    // ... and with the activations staged too (names *_st2b)
    add_config<W_Q4_0, 2, 4, 8, 2, true>();
    add_config<W_Q4_0, 1, 4, 8, 2, true>();
    add_config<W_Q4_0, 2, 8, 8, 1, true>();
    // SEQ (the column tiles one after the other, NT = 2 only, names *_seq): the NT = 1 winner's shape
    add_config_seq<W_Q4_0, 2, 4, 8, 2, true>();
    // MT = 4 (64 rows a block: half the activation reads of MT = 2 from L2, which at 16 columns matched the
    // weight bytes, RESULTS.md 13.9), staged with staged activations, NT = 1 / 2 and SEQ (2026-12-06, not measured)
    add_config<W_Q4_0, 4, 4, 8, 2, true>();
    add_config<W_Q4_0, 4, 4, 8, 1, true>();
    add_config_seq<W_Q4_0, 4, 4, 8, 2, true>();
}
