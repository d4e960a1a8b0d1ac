#!/usr/bin/env bash
# The CUDA backend's tests, on a machine with an NVIDIA GPU: the `cuda`-labelled
# suite (sluice_cuda_tests: kernels against the CPU, goldens within 5x the CPU's
# error, batched == one token at a time, streamed == resident), then the golden
# and speculation suites with every model on the GPU (SLUICE_TEST_DEVICE=cuda), and
# again with the routed experts computed on the host beside it (SLUICE_TEST_EXPERTS_ON=cpu).
# A missing GPU fails (SLUICE_REQUIRE_GPU=1), it is never skipped. Ends with one
# line: "N passed, N failed".
#
#   scripts/test-gpu.sh            builds build/ (release) and runs its binaries
#   scripts/test-gpu.sh BIN_DIR    runs sluice, sluice_cuda_tests, sluice_golden_tests and
#                                  sluice_unit_tests from BIN_DIR (binaries carried to a GPU machine)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
if [ $# -ge 1 ]; then
  BIN=$(cd "$1" && pwd)
  for b in sluice sluice_cuda_tests sluice_golden_tests sluice_unit_tests; do
    [ -x "$BIN/$b" ] || { echo "test-gpu: $BIN/$b is missing"; echo "0 passed, 1 failed"; exit 1; }
  done
  SLUICE=$BIN/sluice CUDA_T=$BIN/sluice_cuda_tests GOLDEN_T=$BIN/sluice_golden_tests UNIT_T=$BIN/sluice_unit_tests
else
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_CUDA=ON >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
  cmake --build build -j "$(nproc)" --target sluice sluice_cuda_tests sluice_golden_tests sluice_unit_tests ||
    { echo "0 passed, 1 failed"; exit 1; }
  SLUICE=$ROOT/build/src/sluice CUDA_T=$ROOT/build/tests/sluice_cuda_tests
  GOLDEN_T=$ROOT/build/tests/sluice_golden_tests UNIT_T=$ROOT/build/tests/sluice_unit_tests
fi
export SLUICE_REQUIRE_GPU=1 SLUICE_FIXTURES_DIR=$ROOT/tests/fixtures SLUICE_TEST_BINARY=$SLUICE
export SLUICE_MODEL=$ROOT/models/sluice-k3-mini

"$SLUICE" info || true
# A tree without the shipped model (a GPU machine that was sent only the golden fixtures) says so
# and leaves out the tests that need it.
SKIP=""
if [ ! -f "$ROOT/models/sluice-k3-mini/config.json" ]; then
  echo "test-gpu: models/sluice-k3-mini is absent: its golden tests are left out"
  SKIP="*sluice_k3_mini*"
fi
passed=0
failed=0
# Runs one gtest binary and adds its counts (a crash or missing summary counts as a failure).
suite() {
  local label=$1
  shift
  echo "=== $label"
  local log
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  local p f
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | head -1)
  f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$log" | grep -oE '[0-9]+' | head -1)
  if [ -z "$p" ] && [ -z "$f" ]; then
    echo "test-gpu: $label ended without a gtest summary (crash?)"
    f=1
  fi
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  rm -f "$log"
}
suite "cuda (kernels, goldens within 5x the CPU error, bitwise checks)" "$CUDA_T" --gtest_filter="*${SKIP:+-$SKIP}"
suite "golden suite on the GPU" env SLUICE_TEST_DEVICE=cuda "$GOLDEN_T" --gtest_filter="*${SKIP:+-$SKIP}"
suite "speculation and rollback on the GPU" env SLUICE_TEST_DEVICE=cuda "$UNIT_T" --gtest_filter='Models/Speculation.*:Rollback.*'
# Routed experts computed on the host beside the GPU (--experts-on cpu): the same goldens and speculation.
suite "golden suite, experts on the host" env SLUICE_TEST_DEVICE=cuda SLUICE_TEST_EXPERTS_ON=cpu "$GOLDEN_T" \
  --gtest_filter="*${SKIP:+-$SKIP}"
suite "speculation, experts on the host" env SLUICE_TEST_DEVICE=cuda SLUICE_TEST_EXPERTS_ON=cpu "$UNIT_T" \
  --gtest_filter='Models/Speculation.*:Rollback.*'
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
