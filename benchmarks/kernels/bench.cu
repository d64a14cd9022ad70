// sbmm benchmark: every compiled kernel configuration (sbmm_<type>.cu) against a float64 reference and
// beside cuBLAS f16 GemmEx, for the Qwen3-8B matmul shapes and n = 1..16 columns.
//
// Timing: CUDA events around each launch, median of --reps launches after --warmup; each launch reads a
// different copy of the weights (copies >= 4x the L2 in total), as a decode reads a new layer per matmul,
// so the weights come from HBM, never from L2. The activations (<= 0.5 MB) stay in L2, as in a decode.
// "us" is the matmul kernel alone (plus the dst memset when k is split over the grid); "quant_us" is the
// f32 -> q8_1 activation kernel ggml runs before MMVQ (test-backend-ops times both together: compare
// its numbers with us + quant_us). TB/s counts the weight bytes only.
//
// usage: sbmm_bench [--types f16,q4_0,q8_0,q4_K (default; also q6_K)] [--shapes 4096x14336,...] [--ncols 1,2,...,16]
//                   [--reps 200] [--warmup 20] [--json out.json]
#include "sbmm.cuh"
#include "sbmm_registry.h"

#if __has_include(<cublas_v2.h>)
#include <cublas_v2.h>
#define SBMM_HAVE_CUBLAS 1
#else // this build machine has no cuBLAS headers: the torch driver (torch_ref.py) times cuBLAS instead
#define SBMM_HAVE_CUBLAS 0
#endif
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#define CUDA_CHECK(x)                                                                                      \
    do {                                                                                                   \
        cudaError_t err_ = (x);                                                                            \
        if (err_ != cudaSuccess) {                                                                         \
            fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(err_), __FILE__, __LINE__, #x); \
            exit(1);                                                                                       \
        }                                                                                                  \
    } while (0)
#if SBMM_HAVE_CUBLAS
#define CUBLAS_CHECK(x)                                                                   \
    do {                                                                                  \
        cublasStatus_t st_ = (x);                                                         \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                                               \
            fprintf(stderr, "cuBLAS error %d at %s:%d: %s\n", (int) st_, __FILE__, __LINE__, #x); \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)
#endif

using namespace sbmm;

namespace sbmm {
std::vector<KernelConfig> & registry() {
    static std::vector<KernelConfig> r;
    return r;
}
} // namespace sbmm

namespace {

// ggml-cuda/quantize.cu quantize_q8_1, same arithmetic: one thread per value of the padded column,
// a 32-lane max and sum per block, d = amax / 127, q = roundf(x / d), ds = (d, sum of x).
__global__ void quantize_q8_1_kernel(const float * __restrict__ x, block_q8_1 * __restrict__ y, int ne00, long long s01, int ne0) {
    const int i0 = blockDim.x * blockIdx.x + threadIdx.x;
    if (i0 >= ne0) {
        return;
    }
    const int i1 = blockIdx.y;
    const long long i_cont = (long long) i1 * ne0 + i0;
    const long long ib = i_cont / qk8_1;
    const int iqs = (int) (i_cont % qk8_1);
    const float xi = i0 < ne00 ? x[i1 * s01 + i0] : 0.0f;
    float amax = fabsf(xi);
    float sum = xi;
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFF, amax, off, 32));
        sum += __shfl_xor_sync(0xFFFFFFFF, sum, off, 32);
    }
    const float d = amax / 127.0f;
    const int8_t q = amax == 0.0f ? 0 : (int8_t) roundf(xi / d);
    y[ib].qs[iqs] = q;
    if (iqs > 0) {
        return;
    }
    y[ib].d = __half_as_ushort(__float2half(d));
    y[ib].s = __half_as_ushort(__float2half(sum));
}


constexpr int NMAX = 16;

// ---- deterministic random data on the device ------------------------------------------------------------
__host__ __device__ inline uint64_t mix64(uint64_t x) { // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
__device__ inline float unif(uint64_t seed, uint64_t i) { // [0, 1)
    return (float) (mix64(seed ^ mix64(i)) >> 40) * (1.0f / 16777216.0f);
}

__global__ void fill_bytes(uint8_t * p, size_t n, uint64_t seed) {
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        p[i] = (uint8_t) (mix64(seed ^ mix64(i)) >> 56);
    }
}

