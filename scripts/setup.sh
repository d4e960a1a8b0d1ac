#!/usr/bin/env bash
# One-time set-up on a fresh Debian 12 machine: installs the Debian packages the
# build and tests need, then builds the release tree (build/) and the
# AddressSanitizer + UndefinedBehaviorSanitizer tree (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libpcre2-dev libutf8proc-dev libxxhash-dev liburing-dev libcurl4-openssl-dev libcpp-httplib-dev libhwy-dev
  nginx-light python3
)
missing=()
for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# Node.js runs the reference tokenizers/templates; an existing installation
# (from any source) is used as is, otherwise Debian's.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Node packages used only by tests as references (pinned in tests/node/package.json).
if [ -f tests/node/package.json ]; then
  (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
fi

JOBS=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$JOBS"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON >/dev/null
cmake --build build-asan -j "$JOBS"
echo "setup: done. Binary: build/src/sluice"
