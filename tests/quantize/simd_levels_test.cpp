// Every SIMD level this CPU supports gives the bytes of the portable scalar
// kernels, for every hot pass, over the edges each kernel has: vector tails,
// unaligned starts, slices, a Philox counter whose low word wraps, tiny
// scales, accumulators holding -0, and sums of 1 to 128 payloads with
// corrupt codes in and out of the vector loops. (The other suites run whole
// under each level too: ctest repeats them with TG_CPU_SIMD set.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;

namespace {

// Runs f once under each supported SIMD level (portable included), restoring
// the level in use afterwards.
class SimdLevels : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = tq::cpu_simd_level(); }
  void TearDown() override { tq::set_cpu_simd_level(saved_); }

  template <class R>
  R under(tq::SimdLevel level, const std::function<R()>& f) {
    tq::set_cpu_simd_level(level);
    return f();
  }

  // f() under the portable kernels, then under every other level, each result
  // compared with the portable one by check(level name, portable, result).
  template <class R, class Check>
  void compare_levels(const std::function<R()>& f, Check check) {
    const R reference = under(tq::SimdLevel::kPortable, f);
    for (tq::SimdLevel level : tq::supported_simd_levels()) {
      if (level == tq::SimdLevel::kPortable) continue;
      check(tq::simd_level_name(level), reference, under(level, f));
    }
  }

  tq::SimdLevel saved_ = tq::SimdLevel::kPortable;
};

std::vector<uint8_t> encode_vec(std::span<const float> x, const tq::EncodeParams& p) {
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
  tq::encode(x, p, out);
  return out;
}

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Sizes around every vector width (4, 8, 16 floats; 16, 32, 64 bytes), the
// stats chunk (4096) and the parallel threshold (2^17).
const std::vector<size_t> kSizes = {1,    2,    3,    4,    5,    7,     15,    16,     17,
                                    31,   32,   33,   63,   64,   65,    127,   128,    129,
                                    255,  256,  257,  1000, 4095, 4096,  4097,  8193,   65537,
                                    70001, 131071, 131072, (size_t{1} << 17) + 13, 300007};

}  // namespace

TEST(SimdLevelNames, ParseAndSupport) {
  for (tq::SimdLevel l : {tq::SimdLevel::kPortable, tq::SimdLevel::kAvx2, tq::SimdLevel::kAvx512,
                          tq::SimdLevel::kNeon}) {
    EXPECT_EQ(tq::parse_simd_level(tq::simd_level_name(l)), l);
  }
  EXPECT_EQ(tq::parse_simd_level("0"), tq::SimdLevel::kPortable);
  EXPECT_EQ(tq::parse_simd_level("native"), tq::supported_simd_levels().back());
  EXPECT_FALSE(tq::parse_simd_level("avx3").has_value());
  EXPECT_FALSE(tq::parse_simd_level("").has_value());
  const auto levels = tq::supported_simd_levels();
  ASSERT_FALSE(levels.empty());
  EXPECT_EQ(levels.front(), tq::SimdLevel::kPortable);
#if defined(__x86_64__)
  EXPECT_FALSE(tq::simd_level_supported(tq::SimdLevel::kNeon));
  EXPECT_THROW(tq::set_cpu_simd_level(tq::SimdLevel::kNeon), tq::CodecError);
#elif defined(__aarch64__)
  EXPECT_TRUE(tq::simd_level_supported(tq::SimdLevel::kNeon));
  EXPECT_FALSE(tq::simd_level_supported(tq::SimdLevel::kAvx2));
  EXPECT_THROW(tq::set_cpu_simd_level(tq::SimdLevel::kAvx2), tq::CodecError);
#endif
  std::string names;
  for (tq::SimdLevel l : levels) names += std::string(" ") + tq::simd_level_name(l);
  std::printf("supported levels:%s; in use: %s\n", names.c_str(),
              tq::simd_level_name(tq::cpu_simd_level()));
}

