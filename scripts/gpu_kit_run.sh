#!/usr/bin/env bash
# The GPU kit's runner (run.sh inside the archive that scripts/gpu_kit.sh
# makes). Runs everything prebuilt; nothing is compiled here.
#
#   run.sh OUTDIR [STAGES]              inside the unpacked kit
#   run-kit.sh ARCHIVE OUTDIR [STAGES]  unpacks ARCHIVE under $TMPDIR (/tmp), then the above
#
# STAGES: a quoted, space-separated list from
#   machine   GPU, driver, CUDA, the kit's commit; every library resolves
#   test      the CUDA tests (codec CPU/GPU bit-exactness, GPU layers and
#             trainer, distributed GPU replicas, C API device pointers)
#   bench     codec_cuda_bench; the PyTorch reference on the same GPU;
#             gpu_train_step_bench (LeNet, CifarNet, AlexNet) against it
#   train     tg-compare --device=gpu, the main job on Fashion-MNIST
#   sanitize  compute-sanitizer memcheck and racecheck: codec tests, a short GPU training run
#   python    the Python package and its DDP hook under the device's PyTorch
#             (run right after the tests, whatever the order given)
#   profile   (not in the default) Nsight Compute: every kernel's time in the
#             AlexNet step (the target still missed, bench/RESULTS.md); with
#             TG_KIT_PROFILE_ENCODE=1 also the 64M encode's kernels; an Nsight
#             Systems timeline of the step first where the image has nsys;
#             TG_KIT_NCU=0 leaves out the per-kernel profile
# TG_KIT_SANITIZERS (memcheck racecheck) and TG_KIT_SANITIZE_PARTS (codec
# train) narrow the sanitize stage; racecheck on the training run (about
# 100 s, clean in runs 6 and later) only with TG_KIT_RACECHECK_TRAIN=1.
# TG_KIT_STEP_THREADS=both times the TF32 step from one host thread and from
# one per worker (default: one per worker only). TG_KIT_NCU_SKIP (0) and
# TG_KIT_NCU_KERNELS (400) the kernels profiled (skip cuDNN find trials and
# warm-up).
# Default: "machine test bench train sanitize python"; each step has its own
# time limit and the whole run stops starting work after TG_KIT_BUDGET_S
# seconds (default 340), so the default run ends within 6 minutes and its
# results file is complete up to there (run 7, H200: the tests, the Python
# checks and the benchmarks took 336 s with the step timed both ways).
#
# Writes OUTDIR/gpu_kit_results.txt (everything printed, every test's outcome,
# the bench tables) and exits 0 only when every check passed.
#
# TG_KIT_REHEARSE=1 (the ctest on a machine without a GPU): every CUDA test
# must report its no-device skip instead of passing, and the libraries are
# checked to come from the kit, glibc or the CUDA toolkit only.
set -u

if [[ ${1:-} == *.tar.xz ]]; then  # run-kit.sh ARCHIVE OUTDIR [STAGES]
  archive=$1
  shift
  [[ -f $archive ]] || { echo "run-kit.sh: no archive at '$archive'" >&2; exit 2; }
  dest=$(mktemp -d "${TMPDIR:-/tmp}/terngrad-gpu-kit.XXXXXX")
  tar -C "$dest" -xJf "$archive" || { echo "run-kit.sh: cannot unpack '$archive'" >&2; exit 2; }
  exec bash "$dest/terngrad-gpu-kit/run.sh" "$@"
fi

case ${1:-} in
  ""|-h|--help) sed -n '2,33p' "$0"; exit 2 ;;
esac
OUTDIR=$1
STAGES=${2:-machine test bench train sanitize python}
for s in $STAGES; do
  case $s in machine|test|bench|train|sanitize|python) ;;
    profile) ;;
    *) echo "run.sh: unknown stage '$s' (machine test bench train sanitize python profile)" >&2; exit 2 ;;
  esac
done
KIT=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR" || { echo "run.sh: cannot create '$OUTDIR'" >&2; exit 2; }
OUTDIR=$(cd "$OUTDIR" && pwd)
RESULTS=$OUTDIR/gpu_kit_results.txt
REHEARSE=${TG_KIT_REHEARSE:-0}
TESTS=${TG_KIT_TESTS:-quantize train distributed capi}  # the test stage's binaries
BENCH=${TG_KIT_BENCH:-codec step}  # the bench stage's parts: codec (codec_cuda_bench), step (PyTorch reference + gpu_train_step_bench)
BUDGET=${TG_KIT_BUDGET_S:-340}
START=$SECONDS
WORK=$(mktemp -d "${TMPDIR:-/tmp}/terngrad-kit-work.XXXXXX")
status=0
failures=()

