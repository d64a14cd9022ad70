# Sourced by the device scripts (h200_issue14.sh, h200_issue20.sh, h200_tree.sh) after they set W and GGUF:
# smol_checkout gathers SmolLM2 from its three parts (h200.sh model0 / model1 left the first two in $W,
# the call carries .dev/smol.part02) and lays this checkout's Python over the installed wheel in $W/pkg.
smol_checkout() {
  [ -d "$W/pkg/pyllama_spec" ] || { echo "no wheel in $W/pkg: run \`bash benchmarks/h200.sh install\` first"; exit 2; }
  if [ ! -s "$GGUF" ]; then
    [ -f "$W/smol.part00" ] && [ -f "$W/smol.part01" ] && [ -f .dev/smol.part02 ] \
      || { echo "SmolLM2 missing: run \`h200.sh model0\` and \`model1\` (carry .dev/smol.part00, .dev/smol.part01), carry .dev/smol.part02 here"; exit 2; }
    cat "$W/smol.part00" "$W/smol.part01" .dev/smol.part02 > "$GGUF.tmp" && mv "$GGUF.tmp" "$GGUF"
  fi
  (cd pyllama_spec && tar -cf - $(find . -name "*.py" -o -path "./data/*" -type f)) | tar -xf - -C "$W/pkg/pyllama_spec"
}