TEST_F(SimdLevels, StatsAreBitIdentical) {
  const auto base = tg_test::gradient_like(kSizes.back() + 3, 41);
  for (size_t n : kSizes) {
    for (size_t offset : {0u, 1u, 3u}) {
      const std::span<const float> x(base.data() + offset, n);
      compare_levels<tq::TensorStats>(
          [&] { return tq::compute_stats(x); },
          [&](const char* level, const tq::TensorStats& want, const tq::TensorStats& got) {
            EXPECT_EQ(std::memcmp(&want.mean, &got.mean, sizeof(double)), 0) << level << " n=" << n;
            EXPECT_EQ(std::memcmp(&want.stddev, &got.stddev, sizeof(double)), 0) << level << " n=" << n;
            EXPECT_EQ(bits_of(want.max_abs), bits_of(got.max_abs)) << level << " n=" << n;
          });
    }
  }
}

TEST_F(SimdLevels, NonFiniteInputIsRefusedOnEveryLevel) {
  std::vector<float> x = tg_test::gradient_like(5000, 3);
  x[4321] = std::numeric_limits<float>::quiet_NaN();
  for (tq::SimdLevel level : tq::supported_simd_levels()) {
    tq::set_cpu_simd_level(level);
    try {
      tq::compute_stats(x);
      ADD_FAILURE() << tq::simd_level_name(level) << ": NaN accepted";
    } catch (const tq::CodecError& e) {
      EXPECT_NE(std::string(e.what()).find("element 4321"), std::string::npos) << e.what();
    }
  }
}

TEST_F(SimdLevels, EncodeIsBitIdentical) {
  const auto base = tg_test::gradient_like(kSizes.back() + 3, 7);
  for (tq::RandomStream stream : {tq::RandomStream::kPhilox10Word32, tq::RandomStream::kPhilox7Half16}) {
    for (size_t n : kSizes) {
      for (size_t offset : {0u, 1u, 2u, 3u}) {
        const std::span<const float> x(base.data() + offset, n);
        tq::EncodeParams p;
        p.seed = 0x123456789ABCDEF0ull + n;
        p.step = static_cast<uint32_t>(offset * 1000 + 17);
        p.tensor_id = static_cast<uint32_t>(n);
        p.clip_factor = offset == 2 ? 0.0f : 2.5f;  // unclipped too
        p.stream = stream;
        compare_levels<std::vector<uint8_t>>(
            [&] { return encode_vec(x, p); },
            [&](const char* level, const auto& want, const auto& got) {
              EXPECT_EQ(want, got) << level << " n=" << n << " offset=" << offset << " "
                                   << tq::random_stream_name(stream);
            });
      }
    }
  }
}

// Nearest rounding (kernels().encode_bytes_nearest): every size and offset,
// with and without clipping, and the edges of the rule: elements at half the
// scale (ties go to zero) and one ulp either side, at the scale and beyond
// it, for scales whose clip test is needed and not, pre = 1 and 2^64, all
// zeros; 2-bit and base-3 packing (whose symbols come from the same kernel).
TEST_F(SimdLevels, NearestEncodeIsBitIdentical) {
  const auto base = tg_test::gradient_like(kSizes.back() + 3, 17);
  for (size_t n : kSizes) {
    for (size_t offset : {0u, 3u}) {
      const std::span<const float> x(base.data() + offset, n);
      for (tq::Packing packing : {tq::Packing::k2Bit, tq::Packing::kBase3}) {
        tq::EncodeParams p;
        p.rounding = tq::Rounding::kNearest;
        p.packing = packing;
        p.clip_factor = offset == 3 ? 0.0f : 2.5f;
        compare_levels<std::vector<uint8_t>>(
            [&] {
              std::vector<uint8_t> out(tq::max_encoded_bytes(x.size(), packing));
              out.resize(tq::encode(x, p, out));
              return out;
            },
            [&](const char* level, const auto& want, const auto& got) {
              EXPECT_EQ(want, got) << level << " n=" << n << " offset=" << offset << " " << tq::packing_name(packing);
            });
      }
    }
  }
  for (float s : {1.0f, 1.0000001f, 0.7f, 3e-25f, 0.0f}) {
    std::vector<float> x(4099);
    for (size_t i = 0; i < x.size(); ++i) {
      const float half = s / 2;
      switch (i % 9) {
        case 0: x[i] = half; break;
        case 1: x[i] = -std::nextafter(half, 0.0f); break;
        case 2: x[i] = std::nextafter(half, 2 * s + 1); break;
        case 3: x[i] = -s; break;
        case 4: x[i] = 3 * s; break;
        case 5: x[i] = -0.0f; break;
        default: x[i] = s * static_cast<float>((i * 37) % 100) / 100.0f * (i % 2 ? -1.0f : 1.0f);
      }
    }
    tq::EncodeParams p;
    p.rounding = tq::Rounding::kNearest;
    p.clip_factor = 0.0f;
    compare_levels<std::vector<uint8_t>>(
        [&] { return encode_vec(x, p); },
        [&](const char* level, const auto& want, const auto& got) { EXPECT_EQ(want, got) << level << " s=" << s; });
  }
}

