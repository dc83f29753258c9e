// CPU benchmarks of the TernGrad codec (compute_stats, encode, decode,
// decode_accumulate) against memory-bandwidth floors measured in this same
// process, on the same buffers and the same OpenMP team.
//
//   codec_cpu_bench [--quick] [Google Benchmark flags...]
//
// --quick (or TG_BENCH_QUICK=1 in the environment): three sizes, short runs,
// one repetition; a smoke test. Otherwise all sizes 4K..64M, 5 repetitions of
// >= 0.2 s each unless --benchmark_repetitions / --benchmark_min_time say
// otherwise; the summary uses medians.
//
// The floor. An op that must move B bytes cannot finish in less than
// B / (read bandwidth of this machine at this working-set size). Before any
// codec timing, main() measures that bandwidth at every size (best of several
// rounds, one thread and all threads, the better of the two), and
// every codec benchmark reports frac_of_floor = (B / bandwidth) / time.
// Writes are costed at the read rate. That is a convention, not a bound:
// rewriting lines the op has just read (decode_accumulate's accumulator) costs
// less than fetching new ones, so frac_of_floor can exceed 1 there. Small
// sizes are cache-resident, and so is their floor.
//
// Minimal traffic B per op (n elements, n/4 payload body bytes):
//   stats              4n          read the input once
//   encode             8n + n/4    statistics pass + quantize pass over the input, write the body
//   (encode_quantize   4n + n/4    diagnostic: the quantize pass alone, stats given;
//    encode_quantize_v1: the same with format version 1's stream, Philox4x32-10
//    words, against the default version 2, Philox4x32-7 half words)
//   decode             2(n/4) + 4n validate the body, then read it again and write n floats
//   decode_accumulate  2(n/4) + 8n the same, reading and writing the accumulator
//
// Before any timing the codec's output on the bench input is checked (values
// in {-s, 0, +s}, clipped elements kept with their sign, decoded mean within
// a few standard errors of the clipped input mean, accumulate == add); a
// failure aborts the program with a message, since timing a wrong codec is useless.

#include <benchmark/benchmark.h>

#include "bench_common.h"
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "memory_baseline.h"
#include "python_baseline.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;
using tg_bench::AlignedArray;

