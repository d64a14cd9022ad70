#!/usr/bin/env bash
# Build or install, train and benchmark on the lent H200 (the `device` tool), one phase per call.
# The machine has no network and no cffi: the calls carry .dev/gpu (wheels, a trimmed llama.cpp tree,
# optionally our CUDA wheel built on the CPU machine; made by benchmarks/prepare_device.sh) and the
# SmolLM2 GGUF in four parts; everything is kept under /tmp/w, which survives between calls while the
# machine stays warm (30 s between calls).
#
#   bash benchmarks/h200.sh wheel0   # carry .dev/wheel.part00 (our CUDA wheel, without the shipped drafters' GGUFs, travels
#   …                                #   in parts sized to what the checkout leaves of a 64 MiB call: prepare_device.sh
#                                    #   makes them and prints the set-up calls, e.g. wheel0 … wheel2)
#   bash benchmarks/h200.sh install  # carry the last wheel part, .dev/gpu/wheel.name, .dev/gpu/wheel.parts, .dev/gpu/whl
#                                    # (with no wheel of ours: carry .dev/gpu whole, it builds, ~6 min); lays this
#                                    # checkout's Python and pyllama_spec/data over it
#   bash benchmarks/h200.sh model0   # carry .dev/smol.part00   (SmolLM2 travels in parts the same way: model0 … up to
#   …                                #                           the one before the last, which the phases carry)
#   bash benchmarks/h200.sh data     # carry the last SmolLM2 part (self-distillation data, batched; features)
#   bash benchmarks/h200.sh train    # the configurations in parallel on shared features, pick the best
#   bash benchmarks/h200.sh bench    # best drafter vs plain vs native on held-out prompts; pytest
#   bash benchmarks/h200.sh retest   # carry the last SmolLM2 part after install + model0 …: tests, τ, demo of this checkout
#   bash benchmarks/h200.sh step-big # Qwen3-8B-shaped random pairs (f16, Q4_0) written there: step cost, kernels,
#                                    # the matmul-dispatch variants of vendor/patches/0001 (carry .dev/smol.part00 along)
#   bash benchmarks/h200.sh sbmm A   # issue 19, after install (our wheel with patch 0008): the Qwen3-8B-shaped f16,
#   bash benchmarks/h200.sh sbmm B   # Q4_K and Q4_0 pairs (SBMM_DTYPES) written there; A: verify of 1..16 rows with
#                                    # sbmm (default), without (GGML_CUDA_SBMM=0), at every row count (=1) and with
#                                    # register loads (GGML_CUDA_SBMM_STAGE=0); B: step ÷ plain and ours vs
#                                    # llama-speculative-simple with and without sbmm; P: kernel tables of verify
#                                    # batches of 1 / 8 / 16 rows (torch.profiler: kernels, wall, CUDA runtime calls);
#                                    # G: verify of 1 / 2 / 8 / 16 rows with CUDA graphs on and off (SBMM_DTYPES=f16 for
#                                    # one dtype, ~1 min); F: the fusions (GGML_CUDA_SBMM_FUSE=2 / 1 / 0) -- verify logits
#                                    # compared, verify of 1..16 rows, device activities, step ÷ plain; V: the drafter
#                                    # call and step ÷ plain with a reduced draft vocabulary (DV_KEEP rows, default
#                                    # "32768 8192") beside the borrowed head. Each packs $OUT/sbmm-A|B|P|G|F|V.tar.gz
#   bash benchmarks/h200.sh ops test   # issue 19, after install (our wheel, built with test-backend-ops): llama.cpp's
#   bash benchmarks/h200.sh ops staged # op tests of MUL_MAT (must pass) and its op benchmark with sbmm on / off (test),
#                                    # staged / register loads / MMVQ (staged) (benchmarks/kernels/ggml_op_check.sh),
#                                    # packed as $OUT/ops-MODE.tar.gz; one mode per call (each ~4-5 min);
#                                    # `ops f16half`: f16 (f16 activations, default) beside GGML_CUDA_SBMM_F16_HALF=0 (~2 min)
#                                    # `ops q6k`: q6_K through sbmm (GGML_CUDA_SBMM=1): eval, SBMM_FUSION, perf vs MMVQ
#                                    # `ops defaults`: the default dispatch (SBMM_FUSION + every MUL_MAT case of the 5 types, ~2 min)
#                                    # `ops topk`: patch 0012's TOP_K (eval + perf) beside GGML_CUDA_TOPK_SMALL=0;
#                                    # `ops fattn`: patch 0013, FLASH_ATTN_EXT with the vector kernel to 16 rows
#                                    # `ops seq`: GGML_CUDA_SBMM_SEQ=1 (NT = 2 tiles one after the other): eval + perf n=8,9,12,16 on / off
#                                    # `ops mt4`: GGML_CUDA_SBMM_Q4_0_MT4=1 (q4_0 staged, 64 rows a block, opt-in): eval + perf on / off
#   bash benchmarks/h200.sh diag     # after install: issue 25's leads of 19.17 (graph warm-up events, first turns
#                                    # new vs old rests, EAGLE-3 vs llama-speculative-simple) in one archive
#   bash benchmarks/h200.sh py SCRIPT ARGS # carry the last SmolLM2 part after model0 …: any script of this checkout
#   bash benchmarks/h200.sh auto-overhead # carry the last SmolLM2 part after model0 …: issue 25, auto's per-step cost
#                                    # (auto-taps: auto with the target's taps off in long rests, AutoState.taps_off_when_dormant)
#   bash benchmarks/h200.sh rest-t08 # carry the last SmolLM2 part after install + model0 …: issue 25, auto's resting
#                                    # steps at T = 0.8 (match / rejection rule) vs plain, patch 0017's sampler switch
#   bash benchmarks/h200.sh graph-keys # carry the last SmolLM2 part after install + model0 …: patch 0015 (CUDA graphs
#                                    # per shape) against the upstream key, auto_overhead + draft model vs native
#   bash benchmarks/h200.sh step-smol # carry the last SmolLM2 part after model0 …: SmolLM2 step cost, T>0, held-out
#   bash benchmarks/h200.sh bakeoff  # carry the last SmolLM2 part after install + model0 …: the drafter bake-off
#                                    # (benchmarks/bakeoff/README.md); plots re-rendered here with --from-json
#   bash benchmarks/h200.sh sweep PART # carry the last SmolLM2 part after install + model0 …: issue 25's whole bake-off
#                                    # sweep in five calls, PART = coding-t0a | coding-t0b | coding-t0c | coding-t08 | mixed, each
#                                    # packed into ONE archive $OUT/sweep-PART.tar.gz; then on the CPU machine:
#   bash benchmarks/h200.sh render sweep-*.tar.gz
#                                    # unpack, merge the parts, draw the plots into benchmarks/bakeoff/h200-sweep-*/
#   KIND=eagle3 bash benchmarks/h200.sh kind  # carry the last SmolLM2 part after install + model0 …: one drafter kind
#                                    # (dflash | eagle3 | draft) trained on the committed 9170-prompt set in one call
#
# The order that fits a 30-minute lease (2026-12-02: wheel0 → install → model0 → model1 → a phase took
# 2 min of device time before the phase itself): build the CUDA wheel on the CPU machine
# (benchmarks/build_cuda_wheel.sh, 23–56 min on 2 cores from a fresh checkout: start it first; incremental after that), run prepare_device.sh with it,
# then issue the calls back to back (the machine is given back 30 s after a call) and give_back when done.
# Fewer set-up calls (2026-12-07): `LEAN=1 bash benchmarks/prepare_device.sh WHEEL` packs the wheel's head and all of
# SmolLM2 (QWEN_PARTS=1: and Qwen2.5-Coder) into ~63 MiB calls made with the work tree emptied
# (`benchmarks/lean_tree.sh on` … `off`): 2 lean calls + install, and the phases carry no
# model part. The install call carries the checkout and the last wheel part: since 2026-12-07 they pass 64 MiB, so
# make it with `benchmarks/lean_tree.sh slim` (the bake-off folders and raw results out, ~15 MB) and `off` after it. A fresh checkout
# has no .dev/: build the wheel first (2 005 s on 2 cores on 2026-12-07), and take the answer files and prompt set
# from git history or regenerate them (benchmarks/data/issue20-h200-torch/README.md).
#
# Settings through the environment: N_CHAT, N_CODE, MAX_TOKENS (data); TRAIN_SECONDS, CONFIGS (train);
# KIND, CONFIGS_KIND, DATA, SEED, TRAIN_SECONDS (kind); RETEST_TESTS_ONLY=1 (retest: pytest only); SBMM_DTYPES (sbmm); NMAX, NTOK, RUNS, NGL, DRAFTERS, MIXED_TURNS, SWEEP_GGUF,
# DRY=1 (sweep: this checkout's source tree, for a check on the CPU machine).
set -uo pipefail
PHASE=${1:?phase: wheel0 … | install | model0 …  | data | train | bench | retest | step-big | sbmm | ops | auto-overhead | rest-t08 | graph-keys | diag | py | step-smol | bakeoff | sweep | render | kind}
REPO=$(pwd)
W=/tmp/w
OUT=${OUT:-$W/out}
mkdir -p "$W/cache" "$W/site" "$OUT"
export PYTHONPATH=$W/pkg:$W/site PYLLAMA_SPEC_CACHE=$W/cache PYTHONUNBUFFERED=1
# On that image, torch imported before the first model load crashes llama.cpp's tokenizer set-up
# unless libstdc++ is loaded at start (README, Known issues).
[ "$PHASE" = install ] || export LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libstdc++.so.6
GGUF=$W/cache/SmolLM2-135M-Instruct.Q4_1.gguf
source "$REPO/benchmarks/device_smol.sh"  # smol_cat: SmolLM2 from its parts
CONFIGS=${CONFIGS:-L2-B8-t2,L3-B8-t2,L3-B8-t3}
log() { echo "== $(date +%T) $*"; }