TEST_F(SimdLevels, EncodeOfTinyScalesSharedScalesAndZerosIsBitIdentical) {
  // s < 2^-64 takes the pre = 2^64 route; a shared scale above the tensor's
  // own; an all-zero tensor; a constant one.
  std::vector<float> tiny = tg_test::gradient_like(4099, 5);
  for (float& v : tiny) v *= 1e-20f;
  const std::vector<float> zeros(4099, 0.0f);
  const std::vector<float> constant(4099, -0.375f);
  const auto normal = tg_test::gradient_like(4099, 6);
  for (const std::vector<float>* x : std::vector<const std::vector<float>*>{&tiny, &zeros, &constant, &normal}) {
    for (bool shared : {false, true}) {
      tq::EncodeParams p;
      p.seed = 99;
      if (shared) p.shared_scale = 2.0f * std::max(tq::local_scale(tq::compute_stats(*x), 2.5f), 1e-30f);
      compare_levels<std::vector<uint8_t>>(
          [&] { return encode_vec(*x, p); },
          [&](const char* level, const auto& want, const auto& got) {
            EXPECT_EQ(want, got) << level << " shared=" << shared;
          });
    }
  }
}

TEST_F(SimdLevels, SlicesWhoseCounterWrapsAreBitIdentical) {
  // A slice of a (notional) huge tensor whose Philox counter's low word wraps
  // inside it: the vector loops must hand those blocks to the portable path.
  // Version 1 draws a block per body byte, version 2 one per two bytes
  // (slices starting on either byte of a block).
  const auto x = tg_test::gradient_like(4000, 9);
  tq::TensorStats st = tq::compute_stats(x);
  for (tq::RandomStream stream : {tq::RandomStream::kPhilox10Word32, tq::RandomStream::kPhilox7Half16}) {
    for (uint64_t first_block : {0xFFFFFFFFull - 40, 0xFFFFFFFFull - 3, 0xFFFFFFFFull, 0x1FFFFFFF0ull}) {
      for (uint64_t odd : {0u, 1u}) {
        const uint64_t first_byte = stream == tq::RandomStream::kPhilox10Word32 ? first_block : 2 * first_block + odd;
        st.count = 4 * first_byte + x.size();
        tq::EncodeParams p;
        p.seed = 3;
        p.element_offset = 4 * first_byte;
        p.stream = stream;
        compare_levels<std::vector<uint8_t>>(
            [&] {
              std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
              tq::encode_with_stats(x, st, p, out);
              return out;
            },
            [&](const char* level, const auto& want, const auto& got) {
              EXPECT_EQ(want, got) << level << " first byte " << first_byte << " "
                                   << tq::random_stream_name(stream);
            });
      }
    }
  }
}