namespace {

using terngrad::bench::size_label;
using terngrad::bench::fill_gradient;
using terngrad::bench::bench_params;
using terngrad::bench::kClip;
using terngrad::bench::kCodecSeed;
using terngrad::bench::kInputSeed;
using terngrad::bench::kGradMean;
using terngrad::bench::kGradSigma;
using terngrad::bench::kOutlierRate;
using terngrad::bench::kOutlierScale;
// Sizes at and above this are the ones the targets apply to (4M-64M: smaller
// tensors are cache-resident, where the floor is the cache's read rate).
constexpr size_t kTargetMinSize = size_t{1} << 22;
constexpr double kTargetFrac = 0.50;
// encode >= this many times the PyTorch-ops TernGrad encode (same run).
constexpr double kTorchRatioTarget = 30.0;
// The ps sums R payloads that share one scale, one per replica.
constexpr uint32_t kMaxSumReplicas = 4;

// Everything one size needs; created, validated and calibrated before any timing.
struct SizeState {
  size_t n = 0;
  AlignedArray<float> x;          // the gradient (encode / stats input, read baseline)
  AlignedArray<uint8_t> payload;  // encode output, decode input
  AlignedArray<float> out;        // decode target, accumulator, copy destination
  // Replica payloads with one shared scale (different Philox steps), and the
  // sum the ps sends back.
  std::vector<AlignedArray<uint8_t>> replica_payloads;
  AlignedArray<uint8_t> sum_out;
  // Read-only bandwidth, bytes/s, from the calibration in main(): one thread
  // and all threads, before and after the benchmarks.
  tg_bench::BandwidthSample pre_1t, pre_mt, post_1t, post_mt;
  double floor_bw = 0.0;        // used by the live frac_of_floor counter: best pre-run round
  double final_floor_bw = 0.0;  // used by the summary: best round before or after
};

std::map<size_t, std::unique_ptr<SizeState>> g_states;

// Where this program's own report goes: stdout, or stderr when Google
// Benchmark writes JSON to stdout, so that the JSON stays parseable.
FILE* g_info = stdout;

__attribute__((format(printf, 1, 2))) void info(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(g_info, fmt, ap);
  va_end(ap);
}

[[noreturn]] void fail(size_t n, const std::string& what) {
  std::fflush(g_info);
  std::fprintf(stderr,
               "\n*** codec_cpu_bench: CODEC OUTPUT IS WRONG on the bench input (n = %zu): %s\n"
               "*** refusing to time an incorrect codec; aborting.\n",
               n, what.c_str());
  std::abort();
}


// Checks the codec on this size's input and leaves a valid payload in s.payload.
void validate_codec(SizeState& s) {
  const size_t n = s.n;
  const float* x = s.x.data();

  // Statistics against a float64 reference (different summation order, so a tolerance).
  double ref_sum = 0.0, ref_sq = 0.0;
  float ref_max = 0.0f;
#pragma omp parallel for reduction(+ : ref_sum, ref_sq) reduction(max : ref_max)
  for (size_t i = 0; i < n; ++i) {
    ref_sum += x[i];
    ref_sq += static_cast<double>(x[i]) * x[i];
    ref_max = std::max(ref_max, std::fabs(x[i]));
  }
  const double ref_mean = ref_sum / static_cast<double>(n);
  const double ref_std = std::sqrt(std::max(0.0, ref_sq / static_cast<double>(n) - ref_mean * ref_mean));
  const tq::TensorStats st = tq::compute_stats({x, n});
  if (st.count != n || st.max_abs != ref_max ||
      std::fabs(st.mean - ref_mean) > 1e-9 * (std::fabs(ref_mean) + ref_std) ||
      std::fabs(st.stddev - ref_std) > 1e-9 * ref_std) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "compute_stats = {count %llu, mean %.9g, std %.9g, max %.9g}, "
                  "reference {%zu, %.9g, %.9g, %.9g}",
                  static_cast<unsigned long long>(st.count), st.mean, st.stddev, st.max_abs, n,
                  ref_mean, ref_std, ref_max);
    fail(n, buf);
  }

  const tq::EncodeParams params = bench_params();
  const size_t want_bytes = tq::max_encoded_bytes(n);
  const size_t wrote = tq::encode({x, n}, params, {s.payload.data(), s.payload.size()});
  if (wrote != want_bytes)
    fail(n, "encode wrote " + std::to_string(wrote) + " bytes, expected " + std::to_string(want_bytes));
  const tq::PayloadHeader h = tq::inspect({s.payload.data(), wrote});
  const float scale = h.scale;
  if (h.count != n) fail(n, "header count " + std::to_string(h.count));
  if (!(scale > 0.0f) || scale != tq::local_scale(st, kClip))
    fail(n, "header scale " + std::to_string(scale) + " != local_scale(stats, 2.5) " +
                std::to_string(tq::local_scale(st, kClip)));

  // The benchmark re-encodes into this buffer every iteration; the decode
  // benchmarks rely on it holding the same bytes, i.e. encode is deterministic.
  {
    std::vector<uint8_t> again(want_bytes);
    tq::encode({x, n}, params, again);
    if (std::memcmp(again.data(), s.payload.data(), want_bytes) != 0)
      fail(n, "two encodes of the same input with the same parameters differ");
  }

  std::vector<float> dec(n);
  tq::decode({s.payload.data(), wrote}, dec);

  // Per element: decoded in {-s, 0, +s}; a nonzero value carries x's sign;
  // |x| >= s (clipped) is always kept. Meanwhile the float64 sums for the
  // mean check: E[dec_i] = c_i = clamp(x_i, -s, s), Var = s|c_i| - c_i^2.
  const double sd = scale;
  double sum_dec = 0.0, sum_clip = 0.0, sum_var = 0.0;
  size_t nonzero = 0, clipped = 0, first_bad = n;
