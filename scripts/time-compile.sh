#!/usr/bin/env bash
# Compiler launcher that records each compile's CPU time (user+sys, children included)
# for build-time measurements: set CMAKE_CXX_COMPILER_LAUNCHER (and _CUDA_) to this
# script and SLUICE_COMPILE_LOG to a file; each line is "seconds output-file".
# scripts/compile-times.sh sums and ranks such a log.
log=${SLUICE_COMPILE_LOG:-/tmp/sluice-compile-times.log}
out=unknown
prev=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out=$a; fi
  prev=$a
done
tf=$(mktemp)
/usr/bin/time -o "$tf" -f '%U %S' "$@"
rc=$?
read -r u s < <(tail -n1 "$tf")
rm -f "$tf"
echo "$(echo "$u + $s" | bc) $out" >> "$log"
exit $rc
