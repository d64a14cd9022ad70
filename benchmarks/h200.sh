#!/usr/bin/env bash
# Build, test, benchmark and train on the lent H200 (the `device` tool), one phase per call.
# The machine has no network and no cffi: the calls carry .dev/gpu (wheels + a trimmed llama.cpp
# tree made by benchmarks/prepare_device.sh on the CPU machine) and the SmolLM2 GGUF in two parts; everything is
# built and kept under /tmp/w, which survives between calls while the machine stays warm.
#
#   bash benchmarks/h200.sh build   # carry .dev/gpu .dev/smol.part00   (~5 min)
#   bash benchmarks/h200.sh test    # carry .dev/smol.part01            (pytest + native comparison)
#   bash benchmarks/h200.sh train   # (no carry)                         (data + training configurations)
#   bash benchmarks/h200.sh bench   # (no carry)                         (best trained drafter vs plain vs native)
set -uo pipefail
PHASE=${1:?phase: build | test | train | bench}
REPO=$(pwd)
W=/tmp/w
OUT=${OUT:-$W/out}
mkdir -p "$W/cache" "$W/site" "$OUT"
export PYTHONPATH=$W/pkg:$W/site PYLLAMA_SPEC_CACHE=$W/cache PYTHONUNBUFFERED=1
# On that image, torch imported before the first model load crashes llama.cpp's tokenizer set-up
# unless libstdc++ is loaded at start (README, Known issues).
[ "$PHASE" = build ] || export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
log() { echo "== $(date +%T) $*"; }

case "$PHASE" in
build)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" .dev/gpu/whl/*.whl || exit 1
  tar -xJf .dev/gpu/llama.cpp.tar.xz -C "$W"
  [ -f .dev/smol.part00 ] && cp .dev/smol.part00 "$W/"
  log "build (pip wheel, CUDA sm_90, native tools)"
  start=$(date +%s)
  python3 -m pip wheel . --no-deps --no-build-isolation -w "$W/wheels" \
      -C cmake.define.PYLLAMA_SPEC_LLAMA_CPP_DIR="$W/llama.cpp" -C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON \
      -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C build-dir="$W/build" > "$OUT/build.log" 2>&1
  rc=$?
  echo "build rc=$rc seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/gpu.txt"
  [ $rc -eq 0 ] || { tail -50 "$OUT/build.log"; exit 1; }
  ls -la "$W/wheels" | tee -a "$OUT/gpu.txt"
  # a fresh environment: the wheel alone, installed into an empty target folder
  python3 -m pip install -q --no-index --no-deps --target "$W/pkg" "$W"/wheels/pyllama_spec-*.whl
  (cd /tmp && python3 -c "import pyllama_spec as ps; print(ps.system_info()); print(ps.devices()); print('gpu offload', ps.supports_gpu_offload())") | tee -a "$OUT/gpu.txt"
  ;;
test)
  cat "$W/smol.part00" .dev/smol.part01 > "$W/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
  sha256sum "$W/cache/SmolLM2-135M-Instruct.Q4_1.gguf"
  log "pytest"
  (cd "$REPO" && timeout 400 pytest -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_h200.txt" | tail -25)
  log "native comparison (SmolLM2 + random DFlash drafter, greedy, 256 tokens)"
  timeout 300 python3 benchmarks/compare_native.py --max-tokens 256 --runs 3 --n-max 1 4 7 \
      --json "$OUT/bench_native_random_h200.json" 2>&1 | tee "$OUT/bench_native_random_h200.txt"
  log "stage timing demo"
  timeout 120 python3 examples/stage_timing.py --max-tokens 128 > "$OUT/demo_h200.txt" 2>&1; tail -40 "$OUT/demo_h200.txt"
  ;;
train)
  log "self-distillation data (the committed 1050 sequences; generation resumes if more are asked for)"
  [ -f "$W/data.jsonl" ] || gunzip -c benchmarks/data/smollm2-selfdistill-1050.jsonl.gz > "$W/data.jsonl"
  (cd /tmp && timeout 280 python3 -m pyllama_spec.train.data "$W/cache/SmolLM2-135M-Instruct.Q4_1.gguf" "$W/data.jsonl" \
      --n-chat 900 --n-code 150 --max-tokens 200 2>&1 | tail -2)
  wc -l "$W/data.jsonl"
  log "training configurations"
  (cd /tmp && timeout 420 python3 "$REPO/benchmarks/train_configs.py" "$W/cache/SmolLM2-135M-Instruct.Q4_1.gguf" \
      "$W/data.jsonl" "$W/train" --out "$OUT") 2>&1 | tee "$OUT/train_configs.txt" | tail -40
  ;;
bench)
  log "trained drafter vs plain vs native"
  best=$(cat "$W/train/best.txt")
  timeout 400 python3 benchmarks/compare_native.py --drafter "$best" --max-tokens 256 --runs 3 --n-max 3 7 \
      --json "$OUT/bench_native_trained_h200.json" 2>&1 | tee "$OUT/bench_native_trained_h200.txt"
  timeout 120 python3 examples/stage_timing.py --drafter "$best" --n-max 7 --max-tokens 128 > "$OUT/demo_trained_h200.txt" 2>&1
  tail -30 "$OUT/demo_trained_h200.txt"
  ;;
esac
