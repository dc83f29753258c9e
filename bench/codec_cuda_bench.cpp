// CUDA benchmarks of the TernGrad codec (stats, encode, device-side scale
// sharing, decode, decode_accumulate) against device-memory bandwidth
// measured in this same process, on the same buffers.
//
//   codec_cuda_bench [--quick] [--sizes=64M,256M] [Google Benchmark flags...]
//
// --quick (or TG_BENCH_QUICK=1): three sizes, short runs, one repetition.
// Otherwise 4K..64M elements (powers of 4), 5 repetitions.
// Without a CUDA device it prints "no CUDA device: skipping" and exits 0.
//
// Timing. Each benchmark iteration enqueues a batch of back-to-back operations
// on one stream between two CUDA events (batches make small sizes measure
// pipelined throughput, not one launch's latency) and reports the event time
// per operation as manual time. Rates are computed here from that GPU time.
//
// The floor. Before any timing main() measures, per size, the best read-only
// bandwidth of a streaming reduction kernel over the input (cuda_bandwidth_probe.h).
// Every codec benchmark reports
//   frac_of_floor = (minimal traffic bytes / floor bandwidth) / time per op,
// with minimal traffic (n elements, n/4 body bytes):
//   stats              4n
//   encode             8n + n/4    stats pass + quantize pass over the input, body written
//                                  (encode_v1: the same with format version 1's stream)
//   encode_shared      12n + n/4   local_scale_async, then encode_shared_async with that one
//                                  scale (a worker group of one: the flow without a host sync)
//   decode             2(n/4) + 4n validate the body, read it again, write n floats
//   decode_accumulate  2(n/4) + 8n the same, reading and writing the accumulator
//   encode_base3       8n + n/5    codec 4: the stats pass, the quantize pass, 5 elements a byte
//   encode_entropy     8n + L      codec 5 (L = its payload's bytes): the same two passes
//                                  over the input, the payload written; the symbols,
//                                  stream slots and the copy are the codec's own traffic
//   decode_base3       2(n/5) + 4n validate the body, read it again, write n floats
//   decode_entropy     L + 4n      read the payload once, write n floats (the
//                                  symbols' round trip through scratch is the codec's)
// The packed decodes run decode_any_async (the header picks the codec on the device).
// Baselines in the same binary: mem_read (the reduction, 4n) and mem_copy
// (device-to-device cudaMemcpyAsync, reported as 8n: both sides).
//
// Before any timing the GPU output is compared with the CPU codec on the same
// input (payload bytes, statistics bitwise, decode and decode_accumulate
// bitwise, local scale and device-shared-scale payload); a mismatch aborts
// with a message: timing a wrong codec is useless.

#include <benchmark/benchmark.h>

#include "bench_common.h"
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cuda_bandwidth_probe.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cuda.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/format.h"

namespace tq = terngrad::quantize;
namespace tc = terngrad::quantize::cuda;

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
// Operations per timed batch: about 16M elements of work, 1..256 operations.
constexpr size_t kBatchElements = size_t{1} << 24;

[[noreturn]] void die(const std::string& what) {
  std::fflush(stdout);
  std::fprintf(stderr, "\n*** codec_cuda_bench: %s\n*** aborting.\n", what.c_str());
  std::abort();
}

void cuda_ok(cudaError_t err, const char* call) {
  if (err != cudaSuccess) die(std::string(call) + " failed: " + cudaGetErrorString(err));
}
#define CUDA_OK(call) cuda_ok((call), #call)

[[noreturn]] void wrong(size_t n, const std::string& what) {
  die("GPU OUTPUT DIFFERS FROM THE CPU CODEC on the bench input (n = " + std::to_string(n) +
      "): " + what + "; refusing to time an incorrect codec");
}

template <class T>
T* device_alloc(size_t count) {
  void* p = nullptr;
  CUDA_OK(cudaMalloc(&p, std::max<size_t>(count * sizeof(T), 1)));
  return static_cast<T*>(p);
}



// Everything one size needs, created and checked before any timing.
struct SizeState {
  size_t n = 0;
  float* x = nullptr;         // the gradient
  uint8_t* payload = nullptr;  // encode output, decode input
  float* out = nullptr;       // decode target, accumulator, copy destination
  uint32_t* sink = nullptr;   // read-only reduction result
  float* scale = nullptr;     // local_scale_async output, encode_shared_async input
  uint8_t* base3 = nullptr;    // codec-4 payload (decode_base3's input)
  uint8_t* entropy = nullptr;  // codec-5 payload (decode_entropy's input)
  uint8_t* packed_out = nullptr;  // the packed encodes' output while timed
  size_t entropy_bytes = 0;       // its length
  std::unique_ptr<tc::Workspace> ws;
  double floor_bw = 0.0;  // bytes/s, best read-only round before the benchmarks
  ~SizeState() {
    cudaFree(x);
    cudaFree(payload);
    cudaFree(out);
    cudaFree(sink);
    cudaFree(scale);
    cudaFree(base3);
    cudaFree(entropy);
    cudaFree(packed_out);
  }
};

