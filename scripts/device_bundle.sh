#!/usr/bin/env bash
# Downloads the Debian 12 packages that terngrad needs to BUILD and RUN its
# targets on a machine that has only a compiler, CMake and CUDA (no network,
# none of our -dev packages): the lent GPU machine that scripts/gpu_checks.sh
# runs on. Run it here (a Debian 12 machine that reaches the registry):
#
#   bash scripts/device_bundle.sh          -> .device-deps/debs/*.deb (git-ignored)
#
# Then carry ".device-deps/debs" to the device; there, scripts/unpack_device_deps.sh
# (sourced by gpu_checks.sh) unpacks them with `dpkg -x` into
# .device-deps/root, never into /.
#
# The set is what CMakeLists.txt's find_package calls resolve through (read
# off the packages' CMake config files and `apt-cache depends`):
#   Eigen3 (CONFIG)       libeigen3-dev
#   ZLIB                  zlib1g-dev zlib1g
#   Protobuf (FindProtobuf, protoc)  libprotobuf-dev libprotobuf32 libprotobuf-lite32
#                         protobuf-compiler libprotoc32
#   gRPC (CONFIG)         libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29
#                         protobuf-compiler-grpc (grpc_cpp_plugin; gRPCTargets
#                         checks that all four plugins exist)
#     its find_dependency: absl (CONFIG) libabsl-dev libabsl20220623;
#                         re2 (Findre2: pkg-config) libre2-dev libre2-9,
#                         pkgconf pkgconf-bin libpkgconf3;
#                         c-ares libc-ares-dev libc-ares2; OpenSSL libssl-dev libssl3
#   GTest/GMock (CONFIG)  libgtest-dev libgmock-dev
#   benchmark (CONFIG)    libbenchmark-dev libbenchmark1debian
#   Fashion-MNIST data    dataset-fashion-mnist
# Left out on purpose: libc6(-dev), libgcc-s1, libstdc++6, gcc-12-base and
# linux-libc-dev (the device's compiler brings its own, newer ones),
# googletest (GoogleTest's sources, which libgtest-dev only recommends using)
# and the pkg-config transitional package. OpenMP comes with the device's g++.
#
# The .debs are slimmed (see SLIM below): docs, man pages and the static
# libraries that no CMake package file imports are removed.
# Versions: the ones installed here when a package is installed and apt can
# still download that version (so the bundle matches what this machine builds
# with), else apt's candidate.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.device-deps/debs
packages=(
  libeigen3-dev
  zlib1g-dev zlib1g
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29 protobuf-compiler-grpc
  libabsl-dev libabsl20220623
  libre2-dev libre2-9
  libc-ares-dev libc-ares2
  libssl-dev libssl3
  pkgconf pkgconf-bin libpkgconf3
  libgtest-dev libgmock-dev
  libbenchmark-dev libbenchmark1debian
  dataset-fashion-mnist
)

# An unpacked root/ from a local test is dropped too: it must not travel.
rm -rf "$DEST" .device-deps/root .device-deps/root.tmp
mkdir -p "$DEST"
specs=()
for p in "${packages[@]}"; do
  v=$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)
  if [[ -n "$v" ]] && dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" &&
     apt-cache show "$p=$v" 2>/dev/null | grep -q '^Filename:'; then
    specs+=("$p=$v")
  else
    specs+=("$p")
  fi
done
# apt-get download writes into the current directory; as root it warns that
# the _apt user cannot write there (harmless: it downloads unsandboxed).
(cd "$DEST" && apt-get download "${specs[@]}" 2>&1 | grep -v "^W: Download is performed unsandboxed" || true)

# Slim the packages (SLIM=0 keeps them as downloaded): nothing links the
# static libraries (*.a: 20 MB of libgrpc.a alone) except those a CMake
# package file imports, and nothing reads the docs
# or man pages, so each .deb is repacked without them. Only `dpkg -x` ever
# reads these files, never dpkg -i.
if [[ "${SLIM:-1}" != 0 ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # Static libraries that a CMake package file imports (GTest's and GMock's,
  # benchmark_main) stay: CMake checks that every imported file exists.
  mkdir "$tmp/all"
  for f in "$DEST"/*.deb; do dpkg -x "$f" "$tmp/all"; done
  find "$tmp/all" -name '*.cmake' -type f -exec grep -ohE 'lib[A-Za-z0-9_+.-]*\.a\b' {} + | sort -u > "$tmp/keep"
  echo "device_bundle: static libraries kept (imported by CMake files): $(paste -sd' ' "$tmp/keep")"
  rm -rf "$tmp/all"
  for f in "$DEST"/*.deb; do
    rm -rf "$tmp/pkg"
    dpkg-deb -R "$f" "$tmp/pkg"
    before=$(find "$tmp/pkg" -type f -o -type l | wc -l)
    find "$tmp/pkg" \( -path '*/usr/share/doc/*' -o -path '*/usr/share/man/*' \
                      -o -path '*/usr/share/lintian/*' \) \( -type f -o -type l \) -delete
    find "$tmp/pkg" -name '*.a' \( -type f -o -type l \) -print0 |
      while IFS= read -r -d '' a; do
        grep -qxF "$(basename "$a")" "$tmp/keep" || rm -f "$a"
      done
    after=$(find "$tmp/pkg" -type f -o -type l | wc -l)
    if ((after != before)); then
      dpkg-deb -Zxz --root-owner-group -b "$tmp/pkg" "$f" >/dev/null
    fi
  done
fi

n=$(ls "$DEST"/*.deb | wc -l)
if ((n != ${#packages[@]})); then
  echo "device_bundle: expected ${#packages[@]} .deb files, got $n" >&2
  exit 1
fi
# Record what the bundle holds (name version), for the results file.
for f in "$DEST"/*.deb; do dpkg-deb -f "$f" Package Version | paste -sd' '; done > "$DEST/MANIFEST"
echo "device_bundle: $n packages in $DEST"
du -sh "$DEST"
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
bundle=$(du -sb "$DEST" | cut -f1)
echo "tracked tree: $((tracked / 1024)) KiB; bundle: $((bundle / 1024)) KiB;" \
     "together: $(((tracked + bundle) / 1024 / 1024)) MiB of the 64 MiB a device call may carry"