build() {
  [ -f .dev/gpu/llama.cpp.tar.xz ] || { echo "building here needs the trimmed llama.cpp tree: carry .dev/gpu whole" \
      "(its llama.cpp.tar.xz, 2.8 MB) with this call"; exit 1; }
  tar -xJf .dev/gpu/llama.cpp.tar.xz -C "$W"
  log "build (pip wheel, CUDA sm_90, native tools)"
  start=$(date +%s)
  python3 -m pip wheel . --no-deps --no-build-isolation -w "$W/wheels" \
      -C cmake.define.PYLLAMA_SPEC_LLAMA_CPP_DIR="$W/llama.cpp" -C cmake.define.PYLLAMA_SPEC_NATIVE_TOOLS=ON \
      -C cmake.define.CMAKE_CUDA_ARCHITECTURES=90 -C build-dir="$W/build" \
      $([ -f "$W/llama.cpp/tests/test-backend-ops.cpp" ] && echo -C cmake.define.PYLLAMA_SPEC_OP_TESTS=ON) > "$OUT/build.log" 2>&1
  rc=$?
  echo "build rc=$rc seconds=$(( $(date +%s) - start ))" | tee -a "$OUT/gpu.txt"
  [ $rc -eq 0 ] || { tail -50 "$OUT/build.log"; exit 1; }
  rm -rf "$W/pkg"
  python3 -m pip install -q --no-index --no-deps --target "$W/pkg" "$W"/wheels/pyllama_spec-*.whl
}

check() {
  (cd /tmp && python3 -c "import pyllama_spec as ps; print(ps.system_info()); print(ps.devices()); \
print('gpu offload', ps.supports_gpu_offload()); from pyllama_spec.native import find_program; \
print(find_program('llama-speculative-simple'))") 2>&1 | tee -a "$OUT/gpu.txt"
  (cd /tmp && python3 -c "import pyllama_spec as ps, sys; sys.exit(0 if ps.supports_gpu_offload() else 1)")
}

# The test suite against the installed wheel: from a copy of the tests, because a run from the checkout
# would import the source tree's pyllama_spec (no compiled parts) ahead of the wheel.
tests_against_the_wheel() {
  rm -rf "$W/rt" && mkdir -p "$W/rt/vendor" && cp -r tests benchmarks examples pyproject.toml "$W/rt/" \
      && cp -r vendor/patches "$W/rt/vendor/"
  (cd "$W/rt" && timeout ${PYTEST_TIMEOUT:-230} python3 -m pytest -q -p no:cacheprovider --timeout 60 \
      --deselect tests/test_train.py --deselect tests/test_train_kinds.py 2>&1 | tee "$OUT/pytest_h200.txt" | tail -15)
}