exec > >(tee "$RESULTS") 2>&1
tee_pid=$!

section() { echo; echo "=== $* === (t=$((SECONDS - START)) s)"; }
fail() { echo "FAILED: $*"; failures+=("$*"); status=1; }
left() { echo $((BUDGET - (SECONDS - START))); }
# limit N: a step's time limit, N seconds or what is left of the budget.
limit() { local l; l=$(left); ((l < $1)) && echo $((l > 5 ? l : 5)) || echo "$1"; }
out_of_time() { (($(left) <= 5)) && { fail "budget of $BUDGET s spent before: $*"; return 0; }; return 1; }

# ---- libraries: the kit's, then the CUDA toolkit's from the device image ----
kit_lib=$KIT/lib
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$kit_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The toolchain's runtime libraries only where the machine has none.
for f in "$kit_lib"/fallback/*; do
  [[ -e $f ]] || continue
  if ! ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$(basename "$f") "; then
    LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$kit_lib/fallback"
    break
  fi
done
# Folders that may hold cuBLAS, cuDNN, the CUDA runtime: the toolkit's, and
# PyTorch's nvidia-* wheels (the device image has cuDNN only there).
cuda_lib_candidates() {
  local d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
    [[ -d $d ]] && echo "$d"
  done
  python3 - <<'EOF' 2>/dev/null
import glob, os, site
roots = site.getsitepackages() + [site.getusersitepackages()]
for r in roots:
    for d in sorted(set(os.path.dirname(p) for p in glob.glob(os.path.join(r, "nvidia", "**", "lib*.so*"), recursive=True))):
        print(d)
    t = os.path.join(r, "torch", "lib")
    if os.path.isdir(t):
        print(t)
EOF
}
missing_libs() { ldd "$KIT"/bin/* "$kit_lib"/libterngrad.so 2>/dev/null | awk '/=> not found/ {print $1}' | sort -u | grep -v -E '^libcuda\.so' ; }
resolve_cuda_libs() {
  local lib d found
  mapfile -t dirs < <(cuda_lib_candidates)
  for lib in $(missing_libs); do
    found=""
    for d in "${dirs[@]}"; do
      if [[ -e $d/$lib ]]; then found=$d; break; fi
    done
    if [[ -n $found && ":$LD_LIBRARY_PATH:" != *":$found:"* ]]; then
      LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$found"
      echo "  $lib from $found"
    fi
  done
}

# run_step NAME SECONDS CMD...: prints the command, runs it with a time limit,
# records a failure on a non-zero exit.
run_step() {
  local name=$1 secs=$2 rc
  shift 2
  out_of_time "$name" && return 1
  echo "\$ $*"
  timeout -k 5 "$(limit "$secs")" "$@" 2>&1 | { head -c 400000; cat >/dev/null; }
  rc=${PIPESTATUS[0]}
  echo "exit status: $rc$( ((rc == 124 || rc == 137)) && echo ' (time limit)')"
  ((rc == 0)) || fail "$name (exit $rc)"
  return $rc
}

# condensed LOG: a GoogleTest log without the passing tests' lines: each
# failing (or unfinished) test's output, at most 60 lines of it, and the
# summary. Failures that print per element cannot flood the results file.
condensed() {
  awk '
    /^\[ RUN      \]/ { inside = 1; n = 0; delete buf; buf[n++] = $0; next }
    inside && /^\[       OK \]/ { inside = 0; next }
    inside && /^\[  SKIPPED \]/ { inside = 0; print; next }
    inside && /^\[  FAILED  \]/ {
      inside = 0
      for (i = 0; i < n && i < 60; i++) print buf[i]
      if (n > 60) print "  ... (" n - 60 " more lines)"
      print; next
    }
    inside { buf[n++] = $0; next }
    { print }
    END { if (inside) { for (i = 0; i < n && i < 60; i++) print buf[i]; print "  (the test did not finish)" } }
  ' "$1" | grep -v -E '^(/.*: Skipped|no CUDA device: .*)$' | head -c 300000
}

# gtest NAME SECONDS ALLOWED_SKIPS BINARY [ARGS]: a GoogleTest binary with its
# outcome per test. On a GPU a skipped test is a failure unless its name
# matches ALLOWED_SKIPS; in a rehearsal every test must skip, saying why.
gtest() {
  local name=$1 secs=$2 allowed=$3 log rc ran skipped passed bad
  shift 3
  out_of_time "$name" && return
  log=$WORK/$name.log
  echo "\$ $*"
  timeout -k 5 "$(limit "$secs")" "$@" >"$log" 2>&1
  rc=$?
  condensed "$log"
  # The whole log of a failing binary comes back beside the results (capped:
  # the device tool returns files of at most 16 MiB).
  ((rc == 0)) || head -c 4000000 "$log" >"$OUTDIR/$name.log"
  echo "exit status: $rc$( ((rc == 124 || rc == 137)) && echo ' (time limit)')"
  ((rc == 0)) || fail "$name (exit $rc)"
  ran=$(grep -c -E '^\[ RUN      \]' "$log")
  passed=$(grep -c -E '^\[       OK \]' "$log")
  skipped=$(grep -E '^\[  SKIPPED \] [A-Za-z0-9_/.]+ \(' "$log" | sed -E 's/^\[  SKIPPED \] ([^ ]+).*/\1/')
  echo "$name: $ran run, $passed passed, $(grep -c . <<<"$skipped") skipped"
  if ((REHEARSE)); then
    # Host-side checks in these binaries (flag parsing, refusals) pass; every
    # test that needs the device must skip, saying that there is none.
    local reasons
    reasons=$(awk '/: Skipped$/ {getline; print}' "$log")
    [[ -n $reasons ]] || fail "$name: rehearsal without a GPU, but no test skipped"
    bad=$(grep -v -i -E 'no CUDA device|needs 2 CUDA devices' <<<"$reasons" | sort -u)
    [[ -z $bad ]] || fail "$name: skips that do not say there is no device: $(tr '\n' ';' <<<"$bad")"
  else
    ((ran > 0)) || fail "$name: no test ran"
    bad=$(grep . <<<"$skipped" | grep -v -E "$allowed")
    [[ -z $bad ]] || fail "$name: skipped on a GPU machine: $(tr '\n' ' ' <<<"$bad")"
  fi
}