std::map<size_t, std::unique_ptr<SizeState>> g_states;
cudaStream_t g_stream = nullptr;
cudaEvent_t g_start = nullptr, g_stop = nullptr;

SizeState& state_for(size_t n) { return *g_states.at(n); }

size_t batch_for(size_t n) {
  return std::clamp<size_t>(kBatchElements / std::max<size_t>(n, 1), 1, 256);
}

// GPU seconds of `ops` back-to-back calls of f on the bench stream.
template <class F>
double time_batch(size_t ops, F&& f) {
  CUDA_OK(cudaEventRecord(g_start, g_stream));
  for (size_t i = 0; i < ops; ++i) f();
  CUDA_OK(cudaEventRecord(g_stop, g_stream));
  CUDA_OK(cudaEventSynchronize(g_stop));
  float ms = 0.0f;
  CUDA_OK(cudaEventElapsedTime(&ms, g_start, g_stop));
  return static_cast<double>(ms) * 1e-3;
}

template <class T>
std::vector<T> download(const T* src, size_t count) {
  std::vector<T> v(count);
  CUDA_OK(cudaMemcpyAsync(v.data(), src, count * sizeof(T), cudaMemcpyDeviceToHost, g_stream));
  CUDA_OK(cudaStreamSynchronize(g_stream));
  return v;
}

template <class T>
void check_same(size_t n, const char* what, const std::vector<T>& cpu, const std::vector<T>& gpu) {
  if (cpu.size() != gpu.size())
    wrong(n, std::string(what) + ": " + std::to_string(gpu.size()) + " values, expected " +
                 std::to_string(cpu.size()));
  for (size_t i = 0; i < cpu.size(); ++i)
    if (std::memcmp(&cpu[i], &gpu[i], sizeof(T)) != 0)
      wrong(n, std::string(what) + " differs first at index " + std::to_string(i));
}

