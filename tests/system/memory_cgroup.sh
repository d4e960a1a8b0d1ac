#!/usr/bin/env bash
# Without --ram, a model larger than the memory available is streamed: the real
# binary in a real memory cgroup (v1, or v2 from the root) of 512 MiB, on a
# synthetic ~700 MB checkpoint. The first line of output says it streams and
# within what; --stats shows experts read from storage; the process never reaches
# the limit. `--ram 0` maps the same model in the same cgroup, and in a cgroup
# of 4 GiB it fits and is mapped without a flag: all three give the same
# tokens. Needs root and a memory cgroup it can create: it fails (never skips)
# where it cannot; -DSLUICE_REQUIRE_TEST_TOOLS=OFF leaves it out of CTest.
#   memory_cgroup.sh SLUICE_BINARY
set -euo pipefail
bin=$(realpath "$1")
tmp=$(mktemp -d)
made=()
cleanup() {
  for c in "${made[@]}"; do rmdir "$c" 2> /dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
MiB=$((1 << 20))

# make_cgroup NAME LIMIT_BYTES: a new memory cgroup with that limit; sets $cg to its directory.
make_cgroup() {
  local own
  if grep -q ' - cgroup cgroup [^ ]*memory' /proc/self/mountinfo && [ -d /sys/fs/cgroup/memory ]; then
    # v1: a child of this process's own memory cgroup, so the job's accounting still holds it.
    own=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}memory\(,[^:]*\)\{0,1\}:\(.*\)$/\3/p' /proc/self/cgroup)
    cg=/sys/fs/cgroup/memory${own%/}/$1
    mkdir "$cg" && made+=("$cg") && echo "$2" > "$cg/memory.limit_in_bytes" && return 0
  elif [ -f /sys/fs/cgroup/cgroup.subtree_control ]; then
    # v2: from the root (exempt from the no-internal-processes rule), memory enabled for children.
    echo +memory > /sys/fs/cgroup/cgroup.subtree_control 2> /dev/null || true
    cg=/sys/fs/cgroup/$1
    mkdir "$cg" && made+=("$cg") && echo "$2" > "$cg/memory.max" && return 0
  fi
  echo "memory_cgroup.sh: cannot create a memory cgroup with a limit (uid $(id -u); $(grep cgroup /proc/self/mountinfo | \
awk '{print $5, $(NF-2)}' | tr '\n' ' ')): this test needs root and the cgroup v1 memory controller or cgroup v2" \
       "with memory; configure with -DSLUICE_REQUIRE_TEST_TOOLS=OFF to leave it out"
  exit 1
}

# in_cgroup DIR CMD...: runs CMD as a member of the cgroup.
in_cgroup() {
  local dir=$1
  shift
  sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$dir" "$@"
}

model=$tmp/model
"$bin" synth --arch qwen3_moe --out "$model" --layers 4 --experts 40 --top-k 4 --hidden 1024 --moe-intermediate 704 \
  --vocab 2048 --quiet > /dev/null
weights=$(du -sb "$model" | cut -f1)
echo "memory_cgroup.sh: synthetic model of $((weights / MiB)) MiB"
[ "$weights" -gt $((600 * MiB)) ] || { echo "memory_cgroup.sh: the model is not larger than the cgroup"; exit 1; }
args=(generate --model "$model" --tokens 5,17,9,200 --max-new 8 --stats)

make_cgroup "sluice-test-$$-small" $((512 * MiB))
small=$cg
in_cgroup "$small" "$bin" "${args[@]}" > "$tmp/streamed.out" 2> "$tmp/streamed.err" ||
  { echo "memory_cgroup.sh: the run without --ram failed in the 512 MiB cgroup:"; cat "$tmp/streamed.err"; exit 1; }
first=$(head -1 "$tmp/streamed.err")
echo "streamed: $first"
case "$first" in
  "sluice: memory: the model ("*") does not fit in "*"cgroup $small: limit 512.0 MiB"*"routed experts"*" streamed from disk within "*"; --ram GIB sets another budget, --ram 0 maps every weight") ;;
  *) echo "memory_cgroup.sh: the first line does not say the model is streamed within the cgroup's memory:"
     cat "$tmp/streamed.err"; exit 1 ;;
esac
read_bytes=$(sed -n 's/^\[experts: .* needed, \([0-9.]* [KMG]*B\) read from storage.*/\1/p' "$tmp/streamed.err")
case "$read_bytes" in
  ""|"0.0 B") echo "memory_cgroup.sh: no expert was read from storage:"; cat "$tmp/streamed.err"; exit 1 ;;
esac
peak=$(cat "$small/memory.max_usage_in_bytes" 2> /dev/null || cat "$small/memory.peak" 2> /dev/null || echo 0)
echo "memory_cgroup.sh: experts read from storage: $read_bytes; cgroup peak $((peak / MiB)) MiB of 512"
# Within the budget means never up against the limit: the kernel never had to reclaim for it.
hits=$(cat "$small/memory.failcnt" 2> /dev/null || sed -n 's/^max //p' "$small/memory.events" 2> /dev/null || echo 0)
[ "$hits" = 0 ] || { echo "memory_cgroup.sh: the streamed run hit the cgroup's limit $hits time(s)"; exit 1; }

in_cgroup "$small" "$bin" "${args[@]}" --ram 0 > "$tmp/mapped.out" 2> "$tmp/mapped.err" ||
  { echo "memory_cgroup.sh: --ram 0 failed:"; cat "$tmp/mapped.err"; exit 1; }
if grep -q '^sluice: memory:' "$tmp/mapped.err" || ! grep -q 'no --ram budget: weights mapped' "$tmp/mapped.err"; then
  echo "memory_cgroup.sh: --ram 0 did not map every weight:"; cat "$tmp/mapped.err"; exit 1
fi

make_cgroup "sluice-test-$$-large" $((4096 * MiB))
in_cgroup "$cg" "$bin" "${args[@]}" > "$tmp/fits.out" 2> "$tmp/fits.err" ||
  { echo "memory_cgroup.sh: the run in the 4 GiB cgroup failed:"; cat "$tmp/fits.err"; exit 1; }
first=$(head -1 "$tmp/fits.err")
echo "fits: $first"
case "$first" in
  "sluice: memory: the model ("*") fits in "*"cgroup $cg: limit 4.00 GiB"*": weights mapped, nothing streamed; --ram GIB streams within a budget instead") ;;
  *) echo "memory_cgroup.sh: in 4 GiB the model should fit and be mapped:"; cat "$tmp/fits.err"; exit 1 ;;
esac

for run in mapped fits; do
  cmp -s "$tmp/streamed.out" "$tmp/$run.out" ||
    { echo "memory_cgroup.sh: tokens differ, streamed vs $run: $(cat "$tmp/streamed.out") / $(cat "$tmp/$run.out")"; exit 1; }
done
echo "memory_cgroup.sh: ok, the same tokens streamed and mapped: $(cat "$tmp/streamed.out")"
