#!/usr/bin/env bash
# Issue 33's comparison on one GPU beside its host: the same model decoded with the routed experts
# computed on the GPU (copied into its VRAM cache), on the host, and auto (measured at load: a fixed
# set in VRAM and the rest on the host for passes of few rows, or exactly gpu where the host is slower
# than the copy even at one row; its stderr line says which), under K3-like routing (`--routing-synthetic k3`,
# benchmark only: the tokens are not the model's), then a 2,000-token prefill with gpu and auto.
# Prints each run's summary lines (tokens/s, experts per side, copies); writes the bench JSON of
# every run to OUT_DIR.
#   bench/hybrid_experts.sh MODEL_DIR [SLUICE_BINARY] [OUT_DIR]     (VRAM=GiB, TOKENS=N in the environment)
# e.g. on the real-size K3 slice: sluice synth --arch kimi_k3 --preset real --layers 2 --out /tmp/k3 &&
#      sluice prepare --model /tmp/k3 && VRAM=14 bench/hybrid_experts.sh /tmp/k3
set -euo pipefail
model=$1
bin=${2:-build/src/sluice}
out=${3:-$(mktemp -d)}
vram=${VRAM:-14}
tokens=${TOKENS:-48}
mkdir -p "$out"
echo "model $model, --vram $vram, $tokens decoded tokens, JSON in $out"
"$bin" bench --kernels --device cuda --json "$out/kernels.json" | tail -8
for on in gpu cpu auto; do
  echo "== decode, --experts-on $on"
  "$bin" bench --model "$model" --device cuda --vram "$vram" --ram 0 --experts-on "$on" --tokens "$tokens" \
    --prompt-tokens 64 --probe-seconds 0 --routing-synthetic k3 --json "$out/decode-$on.json" 2>&1 |
    grep -E "tokens/s|computed|experts: auto|error" | head -7
done
for on in gpu auto; do
  echo "== prefill of 2000 tokens, --experts-on $on"
  "$bin" bench --model "$model" --device cuda --vram "$vram" --ram 0 --experts-on "$on" --tokens 1 \
    --prompt-tokens 2000 --probe-seconds 0 --routing-synthetic k3 --json "$out/prefill-$on.json" 2>&1 |
    grep -E "prefill|experts: auto|error" | head -4
done