// The correctness gate: GPU == CPU on this size's input; leaves a valid payload on the device.
void validate(SizeState& s, const std::vector<float>& x) {
  const size_t n = s.n;
  const tq::EncodeParams p = bench_params();
  tc::Workspace& ws = *s.ws;
  try {
    std::vector<uint8_t> cpu_payload(tq::max_encoded_bytes(n));
    tq::encode(x, p, cpu_payload);
    tc::encode_async(s.x, n, p, s.payload, cpu_payload.size(), ws, g_stream);
    const tq::TensorStats gst = ws.stats(g_stream);
    check_same(n, "payload", cpu_payload, download(s.payload, cpu_payload.size()));

    const tq::TensorStats cst = tq::compute_stats(x);
    if (gst.count != cst.count || std::memcmp(&gst.mean, &cst.mean, sizeof(double)) != 0 ||
        std::memcmp(&gst.stddev, &cst.stddev, sizeof(double)) != 0 ||
        std::memcmp(&gst.max_abs, &cst.max_abs, sizeof(float)) != 0) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "stats: GPU {%a, %a, %a}, CPU {%a, %a, %a}", gst.mean,
                    gst.stddev, static_cast<double>(gst.max_abs), cst.mean, cst.stddev,
                    static_cast<double>(cst.max_abs));
      wrong(n, buf);
    }

    std::vector<float> cpu_out(n);
    tq::decode(cpu_payload, cpu_out);
    tc::decode_async(s.payload, cpu_payload.size(), s.out, n, ws, g_stream);
    ws.check(g_stream);
    check_same(n, "decode", cpu_out, download(s.out, n));

    CUDA_OK(cudaMemcpyAsync(s.out, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, g_stream));
    std::vector<float> cpu_acc = x;
    tq::decode_accumulate(cpu_payload, cpu_acc);
    tc::decode_accumulate_async(s.payload, cpu_payload.size(), s.out, n, ws, g_stream);
    ws.check(g_stream);
    check_same(n, "decode_accumulate", cpu_acc, download(s.out, n));

    // The device scale-sharing flow; a shared scale above the own scale makes
    // the payload differ from the one above (flag, scale, codes).
    tc::local_scale_async(s.x, n, p.clip_factor, s.scale, ws, g_stream);
    ws.check(g_stream);
    const float own = download(s.scale, 1)[0];
    const float doubled = own * 2.0f;
    CUDA_OK(cudaMemcpyAsync(s.scale, &doubled, sizeof doubled, cudaMemcpyHostToDevice, g_stream));
    tc::encode_shared_async(s.x, n, p, s.scale, 1, s.payload, cpu_payload.size(), ws, g_stream);
    ws.check(g_stream);
    tq::EncodeParams shared_p = p;
    shared_p.shared_scale = doubled;
    std::vector<uint8_t> cpu_shared(cpu_payload.size());
    tq::encode(x, shared_p, cpu_shared);
    check_same(n, "local scale", std::vector<float>{tq::local_scale(cst, p.clip_factor)},
               std::vector<float>{own});
    check_same(n, "shared-scale payload", cpu_shared, download(s.payload, cpu_shared.size()));
    // The packed payloads: bytes and length as the CPU's, decoded as the CPU decodes them.
    for (tq::Packing packing : {tq::Packing::kBase3, tq::Packing::kEntropy}) {
      tq::EncodeParams pp = p;
      pp.packing = packing;
      const size_t cap = tq::max_encoded_bytes(n, packing);
      std::vector<uint8_t> cpu_packed(cap);
      cpu_packed.resize(tq::encode(x, pp, cpu_packed));
      uint8_t* dst = packing == tq::Packing::kBase3 ? s.base3 : s.entropy;
      const size_t len = tc::encode(s.x, n, pp, dst, cap, ws, g_stream);
      const std::string name = tq::packing_name(packing);
      check_same(n, (name + " payload").c_str(), cpu_packed, download(dst, len));
      if (packing == tq::Packing::kEntropy) s.entropy_bytes = len;
      std::vector<float> cpu_dec(n);
      tq::decode(cpu_packed, cpu_dec);
      tc::decode_any_async(dst, len, s.out, n, ws, g_stream);
      ws.check(g_stream);
      check_same(n, (name + " decode").c_str(), cpu_dec, download(s.out, n));
    }
    // Leave the plain payload for the decode benchmarks.
    tc::encode_async(s.x, n, p, s.payload, cpu_payload.size(), ws, g_stream);
    ws.check(g_stream);

    std::printf("  %-4s scale %.4g = %.2f sigma: GPU == CPU (payload, stats, decode, accumulate, shared, "
                "base3, entropy: %.3f bits/element%s)\n",
                size_label(n).c_str(), static_cast<double>(tq::bits_float(tq::load_le32(cpu_payload.data() + 16))),
                static_cast<double>(tq::bits_float(tq::load_le32(cpu_payload.data() + 16))) / cst.stddev,
                8.0 * static_cast<double>(s.entropy_bytes) / static_cast<double>(std::max<size_t>(n, 1)),
                download(s.entropy, tq::kHeaderCodecOffset + 1)[tq::kHeaderCodecOffset] == tq::kCodecTernaryEntropy
                    ? ""
                    : ", base-3 fallback");
  } catch (const tq::CodecError& e) {
    wrong(n, std::string("codec error: ") + e.what());
  }
}

// Best read-only bandwidth over `rounds` batches of the reduction kernel.
double measure_read_bandwidth(SizeState& s, int rounds) {
  const size_t ops = batch_for(s.n);
  double best = 0.0;
  for (int r = 0; r < rounds; ++r) {
    const double t = time_batch(
        ops, [&] { terngrad::bench::read_only_reduce_async(s.x, s.n, s.sink, g_stream); });
    best = std::max(best, 4.0 * static_cast<double>(s.n) * static_cast<double>(ops) / t);
  }
  return best;
}

// Runs the timed loop of one op and sets the counters from the GPU time.
template <class F>
void run_timed(benchmark::State& st, const SizeState& s, double traffic_bytes, F&& op) {
  const size_t ops = batch_for(s.n);
  double total_s = 0.0;
  double total_ops = 0.0;
  for (auto _ : st) {
    const double t = time_batch(ops, op);
    st.SetIterationTime(t / static_cast<double>(ops));
    total_s += t;
    total_ops += static_cast<double>(ops);
  }
  if (total_s <= 0.0) return;
  const double per_op = total_s / total_ops;
  st.counters["bytes_per_second"] = traffic_bytes / per_op;
  st.counters["items_per_second"] = static_cast<double>(s.n) / per_op;
  st.counters["frac_of_floor"] = traffic_bytes / s.floor_bw / per_op;
  st.counters["ops_per_batch"] = static_cast<double>(ops);
}

