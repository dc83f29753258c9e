// The parameter server's per-step sums against a memory-bandwidth floor for
// the same bytes, measured in the same run:
//   fp32 sum       R float32 bodies -> float32 (quantize/dense_sum.h), and the
//                  fp32 codec's aggregate around it; baseline: the scalar loop
//                  the fp32 aggregate ran before (load_f32s copies, 2048 at a time)
//   fp16 sum       R binary16 bodies -> float32; baseline: the default
//                  aggregate the fp16 codec ran before (R decode_accumulate
//                  passes over a fresh tensor-sized float vector, then a copy)
//   terngrad sum   sum_payloads of R shared-scale payloads (ternary_sum.h)
//   terngrad entropy intake+sum
//                  a ps step of R entropy-coded pushes: validation and the
//                  entropy-coded sum, the pushes kept as they came (decoded
//                  twice) against kept as 2-bit codes (quantize::repack)
//
//   ps_sum_bench [--n=16777216] [--reps=7] [--round=0.15] [--only=fp32|fp16|terngrad] [--quick]
//
// Traffic of an op: the R bodies read once and its output written once (the
// fp32 sum: 4Rn + 4n bytes; fp16: 2Rn + 4n; terngrad: R n/4 + n bit_width(2R)/8).
//
// The floor of an op is the time this machine takes to read R buffers of the
// op's input size and write one of its output size with a kernel that does
// nothing else: 64-byte vector loads ORed together (so they cannot be dropped),
// stores of that vector, all streams advancing together in steps of 4 KiB or
// of 256 bytes of each input (the output in proportion). It runs with both
// step sizes, regular and non-temporal stores, on one thread and on all, and
// the fastest of those is the floor: an upper bound on the bandwidth a sum of
// those bytes can reach, as far as these access patterns find it (a frac
// somewhat above 1 says the op found a better pattern than the floor did).
//
// Noise. This is not Google Benchmark: on a shared machine a burst of someone
// else's work must hit the floor and the op alike, so each repetition times
// the floor variants and then every op of that shape back to back, and the
// summary takes medians over the repetitions. frac = (op's median GB/s) /
// (the best floor round of the whole run, same thread count class), the
// stricter of the two ratios printed; paired = median over repetitions of
// (floor time / op time) within one repetition. Multithreaded ops are held to
// the best floor of any thread count; single-thread ops to the 1-thread floor.
//
// Before any timing, each op's output is checked: the SIMD fp32 / fp16 sums
// against the old loops, bit for bit; sum_payloads against sum_shared +
// encode_sum. A mismatch aborts.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench_common.h"
#include "memory_baseline.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/dense_sum.h"
#include "terngrad/quantize/fp16.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;
namespace tc = terngrad::comm;
using tg_bench::AlignedArray;

