#!/usr/bin/env bash
# The checks of issue 6 that need an NVIDIA GPU (written on a machine without
# one). Builds for sm_90 (H100/H200), runs every CUDA test and the GPU
# benchmarks, and writes everything to one results file:
#
#   bash scripts/gpu_checks.sh [results-file]     (default gpu_checks_<UTC time>.txt)
#
# BUILD_DIR (default build-gpu) and JOBS (default nproc) override the build.
# STAGES (default "build test bench train") picks what runs, so that the work
# fits the device tool's 10 minutes per call: e.g. STAGES=build first, then
# STAGES="test" and STAGES="bench train" in quick succession (the build
# directory stays while the machine is warm).
# Exit status: 0 when every test passed, 1 otherwise (benchmarks never fail it).
#
# On a lent GPU machine without our Debian packages (no network there): make
# the package bundle first, here, in the checkout that the device tool sends
# (the session's own checkout):
#
#   bash scripts/device_bundle.sh        # -> .device-deps/debs (git-ignored, ~40 MiB)
#
# then call the device tool's `run` with
#
#   carry:     [".device-deps/debs"]      (not ".device-deps": an unpacked root/ there is too big)
#   command:   bash scripts/gpu_checks.sh "$OUT/gpu_checks.txt"
#   timeout_s: 600
#
# and read gpu_checks.txt from the files that come back. When .device-deps/debs
# exists (TG_DEVICE_DEPS names another bundle folder; TG_NO_BUNDLE=1 ignores
# it), scripts/unpack_device_deps.sh unpacks it into .device-deps/root and is
# sourced: CMake then finds Eigen, ZLIB, Protobuf, gRPC (and absl, re2,
# c-ares, OpenSSL), GTest and benchmark there, the programs load their shared
# libraries from there, and tg-train reads the Fashion-MNIST files from there.
# Without a bundle the system's packages are used (scripts/install_deps.sh).
set -u
cd "$(dirname "$0")/.."
OUT=${1:-gpu_checks_$(date -u +%Y%m%dT%H%M%SZ).txt}
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
status=0

section() { echo; echo "=== $* ==="; }
run() {  # run CMD...: prints the command and its exit status, records failures
  echo "\$ $*"
  "$@"
  local rc=$?
  echo "exit status: $rc"
  [ $rc -eq 0 ] || status=1
}
# run_tests ALLOWED CMD...: a GoogleTest binary, run once; a skipped test
# counts as a failure (the device was not usable) unless its name matches
# the extended regex ALLOWED.
run_tests() {
  local allowed=$1 log
  shift
  log=$(mktemp)
  echo "\$ $*"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  echo "exit status: $rc"
  [ $rc -eq 0 ] || status=1
  if grep -E '^\[  SKIPPED \] [A-Za-z0-9_/]+\.' "$log" | grep -v -E "$allowed" | grep -q .; then
    echo "tests SKIPPED on a machine meant to have a GPU: counted as failures"
    status=1
  fi
  rm -f "$log"
}
STAGES=${STAGES:-build test bench train}
stage() { [[ " $STAGES " == *" $1 "* ]]; }

