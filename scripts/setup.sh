#!/usr/bin/env bash
# One-time set-up on a fresh Debian 12 machine: installs the Debian packages the
# build and tests need and the tests' npm packages, then builds the release tree
# (build/), which is all that running sluice needs. scripts/test.sh builds the
# other trees (ASan/UBSan + libFuzzer, ARM64 cross, ThreadSanitizer) on its
# first run and reuses them after. Each step prints how long it took.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libfmt-dev libcli11-dev
  libpcre2-dev libutf8proc-dev libxxhash-dev liburing-dev libcurl4-openssl-dev libcpp-httplib-dev libhwy-dev
  nginx-light python3 clang libclang-rt-14-dev
  chromium  # the server.chat_page test drives the chat page in it, headless
  libopenmpi-dev openmpi-bin  # expert parallelism over MPI (mpirun -np N sluice ...; the mpi.* tests)
  iproute2  # ip netns and tc: the mpi.netns.* tests' ranks in network namespaces (scripts/netns-ranks.sh)
)
# ARM64 cross compiler, user-mode qemu, and the arm64 builds of the libraries
# (Debian multiarch; nlohmann-json and CLI11 are architecture-independent).
PACKAGES+=(
  g++-aarch64-linux-gnu qemu-user
  libgtest-dev:arm64 libfmt-dev:arm64 libhwy-dev:arm64 liburing-dev:arm64 libxxhash-dev:arm64
  libpcre2-dev:arm64 libutf8proc-dev:arm64 libcurl4-openssl-dev:arm64 libcpp-httplib-dev:arm64
)
if ! dpkg --print-foreign-architectures | grep -qx arm64; then $SUDO dpkg --add-architecture arm64; fi
missing=()
# dpkg-query -W, not dpkg -s: with both the amd64 and the arm64 instance installed, `dpkg -s NAME`
# fails ("ambiguous package name"), and every run reinstalled them (apt-get update included).
installed() { dpkg-query -W -f='${db:Status-Abbrev}\n' "$1" 2>/dev/null | grep -q '^ii'; }
for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
# Node.js runs the reference tokenizers/templates; an existing installation
# (from any source) is used as is, otherwise Debian's.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then missing+=(nodejs npm); fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

step() {  # step NAME COMMAND...: runs it and says how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "setup: $name took $((SECONDS - start)) s"
}

# Node packages used only by tests as references (pinned in tests/node/package.json),
# and the coding agents the agents.* tests run (tests/agents/package.json: about
# 1.3 GB unpacked, native binaries; they need no network when run).
if [ -f tests/node/package.json ]; then
  (cd tests/node && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ -f tests/agents/package.json ]; then
  # npm install, not npm ci: the lock lists only the platform packages this
  # registry serves (linux-x64), and npm ci refuses a lock without the other
  # platforms' optional packages; npm install keeps the locked versions.
  step "coding agents (npm)" bash -c 'cd tests/agents && npm install --no-save --no-audit --no-fund --loglevel=error'
fi

JOBS=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only what running sluice needs: the tests (and the test-only trees) are built by scripts/test.sh.
step "release tree (the sluice binary)" cmake --build build -j "$JOBS" --target sluice
echo "setup: done. Binary: build/src/sluice (scripts/test.sh builds the tests and the test-only trees on its first run)"