namespace {

constexpr double kTargetFrac = 0.50;
constexpr size_t kHeader = 16;
// Modes: kCold, every call with the caches evicted first (its bytes come from
// memory: the target's floor); kHot, calls back to back (what fits in the
// caches stays there: at 16M the TernGrad sums' 15-25 MB do).
constexpr int kCold = 0, kHot = 1;
const char* const kModeName[2] = {"from memory (caches evicted before every call)", "hot (calls back to back)"};  // the dense payload header: bodies start 16 bytes in

// ------------------------------------------------------------------ the floor

// Thread t's share [begin, end) of `bytes`, cut on 64-byte lines.
void thread_share(size_t bytes, size_t t, size_t nt, size_t& begin, size_t& end) {
  const size_t per = ((bytes + nt - 1) / nt + 63) / 64 * 64;
  begin = std::min(bytes, t * per);
  end = std::min(bytes, begin + per);
}

#if defined(TG_BENCH_X86)
template <bool kNonTemporal>
__attribute__((target("avx512f"))) void stream_avx512(const uint8_t* const* in, size_t r, size_t in_b, size_t in_e,
                                                      uint8_t* out, size_t out_b, size_t out_e, size_t step_bytes) {
  // Steps of step_bytes of each input; the output advances in proportion.
  const size_t in_len = in_e - in_b, out_len = out_e - out_b;
  const size_t steps = std::max<size_t>(1, in_len / step_bytes);
  const size_t in_step = (in_len / steps + 255) / 256 * 256;
  const size_t out_step = (out_len / steps + 63) / 64 * 64;
  __m512i acc0 = _mm512_setzero_si512(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  size_t ib = in_b, ob = out_b;
  while (ib < in_e || ob < out_e) {
    const size_t ie = std::min(in_e, ib + in_step), oe = std::min(out_e, ob + out_step);
    for (size_t k = 0; k < r; ++k) {
      const uint8_t* p = in[k];
      size_t i = ib;
      for (; i + 256 <= ie; i += 256) {
        acc0 = _mm512_or_si512(acc0, _mm512_loadu_si512(p + i));
        acc1 = _mm512_or_si512(acc1, _mm512_loadu_si512(p + i + 64));
        acc2 = _mm512_or_si512(acc2, _mm512_loadu_si512(p + i + 128));
        acc3 = _mm512_or_si512(acc3, _mm512_loadu_si512(p + i + 192));
      }
      for (; i + 64 <= ie; i += 64) acc0 = _mm512_or_si512(acc0, _mm512_loadu_si512(p + i));
    }
    const __m512i v = _mm512_or_si512(_mm512_or_si512(acc0, acc1), _mm512_or_si512(acc2, acc3));
    for (size_t o = ob; o + 64 <= oe; o += 64) {
      if (kNonTemporal)
        _mm512_stream_si512(reinterpret_cast<__m512i*>(out + o), v);
      else
        _mm512_storeu_si512(out + o, v);
    }
    ib = ie;
    ob = oe;
  }
  if (kNonTemporal) _mm_sfence();
}
#endif

// Portable stand-in where AVX-512 is missing: 8-byte words, the same pattern.
void stream_generic(const uint8_t* const* in, size_t r, size_t in_b, size_t in_e, uint8_t* out, size_t out_b,
                    size_t out_e, size_t step_bytes) {
  const size_t in_len = in_e - in_b, out_len = out_e - out_b;
  const size_t steps = std::max<size_t>(1, in_len / step_bytes);
  const size_t in_step = (in_len / steps + 63) / 64 * 64, out_step = (out_len / steps + 63) / 64 * 64;
  uint64_t acc = 0;
  size_t ib = in_b, ob = out_b;
  while (ib < in_e || ob < out_e) {
    const size_t ie = std::min(in_e, ib + in_step), oe = std::min(out_e, ob + out_step);
    for (size_t k = 0; k < r; ++k) {
      for (size_t i = ib; i + 8 <= ie; i += 8) {
        uint64_t w;
        std::memcpy(&w, in[k] + i, 8);
        acc |= w;
      }
    }
    for (size_t o = ob; o + 8 <= oe; o += 8) std::memcpy(out + o, &acc, 8);
    ib = ie;
    ob = oe;
  }
}

// One pass of the floor kernel over the whole shape (R inputs of in_bytes, an
// output of out_bytes; all 64-byte aligned), on one thread or all.
void stream_pass(const std::vector<const uint8_t*>& in, size_t in_bytes, uint8_t* out, size_t out_bytes,
                 bool parallel, bool non_temporal, size_t step_bytes) {
  auto run = [&](size_t t, size_t nt) {
    size_t ib, ie, ob, oe;
    thread_share(in_bytes, t, nt, ib, ie);
    thread_share(out_bytes, t, nt, ob, oe);
#if defined(TG_BENCH_X86)
    if (tg_bench::have_avx512()) {
      if (non_temporal)
        stream_avx512<true>(in.data(), in.size(), ib, ie, out, ob, oe, step_bytes);
      else
        stream_avx512<false>(in.data(), in.size(), ib, ie, out, ob, oe, step_bytes);
      return;
    }
#endif
    (void)non_temporal;
    stream_generic(in.data(), in.size(), ib, ie, out, ob, oe, step_bytes);
  };
  if (!parallel) {
    run(0, 1);
    return;
  }
#pragma omp parallel
  run(static_cast<size_t>(omp_get_thread_num()), static_cast<size_t>(omp_get_num_threads()));
}

// ------------------------------------------------------------------ timing

// Reads `junk` (a few times the last-level cache) on every thread of the
// team: evicts the op's buffers, so its next call fetches them from memory,
// and keeps the OpenMP team awake for it.
float evict_caches(const AlignedArray<float>& junk) {
  return tg_bench::read_pass(junk.data(), junk.size(), true);
}

// Mean seconds per call of f over a round. Hot: back-to-back calls for at
// least min_round_s, the data staying in whatever cache holds it. Cold: each
// call after evict_caches (untimed), 3 to 20 calls, at least min_round_s / 4
// of timed work.
double seconds_per_call(const std::function<void()>& f, double min_round_s, const AlignedArray<float>* junk) {
  using clock = std::chrono::steady_clock;
  size_t calls = 0;
  double elapsed = 0.0;
  if (junk != nullptr) {
    volatile float sink = 0.0f;
    do {
      sink = sink + evict_caches(*junk);
      const auto t0 = clock::now();
      f();
      elapsed += std::chrono::duration<double>(clock::now() - t0).count();
      ++calls;
    } while (calls < 3 || (calls < 20 && elapsed < min_round_s / 4));
    return elapsed / static_cast<double>(calls);
  }
  const auto t0 = clock::now();
  do {
    f();
    ++calls;
    elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  } while (elapsed < min_round_s);
  return elapsed / static_cast<double>(calls);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Runs f with `threads` OpenMP threads (0: the default team).
void with_threads(int threads, const std::function<void()>& f) {
  const int saved = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  f();
  omp_set_num_threads(saved);
}

struct Op {
  std::string name;
  int threads = 0;       // 0: all (the default team), 1: one thread
  bool targeted = false;  // held to kTargetFrac
  std::function<void()> fn;
  std::vector<double> seconds[2], paired[2];  // per repetition, per mode (kCold, kHot)
};

// Ops that move the same bytes, timed against one floor.
struct Shape {
  std::string label;
  size_t r = 0, in_bytes = 0, out_bytes = 0;
  std::vector<Op> ops;
  std::vector<double> floor_1t[2], floor_mt[2];  // per repetition and mode, seconds: fastest variant
  double traffic() const { return static_cast<double>(r * in_bytes + out_bytes); }
};

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "\n*** ps_sum_bench: WRONG OUTPUT: %s\n*** refusing to time it; aborting.\n", what.c_str());
  std::abort();
}

std::string flag_text(int argc, char** argv, const char* name) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') return argv[i] + len + 1;
  return "";
}