case "$PHASE" in
wheel[0-9]|wheel[0-9][0-9])  # (prepare_device.sh makes WHEEL_PARTS parts: wheel0 .. wheel{N-2} here, install the last)
  cp .dev/wheel.part$(printf %02d $((10#${PHASE#wheel}))) "$W/" && ls -la "$W"/wheel.part*
  ;;
install)
  np=$(cat .dev/gpu/wheel.parts 2>/dev/null || echo 3)  # (a .dev/gpu made before 2026-12-06: three parts)
  last=.dev/gpu/wheel.part$(printf %02d $(( np - 1 )))
  if [ -f "$last" ]; then
    parts=()
    for i in $(seq 0 $(( np - 2 ))); do
      p=$W/wheel.part$(printf %02d "$i")
      [ -f "$p" ] || { echo "run 'wheel$i' first (carry .dev/wheel.part$(printf %02d "$i")), on this warm machine"; exit 1; }
      parts+=("$p")
    done
    cat "${parts[@]}" "$last" > ".dev/gpu/whl/$(cat .dev/gpu/wheel.name)"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site" \
      $(ls .dev/gpu/whl/*.whl | grep -v pyllama_spec) || exit 1
  # (the trimmed llama.cpp tree, 2.8 MB, is needed only to build here: carry .dev/gpu whole then, else its other files)
  [ -f .dev/gpu/llama.cpp.tar.xz ] && cp .dev/gpu/llama.cpp.tar.xz "$W/"
  if ls .dev/gpu/whl/pyllama_spec-*.whl >/dev/null 2>&1; then
    log "installing the wheel built on the CPU machine"
    python3 -m pip install -q --no-index --no-deps --target "$W/pkg" .dev/gpu/whl/pyllama_spec-*.whl
    checkout_over_wheel  # (the wheel's parts leave the shipped drafters out: the checkout has them)
    check || { log "that wheel does not work here: building"; build; check || exit 1; }
  else
    build; check || exit 1
    # bring the wheel back in pieces (files from $OUT: 16 MiB each at most) for later machines
    split -b 15000000 -d "$W"/wheels/pyllama_spec-*.whl "$OUT/wheel.part" && ls "$W"/wheels/ > "$OUT/wheel.name"
  fi
  ;;
model[0-9]|model[0-9][0-9])  # (prepare_device.sh sizes SmolLM2's parts to the checkout and prints the calls: all
  # but the last here, the last carried by each phase)
  cp .dev/smol.part$(printf %02d $((10#${PHASE#model}))) "$W/" && ls -la "$W"/smol.part*
  ;;
data)
  smol_cat "$GGUF" || exit 2; sha256sum "$GGUF"
  log "self-distillation data (batched greedy answers)"
  (cd /tmp && timeout ${DATA_TIMEOUT:-330} python3 -m pyllama_spec.train.data "$GGUF" "$W/data.jsonl" \
      --n-chat ${N_CHAT:-9000} --n-code ${N_CODE:-3000} --max-tokens ${MAX_TOKENS:-256} --parallel ${PARALLEL:-128} \
      2>&1 | tr '\r' '\n' | grep -v "^$" | awk 'NR % 20 == 0' | tail -8)
  wc -l "$W/data.jsonl"
  gzip -c "$W/data.jsonl" > "$OUT/smollm2-selfdistill.jsonl.gz"; ls -la "$OUT"
  log "features (union of the configurations' target layers)"
  (cd /tmp && python3 "$REPO/benchmarks/train_configs.py" features "$GGUF" "$W/data.jsonl" "$W/train" \
      --configs "$CONFIGS") 2>&1 | tee "$OUT/features_log.txt" || exit 1
  log "done"
  ;;
train)
  log "training ${CONFIGS} in parallel, ${TRAIN_SECONDS:-300} s each"
  for c in ${CONFIGS//,/ }; do
    (cd /tmp && python3 "$REPO/benchmarks/train_configs.py" train "$GGUF" "$W/train" "$c" --out "$W/train/out" \
        --seconds ${TRAIN_SECONDS:-300} > "$W/train/log_$c.txt" 2>&1) &
  done
  wait
  cat "$W"/train/log_*.txt | grep -v "Warning\|warn(" > "$OUT/train_log.txt"
  grep -h "^\[\|^L[0-9]" "$W"/train/log_*.txt | tail -40
  (cd /tmp && python3 "$REPO/benchmarks/train_configs.py" pick "$W/train" --out "$W/train/out") 2>&1 | tee -a "$OUT/train_log.txt"
  cp "$W/train/out/train_report.json" "$W/train/out/smollm2-dflash-q8_0.gguf" "$OUT/"
  ;;
bench)
  best=$(cat "$W/train/best_dflash.txt")
  log "trained drafter vs plain vs native on held-out prompts"
  timeout ${BENCH_TIMEOUT:-300} python3 benchmarks/compare_native.py --drafter "$best" --max-tokens 256 --runs 1 \
      --n-max 3 7 --prompts "$W/data.jsonl" --n-prompts ${N_PROMPTS:-20} --json "$OUT/bench_trained_h200.json" 2>&1 \
      | tee "$OUT/bench_trained_h200.txt"
  timeout 100 python3 examples/stage_timing.py --drafter "$best" --n-max 7 --max-tokens 128 > "$OUT/demo_trained_h200.txt" 2>&1
  tail -22 "$OUT/demo_trained_h200.txt"
  log "pytest (the picked drafter put into the installed package as the shipped one)"
  python3 - "$best" "$W/train/out/train_report.json" <<'PY'
import hashlib, json, re, shutil, sys
from pathlib import Path
best, report = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
row = next(r for r in report["results"] if r["gguf"] == str(best))
pkg = Path("/tmp/w/pkg/pyllama_spec")
(pkg / "data").mkdir(exist_ok=True)
shutil.copy(best, pkg / "data" / "smollm2-135m-instruct-dflash-q8_0.gguf")
sha = hashlib.sha256(best.read_bytes()).hexdigest()
(pkg / "data" / "MODEL_CARD.md").write_text(f"sha256 {sha}\n")
a = (pkg / "assets.py").read_text()
a = re.sub(r'SMOLLM2_DFLASH_SHA256 = "[^"]*"', f'SMOLLM2_DFLASH_SHA256 = "{sha}"', a)
meta = {"block_size": row["block_size"], "target_layer_ids": row["layers"], "mask_token_id": row["mask_token"], "n_layer": row["drafter_layers"]}
a = re.sub(r"SMOLLM2_DFLASH = \{[^}]*\}", "SMOLLM2_DFLASH = " + json.dumps(meta), a)
(pkg / "assets.py").write_text(a)
print("shipped for the tests:", best.name, sha, meta)
PY

  tests_against_the_wheel
  ;;
kind)
  # One drafter kind, start to end, on the committed data set (same data, same held-out split for every kind):
  # features of the union of its configurations' target layers (~130 s for 4 layers; none for draft models),
  # its configurations trained side by side on the GPU for TRAIN_SECONDS each, each measured through our loop
  # (when this checkout's loop has the kind) and llama-speculative-simple, the best picked.
  KIND=${KIND:?KIND=dflash|eagle3|draft}
  case "$KIND" in
    dflash) DEF=L3-B8-t3,L4-B8-t3,L3-B16-t3 ;;
    eagle3) DEF=E3-t3,E3-t3-v8k ;;
    draft)  DEF=D4-w256,D6-w256 ;;
    *) echo "KIND must be dflash, eagle3 or draft"; exit 1 ;;
  esac
  KCONFIGS=${CONFIGS_KIND:-$DEF}
  [ -s "$GGUF" ] || smol_cat "$GGUF" || exit 2
  # this checkout's Python files over the installed wheel (its native part is unchanged), as retest does
  checkout_over_wheel
  DATA=${DATA:-$REPO/benchmarks/data/smollm2-selfdistill-9170.jsonl.gz}
  KW=$W/train_$KIND
  log "$KIND: features for $KCONFIGS from $(basename "$DATA")"
  (cd /tmp && python3 "$REPO/benchmarks/train_configs.py" features "$GGUF" "$DATA" "$KW" --configs "$KCONFIGS") \
      2>&1 | tee "$OUT/features_${KIND}_log.txt" || exit 1
  log "$KIND: training $KCONFIGS in parallel, ${TRAIN_SECONDS:-240} s each"
  for c in ${KCONFIGS//,/ }; do
    (cd /tmp && python3 "$REPO/benchmarks/train_configs.py" train "$GGUF" "$KW" "$c" --out "$KW/out" \
        --seconds ${TRAIN_SECONDS:-240} --seed ${SEED:-0} > "$KW/log_$c.txt" 2>&1) &
  done
  wait
  cat "$KW"/log_*.txt | grep -v "Warning\|warn(" > "$OUT/train_${KIND}_log.txt"
  grep -h "^\[\|^[LED][0-9]" "$KW"/log_*.txt | tail -30
  (cd /tmp && python3 "$REPO/benchmarks/train_configs.py" pick "$KW" --out "$KW/out") 2>&1 | tee -a "$OUT/train_${KIND}_log.txt"
  cp "$KW/out/train_report.json" "$OUT/train_report_${KIND}.json"
  cp "$KW"/out/smollm2-"$KIND"-q8_0.gguf "$OUT/" 2>/dev/null
  cp "$KW"/out/train_[LED]*.json "$OUT/" 2>/dev/null
  ;;
retest)
  # carry the last SmolLM2 part after install + model0 …: this checkout's Python files and shipped data go over
  # the installed wheel (its native part is unchanged), then tests, τ on held-out prompts and the demo
  smol_checkout  # (device_smol.sh: SmolLM2 from its parts, this checkout's Python and data over the wheel)
  log "pytest"
  tests_against_the_wheel
  [ "${RETEST_TESTS_ONLY:-0}" = 1 ] && exit 0  # (the suite alone, where device time is short)
  log "τ of the shipped drafter on 60 held-out prompts"
  (cd /tmp && timeout 200 python3 "$REPO/benchmarks/heldout_tau.py" "$REPO/benchmarks/data/smollm2-selfdistill-9170.jsonl.gz" \
      --n-prompts 60 --json "$OUT/heldout_tau_h200.json")
  log "the README demo as a user runs it (shipped drafter by default)"
  (cd /tmp && timeout 120 python3 "$REPO/examples/stage_timing.py" > "$OUT/demo_h200.txt" 2>&1); grep -E "^drafter|τ|generation" "$OUT/demo_h200.txt" | head -30
  ;;