// valid, realistically sized scales over random quants (the same recipe as check_layouts.py)
template <int T> __global__ void fix_blocks(char * W, size_t nunits_total, uint64_t seed) {
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < nunits_total; i += (size_t) gridDim.x * blockDim.x) {
        char * b = W + i * wtraits<T>::unit_bytes;
        if constexpr (T == W_Q4_0) {
            ((block_q4_0 *) b)->d = float_to_half(0.002f + 0.018f * unif(seed, 2 * i));
        } else if constexpr (T == W_Q8_0) {
            block_q8_0 * q = (block_q8_0 *) b;
            q->d = float_to_half(0.0005f + 0.0015f * unif(seed, 2 * i));
            for (int j = 0; j < 32; ++j) {
                q->qs[j] = q->qs[j] == -128 ? -127 : q->qs[j];
            }
        } else if constexpr (T == W_Q4_K) {
            block_q4_K * q = (block_q4_K *) b;
            q->d = float_to_half(0.0005f + 0.0025f * unif(seed, 2 * i));
            q->dmin = float_to_half(0.0005f + 0.0025f * unif(seed, 2 * i + 1));
        } else if constexpr (T == W_Q6_K) { // random int8 scales, ql and qh; d as check_layouts.py makes it
            ((block_q6_K *) b)->d = float_to_half(0.00001f + 0.00009f * unif(seed, 2 * i));
        } else {
            uint16_t * h = (uint16_t *) b;
            for (int j = 0; j < 32; ++j) {
                h[j] = float_to_half(0.1f * (unif(seed, 32 * i + j) - 0.5f));
            }
        }
    }
}

__global__ void fill_activations(float * x, size_t n, uint64_t seed) {
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        x[i] = 2.0f * unif(seed, i) - 1.0f;
    }
}

__global__ void f32_to_f16(const float * x, uint16_t * y, size_t n) {
    for (size_t i = (size_t) blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t) gridDim.x * blockDim.x) {
        y[i] = float_to_half(x[i]);
    }
}

// ---- float64 reference: one warp per weight row, all NMAX columns, f32 (unquantized) activations --------
template <int T>
__global__ void reference_kernel(const char * W, long long row_bytes, const float * x, int k, int m, float * out) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= m) {
        return;
    }
    constexpr int UK = wtraits<T>::unit_k;
    double acc[NMAX] = {};
    float buf[UK];
    for (int u = lane; u < k / UK; u += 32) {
        dequant_unit_any<T>(W + (long long) row * row_bytes, u, buf);
        for (int c = 0; c < NMAX; ++c) {
            const float * xc = x + (size_t) c * k + (size_t) u * UK;
            double s = 0.0;
            for (int j = 0; j < UK; ++j) {
                s += (double) buf[j] * (double) xc[j];
            }
            acc[c] += s;
        }
    }
    for (int c = 0; c < NMAX; ++c) {
        double v = acc[c];
        for (int off = 16; off > 0; off >>= 1) {
            v += __shfl_xor_sync(0xFFFFFFFF, v, off, 32);
        }
        if (lane == 0) {
            out[(size_t) c * m + row] = (float) v;
        }
    }
}

// ---- helpers --------------------------------------------------------------------------------------------
struct Stats {
    double median, p10, p90;
};
Stats stats_of(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    auto at = [&](double q) { return (double) v[std::min(v.size() - 1, (size_t) (q * (double) (v.size() - 1) + 0.5))]; };
    return {at(0.5) * 1e3, at(0.1) * 1e3, at(0.9) * 1e3}; // ms -> us
}

