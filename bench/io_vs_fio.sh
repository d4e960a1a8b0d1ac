#!/usr/bin/env bash
# Expert reader throughput against fio on the same file, block size and queue
# depth, alternating runs so both see the same (noisy) drive. Prints medians.
# usage: bench/io_vs_fio.sh MODEL_DIR SHARD_FILE [READ_KB] [QUEUE_DEPTH] [ROUNDS]
set -euo pipefail
model=$1 shard=$2 kb=${3:-2048} qd=${4:-32} rounds=${5:-3}
bin=$(dirname "$0")/../build/src/sluice
. "$(dirname "$0")/lib_fio.sh"
ours=() theirs=()
for i in $(seq "$rounds"); do
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  ours+=("$("$bin" bench --model "$model" --ram 10 --tokens 8 --io-only --read-kb "$kb" --queue-depth "$qd" \
            --seed "$i" | sed -E 's/.* = ([0-9.]+) GB\/s.*/\1/')")
  sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
  theirs+=("$(fio_read_gbps "$shard" "$kb" "$qd" 5)")
done
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
echo "sluice reader GB/s: ${ours[*]}  median $(med "${ours[@]}")"
echo "fio GB/s:           ${theirs[*]}  median $(med "${theirs[@]}")"
python3 -c "print('ratio sluice/fio: %.2f' % ($(med "${ours[@]}") / $(med "${theirs[@]}")))"
