#!/usr/bin/env bash
# Exploratory fuzzing: every libFuzzer target of build-asan/ (scripts/setup.sh builds it) for
# SECONDS each (default 180) from a new random seed, JOBS at a time (default 2), over a copy of its
# seed corpus. CI runs the same targets from a fixed seed (tests/fuzz/tests.cmake); this is where new
# bugs are found, so run it before landing a change to a parser. A crash input is kept as
# fuzz-out/<target>/crash-*; add it to tests/fuzz/corpus/<target>/ with the fix and a unit case.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (JOBS=N in the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-180}
shift || true
jobs=${JOBS:-2}
bin=build-asan/tests
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for src in tests/fuzz/*_fuzz.cpp; do targets+=("$(basename "${src%_fuzz.cpp}")"); done
fi
for t in "${targets[@]}"; do
  [ -x "$bin/${t}_fuzz" ] || { echo "no $bin/${t}_fuzz: build build-asan (SLUICE_FUZZ=ON) first" >&2; exit 2; }
done
out=fuzz-out
mkdir -p "$out"
run_one() {
  local t=$1 dir=$out/$1
  rm -rf "$dir/corpus" && mkdir -p "$dir/corpus"
  cp -r tests/fuzz/corpus/"$t"/. "$dir/corpus/"
  if "$bin/${t}_fuzz" -seed=0 -max_total_time="$seconds" -timeout=25 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$dir/" "$dir/corpus" >"$dir/log" 2>&1; then
    echo "$t: no crash ($(grep -o 'stat::number_of_executed_units: *[0-9]*' "$dir/log" | grep -o '[0-9]*$') inputs)"
  else
    echo "$t: FAILED, see $dir/log and $(ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* 2>/dev/null | tr '\n' ' ')"
    return 1
  fi
}
export -f run_one
export bin out seconds
status=0
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one {}' || status=1
exit $status
