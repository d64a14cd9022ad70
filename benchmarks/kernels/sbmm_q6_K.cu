// q6_K weights: one 210-byte super-block (256 values, 16 mma of k = 16: one per int8 scale) per unit. The register
// path only: 210-byte blocks make a stretch of U blocks 16-byte aligned only every 8 blocks (1680 bytes per row),
// too long a stretch for the staged path's shared memory. Both column tiles where it fits in 255 registers without
// spilling (ptxas, sm_90): 16 rows per warp at U = 1; 32 rows per warp and U = 2 at one column tile only (at two
// they spill 16..24 bytes).
#include "sbmm_inst.cuh"

void sbmm::register_q6_K() {
    add_config<W_Q6_K, 1, 4, 1>();
    add_config<W_Q6_K, 1, 8, 1>();
    add_config_nt<W_Q6_K, 1, 2, 4, 1>();
    add_config_nt<W_Q6_K, 1, 2, 8, 1>();
    add_config_nt<W_Q6_K, 1, 1, 4, 2>();
    // SEQ (the column tiles one after the other, NT = 2 only, names *_seq): the NT = 1-only shapes above (the
    // NT = 1 default is (2, 8, 1)), which spill at NT = 2 with both tiles' activations live
    add_config_seq<W_Q6_K, 2, 8, 1>();
    add_config_seq<W_Q6_K, 2, 4, 1>();
    add_config_seq<W_Q6_K, 1, 4, 2>();
}