TEST_F(SimdLevels, DecodeAndAccumulateAreBitIdentical) {
  for (size_t n : kSizes) {
    const auto x = tg_test::gradient_like(n, static_cast<uint32_t>(n));
    tq::EncodeParams p;
    p.seed = 5;
    const auto payload = encode_vec(x, p);
    // An accumulator with -0, +0, large and tiny values: each add must round
    // as the scalar add does.
    std::vector<float> acc(n);
    for (size_t i = 0; i < n; ++i)
      acc[i] = i % 5 == 0 ? -0.0f : i % 5 == 1 ? 0.0f : i % 5 == 2 ? 1e30f : x[(i * 7) % n] * 3.0f;
    for (bool accumulate : {false, true}) {
      compare_levels<std::vector<float>>(
          [&] {
            std::vector<float> out = acc;
            accumulate ? tq::decode_accumulate(payload, out) : tq::decode(payload, out);
            return out;
          },
          [&](const char* level, const auto& want, const auto& got) {
            EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0)
                << level << " n=" << n << " accumulate=" << accumulate;
          });
    }
  }
}

// The rANS block decoder of each level (KernelTable::rans_decode): entropy
// payloads of whole 32-lane blocks and of small ones, intact and with one
// byte of their streams changed (200 places, each a different fault or a
// different decoding), give the portable decoder's floats or its error
// message.
TEST_F(SimdLevels, EntropyDecodeOfIntactAndCorruptPayloadsIsIdentical) {
  for (size_t n : {size_t{37}, size_t{5000}, size_t{300007}}) {
    const auto x = tg_test::gradient_like(n, 23);
    tq::EncodeParams p;
    p.seed = 8;
    p.packing = tq::Packing::kEntropy;
    std::vector<uint8_t> payload(tq::max_encoded_bytes(n, p.packing));
    payload.resize(tq::encode(x, p, payload));
    if (n > 1000) ASSERT_EQ(tq::read_header(payload).codec, tq::kCodecTernaryEntropy) << n;  // tiny ones fall back to base-3
    auto decode_or_error = [&](const std::vector<uint8_t>& bytes) {
      std::vector<float> out(n);
      try {
        tq::decode(bytes, out);
      } catch (const tq::CodecError& e) {
        return std::pair(std::vector<float>{}, std::string(e.what()));
      }
      return std::pair(out, std::string());
    };
    using Result = std::pair<std::vector<float>, std::string>;
    auto same = [&](const char* level, const Result& want, const Result& got, size_t at) {
      EXPECT_EQ(want.second, got.second) << level << " n=" << n << " byte " << at;
      ASSERT_EQ(want.first.size(), got.first.size());
      // Bit for bit (NaN patterns too); a refused payload has no values (and
      // memcmp must not see the empty vectors' null pointers).
      if (!want.first.empty())
        EXPECT_EQ(std::memcmp(want.first.data(), got.first.data(), want.first.size() * sizeof(float)), 0)
            << level << " n=" << n << " byte " << at;
    };
    compare_levels<Result>([&] { return decode_or_error(payload); },
                           [&](const char* level, const Result& want, const Result& got) { same(level, want, got, 0); });
    // The streams follow the header and the directory: corrupt the last 90%.
    const size_t first = payload.size() / 10;
    for (uint32_t k = 0; k < 200; ++k) {
      const size_t at = first + (size_t{k} * 7919u) % (payload.size() - first);
      std::vector<uint8_t> bad = payload;
      bad[at] ^= static_cast<uint8_t>(1u << (k % 8));
      compare_levels<Result>([&] { return decode_or_error(bad); },
                             [&](const char* level, const Result& want, const Result& got) { same(level, want, got, at); });
    }
  }
}

