#!/usr/bin/env bash
# Batched decode on one model under a RAM budget: B sequences (each its own
# random prompt) decoded together, one forward pass per step, for each B given,
# the B values alternating over ROUNDS so every B sees the same (noisy)
# machine. Prints, per B, aggregate tokens/s, its ratio to the first B, and
# bytes read per generated token (experts, spine).
# usage: bench/batched_decode.sh MODEL_DIR RAM_GB [TOKENS] [ROUNDS] [B ...]   (default B: 1 2 4 8)
set -euo pipefail
model=$1 ram=$2 tokens=${3:-8} rounds=${4:-1}
shift $(( $# < 4 ? $# : 4 ))
batches=("$@")
[ ${#batches[@]} -gt 0 ] || batches=(1 2 4 8)
bin=$(dirname "$0")/../build/src/sluice
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for r in $(seq "$rounds"); do
  for b in "${batches[@]}"; do
    "$bin" bench --model "$model" --ram "$ram" --tokens "$tokens" --prompt-tokens 4 --batch "$b" \
      --json "$out/b$b-$r.json" > /dev/null
  done
done
python3 - "$out" "${batches[@]}" <<'PY'
import glob, json, os, statistics, sys
d, batches = sys.argv[1], sys.argv[2:]
print(f"{'B':>3} {'tokens/s':>9} {'vs B=' + batches[0]:>8} {'s/pass':>7} {'expert MB/tok':>14} {'spine MB/tok':>13}")
base = None
for b in batches:
    runs = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(d, f"b{b}-*.json")))]
    med = lambda k: statistics.median(r[k] for r in runs)
    agg = med("aggregate_tokens_per_second")
    base = base or agg
    print(f"{b:>3} {agg:9.3f} {agg / base:7.2f}x {med('seconds_per_pass'):7.2f} "
          f"{med('expert_bytes_read_per_token') / 1e6:14.1f} {med('spine_bytes_read_per_token') / 1e6:13.1f}")
PY
