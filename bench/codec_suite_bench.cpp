// Encode speed of every codec of the suite (comm/codec_config.h), through the
// GradientCodec interface a trainer calls, against the memory-bandwidth floor
// measured in this same run.
//
//   ./bench/codec_suite_bench [--quick] [--sizes=16M,1M] [--specs=a;b;...] [--half=bfloat16]
//
// --half=bfloat16|float16: the gradient as halves instead, each codec's
// encode reading them directly against widening them into a float32 copy
// first (the same bytes, checked), as a ratio in the same run.
//
// The floor. Any encoder reads its input once and writes its payload: 4n +
// payload bytes. The floor is that traffic / (best read bandwidth of this
// machine over the same buffer, all threads), measured before the codecs
// and again after them (the best of both: a busy neighbour can only slow a
// pass down). frac_of_floor = floor time / encode time; the target is >= 0.25
// at 16M elements. (codec_cpu_bench counts TernGrad's two passes, 8n + n/4,
// as its minimal traffic; this bench holds every codec to one pass.)
//
// Before timing, each codec's output is checked on the bench input: the
// payload decodes to finite values that point the way of the gradient
// (cosine > 0.05), and fp32 exactly. A codec that fails is reported and not
// timed: timing a wrong codec is useless.
//
// Timing: encode of one variable, whole (one slice), with local_scale() first
// for the codecs that share scales (as the trainer does: both are the
// worker's cost). Best and median of several rounds, each repeating encode
// until it has run >= 0.2 s (0.05 s with --quick).
#include <omp.h>

#include <algorithm>
#include <bit>
#include <optional>
#include <stdexcept>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "memory_baseline.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/fp16.h"
#include "terngrad/quantize/half_input.h"

namespace tc = terngrad::comm;
namespace tq = terngrad::quantize;

