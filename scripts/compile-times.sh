#!/usr/bin/env bash
# compile-times.sh LOG [N]: the total CPU seconds of a log written by scripts/time-compile.sh,
# per target folder, and its N (default 15) most expensive compiles.
# Measuring a tree: cmake -S . -B build-measure -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
#   -DCMAKE_CXX_COMPILER_LAUNCHER=$PWD/scripts/time-compile.sh -DCMAKE_CUDA_COMPILER_LAUNCHER=$PWD/scripts/time-compile.sh
# SLUICE_COMPILE_LOG=/tmp/times.log cmake --build build-measure -j2; scripts/compile-times.sh /tmp/times.log
set -euo pipefail
log=$1
n=${2:-15}
awk '{s += $1; n++} END {printf "total %.1f CPU s in %d compiles\n", s, n}' "$log"
awk '{d = $2; sub(/\.dir\/.*/, "", d); sub(/.*CMakeFiles\//, "", d); s[d] += $1; c[d]++}
     END {for (d in s) printf "  %-24s %8.1f s  %3d compiles\n", d, s[d], c[d]}' "$log" | sort -k2 -rn
sort -rn "$log" | head -n "$n"