#pragma omp parallel for reduction(+ : sum_dec, sum_clip, sum_var, nonzero, clipped) \
    reduction(min : first_bad)
  for (size_t i = 0; i < n; ++i) {
    const float d = dec[i];
    const float xi = x[i];
    const bool in_set = d == scale || d == -scale || d == 0.0f;
    const bool sign_ok = d == 0.0f || (std::signbit(d) == std::signbit(xi) && xi != 0.0f);
    const bool is_clipped = std::fabs(xi) >= scale;
    const bool kept_ok = !is_clipped || d == std::copysign(scale, xi);
    if (!(in_set && sign_ok && kept_ok)) first_bad = std::min(first_bad, i);
    const double c = std::clamp(static_cast<double>(xi), -sd, sd);
    sum_dec += d;
    sum_clip += c;
    sum_var += sd * std::fabs(c) - c * c;
    nonzero += d != 0.0f;
    clipped += is_clipped;
  }
  if (first_bad != n) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "element %zu: x = %.9g decodes to %.9g with scale %.9g", first_bad,
                  x[first_bad], dec[first_bad], scale);
    fail(n, buf);
  }
  const double dn = static_cast<double>(n);
  const double se = std::sqrt(sum_var) / dn;
  const double diff = sum_dec / dn - sum_clip / dn;
  // 6 standard errors: a 1-in-10^9 false alarm on a correct codec. The
  // additive term covers the 2^-24 resolution of the keep probability.
  const double tol = 6.0 * se + 0x1p-20 * sd;
  if (!(std::fabs(diff) <= tol)) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "decoded mean %.9g vs clipped input mean %.9g: off by %.3g = %.2f standard errors",
                  sum_dec / dn, sum_clip / dn, diff, se > 0 ? diff / se : INFINITY);
    fail(n, buf);
  }

  // decode_accumulate must be exactly out + decode (one float add per element).
  std::memcpy(s.out.data(), x, n * sizeof(float));
  tq::decode_accumulate({s.payload.data(), wrote}, {s.out.data(), n});
  for (size_t i = 0; i < n; ++i) {
    if (s.out[i] != x[i] + dec[i]) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "decode_accumulate element %zu: %.9g + %.9g gave %.9g", i, x[i],
                    dec[i], s.out[i]);
      fail(n, buf);
    }
  }

  info("  %-4s s = %.4g (= %.2f sigma), clipped %.2f%%, nonzero %.1f%%, mean error %+.2f SE  ok\n",
              size_label(n).c_str(), sd, sd / st.stddev, 100.0 * clipped / dn, 100.0 * nonzero / dn,
              se > 0 ? diff / se : 0.0);
}

// The first r replica payloads of s, as sum_payloads takes them.
std::vector<std::span<const uint8_t>> replica_spans(const SizeState& s, uint32_t r) {
  std::vector<std::span<const uint8_t>> spans;
  for (uint32_t i = 0; i < r; ++i) spans.emplace_back(s.replica_payloads[i].data(), tq::max_encoded_bytes(s.n));
  return spans;
}

// Encodes kMaxSumReplicas replica payloads of x with one shared scale and
// checks sum_payloads against the independent route (int16 counts by
// sum_shared, then encode_sum) for 2 and 4 replicas.
void prepare_sums(SizeState& s) {
  const size_t n = s.n;
  tq::EncodeParams p = bench_params();
  p.shared_scale = 1.25f * tq::local_scale(tq::compute_stats({s.x.data(), n}), kClip);
  for (uint32_t r = 0; r < kMaxSumReplicas; ++r) {
    p.step = 100 + r;  // a different draw per replica
    s.replica_payloads.emplace_back(tq::max_encoded_bytes(n));
    tq::encode({s.x.data(), n}, p, {s.replica_payloads.back().data(), tq::max_encoded_bytes(n)});
  }
  s.sum_out = AlignedArray<uint8_t>(tq::sum_payload_bytes(n, kMaxSumReplicas));
  for (uint32_t r : {2u, kMaxSumReplicas}) {
    const auto spans = replica_spans(s, r);
    const size_t bytes = tq::sum_payloads(spans, {s.sum_out.data(), s.sum_out.size()});
    std::vector<int16_t> counts(n);
    const float scale = tq::sum_shared(spans, counts);
    std::vector<uint8_t> want(tq::sum_payload_bytes(n, r));
    tq::encode_sum(counts, scale, r, p.tensor_id, 100, want);  // id and step of payload 0
    if (bytes != want.size() || std::memcmp(s.sum_out.data(), want.data(), bytes) != 0)
      fail(n, "sum_payloads of " + std::to_string(r) + " payloads differs from sum_shared + encode_sum");
  }
}

SizeState& state_for(size_t n) { return *g_states.at(n); }