namespace {

using Clock = std::chrono::steady_clock;

const char* const kDefaultSpecs[] = {
    "fp32", "fp16", "terngrad", "terngrad:share_scale=0", "qsgd:levels=127,bucket=512", "qsgd:levels=7,bucket=512",
    "qsgd:levels=1,bucket=512",
    "sign", "sign:scale=mean", "topk:ratio=0.01", "topk:ratio=0.001,values=fp16", "randomk:ratio=0.01",
    "ef(terngrad)", "ef(sign:scale=mean)", "ef(topk:ratio=0.01)"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(sep, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

// "16M", "64K", "1000"; 0 on anything else (the caller names the argument).
size_t parse_size(const std::string& s) {
  const char unit = s.empty() ? '\0' : s.back();
  const size_t mult = unit == 'M' ? (size_t{1} << 20) : unit == 'K' ? (size_t{1} << 10) : 1;
  const std::string digits = mult == 1 ? s : s.substr(0, s.size() - 1);
  if (digits.empty() || digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return static_cast<size_t>(std::stoull(digits)) * mult;
}

// One encode as a worker runs it.
size_t encode_once(tc::GradientCodec& codec, std::span<const float> g, std::span<uint8_t> out, uint32_t step) {
  tc::EncodeContext ctx;
  ctx.tensor_id = 3;
  ctx.step = step;
  ctx.seed = terngrad::bench::kCodecSeed;
  if (codec.wants_shared_scale()) ctx.shared_scale = codec.local_scale(g);
  return codec.encode(g, ctx, out);
}

// Empty when the codec's output is plausible, else what is wrong.
std::string check_codec(tc::GradientCodec& codec, const std::string& spec, std::span<const float> g) {
  std::vector<uint8_t> out(codec.payload_bytes(g.size()));
  try {
    // A variable-size codec's payload is the first encode() bytes of its
    // buffer (payload_bytes() is a capacity), and only those decode.
    const size_t used = encode_once(codec, g, out, 1);
    std::vector<float> d(g.size());
    codec.decode(std::span<const uint8_t>(out).first(used), d);
    double dot = 0, gg = 0, dd = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (!std::isfinite(d[i])) return "decoded element " + std::to_string(i) + " is not finite";
      if (spec == "fp32" && d[i] != g[i]) return "fp32 does not round-trip at element " + std::to_string(i);
      dot += static_cast<double>(d[i]) * g[i];
      gg += static_cast<double>(g[i]) * g[i];
      dd += static_cast<double>(d[i]) * d[i];
    }
    const double cosine = dot / std::sqrt(gg * dd);
    if (!(cosine > 0.05)) return "decoded gradient has cosine " + std::to_string(cosine) + " with the input";
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

struct Timing {
  double best_s = 0, median_s = 0;
};

// Best and median seconds of once(step) over rounds, each repeating it for
// at least min_round_s, after a warm-up call (first touch of scratch buffers).
template <class Once>
Timing time_rounds(Once&& once, int rounds, double min_round_s) {
  uint32_t step = 10;
  once(step++);
  std::vector<double> per_op;
  for (int r = 0; r < rounds; ++r) {
    size_t reps = 0;
    const auto t0 = Clock::now();
    double elapsed = 0;
    do {
      once(step++);
      ++reps;
      elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (elapsed < min_round_s);
    per_op.push_back(elapsed / static_cast<double>(reps));
  }
  std::sort(per_op.begin(), per_op.end());
  return {per_op.front(), per_op[per_op.size() / 2]};
}

Timing time_encode(tc::GradientCodec& codec, std::span<const float> g, int rounds, double min_round_s) {
  std::vector<uint8_t> out(codec.payload_bytes(g.size()));
  return time_rounds([&](uint32_t step) { encode_once(codec, g, out, step); }, rounds, min_round_s);
}

// --half: one encode of a 16-bit gradient read directly (the *_half calls),
// and the baseline of a caller without them: widen into a float32 copy, then
// the float32 encode.
size_t encode_half_once(tc::GradientCodec& codec, tq::HalfTensor h, std::span<uint8_t> out, uint32_t step) {
  tc::EncodeContext ctx;
  ctx.tensor_id = 3;
  ctx.step = step;
  ctx.seed = terngrad::bench::kCodecSeed;
  if (codec.wants_shared_scale()) ctx.shared_scale = codec.local_scale_half(h);
  const tc::ElementRange whole{0, h.size()};
  const std::span<uint8_t> outs[1] = {out};
  codec.encode_slices_half(h, ctx, std::span(&whole, 1), outs);
  return codec.encoded_size(out, h.size());
}

size_t encode_copy_once(tc::GradientCodec& codec, tq::HalfTensor h, std::vector<float>& copy, std::span<uint8_t> out,
                        uint32_t step) {
  tq::widen(h, copy);
  return encode_once(codec, copy, out, step);
}

// The --half table: each codec's direct encode against its copy-first
// baseline, in the same run; the two payloads must be the same bytes.
int half_table(const std::vector<std::string>& specs, const std::vector<uint16_t>& halves, tq::HalfType type,
               int rounds, double min_round_s) {
  const tq::HalfTensor h{halves, type};
  const size_t n = halves.size();
  std::vector<float> copy(n);
  std::printf("\nn = %s, %s gradient: read directly against widened into a float32 copy first\n",
              terngrad::bench::size_label(n).c_str(), tq::half_type_name(type));
  std::printf("%-40s %12s %14s %14s\n", "codec", "direct ms", "via copy ms", "copy / direct");
  int failures = 0;
  for (const std::string& spec : specs) {
    try {
      // Two codecs, so a stateful one (ef) moves the same residual on each side.
      auto direct = tc::make_codec(spec), via = tc::make_codec(spec);
      std::vector<uint8_t> a(direct->payload_bytes(n)), b(a.size());
      const size_t la = encode_half_once(*direct, h, a, 1), lb = encode_copy_once(*via, h, copy, b, 1);
      if (la != lb || !std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(la), b.begin()))
        throw std::runtime_error("the direct payload differs from the float32 copy's");
      const Timing td = time_rounds([&](uint32_t step) { encode_half_once(*direct, h, a, step); }, rounds, min_round_s);
      const Timing tv =
          time_rounds([&](uint32_t step) { encode_copy_once(*via, h, copy, b, step); }, rounds, min_round_s);
      std::printf("%-40s %12.3f %14.3f %13.2fx\n", spec.c_str(), td.best_s * 1e3, tv.best_s * 1e3,
                  tv.best_s / td.best_s);
    } catch (const std::exception& e) {
      std::printf("%-40s  FAILED: %s\n", spec.c_str(), e.what());
      ++failures;
    }
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::optional<tq::HalfType> half;
  std::vector<size_t> sizes = {size_t{16} << 20, size_t{1} << 20};
  std::vector<std::string> specs(std::begin(kDefaultSpecs), std::end(kDefaultSpecs));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("usage: %s [--quick] [--sizes=16M,1M] [--specs=spec;spec;...] [--half=bfloat16|float16]\n"
                  "Encode speed of every codec of the suite against the read floor of the same run\n"
                  "(TG_CPU_SIMD=portable|avx2|avx512 forces a SIMD level; TG_BENCH_QUICK=1 as --quick).\n",
                  argv[0]);
      return 0;
    } else if (a == "--quick") {
      quick = true;
    } else if (a.rfind("--sizes=", 0) == 0) {
      sizes.clear();
      for (const auto& s : split(a.substr(8), ',')) {
        sizes.push_back(parse_size(s));
        if (sizes.back() == 0) {
          std::fprintf(stderr, "--sizes: \"%s\" is not a size (a positive count, optionally with K or M: 16M)\n",
                       s.c_str());
          return 2;
        }
      }
    } else if (a.rfind("--specs=", 0) == 0) {
      specs = split(a.substr(8), ';');
    } else if (a.rfind("--half=", 0) == 0) {
      half = tq::parse_half_type(a.substr(7));
      if (!half) {
        std::fprintf(stderr, "--half: \"%s\" is not float16 or bfloat16\n", a.substr(7).c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--sizes=16M,1M] [--specs=spec;spec;...]\nunknown argument: %s\n",
                   argv[0], a.c_str());
      return 2;
    }
  }
  if (const char* e = std::getenv("TG_BENCH_QUICK"); e && *e && std::strcmp(e, "0") != 0) quick = true;
  if (quick) sizes = {size_t{1} << 20};
  const int rounds = quick ? 2 : 5;
  const double min_round_s = quick ? 0.05 : 0.2;

  std::printf("codec_suite_bench: %s, SIMD level %s, %d threads\n", terngrad::quantize::cpu_model_name().c_str(),
              terngrad::quantize::simd_level_name(terngrad::quantize::cpu_simd_level()), omp_get_max_threads());

  int failures = 0;
  for (const size_t n : sizes) {
    tg_bench::AlignedArray<float> x(n);
    terngrad::bench::fill_gradient(x.data(), n, terngrad::bench::kInputSeed);
    const std::span<const float> g(x.data(), n);
    if (half) {
      std::vector<uint16_t> halves(n);
      for (size_t i = 0; i < n; ++i)
        halves[i] = *half == tq::HalfType::kFloat16 ? tq::fp16::from_float(g[i])
                                                    : static_cast<uint16_t>(std::bit_cast<uint32_t>(g[i]) >> 16);
      failures += half_table(specs, halves, *half, rounds, min_round_s);
      continue;
    }
    const tg_bench::BandwidthSample before = tg_bench::measure_read_bandwidth(x.data(), n, true, rounds, min_round_s);
    struct Row {
      std::string spec;
      std::string error;
      size_t bytes = 0;
      Timing t;
    };
    std::vector<Row> rows;
    for (const std::string& spec : specs) {
      Row row{spec, "", 0, {}};
      std::unique_ptr<tc::GradientCodec> codec;
      try {
        codec = tc::make_codec(spec);
      } catch (const std::exception& e) {
        row.error = e.what();
      }
      if (codec && (row.error = check_codec(*codec, spec, g)).empty()) {
        // A variable-size codec: the bytes its payload of this gradient uses
        // (payload_bytes() is only the capacity).
        std::vector<uint8_t> probe(codec->payload_bytes(n));
        row.bytes = codec->variable_size() ? encode_once(*codec, g, probe, 2) : codec->payload_bytes(n);
        row.t = time_encode(*codec, g, rounds, min_round_s);
      }
      rows.push_back(row);
    }
    const tg_bench::BandwidthSample after = tg_bench::measure_read_bandwidth(x.data(), n, true, rounds, min_round_s);
    const double floor_bw = std::max(before.best, after.best);
    std::printf("\nn = %s: read floor %.2f GB/s (best of before %.2f / after %.2f); %.3f ms to read the input\n",
                terngrad::bench::size_label(n).c_str(), floor_bw / 1e9, before.best / 1e9, after.best / 1e9,
                4e3 * static_cast<double>(n) / floor_bw);
    std::printf("%-36s %10s %12s %12s %14s  %s\n", "codec", "bits/elem", "best ms", "median ms", "frac_of_floor",
                "target >= 0.25");
    for (const Row& r : rows) {
      if (!r.error.empty()) {
        std::printf("%-36s  FAILED: %s\n", r.spec.c_str(), r.error.c_str());
        ++failures;
        continue;
      }
      const double floor_s = (4.0 * static_cast<double>(n) + static_cast<double>(r.bytes)) / floor_bw;
      const double frac = floor_s / r.t.best_s;
      std::printf("%-36s %10.3f %12.3f %12.3f %14.3f  %s\n", r.spec.c_str(), 8.0 * r.bytes / n, r.t.best_s * 1e3,
                  r.t.median_s * 1e3, frac, frac >= 0.25 ? "met" : "MISSED");
    }
  }
  return failures == 0 ? 0 : 1;
}