step-big)
  [ -f .dev/smol.part00 ] && cp .dev/smol.part00 "$W/"
  B=$W/big; mkdir -p "$B"
  for dt in f16 q4_0; do
    log "write the Qwen3-8B-shaped $dt pair"
    (cd /tmp && python3 -m pyllama_spec.fixtures big "$B" --dtype $dt) || exit 1
  done
  ls -la "$B"; df -h /tmp | tail -1
  for dt in f16 q4_0; do
    T=$B/target-qwen3-8b-$dt.gguf; D=$B/dflash-qwen3-8b-$dt.gguf
    log "step cost, $dt pair (kernels profiled)"
    (cd /tmp && timeout 300 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D --label "qwen3-8b-$dt" \
        --max-tokens 96 --reps 30 --profile --json "$OUT/step_$dt.json") 2>&1 | grep -v "^ \{2,\}[0-9.]* µs"
  done
  log "ours vs llama-speculative-simple on the f16 pair (n_max 7, one prompt of random ids)"
  (cd "$REPO" && timeout 150 python3 benchmarks/compare_native.py --target $B/target-qwen3-8b-f16.gguf \
      --drafter $B/dflash-qwen3-8b-f16.gguf --n-max 7 --max-tokens 96 --runs 1 --json "$OUT/native_f16.json") 2>&1 | tail -3
  log "kernel-choice variants (verify rows only)"
  T=$B/target-qwen3-8b-f16.gguf; D=$B/dflash-qwen3-8b-f16.gguf
  for env in GGML_CUDA_MMVF_MAX_COLS=8 GGML_CUDA_DISABLE_MMF=1 GGML_CUDA_DISABLE_GRAPHS=1; do
    (cd /tmp && env $env timeout 120 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D --label "f16 $env" \
        --sections verify --reps 20 --json "$OUT/verify_f16_${env%%=*}.json") 2>&1 | grep "verify\|#"
  done
  T=$B/target-qwen3-8b-q4_0.gguf; D=$B/dflash-qwen3-8b-q4_0.gguf
  for env in GGML_CUDA_MMVQ_MAX_COLS=4 GGML_CUDA_DISABLE_GRAPHS=1; do
    (cd /tmp && env $env timeout 120 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D --label "q4_0 $env" \
        --sections verify --reps 20 --json "$OUT/verify_q4_0_${env%%=*}.json") 2>&1 | grep "verify\|#"
  done
  ;;
