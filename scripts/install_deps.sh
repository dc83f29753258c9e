#!/usr/bin/env bash
# Installs the Debian packages terngrad builds and runs with, skipping those
# already present. Run as root (CI does) or with sudo available.
set -euo pipefail
packages=(
  cmake g++ make pkg-config python3 iproute2
  libeigen3-dev zlib1g-dev libjpeg62-turbo-dev libpng-dev libgtest-dev libbenchmark-dev libhwy-dev
  libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libabsl-dev nlohmann-json3-dev libssl-dev openssl
  dataset-fashion-mnist
  python3-numpy python3-torch python3-matplotlib python3-pil python3-yaml
  python3-venv python3-pip python3-setuptools python3-wheel
  g++-aarch64-linux-gnu qemu-user
  clang libclang-rt-14-dev libomp-14-dev  # the fuzz targets (fuzz/, ctest Fuzz.Brief): libFuzzer, OpenMP for clang
)
# An independent TFRecord/tf.train.Example reader for the test that reads our
# shards with it (ctest TfRecord.PythonReadsOurShards): PyPI's tfrecord, crc32c
# and protobuf into .deps/python of the checkout (numpy and Pillow come from
# Debian, hence --no-deps; crc32c is compiled, so for Debian's /usr/bin/python3,
# the interpreter the test runs). Optional: without it the test skips.
install_test_python() {
  local target
  target="$(cd "$(dirname "$0")/.." && pwd)/.deps/python"
  [[ -d "$target/tfrecord" && -d "$target/crc32c" && -d "$target/google/protobuf" ]] && return 0
  /usr/bin/python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps --target "$target" tfrecord crc32c protobuf \
    || echo "install_deps: could not pip-install tfrecord/crc32c/protobuf into $target (TfRecord.PythonReadsOurShards will skip)" >&2
}
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install_deps: all ${#packages[@]} packages present"
  install_test_python
  exit 0
fi
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
install_test_python
