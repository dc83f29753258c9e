// Private to bench/: the command line shared by the codec benchmarks.
// --quick (or TG_BENCH_QUICK=1) selects a short smoke run; unless given
// explicitly, repetitions and minimum time default to values that suit a
// shared 2-core machine (several short repetitions, so a burst of someone
// else's build spoils a few of them and not the median).
#pragma once

#include <cstdlib>
#include <cstring>
#include <vector>

namespace terngrad::bench {

struct BenchArgs {
  bool quick = false;
  std::vector<char*> argv;  // for benchmark::Initialize, null-terminated
  int argc = 0;
};

inline bool has_flag(const std::vector<char*>& args, const char* prefix) {
  for (char* a : args)
    if (a != nullptr && std::strncmp(a, prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

inline BenchArgs parse_bench_args(int argc, char** argv) {
  BenchArgs b;
  if (const char* e = std::getenv("TG_BENCH_QUICK")) b.quick = *e != '\0' && std::strcmp(e, "0") != 0;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strcmp(argv[i], "--quick") == 0)
      b.quick = true;
    else
      b.argv.push_back(argv[i]);
  }
  static char reps_full[] = "--benchmark_repetitions=5";
  static char reps_quick[] = "--benchmark_repetitions=1";
  static char min_time_full[] = "--benchmark_min_time=0.2";
  static char min_time_quick[] = "--benchmark_min_time=0.05";
  if (!has_flag(b.argv, "--benchmark_repetitions")) b.argv.push_back(b.quick ? reps_quick : reps_full);
  if (!has_flag(b.argv, "--benchmark_min_time")) b.argv.push_back(b.quick ? min_time_quick : min_time_full);
  b.argc = static_cast<int>(b.argv.size());
  b.argv.push_back(nullptr);
  return b;
}

}  // namespace terngrad::bench