sbmm)
  # Issue 19 stage 2 (patch 0008 in the installed wheel). Part A writes the pairs (f16 ~17 GB, Q4_K ~6 GB; kept in
  # /tmp/w/big while the machine stays warm) and measures verify batches; part B the loop on the same pairs.
  PART=${2:?part: A | B | P | G | F | V}
  B=$W/big; mkdir -p "$B" "$OUT/sbmm"
  checkout_over_wheel
  DTS=${SBMM_DTYPES:-f16 q4_K q4_0}
  for dt in $DTS; do
    [ -s "$B/target-qwen3-8b-$dt.gguf" ] && continue
    log "write the Qwen3-8B-shaped $dt pair"
    (cd /tmp && python3 -m pyllama_spec.fixtures big "$B" --dtype $dt) || exit 1
  done
  if [ "$PART" = G ]; then
    # does llama.cpp replay a verify of R > 1 rows as a CUDA graph? The same verify batches with CUDA graphs
    # off (GGML_CUDA_DISABLE_GRAPHS=1) beside the default: if R = 8 costs the same both ways, it was not
    # replayed (RESULTS.md 13.3: the GPU-busy excess of 8 rows over 1 is a third of the wall excess)
    for dt in $DTS; do
      T=$B/target-qwen3-8b-$dt.gguf; D=$B/dflash-qwen3-8b-$dt.gguf
      for env in GGML_CUDA_SBMM_DEFAULT=1 GGML_CUDA_DISABLE_GRAPHS=1; do
        log "verify, $dt, $env"
        (cd /tmp && env $env timeout 100 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D \
            --label "qwen3-8b-$dt $env" --sections verify --rows 1 2 8 16 --reps 20 \
            --json "$OUT/sbmm/graphs_${dt}_${env}.json") 2>&1 | grep "verify\|#\|rows"
      done
    done
  elif [ "$PART" = P ]; then
    # where a verify's excess over a decode goes once the weight matmuls are near flat: GPU kernel tables
    # (torch.profiler) of verify batches with the default dispatch
    for dt in $DTS; do
      T=$B/target-qwen3-8b-$dt.gguf; D=$B/dflash-qwen3-8b-$dt.gguf
      log "verify kernels, $dt"
      (cd /tmp && timeout 200 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D --label "qwen3-8b-$dt" \
          --sections verify --rows 1 8 16 --n-max 7 --reps 20 --profile --json "$OUT/sbmm/profile_${dt}.json") 2>&1 | head -80
    done
  elif [ "$PART" = F ]; then
    # stage 6 (the fusions of ggml_patch/sbmm.cu: sibling MUL_MATs in one launch, MUL_MAT + residual ADD in one
    # kernel, the f16 activations written by the RMS_NORM / SwiGLU before f16 weights; GGML_CUDA_SBMM_FUSE=0 turns
    # them off, =1 keeps the conversion kernels, =2 is the default, =3 adds q8_1 activations for quantized weights:
    # the same as =2 for f16 pairs): the verify logits of each variant against the last of SBMM_F_ENVS, verify batches of
    # 1..16 rows, the device activities per verify call (first variant), and the loop's step ÷ plain, side by side
    # (a variant may set several variables joined by commas, e.g. GGML_CUDA_SBMM_FUSE=3,GGML_CUDA_FATTN_VEC_MAX_ROWS=8)
    FENVS=${SBMM_F_ENVS:-GGML_CUDA_SBMM_FUSE=3 GGML_CUDA_SBMM_FUSE=2 GGML_CUDA_SBMM_FUSE=1 GGML_CUDA_SBMM_FUSE=0}
    REF=${FENVS##* }
    for dt in $DTS; do
      T=$B/target-qwen3-8b-$dt.gguf; D=$B/dflash-qwen3-8b-$dt.gguf
      for env in $FENVS; do
        log "verify + logits, $dt, $env"
        (cd /tmp && env ${env//,/ } timeout 150 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D \
            --label "qwen3-8b-$dt $env" --sections verify --rows 1 2 4 8 12 16 --reps 20 \
            --dump-logits "$OUT/sbmm/logits_${dt}_${env}.npz" --json "$OUT/sbmm/verify_${dt}_${env}.json") 2>&1 | grep "verify\|#\|rows"
      done
      for env in $FENVS; do
        [ "$env" = "$REF" ] && continue
        log "logits, $dt: $env vs $REF"
        (cd /tmp && python3 "$REPO/benchmarks/step_cost.py" --compare-logits "$OUT/sbmm/logits_${dt}_${env}.npz" \
            "$OUT/sbmm/logits_${dt}_${REF}.npz" --json "$OUT/sbmm/logits_${dt}_${env}_vs_ref.json")
      done
      rm -f "$OUT"/sbmm/logits_${dt}_*.npz
      [ "${SBMM_F_PROFILE:-1}" = 1 ] && (cd /tmp && env $(echo ${FENVS%% *} | tr , " ") timeout 200 python3 "$REPO/benchmarks/step_cost.py" \
          --target $T --drafter $D --label "qwen3-8b-$dt ${FENVS%% *}" --sections verify --rows 1 8 16 --n-max 7 --reps 10 \
          --profile --json "$OUT/sbmm/profile_${dt}.json") 2>&1 | grep -A10 "^kernels of" | head -60
      for env in $FENVS; do
        log "loop (step ÷ plain), $dt, $env"
        (cd /tmp && env ${env//,/ } timeout 150 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D \
            --label "qwen3-8b-$dt $env" --sections loop --n-max 3 7 --runs 1 --max-tokens 96 \
            --json "$OUT/sbmm/loop_${dt}_${env}.json") 2>&1 | grep "loop\|#\|plain\|n_max"
      done
    done
  elif [ "$PART" = V ]; then
    # a reduced draft vocabulary (FR-Spec, pyllama_spec.draft_vocab): the drafter call and the loop's step ÷
    # plain with a head of its own of DV_KEEP rows beside the borrowed 151 936-row head (the first ids: a random pair
    # has no token frequencies, and which rows are kept does not change the cost)
    for dt in $DTS; do
      T=$B/target-qwen3-8b-$dt.gguf; D=$B/dflash-qwen3-8b-$dt.gguf
      for k in ${DV_KEEP:-32768 8192}; do
        [ -s "$B/dflash-qwen3-8b-$dt-v$k.gguf" ] || (cd /tmp && python3 -c "import numpy as np
from pyllama_spec.draft_vocab import write_reduced_vocab as w
w('$D', '$T', np.arange($k), '$B/dflash-qwen3-8b-$dt-v$k.gguf')") || exit 1
      done
      for d in $D $(for k in ${DV_KEEP:-32768 8192}; do echo $B/dflash-qwen3-8b-$dt-v$k.gguf; done); do
        v=$(basename $d .gguf); log "drafter call + loop, $v"
        (cd /tmp && timeout 200 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $d --label "$v" \
            --sections drafter,loop --n-max 3 7 --runs 1 --reps 20 --max-tokens 96 \
            --json "$OUT/sbmm/vocab_$v.json") 2>&1 | grep "propose\|draft\|loop\|#\|plain\|n_max"
      done
    done
  elif [ "$PART" = A ]; then
    for dt in $DTS; do
      T=$B/target-qwen3-8b-$dt.gguf; D=$B/dflash-qwen3-8b-$dt.gguf
      ENVS="GGML_CUDA_SBMM_DEFAULT=1 GGML_CUDA_SBMM=0"
      # quantized: also sbmm at every 2..16 rows (=1) and the register loads instead of the staged ones (f16:
      # =1 takes the same 2..16 columns as the default, and it has no staged path)
      [ $dt != f16 ] && ENVS="$ENVS GGML_CUDA_SBMM=1 GGML_CUDA_SBMM_STAGE=0"
      [ $dt = f16 ] && ENVS="$ENVS GGML_CUDA_SBMM_F16_HALF=0"  # f16: the first version (f32 activations, register loads)
      for env in $ENVS; do
        log "verify, $dt, $env"
        (cd /tmp && env $env timeout 150 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D \
            --label "qwen3-8b-$dt $env" --sections verify --rows 1 2 3 4 6 8 12 16 --reps 20 \
            --json "$OUT/sbmm/verify_${dt}_${env}.json") 2>&1 | grep "verify\|#\|rows"
      done
    done
  else
    T=$B/target-qwen3-8b-f16.gguf; D=$B/dflash-qwen3-8b-f16.gguf
    for env in GGML_CUDA_SBMM_DEFAULT=1 GGML_CUDA_SBMM=0; do
      for dt in $DTS; do
        T=$B/target-qwen3-8b-$dt.gguf; D=$B/dflash-qwen3-8b-$dt.gguf
        log "loop (step ÷ plain), $dt, $env"
        (cd /tmp && env $env timeout 150 python3 "$REPO/benchmarks/step_cost.py" --target $T --drafter $D \
            --label "qwen3-8b-$dt $env" --sections loop --n-max 3 7 15 --runs 1 --max-tokens 96 \
            --json "$OUT/sbmm/loop_${dt}_${env}.json") 2>&1 | grep "loop\|#\|plain\|n_max"
        # T = 0 with the verify rows drawn by llama.cpp's greedy backend sampler (patch 0007: one argmax and one
        # copy per sequence) instead of the host argmax over 8 x 151 936 logits, "auto"'s choice at T = 0, which
        # cost ~75 us a row in the accept stage (RESULTS.md 13.2)
        [ "$env" = GGML_CUDA_SBMM_DEFAULT=1 ] && (cd /tmp && env $env timeout 150 python3 "$REPO/benchmarks/step_cost.py" \
            --target $T --drafter $D --label "qwen3-8b-$dt $env backend-sampling" --sections loop --n-max 3 7 15 --runs 1 \
            --max-tokens 96 --backend-sampling on --json "$OUT/sbmm/loop_${dt}_${env}_bs-on.json") 2>&1 | grep "loop\|#\|plain\|n_max"
      done
      log "ours vs llama-speculative-simple, f16 pair, n_max 7, $env"
      T=$B/target-qwen3-8b-f16.gguf; D=$B/dflash-qwen3-8b-f16.gguf
      (cd "$REPO" && env $env timeout 120 python3 benchmarks/compare_native.py --target $T --drafter $D --n-max 7 \
          --max-tokens 96 --runs 1 --json "$OUT/sbmm/native_f16_${env}.json") 2>&1 | tail -3
    done
  fi
  tar -czf "$OUT/sbmm-$PART.tar.gz" -C "$OUT" sbmm && rm -rf "$OUT/sbmm"
  ;;
ops)
  TBO=$W/pkg/pyllama_spec/bin/test-backend-ops
  [ -x "$TBO" ] || { echo "no $TBO: the wheel was built without PYLLAMA_SPEC_OP_TESTS=ON (build_cuda_wheel.sh sets it)"; exit 1; }
  mkdir -p "$OUT/ops"
  # both modes took > 9 min on 2026-12-02 (eval ~1 min each, 7 perf sweeps of 68 cases): one per call; "fuse topk"
  # took > 8 min on 2026-12-04 (fuse ~5 with its five SBMM_FUSION evals, then TOP_K's perf sweep): fattn alone
  for mode in ${2:-test staged}; do
    log "test-backend-ops: $mode"
    OUT=$OUT/ops TBO=$TBO bash benchmarks/kernels/ggml_op_check.sh $mode > "$OUT/ops/$mode.txt" 2>&1
    grep -E "^eval|FAIL" "$OUT/ops/$mode.txt" | head -12
  done
  MM=$(ls "$OUT"/ops/perf_*.txt 2>/dev/null | grep -v "topk\|fattn")  # (MUL_MAT tables; topk / fattn print their own)
  [ -n "$MM" ] && python3 benchmarks/kernels/op_perf_table.py $MM | tee "$OUT/ops/table.md"
  tar -czf "$OUT/ops-${2:-all}.tar.gz" -C "$OUT" ops && rm -rf "$OUT/ops"
  ;;
auto-overhead)
  # issue 25: where n_max="auto" loses time against fixed n_max on this GPU (RESULTS.md 19.3): stage tables, the
  # target's graph reuse and a profile by own time, for an n-gram kind and DFlash (carry the last SmolLM2 part)
  smol_cat "$GGUF" || exit 2
  checkout_over_wheel
  for d in ngram-map-k dflash; do
    log "auto overhead, $d"
    (cd /tmp && timeout 200 python3 "$REPO/benchmarks/auto_overhead.py" --drafter $d --n-max 0 2 7 auto-old auto auto-taps) 2>&1 \
      | tee "$OUT/auto_overhead_$d.txt" | head -80  # (≈ 70 lines with auto-taps: a head that closes early cuts tee's file)
  done
  ;;
rest-t08)
  # issue 25: n_max="auto"'s resting steps at T = 0.8 against plain decoding (carry the last SmolLM2 part after install +
  # model0 …; ~3 min): a sampler chain's attach / detach with patch 0017 and with upstream's reserve
  # (decode_overhead.py --sampler, each in its own process), then DFlash auto_overhead at T = 0.8 with the match rule
  # (the default: one chain the whole generation; plain, auto, auto-taps) and the rejection rule (plain, auto with
  # AutoState.draw_in_graph_when_dormant, auto-host without). One archive $OUT/rest-t08.tar.gz
  smol_checkout
  R=$W/rest-t08 && rm -rf "$R" && mkdir -p "$R"
  for res in 0 1 0 1; do
    log "sampler switch, LLAMA_SAMPLER_RESERVE=$res"
    (cd /tmp && LLAMA_SAMPLER_RESERVE=$res timeout 60 python3 "$REPO/benchmarks/decode_overhead.py" --sampler) 2>&1 \
      | tail -3 | tee -a "$R/sampler_switch_$res.txt"
  done
  for v in match rejection; do
    passes="0 auto auto-taps 0 auto auto-taps"; [ $v = rejection ] && passes="0 auto-host auto 0 auto-host auto"
    log "auto overhead, DFlash, T 0.8, verify $v: $passes"
    (cd /tmp && timeout "${RT_LIMIT:-150}" python3 "$REPO/benchmarks/auto_overhead.py" --drafter dflash --temperature 0.8 \
        --verify $v --turns 4 --n-max $passes --top 12) > "$R/auto_t08_$v.txt" 2>&1
    grep "tok/s\|steps by kind" "$R/auto_t08_$v.txt" | cut -c1-400
  done
  tar -czf "$OUT/rest-t08.tar.gz" -C "$R" .
  ;;
graph-keys)
  # patch 0015 (CUDA graphs cached per shape) against upstream's first-node key (GGML_CUDA_GRAPH_KEY=first-node),
  # side by side: each setting in its own process (the variable is read once), the two alternating; auto_overhead
  # for DFlash, the draft model and ngram-map-k (plain, n_max 2 / 7, auto), then the draft model ours vs
  # llama-speculative-simple (compare_native, GK_PROMPTS prompts × 128 tokens, tokens compared; GK_NATIVE=0 skips
  # it); one archive $OUT/graph-keys.tar.gz (carry the last SmolLM2 part; ~5 min). GK_REPS ("1"; e.g. "1 2 3"),
  # GK_DRAFTERS ("dflash draft ngram-map-k"), GK_PASSES (auto_overhead's --n-max, "0 2 7 auto"; e.g. add auto-taps)
  smol_checkout  # (device_smol.sh: SmolLM2 from its parts, this checkout's Python and data over the wheel)
  G=$W/graph-keys && rm -rf "$G" && mkdir -p "$G"
  HELD=benchmarks/data/issue20-h200-torch/heldout-greedy.jsonl.gz
  for rep in ${GK_REPS:-1}; do
    for key in first-node shape; do
      for d in ${GK_DRAFTERS:-dflash draft ngram-map-k}; do
        log "graph key $key, auto overhead $d (rep $rep)"
        (cd /tmp && GGML_CUDA_GRAPH_KEY=$key timeout 90 python3 "$REPO/benchmarks/auto_overhead.py" --drafter $d \
            --n-max ${GK_PASSES:-0 2 7 auto} --top 12) > "$G/auto_${d}_${key}_$rep.txt" 2>&1
        grep "tok/s" "$G/auto_${d}_${key}_$rep.txt" | head -8
      done
    done
  done
  for key in $([ "${GK_NATIVE:-1}" = 1 ] && echo first-node shape); do
    log "graph key $key: draft model, ours vs native, n_max 3 7"
    (cd /tmp && GGML_CUDA_GRAPH_KEY=$key timeout 200 python3 "$REPO/benchmarks/compare_native.py" --target "$GGUF" \
        --drafter "$(python3 -c 'from pyllama_spec.assets import smollm2_draft_path as p; print(p())')" --n-max 3 7 --max-tokens 128 --runs 1 \
        -ngl 99 --prompts "$REPO/$HELD" --n-prompts ${GK_PROMPTS:-16} --json "$G/native_draft_$key.json") \
        > "$G/native_draft_$key.txt" 2>&1
    grep -v "^llama_\|^load" "$G/native_draft_$key.txt" | tail -8
  done
  tar -czf "$OUT/graph-keys.tar.gz" -C "$W" graph-keys && ls -la "$OUT"
  ;;