std::string cpu_model() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "unknown CPU";
  char line[512];
  std::string model = "unknown CPU", family, number;
  while (std::fgets(line, sizeof line, f)) {
    const char* colon = std::strchr(line, ':');
    if (!colon) continue;
    const std::string value(colon + 2, std::strcspn(colon + 2, "\n"));
    if (std::strncmp(line, "model name", 10) == 0 || std::strncmp(line, "CPU part", 8) == 0) model = value;
    if (std::strncmp(line, "cpu family", 10) == 0) family = value;
    if (std::strncmp(line, "model\t", 6) == 0) number = value;
    if (line[0] == '\n') break;  // the first processor is enough
  }
  std::fclose(f);
  if (!family.empty()) model += " (family " + family + " model " + number + ")";
  return model;
}

size_t flag_value(int argc, char** argv, const char* name, size_t fallback) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') return std::strtoull(argv[i] + len + 1, nullptr, 10);
  return fallback;
}

double flag_double(int argc, char** argv, const char* name, double fallback) {
  const size_t len = std::strlen(name);
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], name, len) == 0 && argv[i][len] == '=') return std::strtod(argv[i] + len + 1, nullptr);
  return fallback;
}

// The fp32 aggregate's loop before dense_sum (comm/codecs/fp32_codec.cpp at
// 4dddbd9), verbatim but for the payload plumbing: copies into stack blocks
// (load_f32s is a memcpy on little-endian hosts), a scalar add loop, a copy out.
void old_fp32_sum(const std::vector<const uint8_t*>& bodies, uint64_t n, uint8_t* out) {
  constexpr size_t kBlock = 2048;
  float acc[kBlock], v[kBlock];
  for (uint64_t b = 0; b < n; b += kBlock) {
    const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlock, n - b));
    std::fill(acc, acc + m, 0.0f);
    for (const uint8_t* p : bodies) {
      std::memcpy(v, p + 4 * b, m * sizeof(float));
      for (size_t i = 0; i < m; ++i) acc[i] += v[i];
    }
    std::memcpy(out + 4 * b, acc, m * sizeof(float));
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::printf("usage: ps_sum_bench [--n=16777216] [--reps=7] [--round=0.15] [--only=fp32|fp16|terngrad] [--quick]\n"
                  "The ps's per-step sums (fp32, fp16, terngrad, an entropy-coded step's intake and sum)\n"
                  "against a read/write floor of the same bytes, measured in the same run.\n");
      return 0;
    }
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
  }
  if (const char* e = std::getenv("TG_BENCH_QUICK")) quick = quick || (*e != '\0' && std::strcmp(e, "0") != 0);
  const size_t n = flag_value(argc, argv, "--n", quick ? (size_t{1} << 20) : (size_t{1} << 24));
  const int reps = static_cast<int>(flag_value(argc, argv, "--reps", quick ? 2 : 7));
  const double round_s = flag_double(argc, argv, "--round", quick ? 0.03 : 0.15);
  const int nthreads = omp_get_max_threads();
  if (n % 1024 != 0) {
    std::fprintf(stderr, "ps_sum_bench: --n must be a multiple of 1024\n");
    return 1;
  }

  std::printf("ps_sum_bench: n = %zu, %d repetitions of >= %.2f s, %d OpenMP threads\n", n, reps, round_s, nthreads);
  std::printf("CPU %s; codec kernels %s (TG_CPU_SIMD forces one); floor kernel %s\n", cpu_model().c_str(),
              tq::simd_level_name(tq::cpu_simd_level()), tg_bench::have_avx512() ? "AVX-512" : "generic 64-bit");

  // Inputs: R = 4 gradients, as float32 and fp16 payloads (bodies 16 bytes
  // into page-aligned buffers, where a received payload's body would be) and
  // as shared-scale TernGrad payloads.
  constexpr uint32_t kMaxR = 4;
  std::vector<AlignedArray<float>> grads;
  std::vector<AlignedArray<uint8_t>> f32_payloads, f16_payloads, tern_payloads;
  auto fp32_codec = tc::make_codec("fp32"), fp16_codec = tc::make_codec("fp16");
  for (uint32_t r = 0; r < kMaxR; ++r) {
    grads.emplace_back(n);
    terngrad::bench::fill_gradient(grads.back().data(), n, terngrad::bench::kInputSeed + r);
    const std::span<const float> g{grads.back().data(), n};
    f32_payloads.emplace_back(fp32_codec->payload_bytes(n));
    fp32_codec->encode(g, {}, {f32_payloads.back().data(), fp32_codec->payload_bytes(n)});
    f16_payloads.emplace_back(fp16_codec->payload_bytes(n));
    fp16_codec->encode(g, {}, {f16_payloads.back().data(), fp16_codec->payload_bytes(n)});
  }
  tq::EncodeParams tp = terngrad::bench::bench_params();
  tp.shared_scale = 1.25f * tq::local_scale(tq::compute_stats({grads[0].data(), n}), terngrad::bench::kClip);
  for (uint32_t r = 0; r < kMaxR; ++r) {
    tp.step = 100 + r;
    tern_payloads.emplace_back(tq::max_encoded_bytes(n));
    tq::encode({grads[r].data(), n}, tp, {tern_payloads.back().data(), tq::max_encoded_bytes(n)});
  }
  // The same gradients entropy-coded (codec 5), as workers of
  // terngrad:pack=entropy push them.
  std::vector<std::vector<uint8_t>> ent_payloads;
  tq::EncodeParams ep = tp;
  ep.packing = tq::Packing::kEntropy;
  for (uint32_t r = 0; r < kMaxR; ++r) {
    ep.step = 100 + r;
    ent_payloads.emplace_back(tq::max_encoded_bytes(n, ep.packing));
    ent_payloads.back().resize(tq::encode({grads[r].data(), n}, ep, ent_payloads.back()));
  }
  std::vector<std::vector<uint8_t>> ent_kept(kMaxR, std::vector<uint8_t>(tq::max_encoded_bytes(n)));
  // Outputs (every op of a shape writes the same buffer) and the floor's
  // aligned stand-ins: the same sizes, at the start of their pages.
  AlignedArray<uint8_t> out_dense(kHeader + 4 * n), out_tern(tq::sum_payload_bytes(n, kMaxR));
  std::vector<uint8_t> out_vec, out_vec_old;  // the codecs' aggregate output, reused
  std::memset(out_dense.data(), 0, out_dense.size());
  std::memset(out_tern.data(), 0, out_tern.size());

  std::vector<Shape> shapes;
  for (uint32_t r : {2u, 4u}) {
    std::vector<const uint8_t*> f32_bodies, f16_bodies;
    std::vector<std::span<const uint8_t>> f32_views, f16_views, tern_views;
    for (uint32_t i = 0; i < r; ++i) {
      f32_bodies.push_back(f32_payloads[i].data() + kHeader);
      f16_bodies.push_back(f16_payloads[i].data() + kHeader);
      f32_views.emplace_back(f32_payloads[i].data(), f32_payloads[i].size());
      f16_views.emplace_back(f16_payloads[i].data(), f16_payloads[i].size());
      tern_views.emplace_back(tern_payloads[i].data(), tq::max_encoded_bytes(n));
    }
    uint8_t* dense_out = out_dense.data() + kHeader;

    // Correctness gate.
    {
      std::vector<uint8_t> want(4 * n);
      old_fp32_sum(f32_bodies, n, want.data());
      tq::dense_sum_f32(f32_bodies, n, dense_out);
      if (std::memcmp(want.data(), dense_out, 4 * n) != 0) fail("dense_sum_f32 differs from the old loop, R = " + std::to_string(r));
      fp32_codec->aggregate(f32_views, n, out_vec);
      if (std::memcmp(want.data(), out_vec.data() + kHeader, 4 * n) != 0) fail("fp32 aggregate differs from the old loop");
      fp16_codec->tc::GradientCodec::aggregate(f16_views, n, out_vec_old);  // the old fp16 path
      tq::dense_sum_f16(f16_bodies, n, dense_out);
      if (std::memcmp(out_vec_old.data() + kHeader, dense_out, 4 * n) != 0) fail("dense_sum_f16 differs from the default aggregate");
      fp16_codec->aggregate(f16_views, n, out_vec);
      if (out_vec != out_vec_old) fail("fp16 aggregate differs from the default aggregate");
      const size_t bytes = tq::sum_payloads(tern_views, {out_tern.data(), out_tern.size()});
      std::vector<int16_t> counts(n);
      const float scale = tq::sum_shared(tern_views, counts);
      std::vector<uint8_t> tern_want(tq::sum_payload_bytes(n, r));
      tq::encode_sum(counts, scale, r, tp.tensor_id, 100, tern_want);
      if (bytes != tern_want.size() || std::memcmp(out_tern.data(), tern_want.data(), bytes) != 0)
        fail("sum_payloads differs from sum_shared + encode_sum, R = " + std::to_string(r));
    }

    const std::string rs = "R=" + std::to_string(r);
    Shape f32{"fp32 " + rs, r, 4 * n, 4 * n, {}, {}, {}};
    f32.ops.push_back({"dense_sum_f32", 0, true, [=] { tq::dense_sum_f32(f32_bodies, n, dense_out); }, {}, {}});
    f32.ops.push_back({"dense_sum_f32", 1, true, [=] { tq::dense_sum_f32(f32_bodies, n, dense_out); }, {}, {}});
    f32.ops.push_back({"fp32 aggregate", 0, false,
                       [&, f32_views] { fp32_codec->aggregate(f32_views, n, out_vec); }, {}, {}});
    f32.ops.push_back({"old scalar loop", 1, false, [=] { old_fp32_sum(f32_bodies, n, dense_out); }, {}, {}});
    shapes.push_back(std::move(f32));

    Shape f16{"fp16 " + rs, r, 2 * n, 4 * n, {}, {}, {}};
    f16.ops.push_back({"dense_sum_f16", 0, false, [=] { tq::dense_sum_f16(f16_bodies, n, dense_out); }, {}, {}});
    f16.ops.push_back({"dense_sum_f16", 1, false, [=] { tq::dense_sum_f16(f16_bodies, n, dense_out); }, {}, {}});
    f16.ops.push_back({"old default aggregate", 0, false,
                       [&, f16_views] { fp16_codec->tc::GradientCodec::aggregate(f16_views, n, out_vec_old); }, {}, {}});
    shapes.push_back(std::move(f16));

    const size_t sum_body = tq::sum_payload_bytes(n, r) - tq::kHeaderBytes;
    Shape tern{"terngrad " + rs, r, tq::body_bytes(n), sum_body, {}, {}, {}};
    auto tern_sum = [&, tern_views] {
      size_t w = tq::sum_payloads(tern_views, {out_tern.data(), out_tern.size()});
      if (w == 0) std::abort();
    };
    tern.ops.push_back({"sum_payloads", 0, true, tern_sum, {}, {}});
    tern.ops.push_back({"sum_payloads", 1, true, tern_sum, {}, {}});
    shapes.push_back(std::move(tern));

    // A ps step of entropy-coded pushes, intake (validation) and the
    // entropy-coded sum: each push inspected then summed from its rANS
    // streams (decoded twice, as before), against each push repacked to
    // 2-bit codes on intake and the 2-bit codes summed (what the ps keeps,
    // GradientCodec::validate_for_server). Both must write the same sum.
    std::vector<std::span<const uint8_t>> ent_views(ent_payloads.begin(), ent_payloads.begin() + r);
    std::vector<std::span<const uint8_t>> kept_views;
    for (uint32_t i = 0; i < r; ++i) kept_views.emplace_back(ent_kept[i]);
    const tq::SumPacking ent_sum = tq::SumPacking::kEntropy;
    auto decode_twice = [&, ent_views] {
      for (const auto& v : ent_views) tq::inspect(v);
      return tq::sum_payloads(ent_views, {out_tern.data(), out_tern.size()}, ent_sum);
    };
    auto keep_codes = [&, ent_views, kept_views, r] {
      for (uint32_t i = 0; i < r; ++i) tq::repack(ent_views[i], tq::Packing::k2Bit, ent_kept[i]);
      return tq::sum_payloads(kept_views, {out_tern.data(), out_tern.size()}, ent_sum);
    };
    {
      const size_t len = decode_twice();
      const std::vector<uint8_t> before(out_tern.data(), out_tern.data() + len);
      if (keep_codes() != len || std::memcmp(before.data(), out_tern.data(), len) != 0)
        fail("the entropy-coded sum of the repacked pushes differs from the pushes' own, R = " + std::to_string(r));
    }
    size_t ent_in = 0;
    for (const auto& v : ent_views) ent_in = std::max(ent_in, v.size());
    Shape ent{"terngrad entropy intake+sum " + rs, r, ent_in, sum_body, {}, {}, {}};
    ent.ops.push_back({"inspect + sum (decoded twice)", 0, false, [=] { decode_twice(); }, {}, {}});
    ent.ops.push_back({"repack to 2-bit + sum", 0, false, [=] { keep_codes(); }, {}, {}});
    shapes.push_back(std::move(ent));
  }

  // --only: the shapes whose label starts with it.
  if (const std::string only = flag_text(argc, argv, "--only"); !only.empty())
    std::erase_if(shapes, [&](const Shape& s) { return s.label.rfind(only, 0) != 0; });

  // The floor's buffers: page-aligned, as large as the largest shape needs.
  size_t max_in = 0, max_out = 0;
  for (const Shape& s : shapes) {
    max_in = std::max(max_in, s.in_bytes);
    max_out = std::max(max_out, s.out_bytes);
  }
  std::vector<AlignedArray<uint8_t>> floor_in;
  std::vector<const uint8_t*> floor_ptrs;
  for (uint32_t r = 0; r < kMaxR; ++r) {
    floor_in.emplace_back(max_in);
    std::memset(floor_in.back().data(), static_cast<int>(r + 1), max_in);
    floor_ptrs.push_back(floor_in.back().data());
  }
  AlignedArray<uint8_t> floor_out(max_out);
  std::memset(floor_out.data(), 0, max_out);

  // Eviction buffer: 4x the last-level cache of this machine class (32 MiB), at least 128 MiB.
  AlignedArray<float> junk(size_t{32} << 20);
  for (size_t i = 0; i < junk.size(); ++i) junk[i] = 1.0f;

  std::printf("timing (per repetition: the floor and the ops of one shape back to back, from memory, then hot)...\n");
  std::fflush(stdout);
  for (Shape& s : shapes) {
    const std::vector<const uint8_t*> in(floor_ptrs.begin(), floor_ptrs.begin() + s.r);
    auto floor_time = [&](bool parallel, const AlignedArray<float>* evict) {
      double best = 1e30;
      for (size_t step : {size_t{4096}, size_t{256}})
        for (bool nt : {false, true})
          best = std::min(best, seconds_per_call(
                                    [&] { stream_pass(in, s.in_bytes, floor_out.data(), s.out_bytes, parallel, nt, step); },
                                    round_s / 4, evict));
      return best;
    };
    for (Op& op : s.ops) with_threads(op.threads, op.fn);  // warm-up: page faults, the OpenMP team
    for (int rep = 0; rep < reps; ++rep) {
      for (int mode : {kCold, kHot}) {
        const AlignedArray<float>* evict = mode == kCold ? &junk : nullptr;
        const double f1 = floor_time(false, evict), fm = floor_time(true, evict);
        s.floor_1t[mode].push_back(f1);
        s.floor_mt[mode].push_back(fm);
        for (Op& op : s.ops) {
          double t = 0.0;
          with_threads(op.threads, [&] { t = seconds_per_call(op.fn, round_s, evict); });
          op.seconds[mode].push_back(t);
          op.paired[mode].push_back((op.threads == 1 ? f1 : std::min(f1, fm)) / t);
        }
      }
    }
  }

  std::printf("\n=== ps_sum_bench summary: n = %zu (%s), %d repetitions, medians ===\n", n,
              terngrad::bench::size_label(n).c_str(), reps);
  std::printf("GB/s over the op's traffic (R bodies read + output written, 1 GB = 1e9 B);\n"
              "floor = fastest floor round of the run, same mode (1 thread: the 1-thread floor; all threads: any);\n"
              "frac = GB/s / floor; paired = median of per-repetition floor time / op time.\n"
              "The target (>= %.2f) is judged from memory; hot rows are for information.\n", kTargetFrac);
  int missed = 0, evaluated = 0;
  for (int mode : {kCold, kHot}) {
    std::printf("\n-- %s\n", kModeName[mode]);
    std::printf("%-13s %-22s %7s %9s %8s %8s %6s %7s  %s\n", "shape", "op", "threads", "traffic", "GB/s", "floor",
                "frac", "paired", mode == kCold ? "target" : "");
    for (const Shape& s : shapes) {
      const double best_1t = *std::min_element(s.floor_1t[mode].begin(), s.floor_1t[mode].end());
      const double best_any = std::min(best_1t, *std::min_element(s.floor_mt[mode].begin(), s.floor_mt[mode].end()));
      for (const Op& op : s.ops) {
        const double gbs = s.traffic() / median(op.seconds[mode]) / 1e9;
        const double floor_gbs = s.traffic() / (op.threads == 1 ? best_1t : best_any) / 1e9;
        const double frac = gbs / floor_gbs;
        std::string verdict = "-";
        if (op.targeted && mode == kCold) {
          ++evaluated;
          verdict = frac >= kTargetFrac ? "PASS" : "MISS";
          missed += frac < kTargetFrac;
        }
        char traffic[32];
        std::snprintf(traffic, sizeof traffic, "%.0f MB", s.traffic() / 1e6);
        std::printf("%-13s %-22s %7d %9s %8.2f %8.2f %6.3f %7.3f  %s\n", s.label.c_str(), op.name.c_str(),
                    op.threads == 0 ? nthreads : op.threads, traffic, gbs, floor_gbs, frac, median(op.paired[mode]),
                    mode == kCold ? verdict.c_str() : "");
      }
    }
    std::printf("floor, GB/s (1 thread / all threads: median, best):\n");
    for (const Shape& s : shapes)
      std::printf("  %-13s %.1f / %.1f, best %.1f / %.1f\n", s.label.c_str(),
                  s.traffic() / median(s.floor_1t[mode]) / 1e9, s.traffic() / median(s.floor_mt[mode]) / 1e9,
                  s.traffic() / *std::min_element(s.floor_1t[mode].begin(), s.floor_1t[mode].end()) / 1e9,
                  s.traffic() / *std::min_element(s.floor_mt[mode].begin(), s.floor_mt[mode].end()) / 1e9);
  }
  if (missed == 0)
    std::printf("TARGETS: HOLD (%d of %d)\n", evaluated, evaluated);
  else
    std::printf("TARGETS: MISSED %d of %d\n", missed, evaluated);
  return 0;
}
