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

// Graph order (called from the CUDA backend's graph_optimize, before the graph is allocated): moves MUL_MATs that
// sbmm takes and that read the same activations (a layer's Q, K, V) next to the first of them, so that
// ggml_cuda_sbmm_try_fuse runs them as one launch. GGML_CUDA_SBMM_FUSE=0 turns this and the fusions off.
void ggml_cuda_sbmm_group_siblings(int device, ggml_cgraph * cgraph);

// Fusions at node i of a graph being computed: up to 3 adjacent sibling MUL_MATs (one launch, one conversion
// of their activations), or a MUL_MAT whose only use is an ADD of a same-shaped f32 tensor (the residual),
// written by the kernel as dst = W x + residual. Returns the number of nodes computed (0: none; the caller
// computes node i as usual).
int ggml_cuda_sbmm_try_fuse(ggml_backend_cuda_context & ctx, ggml_cgraph * cgraph, int i);
