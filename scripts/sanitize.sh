#!/usr/bin/env bash
# Builds the project with AddressSanitizer and UndefinedBehaviorSanitizer
# (GCC, -fno-sanitize-recover=undefined: a UB report fails the test) in its
# own build directory and runs ctest there.
#
#   scripts/sanitize.sh                          # everything that can run under ASan
#   scripts/sanitize.sh -R 'Codec|Checkpoint'    # a ctest -R filter
#   scripts/sanitize.sh --unit                   # the codec, data, comm and JSON unit tests only
#   scripts/sanitize.sh --thread                 # ThreadSanitizer: the ps, worker client and trainer suites
#
# --thread builds build-tsan with -fsanitize=thread and runs the suites of
# comm/service (the ps and the worker client, in-process, with their threads:
# long polls, heartbeats, watchdogs, pipelined pushes and pulls) and of
# train/trainer. gRPC and protobuf are Debian's, not instrumented: TSan sees
# our accesses only, so a report names a race in our code. OpenMP runs one
# thread (OMP_NUM_THREADS=1): libgomp is not instrumented either, and TSan
# would report its workers' writes as races.
#
# Options: --build-dir DIR (default build-asan), --jobs N (build and ctest
# parallelism, default 2), --unit (build and run only the unit suites listed
# below: quick enough for CI), -R REGEX (passed to ctest), --no-build.
#
# Tests left out, and why (ctest -E below):
#   Python.*                     the interpreter (not instrumented) loads the ASan-built
#                                libterngrad.so: ASan must be first in the process, which
#                                needs LD_PRELOAD=libasan.so into python and torch; the
#                                C API itself runs under ASan in CApi.HostCodecs.
#   CApi.InstalledConsumer,      build other programs against the installed, instrumented
#   Package.FindPackageConsumer  static libraries without -fsanitize: they cannot link
#                                (undefined __asan_* / __ubsan_*); nothing of ours runs.
#   CApi.ExportsOnlyTheCApi      checks libterngrad.so's dynamic symbols, which ASan adds to.
#   Arm64.QuantizeTestsUnderQemu a separate cross build (scripts/arm64_check.sh), not this one.
#   Python-driven tools          Experiments.ReportTables, .PerfModelFit, .ResultsArchive,
#                                .TensorBoardReadsEvents and ReferenceEncoder.MatchesTgCodec run
#                                Python scripts; those that run our binaries still do so here.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

build_dir="" jobs=2 unit=0 thread=0 filter="" do_build=1
while (($#)); do
  case "$1" in
    --build-dir) build_dir=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --unit) unit=1; shift ;;
    --thread) thread=1; unit=1; shift ;;
    -R) filter=${2:?-R needs a regex}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "sanitize.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$build_dir" ]] || { ((thread)) && build_dir="build-tsan" || build_dir="build-asan"; }
[[ "$build_dir" = /* ]] || build_dir="$src/$build_dir"

# The unit suites: the codecs, the payload format, the data readers, the
# cluster description, JSON and the ps's step logic.
unit_targets=(quantize_tests comm_codec_tests train_data_tests base_json_tests comm_service_tests ps_steps_tests)
excluded='^(Python\.|CApi\.InstalledConsumer|CApi\.ExportsOnlyTheCApi|Package\.FindPackageConsumer|Arm64\.)'

flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
link_flags="-fsanitize=address,undefined"
if ((thread)); then
  flags="-fsanitize=thread -fno-omit-frame-pointer -O1 -g"
  link_flags="-fsanitize=thread"
  unit_targets=(comm_service_tests ps_liveness_tests ps_steps_tests train_trainer_tests)
fi
if ((do_build)); then
  if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
    echo "sanitize.sh: configuring $build_dir ($flags)"
    # No CUDA (nvcc and ASan's host flags do not mix) and no benches.
    cmake -S "$src" -B "$build_dir" -DTG_CUDA=OFF -DTG_BUILD_BENCH=OFF \
      -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
      -DCMAKE_EXE_LINKER_FLAGS="$link_flags" \
      -DCMAKE_SHARED_LINKER_FLAGS="$link_flags" > "$build_dir.configure.log" 2>&1 ||
      { cat "$build_dir.configure.log" >&2; echo "sanitize.sh: configure failed" >&2; exit 2; }
    rm -f "$build_dir.configure.log"
  fi
  start=$(date +%s)
  if ((unit)); then
    echo "sanitize.sh: building ${unit_targets[*]} (-j$jobs)"
    cmake --build "$build_dir" -j"$jobs" --target "${unit_targets[@]}"
  else
    echo "sanitize.sh: building everything (-j$jobs)"
    cmake --build "$build_dir" -j"$jobs"
  fi
  echo "sanitize.sh: built in $(( $(date +%s) - start )) s"
fi

# Stop at the first report with a stack; leaks count (LSan is part of ASan).
export ASAN_OPTIONS="abort_on_error=0:halt_on_error=1:detect_leaks=1:strict_string_checks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$src/scripts/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
# Debian's libgomp is not instrumented: TSan cannot see its barriers and
# reports every OpenMP worker's write as a race with the code after the
# parallel region. One OpenMP thread: the std::threads are what is checked.
((thread)) && export OMP_NUM_THREADS=1
args=(--test-dir "$build_dir" --output-on-failure -j"$jobs" -E "$excluded")
if [[ -n "$filter" ]]; then
  args+=(-R "$filter")
elif ((unit)); then
  # The suites those executables hold (their gtest names), so that ctest runs
  # them and none of the tests whose programs this mode did not build.
  suites=()
  for t in "${unit_targets[@]}"; do
    exe=$(find "$build_dir/tests" -type f -name "$t" -perm -u+x | head -1)
    [[ -n "$exe" ]] || { echo "sanitize.sh: $t was not built" >&2; exit 2; }
    while read -r s; do suites+=("${s%.}"); done < <(ASAN_OPTIONS=detect_leaks=0 "$exe" --gtest_list_tests | grep -E '^[A-Za-z0-9_/]+\.$')
  done
  args+=(-R "^($(IFS='|'; echo "${suites[*]}"))\\.")
fi
echo "sanitize.sh: ctest ${args[*]}"
ctest "${args[@]}"
