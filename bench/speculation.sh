#!/usr/bin/env bash
# Speculative vs plain greedy generation on one model with experts streamed
# under a RAM budget: a copy-heavy prompt (a text given several times) and a
# free one, plain and speculative runs alternating so both see the same
# (noisy) machine. Prints, per case, seconds, forward passes and expert bytes
# per generated token, and the acceptance rate.
# usage: bench/speculation.sh MODEL_DIR RAM_GB [TOKENS] [ROUNDS] [COPY_PROMPT_FILE FREE_PROMPT_FILE]
#   without prompt files (e.g. a synthetic model without a tokenizer) the
#   copy-heavy prompt is 24 random tokens given 4 times, the free one 96 random tokens.
set -euo pipefail
model=$1 ram=$2 tokens=${3:-24} rounds=${4:-1} copy_file=${5:-} free_file=${6:-}
bin=$(dirname "$0")/../build/src/sluice
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ -n "$copy_file" ]; then copy=(--prompt-file "$copy_file"); else copy=(--prompt-tokens 24 --repeat-prompt 4); fi
if [ -n "$free_file" ]; then free=(--prompt-file "$free_file"); else free=(--prompt-tokens 96 --seed 7); fi
for r in $(seq "$rounds"); do
  for kind in copy free; do
    for mode in generate speculate; do
      if [ $kind = copy ]; then args=("${copy[@]}"); else args=("${free[@]}"); fi
      "$bin" bench --model "$model" --ram "$ram" --tokens "$tokens" "${args[@]}" --"$mode" \
        --json "$out/$kind-$mode-$r.json" > /dev/null
    done
  done
done
python3 - "$out" <<'PY'
import glob, json, os, statistics, sys
d = sys.argv[1]
print(f"{'prompt':6} {'mode':10} {'s/token':>8} {'passes/token':>12} {'accept':>7} {'expert MB needed/tok':>21} {'expert MB read/tok':>19}")
for kind in ("copy", "free"):
    for mode in ("generate", "speculate"):
        runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, f"{kind}-{mode}-*.json")))]
        med = lambda k: statistics.median(r[k] for r in runs)
        print(f"{kind:6} {'plain' if mode == 'generate' else 'speculate':10} {med('seconds_per_token'):8.3f} "
              f"{statistics.median(r['forward_passes'] / r['tokens'] for r in runs):12.2f} {med('acceptance'):7.0%} "
              f"{med('expert_bytes_needed_per_token') / 1e6:21.1f} {med('expert_bytes_read_per_token') / 1e6:19.1f}")
PY
