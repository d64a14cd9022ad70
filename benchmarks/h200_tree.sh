#!/usr/bin/env bash
# Issue 22 (token trees) on the H200, in the layout of benchmarks/h200.sh: run its `install` phase (a CUDA
# wheel of this code) and `model0` … (prepare_device.sh prints the set-up calls) first in the same lease, then one call per phase:
#
#   bash benchmarks/h200_tree.sh tau       # carry the last SmolLM2 part: τ and tok/s of budgets 4, 8, 16, 32 vs the
#                                          # chain, n_max 7, 60 held-out prompts × 256 tokens (tree_tau.py)
#   bash benchmarks/h200_tree.sh stages    # carry the last SmolLM2 part: budgets 4, 16, 32 vs the chain with every stage
#                                          # synchronised (--sync-stages): where a tree step's time goes
#   bash benchmarks/h200_tree.sh natural   # the same on 40 of issue 20's natural prompts (benchmarks/data/issue20-h200)
#   bash benchmarks/h200_tree.sh softmax   # tree 16 ranked in the graph (patch 0011) vs on the host, 40 natural prompts
#   bash benchmarks/h200_tree.sh budgets   # budgets 4, 8, 16, 32 vs the chain on the same 40 natural prompts, stages
#                                          # not synchronised (the tok/s a user sees; the CPU run of RESULTS 20.4)
#   bash benchmarks/h200_tree.sh bakeoff   # carry the last SmolLM2 part: the bake-off with --tree 4,8,16,32 at
#                                          # n_max 3,7 (builtin:mixed, 1 turn, 2 runs); REPORT.md's "Token trees"
#                                          # and the log name the budget the cost model picks
#
# Results go to $OUT (default /tmp/w/out): tree_tau_h200.json, bakeoff-tree/ and the logs.
set -uo pipefail
PHASE=${1:?phase: tau | stages | natural | softmax | budgets | bakeoff}
W=/tmp/w
OUT=${OUT:-$W/out}
mkdir -p "$W/cache" "$OUT"
export PYTHONPATH=$W/pkg:$W/site PYLLAMA_SPEC_CACHE=$W/cache PYTHONUNBUFFERED=1
export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
GGUF=$W/cache/SmolLM2-135M-Instruct.Q4_1.gguf
source "$(dirname "$0")/device_smol.sh"
smol_checkout  # SmolLM2, and this checkout's Python over the installed wheel
case "$PHASE" in
  tau)
    timeout 560 python benchmarks/tree_tau.py --target "$GGUF" --budgets 4,8,16,32 --n-prompts 60 --max-tokens 256 \
      -ngl 99 --json "$OUT/tree_tau_h200.json" 2>&1 | tee "$OUT/tree_tau_h200.log" ;;
  stages)  # the same, every stage synchronised (the split of a tree step's time; tok/s a little lower)
    timeout 560 python benchmarks/tree_tau.py --target "$GGUF" --budgets 4,16,32 --n-prompts 24 --max-tokens 128 \
      -ngl 99 --sync-stages --json "$OUT/tree_stages_h200.json" 2>&1 | tee "$OUT/tree_stages_h200.log" ;;
  natural)  # issue 20's natural prompts (none of them in the drafter's training data), synchronised stages
    timeout 560 python benchmarks/tree_tau.py benchmarks/data/issue20-h200/answers-s0of8-00.jsonl.gz --split all \
      --target "$GGUF" --budgets 4,16,32 --n-prompts 40 --max-tokens 128 -ngl 99 --sync-stages \
      --json "$OUT/tree_natural_h200.json" 2>&1 | tee "$OUT/tree_natural_h200.log" ;;
  softmax)  # patch 0011: trees ranked in the graph (the default on a GPU) beside the host's softmax, same run
    timeout 560 python benchmarks/tree_tau.py benchmarks/data/issue20-h200/answers-s0of8-00.jsonl.gz --split all \
      --target "$GGUF" --budgets 16 --n-prompts 40 --max-tokens 128 -ngl 99 --sync-stages --host-softmax-too \
      --json "$OUT/tree_softmax_h200.json" 2>&1 | tee "$OUT/tree_softmax_h200.log" ;;
  budgets)  # issue 22's goal (tree 16 ≥ 1.3 × the chain's τ on natural prompts) with tok/s as a user sees them
    timeout 560 python benchmarks/tree_tau.py benchmarks/data/issue20-h200/answers-s0of8-00.jsonl.gz --split all \
      --target "$GGUF" --budgets 4,8,16,32 --n-prompts 40 --max-tokens 128 -ngl 99 \
      --json "$OUT/tree_budgets_h200.json" 2>&1 | tee "$OUT/tree_budgets_h200.log" ;;
  bakeoff)  # (from /tmp: `python -m` in the checkout would import its source tree, which has no extension)
    cd /tmp && timeout 560 python -m pyllama_spec.cli bakeoff "$GGUF" -d "dflash=$(python3 -c 'from pyllama_spec.assets import smollm2_dflash_path as p; print(p())')" \
      --n-max 3,7 --tree 4,8,16,32 --prompts builtin:mixed --turns 1 --runs 2 -n 128 -ngl 99 --no-progress \
      --out "$OUT/bakeoff-tree" 2>&1 | tee "$OUT/bakeoff_tree.log" ;;
  *) echo "unknown phase $PHASE"; exit 2 ;;
esac
