#!/usr/bin/env bash
# Issue 14 on the lent GPUs, one phase per device call, in the layout of benchmarks/h200.sh (run its
# `install` phase first on each machine: this branch changes C++/CMake, so the wheel must be built from
# it, and `model0`, which leaves the first half of SmolLM2 in /tmp/w).
#
#   nvidia-h200, ONE call of at most 5 min (after `h200.sh install` with a CUDA wheel built from this code,
#   e.g. by build_cuda_wheel.sh, and `model0`, in the same lease; or any phase that left the SmolLM2 GGUF):
#   bash benchmarks/h200_issue14.sh quick       # carry .dev/smol.part08: the N = 1..32 table (plain, dflash,
#                                               # ngram; batch vs alone checked), stages at N = 1, 8, 32, RPC on
#                                               # loopback vs CUDA0 (steps capped at 150 + 50 + 70 s)
#   the full phases, one call each:
#   bash benchmarks/h200_issue14.sh batch-smol  # carry .dev/smol.part08: throughput table N = 1..32, SmolLM2 +
#                                               # shipped DFlash drafter (and n-gram), plain vs speculative
#   bash benchmarks/h200_issue14.sh batch-big   # Qwen3-8B-shaped f16 pair (random drafter: cost only), N = 1..32
#   bash benchmarks/h200_issue14.sh rpc-gpu     # carry .dev/smol.part08: RPC on loopback lending CUDA0 vs CUDA0
#   nvidia-h200-x2:
#   bash benchmarks/h200_issue14.sh multi-gpu   # carry .dev/smol.part08: target split over 2 GPUs (layer, row),
#                                               # drafter on either; single-GPU reference; big f16 pair too
#
# Results go to $OUT (default /tmp/w/out): batch_*.json / multi_gpu_*.json / rpc_gpu.json and the logs.
set -uo pipefail
PHASE=${1:?phase: quick | batch-smol | batch-big | rpc-gpu | multi-gpu}
REPO=$(pwd)
W=/tmp/w
OUT=${OUT:-$W/out}
mkdir -p "$W/cache" "$OUT"
export PYTHONPATH=$W/pkg:$W/site PYLLAMA_SPEC_CACHE=$W/cache PYTHONUNBUFFERED=1
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
GGUF=$W/cache/SmolLM2-135M-Instruct.Q4_1.gguf
log() { echo "== $(date +%T) $*"; }

source "$REPO/benchmarks/device_smol.sh"
smol() { smol_checkout; }  # SmolLM2 and this checkout's Python over the installed wheel

big() {  # the Qwen3-8B-shaped f16 pair (random drafter), written here once
  B=$W/big; mkdir -p "$B"
  [ -f "$B/target-qwen3-8b-f16.gguf" ] || (cd /tmp && python3 -m pyllama_spec.fixtures big "$B" --dtype f16) || exit 1
  T=$B/target-qwen3-8b-f16.gguf; D=$B/dflash-qwen3-8b-f16.gguf
}

case "$PHASE" in
quick)
  smol
  log "SmolLM2 + shipped drafter: N = 1..32, plain / dflash / ngram (loop free-running), batch vs alone"
  (cd /tmp && timeout 150 python3 "$REPO/benchmarks/batch_throughput.py" --n 1 2 4 8 16 32 --max-tokens 128 \
      --modes plain,dflash,ngram --check -ngl 99 --json "$OUT/batch_smol.json") 2>&1 | tee "$OUT/batch_smol.txt"
  log "where a step's time goes (stages synchronized): N = 1, 8, 32"
  (cd /tmp && timeout 50 python3 "$REPO/benchmarks/batch_throughput.py" --n 1 8 32 --max-tokens 64 \
      --modes plain,dflash --stages -ngl 99 --json "$OUT/batch_smol_stages.json") 2>&1 | tee "$OUT/batch_smol_stages.txt"
  log "RPC on loopback: a ggml-rpc-server lending CUDA0 against CUDA0 used directly"
  (cd /tmp && timeout 70 python3 "$REPO/benchmarks/multi_device.py" --n-prompts 2 --max-tokens 64 \
      --config local:split_mode=none,main_gpu=0 --config rpc-cuda0:rpc=loopback,rpc_devices=CUDA0 \
      --json "$OUT/rpc_gpu.json") 2>&1 | tee "$OUT/rpc_gpu.txt"
  log "done"
  ;;