stage() { [[ " $STAGES " == *" $1 "* ]]; }
{
  section "kit"
  head -8 "$KIT/MANIFEST"
  echo "stages: $STAGES; budget $BUDGET s; rehearsal: $REHEARSE"

  section "machine"
  date -u
  uname -r
  grep -m1 'model name' /proc/cpuinfo
  echo "cores: $(nproc)"
  if command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    nvidia-smi | grep -E 'CUDA Version' || true
  else
    echo "nvidia-smi: no GPU visible"
    ((REHEARSE)) || fail "no GPU visible (nvidia-smi), and this is not a rehearsal"
  fi
  command -v nvcc >/dev/null && nvcc --version | tail -1
  command -v compute-sanitizer >/dev/null && compute-sanitizer --version | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version())' 2>/dev/null || echo "python3: no torch"

  section "libraries"
  echo "CUDA toolkit libraries found in:"
  resolve_cuda_libs
  export LD_LIBRARY_PATH
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "the CUDA libraries the programs load:"
  ldd "$KIT/bin/train_cuda_tests" "$kit_lib/libterngrad.so" 2>/dev/null | grep -E 'lib(cublas|cublasLt|cudnn|cudart)' | sort -u | sed 's/^[[:space:]]*/  /'
  left_missing=$(missing_libs)
  if [[ -n $left_missing ]]; then
    fail "libraries not found: $(tr '\n' ' ' <<<"$left_missing")"
  else
    echo "every library resolves (the CUDA driver aside: $(ldd "$KIT/bin/tg-train" | grep -c 'libcuda.so') link(s) to libcuda)"
  fi
  if ((REHEARSE)); then
    # Here the system has our Debian packages too: check that nothing but
    # glibc, the CUDA toolkit and the kit itself resolves (the device has
    # only those).
    outside=$(ldd "$KIT"/bin/* "$kit_lib"/libterngrad.so 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
      grep -v -F "$kit_lib/" |
      grep -v -E '^(libc|libm|libdl|libpthread|librt|libresolv)\.so|^ld-linux|^linux-vdso|^(libcuda|libnvidia-|libcublas|libcudnn|libcudart|libnccl|libnvrtc|libnvJitLink|libcufft|libcurand|libcusolver|libcusparse)[^ ]*\.so' |
      grep -v -E '^(libstdc\+\+|libgcc_s|libgomp)\.so')
    [[ -z $outside ]] || fail "libraries resolved outside the kit that the device lacks: $(tr '\n' ';' <<<"$outside")"
  fi

  export TG_TRAIN_BIN=$KIT/bin/tg-train TG_CLUSTER_BIN=$KIT/bin/tg-cluster
  export TG_FASHION_MNIST_DIR=$KIT/data/fashion-mnist
  cd "$WORK" || exit 1

  if stage test; then
    want() { [[ " $TESTS " == *" $1 "* ]]; }
    want quantize && section "CUDA codec: CPU/GPU bit-exactness"
    want quantize && gtest quantize_cuda_tests 150 '^$' "$KIT/bin/quantize_cuda_tests"
    want train && section "GPU layers vs CPU, codec in the loop, GPU vs CPU loss curves, checkpoints, EMA (two-GPU tests skip on one GPU)"
    want train && gtest train_cuda_tests 240 'TwoGpus' "$KIT/bin/train_cuda_tests"
    want distributed && section "distributed GPU replicas: GPU cluster vs in-process GPU trainer, resume, async"
    want distributed && gtest distributed_gpu_tests 180 '^$' "$KIT/bin/distributed_tests" --gtest_filter='*Gpu*'
    want capi && section "C API: device pointers vs host (exit 77: no device)"
    want capi && ! out_of_time capi_cuda_test && {
      echo "\$ $KIT/bin/capi_cuda_test"
      timeout -k 5 "$(limit 60)" "$KIT/bin/capi_cuda_test" 2>&1 | { head -c 200000; cat >/dev/null; }
      rc=${PIPESTATUS[0]}
      echo "exit status: $rc"
      if ((REHEARSE)); then ((rc == 77)) || fail "capi_cuda_test: expected the no-device skip (77), got $rc"
      else ((rc == 0)) || fail "capi_cuda_test (exit $rc)"; fi
    }
  fi

  if stage python; then
    section "Python package and DDP hook under this machine's PyTorch"
    for t in test_ddp_cuda.py test_codec.py test_ddp_hook.py; do
      out_of_time "python $t" && break
      echo "\$ python3 tests/python/$t"
      TERNGRAD_LIBRARY=$kit_lib/libterngrad.so \
        PYTHONPATH=$KIT/python:$KIT/tests/python OMP_NUM_THREADS=1 \
        timeout -k 5 "$(limit 120)" python3 "$KIT/tests/python/$t"
      rc=$?
      echo "exit status: $rc"
      ((rc == 0 || (rc == 77 && REHEARSE))) || fail "python $t (exit $rc)"
    done
  fi

  if stage bench && ((!REHEARSE)) && [[ " $BENCH " == *" codec "* ]]; then
    section "benchmark: CUDA codec vs device-to-device copy (64M and 256M elements)"
    run_step codec_cuda_bench 120 "$KIT/bin/codec_cuda_bench" --sizes=64M,256M --benchmark_repetitions=3 \
      --benchmark_min_time=0.1
  fi
  if stage bench && ((!REHEARSE)) && [[ " $BENCH " == *" step "* ]]; then
    section "PyTorch reference on this GPU: TernGrad encode, eager train steps"
    ref=$OUTDIR/pytorch_gpu_reference.jsonl
    out_of_time pytorch_reference || {
      echo "\$ python3 bench/pytorch_gpu_reference.py --workers=4 --batch=64"
      # The machine's own library path: PyTorch needs nothing of the kit.
      LD_LIBRARY_PATH=$ORIG_LD_LIBRARY_PATH timeout -k 5 "$(limit 150)" \
        python3 "$KIT/bench/pytorch_gpu_reference.py" --workers=4 --batch=64 >"$ref"
      rc=$?
      cat "$ref"
      echo "exit status: $rc"
      ((rc == 0)) || fail "pytorch_gpu_reference.py (exit $rc)"
    }
    section "benchmark: GPU train step, 4 virtual workers x batch 64, against PyTorch eager"
    run_step gpu_train_step_bench 120 "$KIT/bin/gpu_train_step_bench" --workers=4 --batch=64 --steps=50 --reference="$ref"
    section "benchmark: like for like with PyTorch's default (TG_GPU_TF32=1: TF32 convolutions and GEMMs), algorithms timed"
    run_step gpu_train_step_bench_tf32 180 env TG_GPU_TF32=1 TG_CUDNN_ALGO=find "$KIT/bin/gpu_train_step_bench" \
      --workers=4 --batch=64 --steps=30 --host_threads="${TG_KIT_STEP_THREADS:-1}" --reference="$ref"
  fi

  if stage train && ((!REHEARSE)); then
    section "tg-compare --device=gpu: the main job (LeNet, Fashion-MNIST, 4 workers, 6000 steps, fp32 and TernGrad)"
    echo "CPU run of the same job (README, 2026-11-24, 2 cores): fp32 91.69%, TernGrad 91.05%"
    run_step tg_compare_gpu 200 "$KIT/bin/tg-compare" --device=gpu --data_dir="$TG_FASHION_MNIST_DIR" \
      --train_dir="$WORK/compare"
  fi

  if stage sanitize && ((!REHEARSE)); then
    section "compute-sanitizer: memcheck and racecheck (exit 99: the sanitizer found errors)"
    cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null | head -1)
    # One test per kernel family: stats, encode (stochastic, nearest, shared
    # scale, device scale), decode/accumulate, the ps sum, the packings.
    codec_filter='CudaCodec.EncodeMatchesCpuBytesAndStats:CudaCodec.NearestRoundingMatchesCpuBytes:CudaCodec.EncodeSharedAsyncMatchesCpuSharedEncode:CudaCodec.LocalScaleAsyncMatchesCpuLocalScale:CudaCodec.DecodeAccumulateAndCountsMatchCpu:CudaCodec.NonFiniteInputReportsFirstIndexAndWritesNothing:CudaCodecDecodeErrors.*:CudaSumDecode.*:CudaPacking.EncodeTakesTheEntropyPathAndTheFallback:CudaPackingDecode.GpuRoundTrip'
    if [[ -z $cs ]]; then
      fail "compute-sanitizer not found"
    else
      for tool in ${TG_KIT_SANITIZERS:-memcheck racecheck}; do
        [[ " ${TG_KIT_SANITIZE_PARTS:-codec train} " == *" codec "* ]] &&
          run_step "sanitizer_${tool}_codec" 75 "$cs" --tool "$tool" --error-exitcode 99 --print-limit 20 \
            "$KIT/bin/quantize_cuda_tests" --gtest_brief=1 --gtest_filter="$codec_filter"
        [[ " ${TG_KIT_SANITIZE_PARTS:-codec train} " == *" train "* ]] || continue
        [[ $tool == racecheck && ${TG_KIT_RACECHECK_TRAIN:-0} != 1 ]] && continue
        # racecheck runs the step about 50x slower (16 s a step on an H100): 2
        # steps, and an evaluation of 512 test images (all 10,000 outran 100 s).
        steps=10 step_limit=100; [[ $tool == racecheck ]] && steps=2 step_limit=150
        run_step "sanitizer_${tool}_train" $step_limit "$cs" --tool "$tool" --error-exitcode 99 --print-limit 20 \
          "$KIT/bin/tg-train" --net=lenet --device=gpu --num_nodes=4 --batch_size=16 --max_steps=$steps --grad_bits=2 \
          --data_dir="$TG_FASHION_MNIST_DIR" --eval_interval_steps=0 --max_eval_examples=512 --train_dir="$WORK/sanitize-$tool"
      done
    fi
  fi

  if stage profile && ((!REHEARSE)); then
    section "profile: Nsight Compute on the 64M encode and the AlexNet step"
    ncu_bin=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    if [[ -z $ncu_bin ]]; then
      fail "ncu not found"
    else
      # Is the GPU idle between kernels? A timeline's totals (Nsight Systems, where the image has it).
      nsys_bin=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
      if [[ -n $nsys_bin ]]; then
        run_step nsys_alexnet_step 90 "$nsys_bin" profile --stats=true --force-overwrite=true -o "$WORK/alexnet" \
          "$KIT/bin/gpu_train_step_bench" --nets=alexnet --workers=4 --batch=64 --steps=5
      else
        echo "nsys not found: no timeline"
      fi
      # Where the AlexNet step's time goes: every kernel's duration (one
      # metric, one replay pass each), summed per kernel name.
      [[ ${TG_KIT_NCU:-1} == 1 ]] && run_step ncu_alexnet_step 150 "$ncu_bin" --metrics gpu__time_duration.sum --launch-skip "${TG_KIT_NCU_SKIP:-0}" -c "${TG_KIT_NCU_KERNELS:-400}" --csv \
        --print-summary per-kernel "$KIT/bin/gpu_train_step_bench" --nets=alexnet --workers=4 --batch=64 --steps=1
      [[ ${TG_KIT_PROFILE_ENCODE:-0} == 1 ]] &&
        run_step ncu_encode 120 "$ncu_bin" --section SpeedOfLight --section MemoryWorkloadAnalysis -c 8 \
          "$KIT/bin/codec_cuda_bench" --sizes=64M --benchmark_filter='^(stats|encode)/' --benchmark_repetitions=1 \
          --benchmark_min_time=0.01
    fi
  fi

  section "summary"
  echo "stages: $STAGES; $((SECONDS - START)) s"
  if ((status == 0)); then echo "checks: PASSED"; else
    echo "checks: FAILED (${#failures[@]})"
    printf '  - %s\n' "${failures[@]}"
  fi
}
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
rm -rf "$WORK"
exit $status
