set -x
cd /tmp
R=/work/main; O=$R/.dev/cpu_tau6
for h in heldout-greedy heldout-magpie-greedy; do
  python3 $R/benchmarks/heldout_tau.py $R/benchmarks/data/issue20-h200-torch/$h.jsonl.gz --drafter $R/.dev/sixth.gguf \
    --n-prompts 60 --max-tokens 128 --n-max 7 -ngl 0 --json $O/heldout_tau_cpu_${h}_sixth.json 2>&1 | grep -v "^llama\|^load" | tail -2
done
python3 $R/benchmarks/humaneval_tau.py --drafter $R/.dev/sixth.gguf --n-problems 40 --modes chat,raw --n-max 7 -ngl 0 \
  --json $O/humaneval_tau_cpu_sixth.json 2>&1 | grep -v "^llama\|^load" | tail -4
