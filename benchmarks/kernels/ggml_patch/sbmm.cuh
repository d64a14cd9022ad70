// pyllama_spec (patch 0008-cuda-sbmm-small-batch-matmul): MUL_MAT of 2..16 columns with f16 / q4_0 / q8_0 /
// q4_K weights by one tensor-core kernel that reads each weight block once for all columns (sbmm-kernel.cuh,
// from pyllama_spec's benchmarks/kernels/, where it is measured against cuBLAS and checked against gguf-py).
#pragma once

#include "common.cuh"

// Whether sbmm takes this MUL_MAT (weights src0, f32 activations src1 of ne11 columns, f32 dst).
// Default: Hopper only, f16 at 2..16 columns and q4_K at 4..16 (where it beat MMF / MMVQ on the H200).
// Environment (read once): GGML_CUDA_SBMM=0 turns it off, =1 takes all four types at 2..16 columns on any
// NVIDIA GPU of compute capability >= 8.0; GGML_CUDA_SBMM_MIN_COLS / _MAX_COLS override every type's range;
// GGML_CUDA_SBMM_STAGE=0 gives q4_0 / q8_0 the register load path instead of the staged (cp.async) one, which
// takes only weights whose base address and row stride are 16-byte aligned.
bool ggml_cuda_should_use_sbmm(const ggml_tensor * src0, const ggml_tensor * src1, const ggml_tensor * dst, int cc);

void ggml_cuda_mul_mat_sbmm(ggml_backend_cuda_context & ctx, const ggml_tensor * src0, const ggml_tensor * src1, ggml_tensor * dst);