// Wall time of a benchmark's timing loop. frac_of_floor needs the elapsed time
// inside the benchmark, which State does not expose; a kIsRate counter would
// give the same number but display it as a rate ("0.5/s").
class LoopTimer {
 public:
  LoopTimer() : t0_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

// Rates over the op's minimal traffic, and the fraction of the floor:
// (time the traffic takes at the floor bandwidth) / (time it took).
void report(benchmark::State& st, const SizeState& s, double traffic_bytes, double loop_seconds) {
  const double it = static_cast<double>(st.iterations());
  st.SetBytesProcessed(static_cast<int64_t>(it * traffic_bytes));
  st.SetItemsProcessed(static_cast<int64_t>(it * static_cast<double>(s.n)));
  st.counters["frac_of_floor"] = it * traffic_bytes / s.floor_bw / loop_seconds;
}

double body(size_t n) { return static_cast<double>(tq::body_bytes(n)); }

// --- baselines ---------------------------------------------------------------

void bm_mem_read(benchmark::State& st, size_t n, bool parallel) {
  SizeState& s = state_for(n);
  const LoopTimer timer;
  for (auto _ : st) {
    float sum = tg_bench::read_pass(s.x.data(), n, parallel);
    benchmark::DoNotOptimize(sum);
  }
  report(st, s, 4.0 * static_cast<double>(n), timer.seconds());
}

// Reported bytes count both sides of the copy (4n read + 4n written).
void bm_mem_copy(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const LoopTimer timer;
  for (auto _ : st) {
    tg_bench::copy_pass(s.out.data(), s.x.data(), n, true);
    benchmark::ClobberMemory();
  }
  report(st, s, 8.0 * static_cast<double>(n), timer.seconds());
}

// --- codec -------------------------------------------------------------------

void bm_stats(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const LoopTimer timer;
  for (auto _ : st) {
    tq::TensorStats r = tq::compute_stats({s.x.data(), n});
    benchmark::DoNotOptimize(r);
  }
  report(st, s, 4.0 * static_cast<double>(n), timer.seconds());
}

void bm_encode(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const tq::EncodeParams p = bench_params();
  const LoopTimer timer;
  for (auto _ : st) {
    size_t w = tq::encode({s.x.data(), n}, p, {s.payload.data(), s.payload.size()});
    benchmark::DoNotOptimize(w);
    benchmark::ClobberMemory();
  }
  report(st, s, 8.0 * static_cast<double>(n) + body(n), timer.seconds());
}

// Diagnostic, not a target: encode's quantize pass alone (encode_with_stats
// with the statistics computed once up front), so that encode's time splits
// into this plus stats. Traffic: one read of the input, the body written.
void bm_encode_quantize(benchmark::State& st, size_t n, tq::RandomStream stream) {
  SizeState& s = state_for(n);
  tq::EncodeParams p = bench_params();
  p.stream = stream;
  const tq::TensorStats stats = tq::compute_stats({s.x.data(), n});
  const LoopTimer timer;
  for (auto _ : st) {
    size_t w = tq::encode_with_stats({s.x.data(), n}, stats, p, {s.payload.data(), s.payload.size()});
    benchmark::DoNotOptimize(w);
    benchmark::ClobberMemory();
  }
  report(st, s, 4.0 * static_cast<double>(n) + body(n), timer.seconds());
}

void bm_decode(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const std::span<const uint8_t> payload{s.payload.data(), tq::max_encoded_bytes(n)};
  const LoopTimer timer;
  for (auto _ : st) {
    tq::decode(payload, {s.out.data(), n});
    benchmark::ClobberMemory();
  }
  report(st, s, 2.0 * body(n) + 4.0 * static_cast<double>(n), timer.seconds());
}

// The accumulator only ever gains multiples of s, so it stays exact and far
// from overflow or denormals however many iterations run.
void bm_decode_accumulate(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const std::span<const uint8_t> payload{s.payload.data(), tq::max_encoded_bytes(n)};
  const LoopTimer timer;
  for (auto _ : st) {
    tq::decode_accumulate(payload, {s.out.data(), n});
    benchmark::ClobberMemory();
  }
  report(st, s, 2.0 * body(n) + 8.0 * static_cast<double>(n), timer.seconds());
}

// The ps's sum of R replica payloads into one packed sum (ternary_sum.h).
// Traffic: the R bodies read, the sum body (bit_width(2R) bits an element) written.
void bm_sum_payloads(benchmark::State& st, size_t n, uint32_t r) {
  SizeState& s = state_for(n);
  const auto spans = replica_spans(s, r);
  const LoopTimer timer;
  for (auto _ : st) {
    size_t w = tq::sum_payloads(spans, {s.sum_out.data(), s.sum_out.size()});
    benchmark::DoNotOptimize(w);
    benchmark::ClobberMemory();
  }
  const double sum_body = static_cast<double>(tq::sum_payload_bytes(n, r) - tq::kHeaderBytes);
  report(st, s, r * body(n) + sum_body, timer.seconds());
}

// A worker's decode of the ps's sum of R payloads (decode_sum). Traffic: the
// sum body read twice (validated, then decoded) and the floats written.
void bm_decode_sum(benchmark::State& st, size_t n, uint32_t r) {
  SizeState& s = state_for(n);
  const auto spans = replica_spans(s, r);
  const size_t bytes = tq::sum_payloads(spans, {s.sum_out.data(), s.sum_out.size()});
  const std::span<const uint8_t> sum{s.sum_out.data(), bytes};
  const LoopTimer timer;
  for (auto _ : st) {
    tq::decode_sum(sum, {s.out.data(), n});
    benchmark::ClobberMemory();
  }
  report(st, s, 2.0 * static_cast<double>(bytes - tq::kHeaderBytes) + 4.0 * static_cast<double>(n),
         timer.seconds());
}

// --- the PyTorch-ops baseline -------------------------------------------------

// Elements/s of bench/torch_terngrad_encode.py per size, run by Debian's
// python3 with the same thread count; empty when PyTorch is missing. Under a
// forced AVX2 level PyTorch is held to AVX2 too (ATEN_CPU_CAPABILITY), so the
// pair stands for an AVX2-only machine.
std::map<size_t, double> torch_encode_rates(const std::vector<size_t>& sizes, int threads) {
  std::map<size_t, double> out;
  if (sizes.empty()) return out;
  const char* script = std::getenv("TG_TORCH_ENCODE_SCRIPT");
  std::string cmd = tq::cpu_simd_level() == tq::SimdLevel::kAvx2 ? "ATEN_CPU_CAPABILITY=avx2 " : "";
  cmd.append("/usr/bin/python3 ").append(script ? script : TG_TORCH_ENCODE_SCRIPT_PATH);
  cmd.append(" ").append(std::to_string(threads));
  for (size_t n : sizes) cmd.append(" ").append(std::to_string(n));
  cmd.append(" 2>/dev/null");
  const std::string text = terngrad::bench::command_output(cmd);
  for (size_t n : sizes)
    if (const auto v = terngrad::bench::json_number(text, std::to_string(n))) out[n] = *v * 1e9;
  return out;
}

std::string cpu_model() { return terngrad::quantize::cpu_model_name(); }

// --- reporting ---------------------------------------------------------------

struct Sample {
  std::vector<double> bps, ips;           // per repetition
  double med_bps = -1.0, med_ips = -1.0;  // the "median" aggregate when reported
  int64_t agg_repetitions = 0;            // repetitions behind that aggregate
};

struct Rates {
  double bps = 0.0, ips = 0.0;  // medians over repetitions
  double best_bps = 0.0;        // the fastest repetition
};

double median(std::vector<double> v) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Forwards everything to the usual display reporter and keeps the rates of
// each run for the summary table.
class CapturingReporter : public benchmark::BenchmarkReporter {
 public:
  explicit CapturingReporter(std::unique_ptr<benchmark::BenchmarkReporter> inner)
      : inner_(std::move(inner)) {}
  bool ReportContext(const Context& c) override { return inner_->ReportContext(c); }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      const auto b = r.counters.find("bytes_per_second");
      const auto i = r.counters.find("items_per_second");
      if (b == r.counters.end() || i == r.counters.end()) continue;
      Sample& smp = samples_[r.run_name.function_name];
      if (r.run_type == Run::RT_Iteration) {
        smp.bps.push_back(b->second.value);
        smp.ips.push_back(i->second.value);
      } else if (r.aggregate_name == "median") {
        smp.med_bps = b->second.value;
        smp.med_ips = i->second.value;
        smp.agg_repetitions = r.repetitions;
      }
    }
    inner_->ReportRuns(runs);
  }
  void Finalize() override { inner_->Finalize(); }

  // Rates of a benchmark; false if it did not run.
  bool get(const std::string& name, Rates& r) const {
    const auto it = samples_.find(name);
    if (it == samples_.end()) return false;
    const Sample& smp = it->second;
    if (!smp.bps.empty()) {
      r.bps = median(smp.bps);
      r.ips = median(smp.ips);
      r.best_bps = *std::max_element(smp.bps.begin(), smp.bps.end());
    } else {  // only aggregates were reported (--benchmark_display_aggregates_only)
      r.bps = r.best_bps = smp.med_bps;
      r.ips = smp.med_ips;
    }
    return r.bps > 0;
  }
  // Repetitions per benchmark (the most any benchmark ran).
  size_t repetitions() const {
    size_t most = 0;
    for (const auto& [name, smp] : samples_)
      most = std::max({most, smp.bps.size(), static_cast<size_t>(smp.agg_repetitions)});
    return most;
  }

 private:
  std::unique_ptr<benchmark::BenchmarkReporter> inner_;
  std::map<std::string, Sample> samples_;
};

