#!/usr/bin/env bash
# Decode read throughput with experts spread over 1, 2, 4, ... emulated drives,
# each throttled to the same read rate, against the sum of the limits.
#
# Each drive is a loop device (losetup --direct-io=on) over an image file,
# formatted ext4 and mounted, limited with a cgroup v1 blkio
# throttle.read_bps_device; this script puts itself (and so sluice) into that
# cgroup. For each drive count the model's experts are packed over the drives
# (`sluice prepare --pack-experts --expert-dirs ...`), then `sluice bench`
# measures decode (and io-only reads) with experts streamed. Loop devices,
# mounts, the cgroup and the images are removed on exit, also when interrupted.
# Needs root, losetup, mkfs.ext4 and /sys/fs/cgroup/blkio.
#
# usage: bench/drives.sh MODEL_DIR [DRIVE_COUNTS (default "1 2 4")] [MB_PER_S (100)] [TOKENS (8)] [RAM_GIB (1)]
#   env: WORK (default /work/drives-bench: images, mounts, results), SLUICE (the binary)
# The model directory must be a checkpoint (e.g. from `sluice synth`); its
# manifest and spine are rewritten by each prepare, and by a plain prepare at the
# end (the experts then come from its own shards again). Results: $WORK/results/*.json
# and one line per drive count on stdout.
set -euo pipefail
model=$(realpath "$1")
counts=${2:-"1 2 4"} rate_mb=${3:-100} tokens=${4:-8} ram=${5:-1}
work=${WORK:-/work/drives-bench}
bin=${SLUICE:-$(realpath "$(dirname "$0")/../build/src/sluice")}
cg=/sys/fs/cgroup/blkio/sluice-drives-$$
rate=$((rate_mb * 1000 * 1000))

loops=() mounts=() child=
# Children run in the background and are waited for, so that a signal to this
# script is handled at once (the trap stops the child before unmounting).
run() { "$@" & child=$!; local rc=0; wait "$child" || rc=$?; child=; return "$rc"; }
cleanup() {
  set +e
  if [ -n "$child" ]; then kill "$child"; wait "$child"; child=; fi
  if [ -d "$cg" ]; then
    echo $$ > /sys/fs/cgroup/blkio/cgroup.procs
    rmdir "$cg"
  fi
  # A killed reader's io_uring is torn down asynchronously and holds its files a moment longer.
  for m in "${mounts[@]}"; do
    for _ in $(seq 20); do umount "$m" 2>/dev/null && break; sleep 0.5; done
    umount "$m" 2>/dev/null; rmdir "$m"
  done
  for l in "${loops[@]}"; do losetup -d "$l"; done
  rm -f "$work"/img-*
  mounts=() loops=()
}
# The packs lived on the drives: at the end the model's experts point back at its own shards.
packed=
restore() {
  if [ -n "$packed" ]; then "$bin" prepare --model "$model" --quiet >&2 || echo "drives.sh: run '$bin prepare --model $model' to point the manifest back at the model's own shards" >&2; fi
}
trap 'cleanup; restore' EXIT
trap 'exit 130' INT TERM

mkdir -p "$work/results"
expert_bytes=$(python3 - "$model" <<'EOF'
import json, os, sys
d = sys.argv[1]
idx = os.path.join(d, "model.safetensors.index.json")
files = set(json.load(open(idx))["weight_map"].values()) if os.path.exists(idx) else {"model.safetensors"}
print(sum(os.path.getsize(os.path.join(d, f)) for f in files))
EOF
)
for n in $counts; do
  cleanup
  mkdir "$cg"
  echo $$ > "$cg/cgroup.procs"
  # Each image holds its share of the experts with room for ext4 and padding.
  size=$(( ((expert_bytes / n) * 12 / 10 + (256 << 20)) / 4096 * 4096 ))
  need=$(( size * n + (15 << 30) ))
  avail=$(df --output=avail -B1 "$work" | tail -1)
  if [ "$avail" -lt "$need" ]; then echo "drives.sh: $n images of $size bytes would leave less than 15 GB free on $work" >&2; exit 1; fi
  dirs=()
  for i in $(seq 0 $((n - 1))); do
    img=$work/img-$i
    truncate -s "$size" "$img"
    l=$(losetup --find --show --direct-io=on "$img")
    loops+=("$l")
    mkfs.ext4 -q -F "$l"
    m=$work/mnt-$i
    mkdir -p "$m"
    mount -o noatime "$l" "$m"
    mounts+=("$m")
    echo "$(lsblk -dno MAJ:MIN "$l" | tr -d ' ') $rate" > "$cg/blkio.throttle.read_bps_device"
    dirs+=("$m")
  done
  list=$(IFS=,; echo "${dirs[*]}")
  echo "== $n drives at $rate_mb MB/s each ($list)" >&2
  packed=1
  run "$bin" prepare --model "$model" --pack-experts --expert-dirs "$list" --quiet >&2
  sync
  run "$bin" bench --model "$model" --ram "$ram" --io-only --tokens "$((tokens * 2))" --json "$work/results/io-$n.json" >&2
  run "$bin" bench --model "$model" --ram "$ram" --tokens "$tokens" --prompt-tokens 4 --json "$work/results/decode-$n.json" >&2
  python3 - "$work/results" "$n" "$rate_mb" <<'EOF'
import json, sys
d, n, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
io = json.load(open(f"{d}/io-{n}.json"))
dec = json.load(open(f"{d}/decode-{n}.json"))
limit = n * rate / 1000
per = " ".join(f"{x['gbps']*1000:.0f}" for x in dec["drives"] if "/mnt-" in x["dir"])
print(f"{n} drives (limit {limit:.2f} GB/s): decode {dec['read_gbps']:.3f} GB/s "
      f"({dec['read_gbps']/limit*100:.0f}% of limit, {dec['seconds_per_token']:.3f} s/token, per drive MB/s: {per}); "
      f"io-only {io['read_gbps']:.3f} GB/s ({io['read_gbps']/limit*100:.0f}%)")
EOF
done
