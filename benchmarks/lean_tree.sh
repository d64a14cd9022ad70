#!/usr/bin/env bash
# Empty the work tree of its tracked files for the set-up calls that carry only parts (`lean` calls of
# prepare_device.sh LEAN=1: a device call carries at most 64 MiB with the work tree, so an emptied tree leaves ~63 MiB
# for the parts instead of the ~15 MB a 51 MB checkout leaves), and put it back.
#
#   bash benchmarks/lean_tree.sh on    # refuses while a tracked file has uncommitted changes (commit first)
#   bash benchmarks/lean_tree.sh off   # git checkout -- . : every tracked file back as committed
#
# The .gitignore files stay: without them git would count .dev/ (the parts, the CUDA build: GBs) as untracked files,
# which the device tool carries with the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:?on | off}" in
on)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "tracked files have uncommitted changes: commit first"; exit 1; }
  git ls-files -z | grep -zv '\(^\|/\)\.gitignore$' | xargs -0 rm -f
  echo "tree emptied; a call carries $(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null \
      | awk '{s+=$1} END {print s+0}') bytes of it (\`bash benchmarks/lean_tree.sh off\` — or git checkout -- . — restores)"
  ;;
off)
  git checkout -- . && echo "tree restored: $(git ls-files | wc -l) tracked files"
  ;;
*) echo "on | off"; exit 2 ;;
esac
