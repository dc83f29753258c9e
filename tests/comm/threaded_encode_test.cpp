// The codecs' OpenMP paths (comm/codecs/parallel_ranges.h) against their
// one-thread runs: payloads, decodes and error-feedback residuals must be the
// same bits with 1, 2 or 3 threads, at every SIMD level, and equal to the
// portable level's one-thread output (the scalar reference the per-codec
// tests check against FORMATS.md). Sizes lie above the threshold where passes
// go parallel, with tails that are not a multiple of any chunk, vector or
// bucket, and slices that start at 4-element boundaries inside buckets and
// bytes; the scalar paths below the threshold are the per-codec tests'.
#include <omp.h>

#include <string>

#include "codec_test_util.h"
#include "terngrad/quantize/cpu_features.h"

namespace tc = terngrad::comm;
namespace tq = terngrad::quantize;
using namespace codec_test;

namespace {

struct Restore {
  tq::SimdLevel level = tq::cpu_simd_level();
  int threads = omp_get_max_threads();
  ~Restore() {
    tq::set_cpu_simd_level(level);
    omp_set_num_threads(threads);
  }
};

// What one configuration produces: every slice's payload, the decodes of the
// first, and (for ef) the residual after two steps, seen through a third
// step's payload.
struct Output {
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<float> decoded, accumulated;
  bool operator==(const Output& o) const = default;
};

std::vector<float> test_gradient(size_t n) {
  auto g = normal_floats(n, n, 0.5f);
  for (size_t i = 0; i < n; i += 97) g[i] = (i / 97) % 2 ? -0.0f : 0.0f;  // signed zeros
  for (size_t i = 5; i < n; i += 4099) g[i] *= 1000.0f;                   // outliers for top-k
  std::fill(g.begin() + 1024, g.begin() + 1600, 0.0f);                    // all-zero buckets
  return g;
}

Output run(const std::string& spec, std::span<const float> g, std::span<const tc::ElementRange> slices) {
  auto codec = tc::make_codec(spec);
  Output o;
  const int steps = spec.rfind("ef(", 0) == 0 ? 3 : 1;
  for (int step = 0; step < steps; ++step) {
    tc::EncodeContext ctx;
    ctx.seed = 0xC0FFEE;
    ctx.step = static_cast<uint32_t>(step + 5);
    ctx.tensor_id = 9;
    if (codec->wants_shared_scale()) ctx.shared_scale = codec->local_scale(g);
    o.payloads.clear();
    std::vector<std::span<uint8_t>> outs;
    for (const auto& s : slices) o.payloads.emplace_back(codec->payload_bytes(s.count));
    for (auto& p : o.payloads) outs.emplace_back(p);
    codec->encode_slices(g, ctx, slices, outs);
  }
  o.decoded.assign(slices[0].count, 0.0f);
  codec->decode(o.payloads[0], o.decoded);
  o.accumulated.assign(g.begin() + static_cast<ptrdiff_t>(slices[0].begin),
                       g.begin() + static_cast<ptrdiff_t>(slices[0].begin + slices[0].count));
  codec->decode_accumulate(o.payloads[0], o.accumulated);
  return o;
}

const char* const kSpecs[] = {"fp32",
                              "fp16",
                              "terngrad",
                              "qsgd:levels=127,bucket=512",
                              "qsgd:levels=7,bucket=512",
                              "qsgd:levels=1,bucket=512",
                              "qsgd:levels=3,bucket=36",
                              "qsgd:levels=1,bucket=4",
                              "qsgd:levels=7,bucket=100",
                              "qsgd:levels=32767,bucket=128",
                              "sign",
                              "sign:scale=mean",
                              "topk:ratio=0.01",
                              "topk:ratio=0.001,values=fp16",
                              "randomk:ratio=0.01",
                              "ef(terngrad)",
                              "ef(sign:scale=mean)",
                              "ef(topk:ratio=0.01)",
                              "ef(qsgd:levels=7,bucket=512)"};

}  // namespace

TEST(ThreadedEncode, SameBitsWithOneOrManyThreadsAtEveryLevel) {
  Restore restore;
  for (const size_t n : {(size_t{1} << 17) + 4, (size_t{1} << 18) + 1029, size_t{300001}}) {
    const auto g = test_gradient(n);
    const uint64_t cut = (n / 3) / 4 * 4 + 4;  // inside a bucket and a byte run
    const std::vector<tc::ElementRange> whole = {{0, n}};
    const std::vector<tc::ElementRange> cuts = {{cut, n - cut}, {0, cut}};
    for (const char* spec : kSpecs) {
      for (const auto* slices : {&whole, &cuts}) {
        tq::set_cpu_simd_level(tq::SimdLevel::kPortable);
        omp_set_num_threads(1);
        const Output want = run(spec, g, *slices);
        for (tq::SimdLevel lv : tq::supported_simd_levels()) {
          tq::set_cpu_simd_level(lv);
          for (int threads : {1, 2, 3}) {
            SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n) + " slices=" +
                         std::to_string(slices->size()) + " " + tq::simd_level_name(lv) + " threads=" +
                         std::to_string(threads));
            omp_set_num_threads(threads);
            const Output got = run(spec, g, *slices);
            ASSERT_EQ(got.payloads, want.payloads);
            for (size_t i = 0; i < want.decoded.size(); ++i) {
              ASSERT_TRUE(same_bits(got.decoded[i], want.decoded[i])) << i;
              ASSERT_TRUE(same_bits(got.accumulated[i], want.accumulated[i])) << i;
            }
          }
        }
      }
    }
  }
}

// A NaN is named as the one-thread encoder names it, wherever the threads
// cut the tensor.
TEST(ThreadedEncode, NonFiniteInputsAreNamedWithManyThreads) {
  Restore restore;
  const size_t n = (size_t{1} << 18) + 12;
  for (const char* spec : {"sign", "sign:scale=mean", "qsgd:levels=7,bucket=512"}) {
    for (size_t bad : {size_t{3}, n / 2 + 1, n - 2}) {
      auto g = test_gradient(n);
      g[bad] = NAN;
      g[n - 1] = NAN;  // a later one must not be named instead
      auto codec = tc::make_codec(spec);
      std::vector<uint8_t> out(codec->payload_bytes(n));
      for (int threads : {1, 2, 3}) {
        omp_set_num_threads(threads);
        try {
          codec->encode(g, {}, out);
          ADD_FAILURE() << spec << " accepted a NaN";
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("element " + std::to_string(bad) + " is NaN"), std::string::npos)
              << spec << " threads=" << threads << ": " << e.what();
        }
      }
    }
  }
}
