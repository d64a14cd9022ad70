#!/usr/bin/env bash
# Empty the work tree of its tracked files for the set-up calls that carry only parts (`lean` calls of
# prepare_device.sh LEAN=1: a device call carries at most 64 MiB with the work tree, so an emptied tree leaves ~63 MiB
# for the parts instead of the ~15 MB a 51 MB checkout leaves), and put it back.
#
#   bash benchmarks/lean_tree.sh on    # refuses while a tracked file has uncommitted changes (commit first)
#   bash benchmarks/lean_tree.sh slim  # only the bake-off folders and raw results (benchmarks/bakeoff, benchmarks/results:
#                                      # ~15 MB no device phase reads) out: for the install call, whose checkout plus the
#                                      # last wheel part no longer fit 64 MiB (2026-12-07: refused at 66.7 MB), and any
#                                      # call that must carry a large file beside the checkout
#   bash benchmarks/lean_tree.sh off   # the deleted tracked files back as committed (edits made meanwhile are kept)
#
# The .gitignore files stay: without them git would count .dev/ (the parts, the CUDA build: GBs) as untracked files,
# which the device tool carries with the tree. This script stays too, so that `off` can run.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:?on | slim | off}" in
on)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "tracked files have uncommitted changes: commit first"; exit 1; }
  # (untracked files git does not ignore travel with every call: the parts are sized for ≤ 1 MB of them)
  extra=$(git ls-files -o --exclude-standard -z | xargs -0r stat -c %s | awk '{s+=$1} END {print s+0}')
  [ "$extra" -le 500000 ] || { echo "untracked files git does not ignore: $extra bytes (the lean parts leave room for 0.5 MB):" \
      "commit, ignore or move them first"; git ls-files -o --exclude-standard | head; exit 1; }
  git ls-files -z | grep -zv -e '\(^\|/\)\.gitignore$' -e '^benchmarks/lean_tree\.sh$' | xargs -0 rm -f
  echo "tree emptied; a call carries $(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s 2>/dev/null \
      | awk '{s+=$1} END {print s+0}') bytes of it (\`bash benchmarks/lean_tree.sh off\` — or git checkout -- :/ — restores)"
  ;;
slim)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || { echo "tracked files have uncommitted changes: commit first"; exit 1; }
  git ls-files -z benchmarks/bakeoff benchmarks/results | xargs -0 rm -f
  echo "bake-off folders and raw results out; a call carries $(git ls-files -co --exclude-standard -z | xargs -0 stat -c %s \
      2>/dev/null | awk '{s+=$1} END {print s+0}') bytes of the tree (\`bash benchmarks/lean_tree.sh off\` restores)"
  ;;
off)
  # only the deleted files: an edit made while the tree was lean stays
  git ls-files -dz | xargs -0r git checkout -- && echo "tree restored: $(git ls-files | wc -l) tracked files"
  ;;
*) echo "on | slim | off"; exit 2 ;;
esac