TEST_F(SimdLevels, PayloadSumsAreBitIdentical) {
  for (size_t n : {size_t{1}, size_t{4}, size_t{7}, size_t{8}, size_t{9}, size_t{63}, size_t{64},
                   size_t{65}, size_t{127}, size_t{129}, size_t{1000}, size_t{65536 * 8 + 13}}) {
    for (uint32_t r : {1u, 2u, 3u, 4u, 5u, 8u, 16u, 127u, 128u}) {
      if (n > 100000 && r > 8) continue;  // keep the test quick
      std::vector<std::vector<float>> grads;
      float scale = 0.0f;  // the max of the workers' own scales, as the ps shares it
      for (uint32_t w = 0; w < r; ++w) {
        grads.push_back(tg_test::gradient_like(n, 77 * w + r));
        scale = std::max(scale, tq::local_scale(tq::compute_stats(grads.back()), 2.5f));
      }
      std::vector<std::vector<uint8_t>> bodies;
      for (uint32_t w = 0; w < r; ++w) {
        tq::EncodeParams p;
        p.seed = 11;
        p.step = w;
        p.shared_scale = scale;
        bodies.push_back(encode_vec(grads[w], p));
      }
      std::vector<std::span<const uint8_t>> spans(bodies.begin(), bodies.end());
      compare_levels<std::vector<uint8_t>>(
          [&] {
            std::vector<uint8_t> out(tq::sum_payload_bytes(n, r), 0xEE);
            tq::sum_payloads(spans, out);
            return out;
          },
          [&](const char* level, const auto& want, const auto& got) {
            EXPECT_EQ(want, got) << level << " n=" << n << " R=" << r;
          });
      // The workers' side: decode_sum of that sum.
      std::vector<uint8_t> sum(tq::sum_payload_bytes(n, r));
      tq::sum_payloads(spans, sum);
      compare_levels<std::vector<float>>(
          [&] {
            std::vector<float> out(n, -1.0f);
            tq::decode_sum(sum, out);
            return out;
          },
          [&](const char* level, const auto& want, const auto& got) {
            EXPECT_EQ(std::memcmp(want.data(), got.data(), n * sizeof(float)), 0) << level << " n=" << n << " R=" << r;
          });
    }
  }
}

TEST_F(SimdLevels, CorruptCodesInPayloadSumsAreFoundOnEveryLevel) {
  const size_t n = 70001;
  const auto x = tg_test::gradient_like(n, 2);
  tq::EncodeParams p;
  p.shared_scale = 1.0f;
  const auto good = encode_vec(x, p);
  const size_t body = good.size() - tq::kHeaderBytes;
  // First byte, inside the vector loops, at a block boundary, the last full
  // group, and the tail group.
  for (size_t at : {size_t{0}, size_t{1001}, size_t{16383}, size_t{16384}, body - 3, body - 1}) {
    std::vector<uint8_t> bad = good;
    bad[tq::kHeaderBytes + at] |= 0x0C;  // code 0b11 in position 1
    const std::vector<std::span<const uint8_t>> spans = {good, bad, good};
    for (tq::SimdLevel level : tq::supported_simd_levels()) {
      tq::set_cpu_simd_level(level);
      std::vector<uint8_t> out(tq::sum_payload_bytes(n, 3));
      try {
        tq::sum_payloads(spans, out);
        ADD_FAILURE() << tq::simd_level_name(level) << ": corrupt byte " << at << " accepted";
      } catch (const tq::CodecError& e) {
        EXPECT_EQ(e.code(), tq::Errc::kInvalidCode) << tq::simd_level_name(level) << " " << e.what();
      }
    }
  }
}

