#!/bin/bash
# usage: run.sh DRAFTER NAME [NMAX]
D=$1; N=$2; NM=${3:-7}; O=/tmp/cputau/$N; mkdir -p $O; cd /tmp
for h in heldout-greedy heldout-magpie-greedy; do
  python /work/main/benchmarks/heldout_tau.py /work/main/benchmarks/data/issue20-h200-torch/$h.jsonl.gz --drafter $D --n-prompts 60 --max-tokens 128 --n-max $NM -ngl 0 --json $O/$h.json 2>&1 | tail -1
done
python /work/main/benchmarks/humaneval_tau.py --drafter $D --n-problems 40 --modes chat,raw --n-max $NM -ngl 0 --json $O/humaneval.json 2>&1 | tail -2
