// pyllama_spec (patch 0008-cuda-sbmm-small-batch-matmul): MUL_MAT of 2..16 columns with f16 / q4_0 / q8_0 /
// q4_K weights by one tensor-core kernel that reads each weight block once for all columns (sbmm-kernel.cuh,
// from pyllama_spec's benchmarks/kernels/, where it is measured against cuBLAS and checked against gguf-py).
#pragma once

#include "common.cuh"

// Whether sbmm takes this MUL_MAT (weights src0, f32 activations src1 of ne11 columns, f32 dst).
// Environment (read once): GGML_CUDA_SBMM=0 turns it off, =1 allows it on any NVIDIA GPU of compute
// capability >= 8.0 (default: Hopper only, where it was measured); GGML_CUDA_SBMM_MIN_COLS /
// GGML_CUDA_SBMM_MAX_COLS (default 2 / 16) bound the column counts it takes.
bool ggml_cuda_should_use_sbmm(const ggml_tensor * src0, const ggml_tensor * src1, const ggml_tensor * dst, int cc);

void ggml_cuda_mul_mat_sbmm(ggml_backend_cuda_context & ctx, const ggml_tensor * src0, const ggml_tensor * src1, ggml_tensor * dst);