TEST_F(SimdLevels, SumFieldsAbove2RAreFoundOnEveryLevel) {
  // Counts of 3 contributions (3 bits, fields up to 6) and of 200 (9 bits:
  // the portable route); one field raised to 7 / 401 at several places.
  for (uint32_t r : {3u, 200u}) {
    const size_t n = 100003;
    std::vector<int16_t> counts(n);
    for (size_t i = 0; i < n; ++i) counts[i] = static_cast<int16_t>(static_cast<int>(i % (2 * r + 1)) - static_cast<int>(r));
    std::vector<uint8_t> good(tq::sum_payload_bytes(n, r));
    tq::encode_sum(counts, 0.5f, r, 1, 2, good);
    const uint32_t bits = tq::sum_bits(r);
    for (size_t at : {size_t{0}, size_t{17}, size_t{65535}, size_t{65536}, size_t{99990}, n - 1}) {
      std::vector<uint8_t> bad = good;
      // Set every bit of element `at`'s field: 2^bits - 1 > 2R.
      for (uint32_t k = 0; k < bits; ++k) {
        const uint64_t bit = at * bits + k;
        bad[tq::kHeaderBytes + bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
      }
      for (tq::SimdLevel level : tq::supported_simd_levels()) {
        tq::set_cpu_simd_level(level);
        std::vector<float> out(n, 1.0f);
        try {
          tq::decode_sum(bad, out);
          ADD_FAILURE() << tq::simd_level_name(level) << ": field above 2R at " << at << " accepted";
        } catch (const tq::CodecError& e) {
          EXPECT_NE(std::string(e.what()).find("element " + std::to_string(at) + " "), std::string::npos)
              << tq::simd_level_name(level) << ": " << e.what();
        }
        EXPECT_EQ(out, std::vector<float>(n, 1.0f)) << "nothing is written on failure";
      }
    }
  }
}

// The x86 encode kernels skip the "a >= s" test of clipped elements when the
// threshold of a = s, (s * pre) * inv24, exceeds every 24-bit random integer,
// and keep it for the few scales whose inv24 rounds so that it does not.
// Both kinds of scale, with many elements at and beyond s, at every level.
TEST_F(SimdLevels, EncodeOfClippedElementsIsBitIdenticalForEveryKindOfScale) {
  auto threshold_of_scale = [](float s) {
    const tq::TernaryQuantizer q = tq::make_quantizer(s);
    return (s * q.pre) * q.inv24;
  };
  float low = 0.0f, high = 0.0f;  // a scale whose threshold is <= 2^24 - 1, and one whose is above
  for (float s = 1.0f; (low == 0.0f || high == 0.0f) && s < 2.0f; s = std::nextafter(s, 2.0f)) {
    (threshold_of_scale(s) > 16777215.0f ? high : low) = s;
  }
  ASSERT_GT(low, 0.0f) << "no scale in [1, 2) whose threshold rounds below 2^24";
  ASSERT_GT(high, 0.0f);
  for (float s : {low, high, low * 0x1p-70f, high * 0x1p-70f}) {  // pre = 1 and pre = 2^64
    std::vector<float> x = tg_test::gradient_like(40000, 13);
    float mx = 0.0f;
    for (float v : x) mx = std::max(mx, std::fabs(v));
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = x[i] / mx * s;                             // |x| <= s
      if (i % 7 == 0) x[i] = (i % 2 ? -s : s);          // at the scale
      if (i % 11 == 0) x[i] = (i % 3 ? -1.5f : 2.5f) * s;  // beyond it (clipped)
    }
    // Seed 39075 gives element 3 (block 0, word 3; step 0, tensor 0) the
    // largest 24-bit integer, 2^24 - 1: below the first kind of scale's
    // threshold only if the kernel tests a >= s.
    ASSERT_EQ(tq::byte_random_words(tq::RngStream{39075, 0, 0, 0}, 0).v[3] >> 8, 0xFFFFFFu);
    x[3] = s;
    tq::EncodeParams p;
    p.seed = 39075;
    p.stream = tq::RandomStream::kPhilox10Word32;  // version 2's largest u, 2^24 - 128, needs no test
    p.clip_factor = 0.0f;
    p.shared_scale = s;  // exactly s, whatever the clip factor would give
    compare_levels<std::vector<uint8_t>>(
        [&] {
          tq::TensorStats st = tq::compute_stats(x);
          std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
          st.max_abs = std::min(st.max_abs, s);  // own scale <= the shared one
          tq::encode_with_stats(x, st, p, out);
          return out;
        },
        [&](const char* level, const auto& want, const auto& got) {
          EXPECT_EQ(want, got) << level << " s=" << s << " threshold " << threshold_of_scale(s);
        });
    std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
    tq::TensorStats st = tq::compute_stats(x);
    st.max_abs = std::min(st.max_abs, s);
    tq::encode_with_stats(x, st, p, out);
    for (size_t i = 0; i < x.size(); i += (i == 3 ? 4 : i == 0 ? 3 : 7)) {  // elements at or beyond s are kept
      const uint32_t code = (out[tq::kHeaderBytes + i / 4] >> (2 * (i % 4))) & 3u;
      EXPECT_EQ(code, x[i] < 0 ? 2u : 1u) << "s=" << s << " element " << i;
    }
  }
}
