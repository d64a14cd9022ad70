#!/usr/bin/env bash
# Build the CUDA (sm_90) wheel for the H200 machine here, on the CPU machine, so that the GPU
# session spends no device time compiling (~6 min there; 23–56 min on 2 cores here from a fresh checkout (23 on 2026-12-04), in the background).
# This machine has nvcc 13.0 but neither cuBLAS nor the driver library: cuBLAS comes from the
# `nvidia-cublas` wheel and the driver library is a stub made from cuda.h (its functions are only
# linked against; the real libcuda.so.1 of the GPU machine is loaded at run time).
#
#   bash benchmarks/build_cuda_wheel.sh [PYTHON3.12] [OUT_DIR]    # then: prepare_device.sh OUT_DIR/*.whl
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${1:-python3.12}   # the GPU machine runs Python 3.12: the extension must be built for it
OUT=${2:-$PWD/.dev/cudawheel}
CUDA=${CUDA_HOME:-/usr/local/cuda-13.0}
T=$PWD/.dev/cudatk
mkdir -p "$T" "$OUT"
"$PY" -m pip install -q scikit-build-core cffi pycparser ninja cmake
if [ ! -f "$T/cublas/nvidia/cu13/lib/libcublas.so" ]; then
  "$PY" -m pip download -q --no-deps "nvidia-cublas>=13.0,<13.1" -d "$T/dl"
  (cd "$T" && mkdir -p cublas && unzip -q -o dl/nvidia_cublas-*.whl -d cublas && rm -rf dl)
  ln -sf libcublas.so.13 "$T/cublas/nvidia/cu13/lib/libcublas.so"
  ln -sf libcublasLt.so.13 "$T/cublas/nvidia/cu13/lib/libcublasLt.so"
fi
if [ ! -f "$T/stub/libcuda.so" ]; then
  mkdir -p "$T/stub"
  echo '#include <cuda.h>' | gcc -E -I"$CUDA/include" -x c - | grep -oE "\bcu[A-Z][A-Za-z0-9_]*\s*\(" \
      | sed 's/\s*($//' | sort -u | awk '{print "void "$1"(void){}"}' > "$T/stub/stub.c"
  gcc -shared -fPIC -o "$T/stub/libcuda.so" -Wl,-soname,libcuda.so.1 "$T/stub/stub.c"
fi
# the programs link against libggml-cuda.so, which needs libcuda.so.1 by that name (-rpath-link finds it)
ln -sf libcuda.so "$T/stub/libcuda.so.1"
CB=$T/cublas/nvidia/cu13
export PATH=$CUDA/bin:$PATH LIBRARY_PATH=$T/stub:$CB/lib CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-2}
start=$(date +%s)
"$PY" -m pip wheel . --no-deps --no-build-isolation -w "$OUT" \
  -C cmake.define.PYLLAMA_SPEC_CUDA=ON -C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON -C cmake.define.PYLLAMA_SPEC_OP_TESTS=ON \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 \
  -C cmake.define.CUDA_cublas_LIBRARY="$CB/lib/libcublas.so" \
  -C cmake.define.CUDA_cublasLt_LIBRARY="$CB/lib/libcublasLt.so" \
  -C cmake.define.CUDA_cuda_driver_LIBRARY="$T/stub/libcuda.so" \
  -C "cmake.define.CMAKE_CUDA_FLAGS=-I$CB/include" -C "cmake.define.CMAKE_CXX_FLAGS=-I$CB/include" \
  -C "cmake.define.CMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$T/stub:$CB/lib" \
  -C build-dir="$PWD/.dev/cudabuild"
echo "built in $(( $(date +%s) - start )) s: $(ls "$OUT"/*.whl)"