double body(size_t n) { return static_cast<double>(tq::body_bytes(n)); }

// Errors recorded during a timed loop would mean the timings measured early exits.
void require_clean(benchmark::State& st, SizeState& s) {
  try {
    s.ws->check(g_stream);
  } catch (const tq::CodecError& e) {
    st.SkipWithError(e.what());
  }
}

// --- baselines ---------------------------------------------------------------

void bm_mem_read(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  run_timed(st, s, 4.0 * static_cast<double>(n),
            [&] { terngrad::bench::read_only_reduce_async(s.x, n, s.sink, g_stream); });
}

void bm_mem_copy(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  run_timed(st, s, 8.0 * static_cast<double>(n), [&] {
    CUDA_OK(cudaMemcpyAsync(s.out, s.x, n * sizeof(float), cudaMemcpyDeviceToDevice, g_stream));
  });
}

// --- codec -------------------------------------------------------------------

void bm_stats(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  run_timed(st, s, 4.0 * static_cast<double>(n),
            [&] { tc::stats_async(s.x, n, *s.ws, g_stream); });
  require_clean(st, s);
}

// stream: format version 2's (the default) or version 1's, to compare the two in one run.
void bm_encode(benchmark::State& st, size_t n, tq::RandomStream stream) {
  SizeState& s = state_for(n);
  tq::EncodeParams p = bench_params();
  p.stream = stream;
  run_timed(st, s, 8.0 * static_cast<double>(n) + body(n), [&] {
    tc::encode_async(s.x, n, p, s.payload, tq::max_encoded_bytes(n), *s.ws, g_stream);
  });
  require_clean(st, s);
}

void bm_encode_shared(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const tq::EncodeParams p = bench_params();
  run_timed(st, s, 12.0 * static_cast<double>(n) + body(n), [&] {
    tc::local_scale_async(s.x, n, p.clip_factor, s.scale, *s.ws, g_stream);
    tc::encode_shared_async(s.x, n, p, s.scale, 1, s.payload, tq::max_encoded_bytes(n), *s.ws, g_stream);
  });
  require_clean(st, s);
}

void bm_decode(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  run_timed(st, s, 2.0 * body(n) + 4.0 * static_cast<double>(n), [&] {
    tc::decode_async(s.payload, tq::max_encoded_bytes(n), s.out, n, *s.ws, g_stream);
  });
  require_clean(st, s);
}

// The accumulator only gains multiples of s: it stays exact and finite.
void bm_decode_accumulate(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  run_timed(st, s, 2.0 * body(n) + 8.0 * static_cast<double>(n), [&] {
    tc::decode_accumulate_async(s.payload, tq::max_encoded_bytes(n), s.out, n, *s.ws, g_stream);
  });
  require_clean(st, s);
}

// --- packed payloads (codec 4 and 5) ---------------------------------------------

tq::EncodeParams packed_params(tq::Packing packing) {
  tq::EncodeParams p = bench_params();
  p.packing = packing;
  return p;
}

void bm_encode_base3(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const tq::EncodeParams p = packed_params(tq::Packing::kBase3);
  run_timed(st, s, 8.0 * static_cast<double>(n) + static_cast<double>(tq::base3_body_bytes(n)), [&] {
    tc::encode_async(s.x, n, p, s.packed_out, tq::max_encoded_bytes(n, p.packing), *s.ws, g_stream);
  });
  require_clean(st, s);
}

void bm_encode_entropy(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const tq::EncodeParams p = packed_params(tq::Packing::kEntropy);
  run_timed(st, s, 8.0 * static_cast<double>(n) + static_cast<double>(s.entropy_bytes), [&] {
    tc::encode_async(s.x, n, p, s.packed_out, tq::max_encoded_bytes(n, p.packing), *s.ws, g_stream);
  });
  require_clean(st, s);
  st.counters["bits_per_element"] = 8.0 * static_cast<double>(s.entropy_bytes) / static_cast<double>(n);
}

void bm_decode_base3(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  const size_t len = tq::max_encoded_bytes(n, tq::Packing::kBase3);
  run_timed(st, s, 2.0 * static_cast<double>(tq::base3_body_bytes(n)) + 4.0 * static_cast<double>(n),
            [&] { tc::decode_any_async(s.base3, len, s.out, n, *s.ws, g_stream); });
  require_clean(st, s);
}

