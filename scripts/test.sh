#!/usr/bin/env bash
# Runs every test: the include-graph check, the release build's CTest suite (unit, golden, CLI, the
# node-reference and server suites, stream mode), then under AddressSanitizer + UndefinedBehaviorSanitizer
# (clang) the unit, golden, server and stream-mode tests and each libFuzzer target for
# SLUICE_FUZZ_SECONDS (its seed corpus first, then mutations from a seed that changes with every
# commit: SLUICE_FUZZ_SEED, printed, repeats a run), the kernel and golden
# tests built for ARM64 under qemu-aarch64 (NEON), and under ThreadSanitizer the thread pool,
# streaming, remote-fetch and server tests (continuous batching included). A skipped test fails the run unless it is a SIMD test of
# an instruction set this CPU lacks. Each stage prints how long it took. Run scripts/setup.sh first;
# the sanitizer, ARM64 and TSan trees are configured here on the first run and reused after.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)
stage_start=$SECONDS
took() {  # took NAME: how long the stage that just ended took
  echo "test: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}

# The include graph first: no folder includes from a folder above it.
python3 scripts/check_layers.py

cmake --build build -j "$JOBS"
echo "test: kernels on this CPU: $(build/src/sluice info | grep '^isa:')"
# The CUDA backend's tests (label cuda) need a GPU: scripts/test-gpu.sh runs them on one.
echo "test: CUDA tests (ctest label cuda) are not run here; scripts/test-gpu.sh runs them on a GPU machine"
(cd build && ctest -j "$JOBS" --output-on-failure --timeout 900 -LE cuda)
python3 scripts/check_skips.py build
took "release tree"

# The libFuzzer seed changes with every commit (so each CI run tries new inputs) and is printed, so
# a failure is repeated with SLUICE_FUZZ_SEED=N scripts/test.sh; outside git it is 1.
if [ -z "${SLUICE_FUZZ_SEED:-}" ]; then
  commit=$(git rev-parse --short=7 HEAD 2>/dev/null || echo 1)
  SLUICE_FUZZ_SEED=$(( 16#${commit} % 2147483647 + 1 ))
fi
echo "test: libFuzzer seed $SLUICE_FUZZ_SEED (SLUICE_FUZZ_SEED=$SLUICE_FUZZ_SEED repeats this run)"
# The CUDA backend is compiled in build/ (where nvcc exists); the other trees check the CPU code.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_SANITIZE=ON -DSLUICE_FUZZ=ON \
  -DSLUICE_CUDA=OFF -DCMAKE_CXX_COMPILER=clang++ -DSLUICE_FUZZ_SEED="$SLUICE_FUZZ_SEED" >/dev/null
cmake --build build-asan -j "$JOBS"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Two PrefillCacheLoan tests are left to the release tree: they run the same long prefill three
# times over to compare bits (316 s together under ASan in CI); the code they exercise runs under
# ASan in PrefillCacheLoan.ASpanBorrows... and PrefillChunk.*.
(cd build-asan && ctest -j "$JOBS" --output-on-failure --timeout 1800 -L 'unit|golden|asan|fuzz' \
  -E '^PrefillCacheLoan\.(OneSpanGivesTheBitsOfSpansOfTheReserveAloneAndOfChunks|TheCacheHasItsSlotsBackForTheDecode)$')
python3 scripts/check_skips.py build-asan
took "sanitizer tree (ASan + UBSan, libFuzzer)"

if [ ! -f build-aarch64/CMakeCache.txt ]; then
  cmake -S . -B build-aarch64 -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_OPT_FLAGS=-O2 -DSLUICE_BENCH=OFF \
    -DSLUICE_CUDA=OFF -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake >/dev/null
fi
cmake --build build-aarch64 -j "$JOBS" --target sluice_unit_tests sluice_golden_tests
echo "test: ARM64 under qemu: $(qemu-aarch64 build-aarch64/tests/sluice_unit_tests --gtest_filter='Isa.*' | grep '\[ kernels \]')"
(cd build-aarch64 && ctest -j "$JOBS" --output-on-failure --timeout 1800 \
  -R '^(Isa/|Isa\.|Decode\.|Models/Golden\.)')
python3 scripts/check_skips.py build-aarch64
took "ARM64 tree under qemu"

if [ ! -f build-tsan/CMakeCache.txt ]; then
  cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSLUICE_TSAN=ON -DSLUICE_CUDA=OFF >/dev/null
fi
cmake --build build-tsan -j "$JOBS" --target sluice sluice_unit_tests server_test_model
# The suites run under TSan (ctest name prefixes). Unit suites: only their files are built in this
# tree (tests/CMakeLists.txt); each prefix must name tests there. PrefillCacheLoan: only the test
# where a span borrows the expert cache's slots while its reader threads run (the others repeat the
# prompt to compare bits: one of them took 364 s under TSan in CI). remote.*: one model's (the
# fetcher's threads are the same for every architecture; the release and ASan trees run them all).
TSAN_SUITES=(ThreadPool. Streaming. SpineStreaming. ReadFaults. Pull. ExpertDiskCache. ServerQueue.
  PrefillCacheLoan.ASpanBorrows server.robustness server.connections server.shutdown server.batching server.hostile
  remote.stream.deepseek_v3_fp8 remote.faults.deepseek_v3_fp8)
TSAN_TESTS=
for suite in "${TSAN_SUITES[@]}"; do
  pattern="^${suite//./\\.}"
  listed=$(cd build-tsan && ctest -N -R "$pattern")  # whole, then grep: grep -q would end ctest by SIGPIPE
  if ! grep -q 'Test *#' <<<"$listed"; then
    echo "test: the TSan tree has no test named $suite* (tests/CMakeLists.txt: the TSan tree's unit-test files)" >&2
    exit 1
  fi
  TSAN_TESTS="${TSAN_TESTS:+$TSAN_TESTS|}$pattern"
done
(cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/../scripts/tsan-suppressions.txt \
  ctest -j "$JOBS" --output-on-failure --timeout 1800 -R "$TSAN_TESTS")
python3 scripts/check_skips.py build-tsan
took "ThreadSanitizer tree"
echo "test: all stages passed in $SECONDS s"