# Everything below goes to the terminal and the results file (no subshell:
# `status` must survive to the exit).
exec > >(tee "$OUT") 2>&1
tee_pid=$!
{
  section "machine"
  date -u
  git rev-parse HEAD
  nvidia-smi || echo "nvidia-smi failed: no driver/GPU visible"
  nvcc --version | tail -1

  section "dependencies"
  deps_args=()
  deps_dir=${TG_DEVICE_DEPS:-.device-deps}
  if [ -d "$deps_dir/debs" ] && [ -z "${TG_NO_BUNDLE:-}" ]; then
    echo "package bundle $deps_dir/debs:"
    cat "$deps_dir/debs/MANIFEST" 2>/dev/null
    export TG_DEVICE_DEPS=$deps_dir
    if source scripts/unpack_device_deps.sh; then
      read -ra deps_args <<<"$TG_DEPS_CMAKE_ARGS"
      echo "unpacked in $TG_DEPS_ROOT; CMAKE_PREFIX_PATH=$CMAKE_PREFIX_PATH"
    else
      echo "unpacking the bundle failed: building against the system's packages"
      status=1
    fi
  else
    echo "no package bundle ($deps_dir/debs): the system's packages"
  fi

  section "cuDNN and cuBLAS"
  # train/cuda needs cudnn.h and libcudnn. Images that ship cuDNN only inside
  # PyTorch's pip wheel (nvidia-cudnn-*) have no copy in the CUDA toolkit:
  # point the build there (TG_CUDNN_ROOT) and let the loader find its parts.
  cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
  echo "CUDA toolkit: $cuda_home"
  ls "$cuda_home"/lib64 2>/dev/null | grep -E '^lib(cublas|cudnn)[^_]*\.so' | head
  if [ -z "${TG_CUDNN_ROOT:-}" ] && ! ls "$cuda_home"/include/cudnn.h "$cuda_home"/targets/*/include/cudnn.h >/dev/null 2>&1; then
    wheel=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
    if [ -n "$wheel" ] && [ -f "$wheel/include/cudnn.h" ]; then
      export TG_CUDNN_ROOT=$wheel
      export LD_LIBRARY_PATH="$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "cuDNN from the Python wheel: $wheel ($(ls "$wheel"/lib | tr '\n' ' '))"
      ldd "$wheel"/lib/libcudnn.so.9 | grep -E 'not found|cublas|cudart' || true
    else
      echo "no cuDNN found (toolkit or Python wheel): train/cuda will not be built"
    fi
  fi

  if stage build; then
  section "build (sm_90)"
  run cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTG_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      ${TG_CUDNN_ROOT:+-DTG_CUDNN_ROOT="$TG_CUDNN_ROOT"} "${deps_args[@]}"
  grep -E '^(Eigen3_DIR|ZLIB_LIBRARY_RELEASE|Protobuf_LIBRARY|Protobuf_PROTOC_EXECUTABLE|gRPC_DIR|absl_DIR|GTest_DIR|benchmark_DIR)[:=]' \
      "$BUILD_DIR/CMakeCache.txt" 2>/dev/null
  run cmake --build "$BUILD_DIR" -j"$JOBS" --target quantize_cuda_tests train_cuda_tests codec_cuda_bench \
      gpu_train_step_bench tg-train tg-cluster distributed_tests capi_cuda_test
  fi

  if stage test; then
  section "CUDA codec: CPU/GPU bit-exactness"
  run_tests '^$' "$BUILD_DIR"/tests/quantize_cuda_tests
  section "GPU layers vs CPU layers, codec in the loop, GPU vs CPU loss curves, checkpoints, EMA, several GPUs"
  # The two-GPU check skips on a one-GPU machine, saying so.
  run_tests 'TwoGpus' "$BUILD_DIR"/tests/train/cuda/train_cuda_tests
  section "distributed GPU replicas: GPU cluster vs in-process GPU trainer, resume, async"
  run_tests '^$' "$BUILD_DIR"/tests/distributed/distributed_tests --gtest_filter='*Gpu*'
  section "C API: device-pointer functions vs the host ones (exit 77 = skipped = failure here)"
  run "$BUILD_DIR"/tests/capi/capi_cuda_test
  fi

  if stage bench; then
  section "benchmark: CUDA codec vs D2D copy bandwidth"
  "$BUILD_DIR"/bench/codec_cuda_bench
  section "PyTorch reference on this GPU: TernGrad encode and train steps (eager)"
  # (with the machine's own LD_LIBRARY_PATH: PyTorch needs none of the bundle)
  ref="$BUILD_DIR/pytorch_gpu_reference.jsonl"
  LD_LIBRARY_PATH=${TG_ORIG_LD_LIBRARY_PATH-${LD_LIBRARY_PATH:-}} \
    python3 bench/pytorch_gpu_reference.py --workers=4 --batch=64 >"$ref" || echo "PyTorch reference unavailable"
  cat "$ref"
  section "benchmark: GPU train step, 4 virtual workers x batch 64, against the PyTorch lines above"
  # (it checks its first loss against the CPU before timing: a mismatch fails the checks)
  run "$BUILD_DIR"/bench/gpu_train_step_bench --workers=4 --batch=64 --reference="$ref"
  fi

  if stage train; then
  section "tg-train --device=gpu: LeNet, 4 workers, TernGrad, 500 steps, EMA (synthetic data unless the IDX files exist)"
  data=${TG_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
  ds=""
  [ -d "$data" ] || ds="--dataset_name=synthetic"
  run "$BUILD_DIR"/experiments/tg-train --net=lenet --device=gpu --num_nodes=4 --batch_size=16 --max_steps=500 \
      --grad_bits=2 --data_dir="$data" $ds
  fi

  section "summary"
  echo "stages: $STAGES"
  echo "checks: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
}
echo "results written to $OUT"
# Let tee write the last lines before the script (and the device call) ends.
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit $status
