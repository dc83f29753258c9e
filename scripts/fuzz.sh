#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang, ASan + UBSan) in their own build
# directory and runs each for a time or a number of executions, one after the
# other. Prints each target's executions and the total; exits 1 when any
# target found a crash, a hang, a sanitizer report or an allocation over the
# limit (the input is kept under <build>/fuzz/artifacts/<target>/), 2 on a
# usage or build error.
#
#   scripts/fuzz.sh --seconds 20             # each target for 20 s (CI's brief run)
#   scripts/fuzz.sh --runs 1000000           # each target for 1e6 executions
#   scripts/fuzz.sh --seconds 5 --targets "json npy"
#   scripts/fuzz.sh --list                   # the targets, one per line
#
# Options: --build-dir DIR (default build-fuzz), --targets "a b" (default:
# all in fuzz/CMakeLists.txt), --jobs N (build parallelism, default 2),
# --no-build (run what is built), --fresh-corpus (start from the seeds only),
# --fork N (libFuzzer's fork mode: N child processes, each restarted after a
# job, so memory kept per execution does not pile up to -rss_limit_mb: one
# ps_requests process under ASan and libFuzzer grows about 5 MB per 1000
# executions, where the plain build stays flat over 10,000 scripts).
# Extra libFuzzer flags: after "--", e.g. -- -max_len=8192.
# The corpus grows between runs in <build>/fuzz/corpus/<target>; the seeds
# (tg-fuzz-seeds, from the library's writers) are regenerated on every run.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)

seconds="" runs="" build_dir="build-fuzz" targets="" jobs=2 do_build=1 fresh=0 list=0 fork=0
extra=()
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2; }
while (($#)); do
  case "$1" in
    --seconds) seconds=${2:?--seconds needs a value}; shift 2 ;;
    --runs) runs=${2:?--runs needs a value}; shift 2 ;;
    --build-dir) build_dir=${2:?--build-dir needs a value}; shift 2 ;;
    --targets) targets=${2:?--targets needs a value}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a value}; shift 2 ;;
    --no-build) do_build=0; shift ;;
    --fork) fork=${2:?--fork needs a value}; shift 2 ;;
    --fresh-corpus) fresh=1; shift ;;
    --list) list=1; shift ;;
    -h|--help) usage ;;
    --) shift; extra=("$@"); break ;;
    *) echo "fuzz.sh: unknown option '$1'" >&2; usage ;;
  esac
done
if ((list == 0)); then
  if [[ -n "$seconds" && -n "$runs" ]] || [[ -z "$seconds" && -z "$runs" ]]; then
    echo "fuzz.sh: give exactly one of --seconds S or --runs N" >&2; exit 2
  fi
  [[ "${seconds}${runs}" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --seconds/--runs take a whole number" >&2; exit 2; }
fi
[[ "$build_dir" = /* ]] || build_dir="$src/$build_dir"

if ! command -v clang++ > /dev/null; then
  echo "fuzz.sh: clang++ not found (Debian: apt-get install clang libclang-rt-14-dev libomp-14-dev;" \
       "scripts/install_deps.sh installs them)" >&2
  exit 2
fi

if ((do_build)); then
  if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
    echo "fuzz.sh: configuring $build_dir (clang, TG_FUZZ=ON)"
    CC=clang CXX=clang++ cmake -S "$src" -B "$build_dir" -DTG_FUZZ=ON -DTG_CUDA=OFF -DTG_NATIVE=OFF \
      > "$build_dir.configure.log" 2>&1 ||
      { cat "$build_dir.configure.log" >&2; echo "fuzz.sh: configure failed" >&2; exit 2; }
    rm -f "$build_dir.configure.log"
  fi
fi
[[ -f "$build_dir/fuzz/targets.txt" ]] || { echo "fuzz.sh: $build_dir is not a TG_FUZZ build" >&2; exit 2; }
all_targets=$(cat "$build_dir/fuzz/targets.txt")
if ((list)); then echo "$all_targets"; exit 0; fi
if [[ -z "$targets" ]]; then targets=$all_targets; fi
for t in $targets; do
  grep -qx "$t" <<< "$all_targets" || { echo "fuzz.sh: no target '$t' (targets: $(echo $all_targets))" >&2; exit 2; }
done

if ((do_build)); then
  build_targets=(tg-fuzz-seeds)
  for t in $targets; do build_targets+=("fuzz_$t"); done
  echo "fuzz.sh: building ${build_targets[*]} in $build_dir (-j$jobs)"
  start=$(date +%s)
  cmake --build "$build_dir" -j"$jobs" --target "${build_targets[@]}" > "$build_dir/fuzz-build.log" 2>&1 ||
    { tail -40 "$build_dir/fuzz-build.log" >&2; echo "fuzz.sh: build failed (log: $build_dir/fuzz-build.log)" >&2; exit 2; }
  echo "fuzz.sh: built in $(( $(date +%s) - start )) s"
fi

work="$build_dir/fuzz"
rm -rf "$work/seeds"
"$work/tg-fuzz-seeds" "$work/seeds" "$src" || { echo "fuzz.sh: seed generation failed" >&2; exit 2; }

# UBSan reports abort (the build has -fno-sanitize-recover too), with stacks.
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
limit=()
if [[ -n "$seconds" ]]; then limit=(-max_total_time="$seconds"); else limit=(-runs="$runs"); fi
[[ "$fork" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --fork takes a whole number" >&2; exit 2; }
if ((fork > 0)); then limit+=(-fork="$fork"); fi

total=0 failed=()
summary=""
for t in $targets; do
  corpus="$work/corpus/$t" artifacts="$work/artifacts/$t" log="$work/logs/$t.log"
  ((fresh)) && rm -rf "$corpus"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  mkdir -p "$work/seeds/$t"
  echo "fuzz.sh: $t: running (${seconds:+$seconds s}${runs:+$runs runs}) ..."
  # -timeout: one input taking longer is a hang; -rss_limit_mb also sets the
  # single-allocation limit; -print_final_stats gives the execution count.
  set +e
  "$work/fuzz_$t" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${extra[@]}" "$corpus" "$work/seeds/$t" > "$log" 2>&1
  rc=$?
  set -e
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  # Fork mode prints no final stats; its last lines count every child's runs.
  [[ -n "$execs" ]] || execs=$(sed -n 's/^INFO: fuzzed for \([0-9]*\) iterations.*/\1/p' "$log" | tail -1)
  [[ -n "$execs" ]] || execs=$(sed -n 's/^#\([0-9]*\): cov:.*/\1/p' "$log" | tail -1)
  execs=${execs:-0}
  total=$((total + execs))
  if ((rc != 0)); then
    failed+=("$t")
    echo "fuzz.sh: $t: FAILED (exit $rc) after $execs executions; log $log, inputs in $artifacts/:" >&2
    grep -E "ERROR|SUMMARY|runtime error|fuzz: |Test unit written" "$log" | head -12 >&2 || true
  else
    echo "fuzz.sh: $t: $execs executions, no crash"
  fi
  summary+=$(printf '%-20s %12s %s' "$t" "$execs" "$([[ $rc == 0 ]] && echo ok || echo CRASH)")$'\n'
done

echo
echo "fuzz.sh: executions per target"
printf '%s' "$summary"
printf '%-20s %12s\n' "total" "$total"
if ((${#failed[@]})); then
  echo "fuzz.sh: crashes in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: 0 crashes"