void bm_decode_entropy(benchmark::State& st, size_t n) {
  SizeState& s = state_for(n);
  run_timed(st, s, static_cast<double>(s.entropy_bytes) + 4.0 * static_cast<double>(n),
            [&] { tc::decode_any_async(s.entropy, s.entropy_bytes, s.out, n, *s.ws, g_stream); });
  require_clean(st, s);
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first; Google Benchmark rejects flags it does not know.
  terngrad::bench::BenchArgs parsed = terngrad::bench::parse_bench_args(argc, argv);
  const bool quick = parsed.quick;
  std::vector<char*>& args = parsed.argv;
  int bargc = parsed.argc;
  if (!tc::device_available()) {
    std::printf("no CUDA device: skipping\n");
    return 0;
  }
  benchmark::Initialize(&bargc, args.data());
  if (benchmark::ReportUnrecognizedArguments(bargc, args.data())) return 1;

  std::vector<size_t> sizes;
  if (!parsed.sizes.empty())
    sizes = parsed.sizes;
  else if (quick)
    sizes = {size_t{1} << 12, size_t{1} << 20, size_t{1} << 24};
  else
    for (size_t n = size_t{1} << 12; n <= (size_t{1} << 26); n *= 4) sizes.push_back(n);

  int device = 0;
  CUDA_OK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_OK(cudaGetDeviceProperties(&prop, device));
  std::printf("codec_cuda_bench: %s, %s (%d SMs), clip %.1f\n", !parsed.sizes.empty() ? "--sizes" : quick ? "quick mode" : "all sizes",
              prop.name, prop.multiProcessorCount, static_cast<double>(kClip));
  CUDA_OK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  CUDA_OK(cudaEventCreate(&g_start));
  CUDA_OK(cudaEventCreate(&g_stop));

  // 1. Inputs and the correctness gate, for every size before any timing.
  std::printf("validating the GPU codec against the CPU codec on the bench input:\n");
  for (size_t n : sizes) {
    auto s = std::make_unique<SizeState>();
    s->n = n;
    s->x = device_alloc<float>(n);
    s->payload = device_alloc<uint8_t>(tq::max_encoded_bytes(n));
    s->out = device_alloc<float>(n);
    s->sink = device_alloc<uint32_t>(1);
    s->scale = device_alloc<float>(1);
    s->base3 = device_alloc<uint8_t>(tq::max_encoded_bytes(n, tq::Packing::kBase3));
    s->entropy = device_alloc<uint8_t>(tq::max_encoded_bytes(n, tq::Packing::kEntropy));
    s->packed_out = device_alloc<uint8_t>(tq::max_encoded_bytes(n, tq::Packing::kEntropy));
    s->ws = std::make_unique<tc::Workspace>(n);
    std::vector<float> x(n);
    terngrad::bench::fill_gradient(x.data(), n, kInputSeed);
    CUDA_OK(cudaMemcpyAsync(s->x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, g_stream));
    CUDA_OK(cudaStreamSynchronize(g_stream));
    validate(*s, x);
    g_states.emplace(n, std::move(s));
  }

  // 2. The floor: best read-only bandwidth per size.
  const int rounds = quick ? 5 : 20;
  std::printf("read-only bandwidth (best of %d batches):\n", rounds);
  for (size_t n : sizes) {
    SizeState& s = state_for(n);
    measure_read_bandwidth(s, 2);  // warm-up
    s.floor_bw = measure_read_bandwidth(s, rounds);
    std::printf("  %-5s %8.1f GB/s\n", size_label(n).c_str(), s.floor_bw / 1e9);
  }
  std::fflush(stdout);

  // 3. Baselines, then the codec, each over all sizes.
  using BmFn = void (*)(benchmark::State&, size_t);
  const std::vector<std::pair<std::string, BmFn>> ops = {
      {"mem_read", bm_mem_read}, {"mem_copy", bm_mem_copy},
      {"stats", bm_stats},
      {"encode", [](benchmark::State& st, size_t n) { bm_encode(st, n, tq::RandomStream::kPhilox7Half16); }},
      {"encode_v1", [](benchmark::State& st, size_t n) { bm_encode(st, n, tq::RandomStream::kPhilox10Word32); }},
      {"encode_shared", bm_encode_shared},
      {"decode", bm_decode},     {"decode_accumulate", bm_decode_accumulate},
      {"encode_base3", bm_encode_base3},   {"encode_entropy", bm_encode_entropy},
      {"decode_base3", bm_decode_base3},   {"decode_entropy", bm_decode_entropy},
  };
  for (const auto& [name, fn] : ops)
    for (size_t n : sizes)
      benchmark::RegisterBenchmark((name + "/" + std::to_string(n)).c_str(), fn, n)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  g_states.clear();
  cudaEventDestroy(g_start);
  cudaEventDestroy(g_stop);
  cudaStreamDestroy(g_stream);
  return 0;
}
