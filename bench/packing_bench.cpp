// Payloads below two bits (issue: base-3 and entropy-coded ternary): encode
// and decode of each packing against the 2-bit payload measured in the same
// run, per core (one OpenMP thread) and on all threads, on a Gaussian
// gradient (the 2.5-sigma clip keeps ~32% of the elements) and a heavy-tailed
// one. Encode includes the statistics pass and the ternarization (what a
// trainer calls); the bits per element of each payload are printed beside.
//
//   ./bench/packing_bench                  (16M elements, 1 and all threads)
//   ./bench/packing_bench --benchmark_filter=... (Google Benchmark flags)
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;

namespace {

constexpr size_t kN = size_t{1} << 24;

struct Data {
  std::vector<float> gauss, heavy;
  Data() : gauss(kN), heavy(kN) {
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 1e-3f);
    std::student_t_distribution<float> t(2.5f);
    for (size_t i = 0; i < kN; ++i) {
      gauss[i] = g(rng);
      heavy[i] = 1e-3f * t(rng);
    }
  }
};
const Data& data() {
  static const Data d;
  return d;
}

tq::EncodeParams params(tq::Packing p) {
  tq::EncodeParams e;
  e.seed = 42;
  e.step = 3;
  e.tensor_id = 1;
  e.packing = p;
  return e;
}

const std::vector<float>& input(bool heavy) { return heavy ? data().heavy : data().gauss; }

void bm_encode(benchmark::State& st, tq::Packing p, bool heavy, int threads) {
  const auto& x = input(heavy);
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size(), p));
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  size_t bytes = 0;
  for (auto _ : st) {
    bytes = tq::encode(x, params(p), out);
    benchmark::DoNotOptimize(bytes);
  }
  omp_set_num_threads(before);
  st.counters["Gelem_s"] = benchmark::Counter(static_cast<double>(x.size()) * st.iterations() / 1e9,
                                              benchmark::Counter::kIsRate);
  st.counters["Gelem_s_per_core"] = benchmark::Counter(
      static_cast<double>(x.size()) * st.iterations() / 1e9 / threads, benchmark::Counter::kIsRate);
  st.counters["bits_per_elem"] = 8.0 * static_cast<double>(bytes) / static_cast<double>(x.size());
}

void bm_decode(benchmark::State& st, tq::Packing p, bool heavy, int threads) {
  const auto& x = input(heavy);
  std::vector<uint8_t> payload(tq::max_encoded_bytes(x.size(), p));
  payload.resize(tq::encode(x, params(p), payload));
  std::vector<float> out(x.size());
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  for (auto _ : st) {
    tq::decode(payload, out);
    benchmark::ClobberMemory();
  }
  omp_set_num_threads(before);
  st.counters["Gelem_s_per_core"] = benchmark::Counter(
      static_cast<double>(x.size()) * st.iterations() / 1e9 / threads, benchmark::Counter::kIsRate);
}

// The ps's sum of R = 4 shared-scale payloads, bit-packed against entropy-coded.
void bm_sum(benchmark::State& st, tq::SumPacking sp, bool heavy, int threads) {
  const auto& x = input(heavy);
  const uint32_t r = 4;
  std::vector<std::vector<uint8_t>> payloads(r);
  tq::EncodeParams e = params(tq::Packing::k2Bit);
  float shared = 0.0f;
  for (uint32_t w = 0; w < r; ++w) shared = std::max(shared, tq::local_scale(tq::compute_stats(x), 2.5f));
  e.shared_scale = shared;
  for (uint32_t w = 0; w < r; ++w) {
    e.seed = 100 + w;
    payloads[w].resize(tq::max_encoded_bytes(x.size()));
    tq::encode(x, e, payloads[w]);
  }
  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  std::vector<uint8_t> out(tq::sum_payload_bytes(x.size(), r));
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  size_t bytes = 0;
  for (auto _ : st) {
    bytes = tq::sum_payloads(views, out, sp);
    benchmark::DoNotOptimize(bytes);
  }
  omp_set_num_threads(before);
  st.counters["Gelem_s_per_core"] = benchmark::Counter(
      static_cast<double>(x.size()) * st.iterations() / 1e9 / threads, benchmark::Counter::kIsRate);
  st.counters["bits_per_elem"] = 8.0 * static_cast<double>(bytes) / static_cast<double>(x.size());
}

}  // namespace

int main(int argc, char** argv) {
  const int all = omp_get_max_threads();
  std::printf("SIMD level in use: %s; OpenMP threads: %d; %zu elements (Gaussian; heavy = Student-t 2.5)\n",
              tq::simd_level_name(tq::cpu_simd_level()), all, kN);
  for (int threads : {1, all}) {
    for (bool heavy : {false, true}) {
      const std::string tail = std::string(heavy ? "/heavy" : "/gauss") + "/threads:" + std::to_string(threads);
      for (tq::Packing p : {tq::Packing::k2Bit, tq::Packing::kBase3, tq::Packing::kEntropy}) {
        benchmark::RegisterBenchmark(("encode/" + std::string(tq::packing_name(p)) + tail).c_str(), bm_encode, p,
                                     heavy, threads)
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.5);
        benchmark::RegisterBenchmark(("decode/" + std::string(tq::packing_name(p)) + tail).c_str(), bm_decode, p,
                                     heavy, threads)
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.5);
      }
      for (tq::SumPacking sp : {tq::SumPacking::kBitPacked, tq::SumPacking::kEntropy})
        benchmark::RegisterBenchmark(
            (std::string("sum4/") + (sp == tq::SumPacking::kEntropy ? "entropy" : "bitpacked") + tail).c_str(),
            bm_sum, sp, heavy, threads)
            ->Unit(benchmark::kMillisecond)
            ->MinTime(0.5);
    }
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  return 0;
}
