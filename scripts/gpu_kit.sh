#!/usr/bin/env bash
# The GPU device kit (issue 31): builds here, for sm_90 with compute_90 PTX,
# everything the device checks run, and packs it with the shared libraries
# the device image lacks into one archive, so that nothing is compiled on the
# lent GPU machine (15 minutes of device time in all, starts included).
#
#   bash scripts/gpu_kit.sh                       # configure + build build-kit/, pack
#   bash scripts/gpu_kit.sh --pack-only BUILD_DIR # pack an existing build (the ctest rehearsal)
#   options: --out DIR (default .gpu-kit), --xz-level N (default 9),
#            --size-limit-mib N (default 40: the archive that travels)
#
# Result: .gpu-kit/terngrad-gpu-kit.tar.xz (git-ignored, at most 40 MiB; the
# script fails if it is larger) and .gpu-kit/run-kit.sh, a copy of the kit's
# runner for the device command below.
#
# The device-tool call (one call, the whole default run, at most 6 minutes of
# work; the timeout leaves room for the machine's start within the budget):
#
#   run(command:   "bash .gpu-kit/run-kit.sh .gpu-kit/terngrad-gpu-kit.tar.xz $OUT",
#       carry:     [".gpu-kit"],
#       timeout_s: 420)
#
# run-kit.sh unpacks the archive under /tmp and runs its run.sh with OUT
# ($OUT/gpu_kit_results.txt is the one results file; non-zero exit on any
# failure). A later call may name stages: run-kit.sh ARCHIVE OUT "test bench".
# Stages: machine test sanitize bench train python (run.sh --help).
#
# What the kit holds: bin/ (CUDA tests, capi_cuda_test, distributed_tests,
# codec_cuda_bench, gpu_train_step_bench, tg-train, tg-compare, tg-cluster),
# lib/ (libterngrad.so and every library those need that is not glibc, the
# CUDA driver or a CUDA toolkit library; libstdc++, libgcc_s and libgomp go to
# lib/fallback/, used only where the device has none), python/terngrad (the
# DDP hook's package) with its tests, the PyTorch reference scripts, the
# Fashion-MNIST IDX files and MANIFEST (commit, build flags, checksums).
# cuBLAS, cuDNN and the CUDA runtime come from the device image (the CUDA
# toolkit or PyTorch's nvidia-* wheels); run.sh finds them there.
#
# The fallback that builds on the device instead: scripts/gpu_checks.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

build_dir=build-kit
pack_only=0
out=.gpu-kit
xz_level=9
size_limit_mib=40
while (($#)); do
  case $1 in
    --pack-only) pack_only=1; build_dir=${2:?--pack-only needs a build folder}; shift 2 ;;
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --xz-level) xz_level=${2:?--xz-level needs a number}; shift 2 ;;
    --size-limit-mib) size_limit_mib=${2:?--size-limit-mib needs a number}; shift 2 ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) echo "gpu_kit.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
  esac
done
[[ $xz_level =~ ^[0-9]$ ]] || { echo "gpu_kit.sh: --xz-level must be 0..9, got '$xz_level'" >&2; exit 2; }
[[ $size_limit_mib =~ ^[1-9][0-9]*$ ]] || { echo "gpu_kit.sh: --size-limit-mib must be a positive number, got '$size_limit_mib'" >&2; exit 2; }

programs=(tests/quantize_cuda_tests tests/train/cuda/train_cuda_tests tests/distributed/distributed_tests
          tests/capi/capi_cuda_test bench/codec_cuda_bench bench/gpu_train_step_bench
          experiments/tg-train experiments/tg-compare experiments/tg-cluster)
targets=(quantize_cuda_tests train_cuda_tests distributed_tests capi_cuda_test codec_cuda_bench
         gpu_train_step_bench tg-train tg-compare tg-cluster terngrad_capi)

if ((!pack_only)); then
  command -v nvcc >/dev/null || { echo "gpu_kit.sh: nvcc not found: the kit needs the CUDA toolkit" >&2; exit 1; }
  # x86-64-v3 (AVX2): the device's host CPU is not this one; the codec still
  # picks AVX-512 at run time where the device has it.
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON \
        "-DCMAKE_CUDA_ARCHITECTURES=90-real;90-virtual" -DTG_MARCH=x86-64-v3
  cmake --build "$build_dir" -j"$(nproc)" --target "${targets[@]}"
fi

for p in "${programs[@]}"; do
  [[ -x $build_dir/$p ]] || { echo "gpu_kit.sh: $build_dir/$p is missing (build it, or build with CUDA)" >&2; exit 1; }
