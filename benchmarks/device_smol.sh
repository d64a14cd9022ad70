# Sourced by the device scripts (h200_issue14.sh, h200_issue20.sh, h200_tree.sh) after they set W and GGUF:
# smol_checkout gathers SmolLM2 from its parts (h200.sh model0 … left all but the last in $W, the call carries the
# last) and lays this checkout's Python and data over the installed wheel in $W/pkg (checkout_over_wheel).
# smol_cat OUT: SmolLM2 from its parts, those earlier calls left in $W and the last one, which this call carries;
# refuses an incomplete set (the file's size is known). prepare_device.sh sizes the parts to what the checkout
# leaves of a 64 MiB call and prints the calls (2026-12-07, a 51.2 MB checkout: 7 parts, model0 … model5 and the
# last, .dev/smol.part06, with each phase); smol_cat takes any number.
SMOL_BYTES=98362432
QWEN_BYTES=491400064  # Qwen2.5-Coder-0.5B-Instruct Q4_K_M (pyllama_spec.assets), in parts (prepare_device.sh QWEN_PARTS=1)
# parts_cat NAME OUT BYTES: the parts NAME.partNN earlier calls left in $W and those this call carries (.dev/), in
# order, into OUT; refuses a set of another size (returns 2, OUT untouched)
parts_cat() {
  local name=$1 out=$2 bytes=$3 parts=() n
  for n in $(ls "$W"/"$name".part[0-9][0-9] .dev/"$name".part[0-9][0-9] 2>/dev/null | xargs -r -n1 basename | sort -u); do
    if [ -f "$W/$n" ]; then parts+=("$W/$n"); else parts+=(".dev/$n"); fi
  done
  [ ${#parts[@]} -gt 0 ] && cat "${parts[@]}" > "$out.tmp"
  if [ "$(stat -c %s "$out.tmp" 2>/dev/null)" != "$bytes" ]; then
    rm -f "$out.tmp"
    echo "$name incomplete (${#parts[@]} parts: ${parts[*]:-none})"
    return 2
  fi
  mv "$out.tmp" "$out"
}
smol_cat() {
  parts_cat smol "$1" $SMOL_BYTES || { echo "run \`h200.sh model0\` … (carry .dev/smol.part00 …, one each but the" \
      "last) and carry the last part with this call (bash benchmarks/prepare_device.sh makes them and prints the" \
      "calls)"; return 2; }
}

# checkout_over_wheel: this checkout's Python files and pyllama_spec/data (the shipped drafters: prepare_device.sh
# leaves their GGUFs out of the wheel's parts, 32 MB that the checkout carries anyway) over the installed wheel in
# $W/pkg (its native part is unchanged)
checkout_over_wheel() {
  [ -d "$W/pkg/pyllama_spec" ] || { echo "no wheel in $W/pkg: run \`bash benchmarks/h200.sh install\` first"; exit 2; }
  # (a plain GGUF there — h200.sh bench drops a trained drafter so — would shadow the checkout's .gguf.xz, whose sha256
  # the checkout's assets.py pins)
  rm -f "$W/pkg/pyllama_spec/data/"*.gguf
  (cd pyllama_spec && tar -cf - $(find . -name "*.py" -o -path "./data/*" -type f)) | tar -xf - -C "$W/pkg/pyllama_spec"
}
smol_checkout() {
  [ -d "$W/pkg/pyllama_spec" ] || { echo "no wheel in $W/pkg: run \`bash benchmarks/h200.sh install\` first"; exit 2; }
  [ -s "$GGUF" ] || smol_cat "$GGUF" || exit 2
  checkout_over_wheel
}