// f(i) enqueues one call on stream 0 reading weight copy i
template <class F> Stats time_calls(F f, int reps, int warmup) {
    for (int i = 0; i < warmup; ++i) {
        f(i);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<cudaEvent_t> ev(2 * (size_t) reps);
    for (auto & e : ev) {
        CUDA_CHECK(cudaEventCreate(&e));
    }
    for (int i = 0; i < reps; ++i) {
        CUDA_CHECK(cudaEventRecord(ev[2 * i]));
        f(warmup + i);
        CUDA_CHECK(cudaEventRecord(ev[2 * i + 1]));
    }
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGetLastError());
    std::vector<float> ms((size_t) reps);
    for (int i = 0; i < reps; ++i) {
        CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    }
    for (auto & e : ev) {
        CUDA_CHECK(cudaEventDestroy(e));
    }
    return stats_of(ms);
}

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, sep)) {
        if (!item.empty()) {
            out.push_back(item);
        }
    }
    return out;
}

int type_of(const std::string & s) {
    if (s == "f16") return W_F16;
    if (s == "q4_0") return W_Q4_0;
    if (s == "q8_0") return W_Q8_0;
    if (s == "q4_K") return W_Q4_K;
    if (s == "q6_K") return W_Q6_K;
    fprintf(stderr, "unknown type %s (f16, q4_0, q8_0, q4_K, q6_K)\n", s.c_str());
    exit(2);
}
int unit_k(int t) { return t == W_Q4_K || t == W_Q6_K ? 256 : 32; }
int unit_bytes(int t) {
    switch (t) {
        case W_F16: return 64;
        case W_Q4_0: return 18;
        case W_Q8_0: return 34;
        case W_Q6_K: return 210;
        default: return 144;
    }
}

void init_weights(int t, char * W, size_t nbytes, uint64_t seed) {
    const size_t nunits = nbytes / unit_bytes(t);
    fill_bytes<<<4096, 256>>>((uint8_t *) W, nbytes, seed);
    switch (t) {
        case W_F16: fix_blocks<W_F16><<<4096, 256>>>(W, nunits, seed); break;
        case W_Q4_0: fix_blocks<W_Q4_0><<<4096, 256>>>(W, nunits, seed); break;
        case W_Q8_0: fix_blocks<W_Q8_0><<<4096, 256>>>(W, nunits, seed); break;
        case W_Q6_K: fix_blocks<W_Q6_K><<<4096, 256>>>(W, nunits, seed); break;
        default: fix_blocks<W_Q4_K><<<4096, 256>>>(W, nunits, seed); break;
    }
    CUDA_CHECK(cudaGetLastError());
}

void run_reference(int t, const char * W, long long row_bytes, const float * x, int k, int m, float * out) {
    const dim3 grid((m + 7) / 8), block(256);
    switch (t) {
        case W_F16: reference_kernel<W_F16><<<grid, block>>>(W, row_bytes, x, k, m, out); break;
        case W_Q4_0: reference_kernel<W_Q4_0><<<grid, block>>>(W, row_bytes, x, k, m, out); break;
        case W_Q8_0: reference_kernel<W_Q8_0><<<grid, block>>>(W, row_bytes, x, k, m, out); break;
        case W_Q6_K: reference_kernel<W_Q6_K><<<grid, block>>>(W, row_bytes, x, k, m, out); break;
        default: reference_kernel<W_Q4_K><<<grid, block>>>(W, row_bytes, x, k, m, out); break;
    }
    CUDA_CHECK(cudaGetLastError());
}

struct Err {
    double nmse, max_rel;
};
Err compare(const std::vector<float> & y, const std::vector<float> & ref, int m, int ncols) {
    double num = 0, den = 0, maxd = 0, maxr = 0;
    for (size_t i = 0; i < (size_t) m * ncols; ++i) {
        const double d = (double) y[i] - (double) ref[i];
        num += d * d;
        den += (double) ref[i] * ref[i];
        maxd = std::max(maxd, std::fabs(d));
        maxr = std::max(maxr, std::fabs((double) ref[i]));
    }
    if (!std::isfinite(num)) {
        return {INFINITY, INFINITY};
    }
    return {num / std::max(den, 1e-30), maxd / std::max(maxr, 1e-30)};
}

} // namespace