diag)
  # issue 25 (RESULTS.md 19.17's leads), one archive $OUT/diag.tar.gz (~3 min): graph_warmup.py (ggml-cuda's CUDA-graph
  # warm-up events per decode: plain, DFlash n_max 2, auto); first_turn.py with the rest rule of 2026-12-07 and
  # --old-rests (DIAG_RULES, "new old"), alternating in separate processes (DIAG_REPS, "1 2"); the shipped EAGLE-3 head
  # through our loop vs llama-speculative-simple (compare_native, 16 held-out code prompts x 128 tokens, n_max 3 7;
  # DIAG_NATIVE=0 skips; DIAG_NATIVE_EAGER=1 runs it with GGML_CUDA_GRAPH_EAGER=1); DIAG_CRASH=0 skips the crash test
  # (passed on an H100 on 2026-12-07: RESULTS.md 19.20); DIAG_FIRST=0 skips first_turn.py; graph_warmup.py also runs
  # with LLAMA_SWITCH_PLAN=worst (DIAG_SWITCH_PLAN=0 skips) and at T 0.8 (DIAG_T08=0 skips)
  smol_checkout
  G=$W/diag && rm -rf "$G" && mkdir -p "$G"
  if [ "${DIAG_CRASH:-${DIAG_EAGER:-0}}" != 1 ]; then
    :  # (no crash test asked for)
  elif [ -x "$W/pkg/pyllama_spec/bin/test-backend-ops" ]; then
    # patch 0018's crash test first: in one process the first MUL_MAT case warms a graph up the upstream way and
    # every later case's graph is then captured at its first call (an illegal call in a capture would abort here)
    log "test-backend-ops perf -o MUL_MAT with GGML_CUDA_GRAPH_EAGER=1 (crash test, 120 s at most)"
    GGML_CUDA_GRAPH_EAGER=1 timeout 120 "$W/pkg/pyllama_spec/bin/test-backend-ops" perf -o MUL_MAT -b CUDA0 \
        > "$G/eager_mul_mat_perf.txt" 2>&1
    echo "rc=$? (124: the time limit, fine; 134 or 139: a crash)" | tee -a "$G/eager_mul_mat_perf.txt"
    tail -3 "$G/eager_mul_mat_perf.txt"
  else
    echo "no $W/pkg/pyllama_spec/bin/test-backend-ops (a wheel built without PYLLAMA_SPEC_OP_TESTS=ON): crash test skipped" \
        | tee "$G/eager_mul_mat_perf.txt"
  fi
  # graph_warmup.py (3 turns of 128 tokens as the bake-off: turn 2 starts past a 256-row KV boundary and turn 3 crosses
  # one, new graph shapes; each generation's dear decodes with their events, reset causes and ms), in its own process
  # per variant NAME:ENV:ARGS — eager 0; with DIAG_EAGER=1 patch 0018's GGML_CUDA_GRAPH_EAGER=1; patches 0016 / 0017's
  # opt-in LLAMA_SWITCH_PLAN=worst (do the [data] / [src] resets go? DIAG_SWITCH_PLAN=0 skips); T 0.8, where each
  # generation attaches a backend sampler chain of its own (DIAG_T08=0 skips)
  variants=("e0:GGML_CUDA_GRAPH_EAGER=0:")
  [ "${DIAG_EAGER:-0}" = 1 ] && variants+=("e1:GGML_CUDA_GRAPH_EAGER=1:")
  [ "${DIAG_SWITCH_PLAN:-1}" = 1 ] && variants+=("worst:LLAMA_SWITCH_PLAN=worst:")
  [ "${DIAG_T08:-1}" = 1 ] && variants+=("t08:GGML_CUDA_GRAPH_EAGER=0:--temperature 0.8")
  # (both: at T 0.8 each generation switches the sampler chain too, patch 0017's half of the opt-in)
  [ "${DIAG_T08:-1}${DIAG_SWITCH_PLAN:-1}" = 11 ] && variants+=("worst08:LLAMA_SWITCH_PLAN=worst:--temperature 0.8")
  for v in "${variants[@]}"; do
    IFS=: read -r name env args <<< "$v"
    log "graph warm-up events, $name ($env $args)"
    # shellcheck disable=SC2086  # (args: words)
    (cd /tmp && env "$env" timeout 150 python3 "$REPO/benchmarks/graph_warmup.py" --turns 3 -n 128 $args) \
        > "$G/graph_warmup_$name.txt" 2>&1
    grep "turn\|dear" "$G/graph_warmup_$name.txt" | cut -c1-220
  done
  for rep in $([ "${DIAG_FIRST:-1}" = 1 ] && echo ${DIAG_REPS:-1 2}); do
    for rule in ${DIAG_RULES:-new old}; do
      for eager in 0 $([ "${DIAG_EAGER:-0}" = 1 ] && echo 1); do
        log "first turn, rests $rule, eager $eager (rep $rep)"
        (cd /tmp && GGML_CUDA_GRAPH_EAGER=$eager timeout 120 python3 "$REPO/benchmarks/first_turn.py" \
            $([ $rule = old ] && echo --old-rests)) > "$G/first_turn_${rule}_e${eager}_$rep.txt" 2>&1
        grep -i "^total" "$G/first_turn_${rule}_e${eager}_$rep.txt" | head -6
      done
    done
  done
  if [ "${DIAG_NATIVE:-1}" = 1 ]; then
    log "EAGLE-3 head: ours vs llama-speculative-simple, n_max 3 7"
    (cd /tmp && GGML_CUDA_GRAPH_EAGER=${DIAG_NATIVE_EAGER:-0} timeout 200 python3 "$REPO/benchmarks/compare_native.py" --target "$GGUF" \
        --drafter "$(python3 -c 'from pyllama_spec.assets import smollm2_eagle3_path as p; print(p())')" --n-max 3 7 \
        --max-tokens 128 --runs 1 -ngl 99 --prompts "$REPO/benchmarks/data/issue20-h200-torch/heldout-greedy.jsonl.gz" \
        --n-prompts 16 --json "$G/native_eagle3.json") > "$G/native_eagle3.txt" 2>&1
    grep -v "^llama_\|^load" "$G/native_eagle3.txt" | tail -10
  fi
  tar -czf "$OUT/diag.tar.gz" -C "$W" diag && ls -la "$OUT"
  ;;