std::string display_format(int argc, char** argv) {
  std::string format = "console";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--benchmark_format=", 19) == 0) format = argv[i] + 19;
  return format;
}

std::unique_ptr<benchmark::BenchmarkReporter> make_display_reporter(const std::string& format) {
  if (format == "json") return std::make_unique<benchmark::JSONReporter>();
  const auto opts = isatty(STDOUT_FILENO) ? benchmark::ConsoleReporter::OO_ColorTabular
                                          : benchmark::ConsoleReporter::OO_Tabular;
  return std::make_unique<benchmark::ConsoleReporter>(opts);
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first; Google Benchmark rejects flags it does not know.
  terngrad::bench::BenchArgs parsed = terngrad::bench::parse_bench_args(argc, argv);
  const bool quick = parsed.quick;
  std::vector<char*>& args = parsed.argv;
  int bargc = parsed.argc;
  // Read before Initialize(), which consumes the flags it knows.
  const std::string format = display_format(bargc, args.data());
  if (format == "json") g_info = stderr;
  benchmark::Initialize(&bargc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, args.data())) return 1;

  const std::vector<size_t> sizes =
      quick ? std::vector<size_t>{size_t{1} << 12, size_t{1} << 16, size_t{1} << 20}
            : std::vector<size_t>{size_t{1} << 12, size_t{1} << 14, size_t{1} << 16, size_t{1} << 18,
                                  size_t{1} << 20, size_t{1} << 22, size_t{1} << 24, size_t{1} << 26};

  // Which kernels ran matters to every number below (TG_CPU_SIMD=0 forces the portable ones).
  std::string levels;
  for (tq::SimdLevel l : tq::supported_simd_levels()) levels += std::string(" ") + tq::simd_level_name(l);
  info("codec_cpu_bench: %s, %d OpenMP threads, CPU %s (levels:%s)\n"
       "codec kernels %s (TG_CPU_SIMD=portable|avx2|avx512|neon forces one), read baseline %s, clip %.1f\n",
       quick ? "quick mode" : "all sizes", omp_get_max_threads(), cpu_model().c_str(), levels.c_str(),
       tq::simd_level_name(tq::cpu_simd_level()), tg_bench::have_avx512() ? "AVX-512" : "generic", kClip);

  // 1. Inputs and the correctness gate, for every size before any timing.
  info("validating the codec on the bench input:\n");
  for (size_t n : sizes) {
    auto s = std::make_unique<SizeState>();
    s->n = n;
    s->x = AlignedArray<float>(n);
    s->payload = AlignedArray<uint8_t>(tq::max_encoded_bytes(n));
    s->out = AlignedArray<float>(n);
    fill_gradient(s->x.data(), n, kInputSeed);
    std::memset(s->payload.data(), 0, s->payload.size());
    std::memset(s->out.data(), 0, n * sizeof(float));
    try {
      validate_codec(*s);
      prepare_sums(*s);
    } catch (const tq::CodecError& e) {  // a throw on valid input is a wrong codec too
      fail(n, std::string("the codec threw: ") + e.what());
    }
    g_states.emplace(n, std::move(s));
  }

  // 2. The floor: read-only bandwidth per size, one thread and all threads
  // (small sizes are faster on one: no fork/join), best round of several.
  const int rounds = quick ? 5 : 9;
  const double round_s = quick ? 0.01 : 0.03;
  info("read-only bandwidth, %d rounds each (median / best round); floor = best of all:\n",
              rounds);
  for (size_t n : sizes) {
    SizeState& s = state_for(n);
    s.pre_1t = tg_bench::measure_read_bandwidth(s.x.data(), n, false, rounds, round_s);
    s.pre_mt = tg_bench::measure_read_bandwidth(s.x.data(), n, true, rounds, round_s);
    s.floor_bw = std::max(s.pre_1t.best, s.pre_mt.best);
    info("  %-5s 1 thread %6.1f / %6.1f GB/s, %d threads %6.1f / %6.1f GB/s, floor %6.1f GB/s\n",
                size_label(n).c_str(), s.pre_1t.median / 1e9, s.pre_1t.best / 1e9,
                omp_get_max_threads(), s.pre_mt.median / 1e9, s.pre_mt.best / 1e9, s.floor_bw / 1e9);
  }
  std::fflush(g_info);

  // 3. The benchmarks: baselines first, then the codec, each over all sizes.
  // Real time throughout: the work runs on several OpenMP threads.
  using BmFn = void (*)(benchmark::State&, size_t);
  const std::vector<std::pair<std::string, BmFn>> ops = {
      {"mem_read", [](benchmark::State& st, size_t n) { bm_mem_read(st, n, true); }},
      {"mem_read_1t", [](benchmark::State& st, size_t n) { bm_mem_read(st, n, false); }},
      {"mem_copy", bm_mem_copy},
      {"stats", bm_stats},
      {"encode", bm_encode},
      {"encode_quantize",
       [](benchmark::State& st, size_t n) { bm_encode_quantize(st, n, tq::RandomStream::kPhilox7Half16); }},
      {"encode_quantize_v1",
       [](benchmark::State& st, size_t n) { bm_encode_quantize(st, n, tq::RandomStream::kPhilox10Word32); }},
      {"decode", bm_decode},
      {"decode_accumulate", bm_decode_accumulate},
      {"sum_payloads_r2", [](benchmark::State& st, size_t n) { bm_sum_payloads(st, n, 2); }},
      {"sum_payloads_r4", [](benchmark::State& st, size_t n) { bm_sum_payloads(st, n, 4); }},
      {"decode_sum_r4", [](benchmark::State& st, size_t n) { bm_decode_sum(st, n, 4); }},
  };
  for (const auto& [name, fn] : ops)
    for (size_t n : sizes)
      benchmark::RegisterBenchmark((name + "/" + std::to_string(n)).c_str(), fn, n)
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);

  CapturingReporter reporter(make_display_reporter(format));
  benchmark::RunSpecifiedBenchmarks(&reporter);

  // The PyTorch-ops encode at the target sizes, after the timings (it would
  // compete with them for the cores).
  std::vector<size_t> torch_sizes;
  for (size_t n : sizes)
    if (n >= kTargetMinSize) torch_sizes.push_back(n);
  const std::map<size_t, double> torch_rates = torch_encode_rates(torch_sizes, omp_get_max_threads());

  // 4. The floor again: if someone else's build ran during the first
  // calibration, its floor is too low and would flatter every fraction. The
  // summary uses the higher of the two.
  bool floor_moved = false;
  for (size_t n : sizes) {
    SizeState& s = state_for(n);
    s.post_1t = tg_bench::measure_read_bandwidth(s.x.data(), n, false, rounds, round_s);
    s.post_mt = tg_bench::measure_read_bandwidth(s.x.data(), n, true, rounds, round_s);
    const double post = std::max(s.post_1t.best, s.post_mt.best);
    s.final_floor_bw = std::max(s.floor_bw, post);
    floor_moved |= post > 1.15 * s.floor_bw || post < s.floor_bw / 1.15;
  }

  // 5. Summary.
  const size_t reps = reporter.repetitions();
  info("\n=== codec_cpu_bench summary: %zu repetition(s) per benchmark, %d threads ===\n", reps,
              omp_get_max_threads());
  info("GB/s over each op's minimal traffic (1 GB = 1e9 B), median of the repetitions;\n"
              "floor = best read-only bandwidth at that size (before or after the run);\n"
              "frac = GB/s / floor (median repetition), best = the same for the fastest repetition.\n");
  info("%-18s %5s %8s %8s %8s %6s %6s  %s\n", "op", "size", "GB/s", "Gelem/s", "floor",
              "frac", "best", "target (>= 0.50 of floor at >= 4M)");
  std::vector<std::string> missed;
  size_t evaluated = 0;
  for (const auto& [name, fn] : ops) {
    const bool targeted = name == "encode" || name == "decode" || name == "decode_accumulate" ||
                          name.rfind("sum_payloads", 0) == 0 || name == "decode_sum_r4";
    for (size_t n : sizes) {
      Rates r;
      if (!reporter.get(name + "/" + std::to_string(n), r)) continue;
      const SizeState& s = state_for(n);
      const double frac = r.bps / s.final_floor_bw;
      const double best = r.best_bps / s.final_floor_bw;
      std::string verdict = "-";
      if (targeted && n >= kTargetMinSize) {
        ++evaluated;
        verdict = frac >= kTargetFrac ? "PASS" : "MISS";
        if (frac < kTargetFrac) {
          char buf[64];
          std::snprintf(buf, sizeof buf, "%s/%s (%.2f)", name.c_str(), size_label(n).c_str(), frac);
          missed.push_back(buf);
        }
      } else if (targeted) {
        verdict = frac >= kTargetFrac ? "(>= 0.50; cache-resident, not a target)"
                                      : "(< 0.50; cache-resident, not a target)";
      }
      info("%-18s %5s %8.2f %8.3f %8.1f %6.3f %6.3f  %s\n", name.c_str(), size_label(n).c_str(),
                  r.bps / 1e9, r.ips / 1e9, s.final_floor_bw / 1e9, frac, best, verdict.c_str());
    }
  }
  if (!torch_sizes.empty()) {
    info("encode vs the PyTorch-ops TernGrad encode (bench/torch_terngrad_encode.py, %d threads%s):\n",
         omp_get_max_threads(),
         tq::cpu_simd_level() == tq::SimdLevel::kAvx2 ? ", ATEN_CPU_CAPABILITY=avx2" : "");
    for (size_t n : torch_sizes) {
      Rates r;
      const auto t = torch_rates.find(n);
      if (!reporter.get("encode/" + std::to_string(n), r)) continue;
      if (t == torch_rates.end() || !(t->second > 0)) {
        info("  %-5s encode %.3f Gelem/s, PyTorch n/a (python3-torch missing?)\n", size_label(n).c_str(),
             r.ips / 1e9);
        continue;
      }
      const double ratio = r.ips / t->second;
      ++evaluated;
      const bool pass = ratio >= kTorchRatioTarget;
      if (!pass) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "encode_vs_torch/%s (%.1fx)", size_label(n).c_str(), ratio);
        missed.push_back(buf);
      }
      info("  %-5s encode %.3f Gelem/s, PyTorch ops %.4f Gelem/s: %.1fx  %s (>= %.0fx)\n",
           size_label(n).c_str(), r.ips / 1e9, t->second / 1e9, ratio, pass ? "PASS" : "MISS",
           kTorchRatioTarget);
    }
  }
  info("read-only bandwidth before / after the run, best round, GB/s:");
  for (size_t n : sizes) {
    const SizeState& s = state_for(n);
    info(" %s %.0f/%.0f", size_label(n).c_str(), s.floor_bw / 1e9,
                std::max(s.post_1t.best, s.post_mt.best) / 1e9);
  }
  info("\n");
  if (floor_moved)
    info("WARNING: the floor moved by more than 15%% between the calibrations (other load on the\n"
                "machine?); the live frac_of_floor counters used the first one. Repeat on a quiet machine.\n");
  if (evaluated == 0)
    info("TARGETS: not evaluated (no targeted op ran at >= 4M elements)\n");
  else if (missed.empty())
    info("TARGETS: HOLD (%zu of %zu)\n", evaluated, evaluated);
  else {
    info("TARGETS: MISSED %zu of %zu:", missed.size(), evaluated);
    for (const auto& m : missed) info(" %s", m.c_str());
    info("\n");
  }
  benchmark::Shutdown();
  return 0;
}
