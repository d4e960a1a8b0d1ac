# Cross-compiling for 64-bit ARM with Debian's g++-aarch64-linux-gnu and arm64
# -dev packages installed through multiarch (scripts/setup.sh). Test binaries
# run under qemu-aarch64 (Debian qemu-user), so ctest works in this tree.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
# arm64 .pc files only (headers are shared under /usr/include).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