batch-smol)
  smol
  log "SmolLM2 + shipped drafter: N = 1..32, plain / dflash / ngram (loop free-running)"
  (cd /tmp && timeout 420 python3 "$REPO/benchmarks/batch_throughput.py" --n 1 2 4 8 16 32 --max-tokens 128 \
      --modes plain,dflash,ngram --reps 2 --check -ngl 99 --json "$OUT/batch_smol.json") 2>&1 | tee "$OUT/batch_smol.txt"
  log "where a step's time goes (stages synchronized): N = 1, 8, 32"
  (cd /tmp && timeout 150 python3 "$REPO/benchmarks/batch_throughput.py" --n 1 8 32 --max-tokens 128 \
      --modes plain,dflash --stages -ngl 99 --json "$OUT/batch_smol_stages.json") 2>&1 | tee "$OUT/batch_smol_stages.txt"
  ;;
batch-big)
  big
  log "Qwen3-8B-shaped f16 target + random DFlash drafter (accepts nothing): N = 1..32"
  (cd /tmp && timeout 500 python3 "$REPO/benchmarks/batch_throughput.py" --target "$T" --drafter "$D" \
      --n 1 2 4 8 16 32 --max-tokens 64 --modes plain,dflash --stages -ngl 99 --json "$OUT/batch_big.json") \
      2>&1 | tee "$OUT/batch_big.txt"
  ;;
rpc-gpu)
  smol
  log "RPC on loopback: a ggml-rpc-server lending CUDA0 against CUDA0 used directly"
  (cd /tmp && timeout 300 python3 "$REPO/benchmarks/multi_device.py" --n-prompts 4 --max-tokens 128 \
      --config local:split_mode=none,main_gpu=0 --config rpc-cuda0:rpc=loopback,rpc_devices=CUDA0 \
      --json "$OUT/rpc_gpu.json") 2>&1 | tee "$OUT/rpc_gpu.txt"
  ;;
multi-gpu)
  nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$OUT/multi_gpu_smi.txt"
  smol
  CONFIGS=(--config one:split_mode=none,main_gpu=0
           --config layer-d1:tensor_split=1/1,drafter_device=CUDA1
           --config layer-d0:tensor_split=1/1,drafter_device=CUDA0
           --config row-d0:split_mode=row,tensor_split=1/1,drafter_device=CUDA0)
  log "SmolLM2 + shipped drafter: one GPU, layers split over two (drafter on either), rows split"
  (cd /tmp && timeout 300 python3 "$REPO/benchmarks/multi_device.py" --n-prompts 4 --max-tokens 128 "${CONFIGS[@]}" \
      --json "$OUT/multi_gpu_smol.json") 2>&1 | tee "$OUT/multi_gpu_smol.txt"
  big
  log "Qwen3-8B-shaped f16 pair (random drafter): the same placements"
  (cd /tmp && timeout 600 python3 "$REPO/benchmarks/multi_device.py" --target "$T" --drafter "$D" --random-prompts 2 \
      --max-tokens 64 "${CONFIGS[@]}" --json "$OUT/multi_gpu_big.json") 2>&1 | tee "$OUT/multi_gpu_big.txt"
  log "batched generation on the split target (N = 1, 8, 32)"
  (cd /tmp && timeout 240 python3 "$REPO/benchmarks/batch_throughput.py" --n 1 8 32 --max-tokens 128 \
      --modes plain,dflash -ngl 99 --json "$OUT/multi_gpu_batch_smol.json") 2>&1 | tee "$OUT/multi_gpu_batch_smol.txt"
  ;;
esac
