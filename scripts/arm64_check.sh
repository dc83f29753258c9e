#!/usr/bin/env bash
# Cross-builds the codec library (quantize/) and its whole test suite for
# AArch64 with Debian's g++-aarch64-linux-gnu and runs it under qemu-user,
# once with the best level (NEON), once forced to NEON and once forced to the
# portable kernels (TG_CPU_SIMD), so the NEON kernels are proven to give the
# portable bytes without ARM hardware.
#   bash scripts/arm64_check.sh [build-dir]        (default: build-arm64)
# Exits 77 (a ctest skip) with a message when a tool is missing.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build-arm64}"

missing=()
command -v aarch64-linux-gnu-g++ > /dev/null || missing+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 > /dev/null || missing+=(qemu-user)
[[ -f /usr/src/googletest/CMakeLists.txt ]] || missing+=(googletest)
[[ -f /usr/include/hwy/highway.h ]] || missing+=(libhwy-dev)
if ((${#missing[@]} > 0)); then
  echo "arm64 check SKIPPED: missing ${missing[*]} (apt-get install ${missing[*]}; scripts/install_deps.sh installs them)"
  exit 77
fi

# Highway's headers only: /usr/include itself holds the build machine's libc
# headers, which must not reach the cross compiler.
mkdir -p "$build/hwy-include"
ln -sfn /usr/include/hwy "$build/hwy-include/hwy"

echo "arm64 check: configuring $build"
cmake -S "$root/tests/cross" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$root/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DTG_HWY_INCLUDE_DIR="$build/hwy-include" > "$build/configure.log" 2>&1 || {
  cat "$build/configure.log"
  exit 1
}
echo "arm64 check: building (aarch64-linux-gnu-g++)"
cmake --build "$build" -j"$(nproc)" > "$build/build.log" 2>&1 || {
  tail -50 "$build/build.log"
  exit 1
}
if command -v file > /dev/null; then file "$build/quantize_tests" | sed "s/^/arm64 check: /"; fi
echo "arm64 check: running the codec tests under qemu-aarch64"
ctest --test-dir "$build" --output-on-failure --timeout 600