done
capi=$(find "$build_dir/comm/capi" -maxdepth 1 -name 'libterngrad.so.*.*' -type f | head -1)
[[ -n $capi ]] || { echo "gpu_kit.sh: no libterngrad.so.* in $build_dir/comm/capi" >&2; exit 1; }

fmnist=${TG_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [[ -f $fmnist/$f.gz || -f $fmnist/$f ]] || { echo "gpu_kit.sh: $fmnist/$f(.gz) missing (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
done

mkdir -p "$out"
stage_root=$(mktemp -d "$out/stage.XXXXXX")
trap 'rm -rf "$stage_root"' EXIT
kit=$stage_root/terngrad-gpu-kit
mkdir -p "$kit"/{bin,lib/fallback,python/terngrad,tests/python,bench,data/fashion-mnist}

for p in "${programs[@]}"; do cp "$build_dir/$p" "$kit/bin/"; done
cp "$capi" "$kit/lib/"
soname=$(basename "$capi")
ln -s "$soname" "$kit/lib/libterngrad.so"
strip --strip-unneeded "$kit"/bin/* "$kit/lib/$soname"

# The shared libraries to bring: what ldd resolves here, less what every
# device image has (glibc), the CUDA driver, and the CUDA toolkit's libraries
# (the device's own must match its driver). The toolchain's runtime libraries
# go to fallback/: the device's newer ones serve PyTorch in the same process.
is_device_provided() {
  case $1 in
    libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|ld-linux*|linux-vdso*|libresolv.so.*) return 0 ;;
    libcuda.so.*|libnvidia-*|libcublas*|libcudnn*|libcudart*|libnccl*|libnvrtc*|libnvJitLink*|libcufft*|libcurand*|libcusolver*|libcusparse*) return 0 ;;
  esac
  return 1
}
declare -A bundled=()
for f in "$kit"/bin/* "$kit/lib/$soname"; do
  while read -r name _ path _; do
    [[ $path == /* ]] || continue
    is_device_provided "$name" && continue
    [[ -n ${bundled[$name]:-} ]] && continue
    bundled[$name]=1
    case $name in
      libstdc++.so.*|libgcc_s.so.*|libgomp.so.*) cp -L "$path" "$kit/lib/fallback/$name" ;;
      *) cp -L "$path" "$kit/lib/$name" ;;
    esac
  done < <(ldd "$f" | grep '=>')
done
strip --strip-unneeded "$kit"/lib/*.so.* "$kit"/lib/fallback/* 2>/dev/null || true

cp python/terngrad/*.py "$kit/python/terngrad/"
cp tests/python/*.py "$kit/tests/python/"
cp bench/pytorch_gpu_reference.py bench/pytorch_models.py bench/torch_terngrad_encode.py "$kit/bench/"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  # Stored raw: xz packs the images tighter than their .gz.
  if [[ -f $fmnist/$f.gz ]]; then gzip -dc "$fmnist/$f.gz" >"$kit/data/fashion-mnist/$f"; else cp "$fmnist/$f" "$kit/data/fashion-mnist/"; fi
done
cp scripts/gpu_kit_run.sh "$kit/run.sh"
chmod +x "$kit/run.sh"

{
  echo "terngrad GPU kit"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
  echo "build folder: $build_dir"
  grep -E '^(CMAKE_BUILD_TYPE|CMAKE_CUDA_ARCHITECTURES|TG_MARCH|TG_NATIVE|CMAKE_CUDA_COMPILER):' "$build_dir/CMakeCache.txt" || true
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "bundled libraries: $(ls "$kit/lib" | grep -v -E '^(fallback|libterngrad)' | tr '\n' ' ')"
  echo "fallback libraries: $(ls "$kit/lib/fallback" | tr '\n' ' ')"
  echo "sha256:"
  (cd "$kit" && find . -type f ! -name MANIFEST | sort | xargs sha256sum)
} >"$kit/MANIFEST"

archive=$out/terngrad-gpu-kit.tar.xz
tar -C "$stage_root" -cf - terngrad-gpu-kit | xz -T0 -"$xz_level" >"$archive.tmp"
mv "$archive.tmp" "$archive"
cp scripts/gpu_kit_run.sh "$out/run-kit.sh"
size=$(stat -c %s "$archive")
echo "gpu_kit.sh: $archive: $((size / 1024)) KiB, $(ls "$kit/lib" | grep -c 'so') libraries bundled"
limit=$((size_limit_mib * 1024 * 1024))
if ((size > limit)); then
  echo "gpu_kit.sh: the archive is $size bytes, over the $size_limit_mib MiB limit" >&2
  exit 1
fi
