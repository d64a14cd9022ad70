#!/usr/bin/env bash
# On the CPU machine, before ggml_op_check.sh on the H200: the pinned llama.cpp tree with our patches
# (_pin.PATCHES, 0008 = sbmm among them) as the kernel sources make 0008 now, trimmed as
# benchmarks/prepare_device.sh trims it but with tests/ kept (test-backend-ops), as
# .dev/kernels/llama.cpp-sbmm.tar.xz (a few MB; carry .dev/kernels).
#   bash benchmarks/kernels/pack_tree.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 benchmarks/kernels/make_patch.py  # patch 0008 from the kernel sources as they are now
python3 vendor/fetch_llama_cpp.py          # remakes the tree where 0008's bytes changed
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
skip=()
for b in vulkan sycl metal opencl hexagon cann openvino webgpu et virtgpu zdnn musa blas; do
    skip+=(--exclude="llama.cpp/ggml/src/ggml-$b")
done
tar -C vendor -cf - "${skip[@]}" --exclude=llama.cpp/gguf-py --exclude=llama.cpp/conversion \
    --exclude=llama.cpp/tools/server --exclude=llama.cpp/requirements --exclude=llama.cpp/examples/llama.android \
    --exclude=llama.cpp/examples/llama.swiftui llama.cpp | tar -C "$T" -xf -
mkdir -p .dev/kernels
tar -C "$T" -cJf .dev/kernels/llama.cpp-sbmm.tar.xz llama.cpp
ls -la .dev/kernels