py)
  # any script of this checkout with SmolLM2 in the cache and this checkout's Python over the wheel (carry
  # the last SmolLM2 part): bash benchmarks/h200.sh py benchmarks/draft_sampling_ab.py --n-prompts 8; LIMIT (s, 500)
  smol_checkout  # (device_smol.sh: SmolLM2 from its parts, this checkout's Python and data over the wheel)
  S=${2:?py SCRIPT [ARGS...]}; shift 2
  (cd /tmp && timeout "${LIMIT:-500}" python3 "$REPO/$S" "$@") 2>&1 | grep -v "^llama_\|^load" | tail -"${TAIL:-60}"
  ;;
step-smol)
  smol_checkout; sha256sum "$GGUF"
  log "SmolLM2 + shipped drafter: step cost (kernels profiled)"
  (cd /tmp && timeout 200 python3 "$REPO/benchmarks/step_cost.py" --label smollm2-shipped --profile \
      --json "$OUT/step_smol.json") 2>&1 | grep -v "^ \{2,\}[0-9.]* µs"
  log "SmolLM2 + a random drafter (nothing accepted): step ÷ plain"
  RND=$(cd /tmp && python3 -c "from pyllama_spec.assets import random_dflash_for_smollm2; print(random_dflash_for_smollm2())")
  (cd /tmp && timeout 120 python3 "$REPO/benchmarks/step_cost.py" --drafter "$RND" --label smollm2-random \
      --sections loop --n-max 1 3 7 --json "$OUT/step_smol_random.json") 2>&1 | grep "loop\|#"
  log "T = 0.8"
  (cd /tmp && timeout 120 python3 "$REPO/benchmarks/sampling_speed.py" --json "$OUT/sampling_h200.json")
  log "held-out τ and speed, 60 prompts, n_max 7"
  (cd /tmp && timeout 200 python3 "$REPO/benchmarks/heldout_tau.py" "$REPO/benchmarks/data/smollm2-selfdistill-9170.jsonl.gz" \
      --n-prompts 60 --json "$OUT/heldout_h200.json") 2>&1 | tail -2
  log "ours vs llama-speculative-simple, 16 held-out prompts"
  timeout 200 python3 benchmarks/compare_native.py --drafter "$(cd /tmp && python3 -c 'from pyllama_spec.assets import smollm2_dflash_path; print(smollm2_dflash_path())')" \
      --max-tokens 256 --runs 1 --n-max 3 7 --prompts benchmarks/data/smollm2-selfdistill-9170.jsonl.gz --n-prompts 16 \
      --json "$OUT/native_h200.json" 2>&1 | tail -6
  ;;
