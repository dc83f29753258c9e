// Private to bench/: what the CPU and CUDA codec benchmarks share — their
// input model and their command line.
//
// Input: gradient-like values, mostly N(mean, sigma) with a small bias (real
// gradients rarely average exactly zero), plus rare Student-t(3) outliers an
// order of magnitude out, so max|g| >> 2.5 sigma and clipping really happens.
//
// Command line:
// --quick (or TG_BENCH_QUICK=1) selects a short smoke run; unless given
// explicitly, repetitions and minimum time default to values that suit a
// shared 2-core machine (several short repetitions, so a burst of someone
// else's build spoils a few of them and not the median).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "terngrad/quantize/codec.h"

namespace terngrad::bench {

inline constexpr float kClip = 2.5f;
inline constexpr uint64_t kInputSeed = 20261123;
inline constexpr uint64_t kCodecSeed = 0x7E46'0001ull;
inline constexpr float kGradMean = 2e-6f;
inline constexpr float kGradSigma = 1e-3f;
inline constexpr double kOutlierRate = 1.0 / 2000.0;
inline constexpr float kOutlierScale = 8.0f * kGradSigma;

struct BenchArgs {
  bool quick = false;
  std::vector<size_t> sizes;  // --sizes=64M,256M (K and M suffixes); empty: the program's own
  std::vector<char*> argv;  // for benchmark::Initialize, null-terminated
  int argc = 0;
};

inline std::string size_label(size_t n) {
  if (n >= (size_t{1} << 20) && n % (size_t{1} << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= (size_t{1} << 10) && n % (size_t{1} << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

// Deterministic for a given seed whatever the thread count: each 64K block has
// its own generator seeded from the block index.
inline void fill_gradient(float* x, size_t n, uint64_t seed) {
  constexpr size_t kBlock = size_t{1} << 16;
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(dynamic)
  for (long b = 0; b < blocks; ++b) {
    std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * static_cast<uint64_t>(b + 1)));
    std::normal_distribution<float> normal(kGradMean, kGradSigma);
    std::student_t_distribution<float> tail(3.0f);
    std::uniform_real_distribution<double> coin(0.0, 1.0);
    const size_t begin = static_cast<size_t>(b) * kBlock;
    const size_t end = std::min(n, begin + kBlock);
    for (size_t i = begin; i < end; ++i)
      x[i] = coin(rng) < kOutlierRate ? kOutlierScale * tail(rng) : normal(rng);
  }
}

inline terngrad::quantize::EncodeParams bench_params() {
  terngrad::quantize::EncodeParams p;
  p.clip_factor = kClip;
  p.seed = kCodecSeed;
  p.step = 7;
  p.tensor_id = 3;
  return p;
}

inline bool has_flag(const std::vector<char*>& args, const char* prefix) {
  for (char* a : args)
    if (a != nullptr && std::strncmp(a, prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

// "64M,256M,4096" -> element counts; a malformed list ends the program with
// a message naming the token (exit 2).
inline std::vector<size_t> parse_sizes(const char* list) {
  std::vector<size_t> out;
  const std::string all(list);
  for (size_t at = 0; at <= all.size();) {
    const size_t comma = std::min(all.find(',', at), all.size());
    const std::string tok = all.substr(at, comma - at);
    at = comma + 1;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(tok.c_str(), &end, 10);
    size_t mult = 1;
    if (end && *end == 'K') mult = size_t{1} << 10, ++end;
    else if (end && *end == 'M') mult = size_t{1} << 20, ++end;
    if (tok.empty() || end == tok.c_str() || *end != '\0' || v == 0 || v > (size_t{1} << 32) / mult) {
      std::fprintf(stderr, "--sizes: '%s' is not an element count (e.g. 4096, 64K, 256M; at most 4096M)\n", tok.c_str());
      std::exit(2);
    }
    out.push_back(static_cast<size_t>(v) * mult);
  }
  return out;
}

inline BenchArgs parse_bench_args(int argc, char** argv) {
  BenchArgs b;
  if (const char* e = std::getenv("TG_BENCH_QUICK")) b.quick = *e != '\0' && std::strcmp(e, "0") != 0;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && std::strcmp(argv[i], "--quick") == 0)
      b.quick = true;
    else if (i > 0 && std::strncmp(argv[i], "--sizes=", 8) == 0)
      b.sizes = parse_sizes(argv[i] + 8);
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
