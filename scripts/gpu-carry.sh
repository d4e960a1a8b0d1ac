#!/usr/bin/env bash
# Packs what a GPU machine without Debian's -dev packages needs to run the CUDA
# tests and benchmarks: the release binaries (stripped), the shared libraries
# they link that are not glibc/libstdc++ (copied from this machine), and a
# runner that points LD_LIBRARY_PATH at them.
#
#   scripts/gpu-carry.sh BUILD_DIR DEST     then on the GPU machine: DEST/run.sh COMMAND...
set -euo pipefail
BUILD=$1
DEST=$2
mkdir -p "$DEST/lib"
bins=("$BUILD/src/sluice" "$BUILD/tests/sluice_cuda_tests" "$BUILD/tests/sluice_golden_tests" "$BUILD/tests/sluice_unit_tests")
for b in "${bins[@]}"; do
  strip -o "$DEST/$(basename "$b")" "$b"
done
for b in "${bins[@]}"; do
  ldd "$b" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libresolv.so*|libnss*|libutil.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*) ;;
    *) cp -L "$lib" "$DEST/lib/" ;;
  esac
done
cat > "$DEST/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs a command with the carried libraries first on the library path.
here=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
exec "$@"
RUN
chmod +x "$DEST/run.sh"
du -sh "$DEST"