int main(int argc, char ** argv) {
    std::string types_s = "f16,q4_0,q8_0,q4_K";
    // Qwen3-8B: attn q/o 4096x4096, k/v 1024x4096, gate/up 14336x4096, down 4096x14336, head 151936x4096
    std::string shapes_s = "4096x14336,4096x4096,1024x4096,14336x4096,151936x4096";
    std::string ncols_s = "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16";
    std::string json_path;
    int reps = 200, warmup = 20;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() -> std::string {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--types") types_s = next();
        else if (a == "--shapes") shapes_s = next();
        else if (a == "--ncols") ncols_s = next();
        else if (a == "--reps") reps = atoi(next().c_str());
        else if (a == "--warmup") warmup = atoi(next().c_str());
        else if (a == "--json") json_path = next();
        else {
            fprintf(stderr, "unknown argument %s (see the header of bench.cu)\n", a.c_str());
            return 2;
        }
    }

    register_f16();
    register_q4_0();
    register_q8_0();
    register_q4_K();
    register_q6_K();

    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    const int nsm = prop.multiProcessorCount;
    printf("# device %s, cc %d.%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor, nsm, prop.l2CacheSize >> 20);

#if SBMM_HAVE_CUBLAS
    cublasHandle_t cublas;
    CUBLAS_CHECK(cublasCreate(&cublas));
#else
    printf("# built without cuBLAS headers: no cublas_gemmex rows (torch_ref.py times cuBLAS)\n");
#endif

    std::vector<std::string> recs;
    auto rec = [&](const std::string & s) {
        recs.push_back(s);
    };

    for (const std::string & shape : split(shapes_s, ',')) {
        const auto mk = split(shape, 'x');
        const int m = atoi(mk.at(0).c_str()), k = atoi(mk.at(1).c_str());
        if (m <= 0 || k <= 0 || k % 256 != 0) {
            fprintf(stderr, "bad shape %s: m x k, k a multiple of 256\n", shape.c_str());
            return 2;
        }
        const int k_padded = (k + matrix_row_padding - 1) / matrix_row_padding * matrix_row_padding;

        float * x;     // f32 activations [NMAX][k]
        uint16_t * xh; // the same as f16, for cuBLAS
        block_q8_1 * yq;
        float * dst;
        float * ref;
        CUDA_CHECK(cudaMalloc(&x, sizeof(float) * NMAX * k));
        CUDA_CHECK(cudaMalloc(&xh, sizeof(uint16_t) * NMAX * k));
        CUDA_CHECK(cudaMalloc(&yq, sizeof(block_q8_1) * NMAX * (k_padded / qk8_1)));
        CUDA_CHECK(cudaMalloc(&dst, sizeof(float) * NMAX * m));
        CUDA_CHECK(cudaMalloc(&ref, sizeof(float) * NMAX * m));
        fill_activations<<<1024, 256>>>(x, (size_t) NMAX * k, 1234);
        f32_to_f16<<<1024, 256>>>(x, xh, (size_t) NMAX * k);
        CUDA_CHECK(cudaGetLastError());

        for (const std::string & ts : split(types_s, ',')) {
            const int t = type_of(ts);
            const long long row_bytes = (long long) (k / unit_k(t)) * unit_bytes(t);
            const size_t nbytes = (size_t) row_bytes * m;
            const size_t l2x4 = (size_t) 4 * std::max(prop.l2CacheSize, 1 << 20);
            const int ncopies = (int) std::min<size_t>(64, std::max<size_t>(1, (l2x4 + nbytes - 1) / nbytes));
            char * W;
            CUDA_CHECK(cudaMalloc(&W, nbytes * ncopies));
            init_weights(t, W, nbytes, 42 + t);
            for (int c = 1; c < ncopies; ++c) {
                CUDA_CHECK(cudaMemcpy(W + c * nbytes, W, nbytes, cudaMemcpyDeviceToDevice));
            }
            run_reference(t, W, row_bytes, x, k, m, ref);
            std::vector<float> href((size_t) NMAX * m), hy((size_t) NMAX * m);
            CUDA_CHECK(cudaMemcpy(href.data(), ref, sizeof(float) * href.size(), cudaMemcpyDeviceToHost));
            printf("## %s m=%d k=%d: %.1f MB of weights, %d copies\n", ts.c_str(), m, k, nbytes / 1e6, ncopies);

            for (const std::string & ns : split(ncols_s, ',')) {
                const int ncols = atoi(ns.c_str());
                if (ncols < 1 || ncols > NMAX) {
                    fprintf(stderr, "ncols must be 1..16\n");
                    return 2;
                }
                // activations as ggml's MMVQ sees them: q8_1, one padded column after the other
                const long long stride_q = k_padded / qk8_1;
                auto quantize = [&]() {
                    quantize_q8_1_kernel<<<dim3((k_padded + 255) / 256, ncols), 256>>>(x, yq, k, k, k_padded);
                };
                double quant_us = 0.0;
                if (t != W_F16) {
                    quantize();
                    CUDA_CHECK(cudaDeviceSynchronize());
                    quant_us = time_calls([&](int) { quantize(); }, reps, warmup).median;
                }
                // the f16-activation (hb) configurations pay a conversion of the ncols columns first
                double conv_us = 0.0;
                if (t == W_F16) {
                    auto convert = [&]() { f32_to_f16<<<(ncols * k + 255) / 256, 256>>>(x, xh, (size_t) ncols * k); };
                    convert();
                    CUDA_CHECK(cudaDeviceSynchronize());
                    conv_us = time_calls([&](int) { convert(); }, reps, warmup).median;
                }
                const void * Y = t == W_F16 ? (const void *) x : (const void *) yq;
                const long long stride_y = t == W_F16 ? k : stride_q;

                double best_us = 1e30;
                std::string best_name;
                for (const KernelConfig & kc : registry()) {
                    if (kc.type != t || kc.nt * 8 < ncols || (kc.nt == 2 && ncols <= 8)) {
                        continue;
                    }
                    const int gx = (m + 16 * kc.mt - 1) / (16 * kc.mt);
                    const void * Yk = kc.hb ? (const void *) xh : Y;
                    const double q_us = kc.hb ? conv_us : quant_us;
                    const int nchunks = (k / unit_k(t) + kc.u - 1) / kc.u;
                    for (int ks = 1; ks <= 8; ks *= 2) {
                        // split k over the grid only while the grid is short of ~2 blocks per SM and each
                        // warp keeps >= 2 chunks
                        if (ks > 1 && ((long long) gx * (ks / 2) >= 2LL * nsm || nchunks / (kc.nw * ks) < 2)) {
                            break;
                        }
                        auto call = [&](int i) {
                            if (ks > 1) {
                                CUDA_CHECK(cudaMemsetAsync(dst, 0, sizeof(float) * (size_t) m * ncols));
                            }
                            kc.launch(W + (size_t) (i % ncopies) * nbytes, row_bytes, Yk, stride_y, dst, m, m, k, ncols, ks, 0);
                        };
                        CUDA_CHECK(cudaMemset(dst, 0, sizeof(float) * (size_t) NMAX * m));
                        call(0);
                        CUDA_CHECK(cudaDeviceSynchronize());
                        CUDA_CHECK(cudaGetLastError());
                        CUDA_CHECK(cudaMemcpy(hy.data(), dst, sizeof(float) * (size_t) m * ncols, cudaMemcpyDeviceToHost));
                        const Err err = compare(hy, href, m, ncols);
                        const Stats st = time_calls(call, reps, warmup);
                        const double tbps = (double) nbytes / (st.median * 1e-6) / 1e12;
                        const bool ok = err.nmse < 5e-4;
                        const std::string name = kc.name() + "_ks" + std::to_string(ks);
                        if (ok && st.median < best_us) {
                            best_us = st.median;
                            best_name = name;
                        }
                        char line[512];
                        snprintf(line, sizeof(line),
                                 "{\"m\": %d, \"k\": %d, \"type\": \"%s\", \"ncols\": %d, \"kernel\": \"%s\", \"us\": %.2f, "
                                 "\"us_p10\": %.2f, \"us_p90\": %.2f, \"quant_us\": %.2f, \"tbps\": %.3f, \"nmse\": %.3g, "
                                 "\"max_rel\": %.3g, \"ok\": %s}",
                                 m, k, ts.c_str(), ncols, name.c_str(), st.median, st.p10, st.p90, q_us, tbps, err.nmse,
                                 err.max_rel, ok ? "true" : "false");
                        rec(line);
                        printf("%-5s m=%6d k=%5d n=%2d %-26s %8.2f us (p10 %7.2f p90 %7.2f) +q8_1 %5.2f  %5.2f TB/s  nmse %.1e %s\n",
                               ts.c_str(), m, k, ncols, name.c_str(), st.median, st.p10, st.p90, q_us, tbps, err.nmse,
                               ok ? "" : "WRONG");
                    }
                }

#if SBMM_HAVE_CUBLAS
                if (t == W_F16) { // cuBLAS f16 GemmEx (f16 activations, f32 output), what torch/cuBLAS reach
                    const float alpha = 1.0f, beta = 0.0f;
                    auto call = [&](int i) {
                        CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, m, ncols, k, &alpha,
                                                  W + (size_t) (i % ncopies) * nbytes, CUDA_R_16F, k, xh, CUDA_R_16F, k,
                                                  &beta, dst, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                    };
                    call(0);
                    CUDA_CHECK(cudaDeviceSynchronize());
                    CUDA_CHECK(cudaMemcpy(hy.data(), dst, sizeof(float) * (size_t) m * ncols, cudaMemcpyDeviceToHost));
                    const Err err = compare(hy, href, m, ncols);
                    const Stats st = time_calls(call, reps, warmup);
                    const double tbps = (double) nbytes / (st.median * 1e-6) / 1e12;
                    char line[512];
                    snprintf(line, sizeof(line),
                             "{\"m\": %d, \"k\": %d, \"type\": \"f16\", \"ncols\": %d, \"kernel\": \"cublas_gemmex\", \"us\": %.2f, "
                             "\"us_p10\": %.2f, \"us_p90\": %.2f, \"quant_us\": 0, \"tbps\": %.3f, \"nmse\": %.3g, "
                             "\"max_rel\": %.3g, \"ok\": true}",
                             m, k, ncols, st.median, st.p10, st.p90, tbps, err.nmse, err.max_rel);
                    rec(line);
                    printf("%-5s m=%6d k=%5d n=%2d %-26s %8.2f us (p10 %7.2f p90 %7.2f)          %5.2f TB/s  nmse %.1e\n",
                           "f16", m, k, ncols, "cublas_gemmex", st.median, st.p10, st.p90, tbps, err.nmse);
                }
#endif
                printf("   best %s n=%d: %s %.2f us\n", ts.c_str(), ncols, best_name.c_str(), best_us);
                fflush(stdout);
            }
            CUDA_CHECK(cudaFree(W));
        }
        CUDA_CHECK(cudaFree(x));
        CUDA_CHECK(cudaFree(xh));
        CUDA_CHECK(cudaFree(yq));
        CUDA_CHECK(cudaFree(dst));
        CUDA_CHECK(cudaFree(ref));
    }
#if SBMM_HAVE_CUBLAS
    CUBLAS_CHECK(cublasDestroy(cublas));
#endif

    if (!json_path.empty()) {
        FILE * f = fopen(json_path.c_str(), "w");
        if (!f) {
            fprintf(stderr, "cannot write %s\n", json_path.c_str());
            return 1;
        }
        fprintf(f, "{\"device\": \"%s\", \"cc\": %d, \"sms\": %d, \"l2_mb\": %d, \"reps\": %d, \"records\": [\n", prop.name,
                prop.major * 10 + prop.minor, nsm, prop.l2CacheSize >> 20, reps);
        for (size_t i = 0; i < recs.size(); ++i) {
            fprintf(f, "  %s%s\n", recs[i].c_str(), i + 1 < recs.size() ? "," : "");
        }
        fprintf(f, "]}\n");
        fclose(f);
    }
    return 0;
}