bakeoff)
  # the wheel must hold this checkout's native part (the bake-off's sampler declarations); the device has
  # no matplotlib: --no-plots, then `pyllama-spec bakeoff --from-json` on the CPU machine draws the PNGs
  smol_checkout  # (device_smol.sh: SmolLM2 from its parts, this checkout's Python and data over the wheel)
  DFL=$(cd /tmp && python3 -c "from pyllama_spec.assets import smollm2_dflash_path as p; print(p())")
  log "bake-off: coding chat, 4 turns, n_max sweep + auto, with llama.cpp's programs"
  (cd /tmp && timeout 330 python3 -m pyllama_spec.cli bakeoff "$GGUF" -d dflash="$DFL" -d ngram \
      --n-max 1,2,3,4,7,15,auto --prompts builtin:coding-chat --turns 4 --runs 2 -n 128 --native -ngl 99 \
      --no-plots --no-progress --out "$OUT/bakeoff/h200") 2>&1 | tail -25
  log "held-out mix (the shipped drafter never saw it): auto vs the fixed n_max"
  (cd /tmp && timeout 200 python3 -m pyllama_spec.cli bakeoff "$GGUF" -d dflash="$DFL" \
      --n-max 1,2,3,4,7,auto --prompts builtin:mixed --turns 2 --runs 3 -n 128 -ngl 99 \
      --no-plots --no-progress --out "$OUT/bakeoff/h200-mixed") 2>&1 | tail -12
  ;;
sweep)
  # Issue 25: SmolLM2 with every drafter kind that has a real drafter for it (the shipped DFlash drafter, draft model
  # and EAGLE-3 head, and the six n-gram kinds), n_max 1,2,3,4,7,15,auto, the coding chat (4 turns)
  # and the held-out mix, T = 0 and 0.8, llama.cpp's programs beside the greedy points. One call per PART (each
  # about 3-5 min on the H200, estimated from the 2026-11-30 bake-off: 240 generations + ~200 native runs in ~3 min):
  #   coding-t0a  coding chat, T 0, --native, dflash ngram ngram-simple   (22 points x 8 answers + 152 native runs)
  #   coding-t0b  coding chat, T 0, --native, the other four n-gram kinds (29 points x 8 answers + 200 native runs)
  #   coding-t0c  coding chat, T 0, --native, the shipped draft model and EAGLE-3 head (16 points x 8 answers + ~100
  #               native runs)
  #   coding-t08  coding chat, T 0.8, every drafter                       (57 points x 8 answers)
  #   mixed       builtin:mixed, first turns, T 0 and 0.8, every drafter  (114 points x 8 answers: 2.2 min on 2026-12-04
  #               without the draft model's 14, so ≈ 2.5 min)
  # Each part's folder goes into ONE archive (a call brings back at most 8 files): $OUT/sweep-PART.tar.gz.
  PART=${2:?part: coding-t0a | coding-t0b | coding-t0c | coding-t08 | mixed}
  if [ "${DRY:-0}" = 1 ]; then  # a check on the CPU machine: this source tree, small settings by default
    export PYTHONPATH=$REPO LD_PRELOAD=
    SG=${SWEEP_GGUF:-$(cd /tmp && python3 -c "from pyllama_spec.assets import smollm2_path as p; print(p())")}
    NGL=${NGL:-0} NTOK=${NTOK:-8} NMAX=${NMAX:-1,auto}
  else
    SG=${SWEEP_GGUF:-$GGUF}
    [ -s "$SG" ] || smol_cat "$SG" || exit 2
    checkout_over_wheel
  fi
  DFL=$(cd /tmp && python3 -c "from pyllama_spec.assets import smollm2_dflash_path as p; print(p())")
  # the shipped draft model (draft-simple) too, where this checkout ships one (2026-12-06 on)
  DRM=$(cd /tmp && python3 -c "from pyllama_spec.assets import smollm2_draft_path as p; print(p())" 2>/dev/null)
  DRM=${DRM:+,draft=$DRM}
  # and the shipped EAGLE-3 head (draft-eagle3; 2026-12-07 on)
  E3=$(cd /tmp && python3 -c "from pyllama_spec.assets import smollm2_eagle3_path as p; print(p())" 2>/dev/null)
  E3=${E3:+,eagle3=$E3}
  DR=()
  case "$PART" in
    coding-t0a) ALL=dflash=$DFL,ngram,ngram-simple ;;
    coding-t0b) ALL=ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache ;;
    coding-t0c) ALL=$DRM$E3; ALL=${ALL#,} ;;
    *) ALL=dflash=$DFL$DRM$E3,ngram,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache ;;
  esac
  [ -n "$ALL" ] || { echo "no drafter for part $PART (coding-t0c needs the shipped draft model or EAGLE-3 head)"; exit 1; }
  IFS=, read -ra names <<< "${DRAFTERS:-$ALL}"
  for d in "${names[@]}"; do  # (DRAFTERS may name the shipped ones by kind alone: dflash, draft, eagle3)
    k=$d
    case $d in dflash) d=dflash=$DFL ;; draft) d=${DRM#,} ;; eagle3) d=${E3#,} ;; esac
    [ -n "$d" ] || { echo "DRAFTERS names $k, but this checkout ships no $k drafter for SmolLM2"; exit 1; }
    DR+=(-d "$d")
  done
  S=$OUT/sweep; rm -rf "$S"; mkdir -p "$S"
  bo() {  # bo NAME TIMEOUT_S BAKEOFF_ARGS...
    local name=$1 limit=$2; shift 2
    log "bake-off $name: $*"
    (cd /tmp && timeout "$limit" python3 -m pyllama_spec.cli bakeoff "$SG" "${DR[@]}" --n-max "${NMAX:-1,2,3,4,7,15,auto}" \
        -n "${NTOK:-128}" --runs "${RUNS:-1}" -ngl "${NGL:-99}" --no-plots --no-progress --out "$S/$name" "$@") 2>&1 | tail -12
    [ -s "$S/$name/results.json" ] || log "bake-off $name wrote nothing (timed out?): split it, e.g. DRAFTERS=..."
  }
  case "$PART" in
    coding-t0a|coding-t0b|coding-t0c) bo "$PART" 540 --prompts builtin:coding-chat --turns 4 --temperature 0 --native ;;
    coding-t08) bo coding-t08 540 --prompts builtin:coding-chat --turns 4 --temperature 0.8 ;;
    mixed)      bo mixed 540 --prompts builtin:mixed --turns "${MIXED_TURNS:-1}" --temperature 0,0.8 ;;
    *) echo "PART must be coding-t0a, coding-t0b, coding-t0c, coding-t08 or mixed"; exit 1 ;;
  esac
  tar -czf "$OUT/sweep-$PART.tar.gz" -C "$S" . && rm -rf "$S"
  ls -la "$OUT"
  ;;
render)
  # On the CPU machine: unpack the archives of the sweep calls, merge the parts per prompt set and draw every
  # plot (benchmarks/merge_bakeoff.py: REPORT.md, results.json/csv, PNGs) into benchmarks/bakeoff/h200-sweep-*/.
  shift
  [ $# -ge 1 ] || { echo "give the sweep-*.tar.gz archives"; exit 1; }
  # the installed package (pip install .): the source tree has no extension and cannot be imported
  export PYTHONPATH= LD_PRELOAD=
  R=$W/render; rm -rf "$R"; mkdir -p "$R"
  for a in "$@"; do tar -xzf "$a" -C "$R" || exit 1; done
  coding=(); for p in "$R"/coding-*/results.json; do [ -s "$p" ] && coding+=("$p"); done
  # SWEEP_OUT: the folders' prefix (default benchmarks/bakeoff/h200-sweep: -coding and -mixed are appended)
  O=${SWEEP_OUT:-benchmarks/bakeoff/h200-sweep}
  [ ${#coding[@]} -gt 0 ] && python3 benchmarks/merge_bakeoff.py "$O-coding" "${coding[@]}"
  [ -s "$R/mixed/results.json" ] && python3 benchmarks/merge_bakeoff.py "$O-mixed" "$R/mixed/results.json"
  ls -la "$O"-*
  ;;
esac
