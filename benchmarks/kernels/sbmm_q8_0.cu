// q8_0 weights: one 34-byte block per unit.
#include "sbmm_inst.cuh"

void sbmm::register_q8_0() {
    add_config<W_Q8_0, 1, 4, 4>();
    add_config<W_Q8_0, 1, 8, 4>();
    add_config<W_Q8_0, 2, 4, 2>();
    add_config<W_Q8_0, 2, 8, 2>();
    // the staged (cp.async) path beside the register path above, for the side-by-side H200 run
    add_config<W_Q8_0, 1, 4, 8, 2>();
    add_config<W_Q8_0, 1, 8, 8, 1>();
    add_config<W_Q8_0, 2, 4, 8, 1>();
    // ... and with the activations staged too (names *_st2b)
    add_config<W_Q8_0, 1, 4, 8, 2, true>();
    add_config<W_Q8_0, 2, 4, 8, 1, true>();
    // SEQ (the column tiles one after the other, NT = 2 only, names *_seq): the NT = 1 winner's shape, and U = 8
    // double-buffered
    add_config_seq<W_Q8_0, 2, 4, 8, 1, true>();
    add_config_seq<W_Q8_0, 2, 4, 8, 2, true>();
    // MT = 4 (RESULTS.md 13.9: fewer activation reads at 9..16 columns; 2026-12-06, not measured): (4, 4, 8, 1)b
    // spills 12 bytes at NT = 1 (ptxas, sm_90), so SEQ only
    add_config_seq<W_Q8_0, 4, 4, 8, 1, true>();
}
