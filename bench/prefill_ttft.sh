#!/usr/bin/env bash
# Time to first token of long prompts with routed experts streamed from disk (page cache dropped,
# O_DIRECT), against its floor: (the distinct routed experts' bytes / fio's read rate on the same
# files, block size and depth) + compute, where compute is the prefill's time less the time it
# waited for reads (bench's prefill_stall_seconds). Also the bytes read against the distinct
# experts routed (1.00: each read once per layer). One line per prompt length; each run's
# `sluice bench --json` is kept in OUT_DIR.
#
# usage: bench/prefill_ttft.sh MODEL_DIR RAM_GIB "64 512 2000" [OUT_DIR]
#   env: SLUICE (binary, default build/src/sluice), CHUNK (--prefill-chunk; default the plan's, 64
#        is the old chunking), READ_KB / QUEUE_DEPTH (reader's and fio's block size and depth:
#        1024 / 128, the reader's defaults)
# Needs root (drop_caches) and fio.
set -euo pipefail
model=$1 ram=$2 lengths=$3 out=${4:-$(mktemp -d)}
bin=${SLUICE:-$(dirname "$0")/../build/src/sluice}
kb=${READ_KB:-1024} qd=${QUEUE_DEPTH:-128}
chunk=()
if [ -n "${CHUNK:-}" ]; then chunk=(--prefill-chunk "$CHUNK"); fi
mkdir -p "$out"

# The routed experts' files (the packs where `prepare --pack-experts` placed them, else the shards).
. "$(dirname "$0")/lib_fio.sh"
mapfile -t files < <("$bin" info --model "$model" --json |
                     python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin).get("expert_files", [])))')
[ ${#files[@]} -gt 0 ] || { echo "prefill_ttft: no expert files found in $model (is it prepared? sluice prepare)" >&2; exit 1; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

drop
fio_gbps=$(fio_read_gbps "$(IFS=:; echo "${files[*]}")" "$kb" "$qd" 10)
echo "prefill_ttft: fio O_DIRECT io_uring randread ${kb} KiB x ${qd} over ${#files[@]} expert files: ${fio_gbps} GB/s"

printf '%7s %6s %9s %8s %10s %8s %9s %9s %8s %10s\n' tokens chunk ttft_s read_GB distinct_GB read/dist stall_s compute_s floor_s ttft/floor
for n in $lengths; do
  drop
  "$bin" bench --model "$model" --ram "$ram" --prompt-tokens "$n" --tokens 1 --read-kb "$kb" --queue-depth "$qd" \
    "${chunk[@]}" --json "$out/prefill-$n.json" >"$out/prefill-$n.log" 2>&1
  python3 - "$out/prefill-$n.json" "$fio_gbps" "$n" <<'EOF'
import json, sys
c, fio = json.load(open(sys.argv[1])), float(sys.argv[2])
read, dist = c["prefill_expert_bytes_read"], c["prefill_distinct_expert_bytes"]
compute = c["prefill_seconds"] - c["prefill_stall_seconds"]
floor = dist / 1e9 / fio + compute
print("%7s %6d %9.1f %8.2f %10.2f %8.2f %9.1f %9.1f %8.1f %10.2f" % (
    sys.argv[3], c["prefill_chunk"], c["prefill_seconds"], read / 1e9, dist / 1e9, read / dist if dist else 0,
    c["prefill_stall_seconds"], compute, floor, c["prefill_seconds"] / floor))
EOF
done
echo "prefill_ttft: runs kept in $out"
