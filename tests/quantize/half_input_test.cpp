// 16-bit inputs read directly (terngrad/quantize/half_input.h): every call on
// float16 and bfloat16 tensors against the float32 call on a widened copy
// (the reference: fp16::to_float, and a bfloat16's bits shifted into a
// float32), bit for bit, for every rounding, packing, slice and error
// feedback, on whichever SIMD level the suite is run under (ctest reruns it
// with each forced).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/error_feedback.h"
#include "terngrad/quantize/fp16.h"
#include "terngrad/quantize/half_input.h"

namespace tq = terngrad::quantize;

namespace {

uint16_t to_bf16(float x) {  // truncation: any bfloat16 is a valid input
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return static_cast<uint16_t>(b >> 16);
}

float reference_widen(uint16_t h, tq::HalfType t) {
  if (t == tq::HalfType::kFloat16) return tq::fp16::to_float(h);
  const uint32_t b = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// Gaussian gradients with a few subnormal, zero, negative-zero and large
// elements, as halves of type t.
std::vector<uint16_t> halves(size_t n, uint64_t seed, float sigma, tq::HalfType t) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) {
    float x = d(rng);
    if (i % 97 == 3) x = 0.0f;
    if (i % 89 == 5) x = -0.0f;
    if (i % 101 == 7) x = (t == tq::HalfType::kFloat16 ? 3e-6f : 1e-39f) * (i % 2 ? 1 : -1);  // subnormal
    if (i % 1009 == 11) x = 40000.0f * (i % 2 ? 1 : -1);
    v[i] = t == tq::HalfType::kFloat16 ? tq::fp16::from_float(x) : to_bf16(x);
  }
  return v;
}

std::vector<float> widened(const std::vector<uint16_t>& h, tq::HalfType t) {
  std::vector<float> w(h.size());
  for (size_t i = 0; i < h.size(); ++i) w[i] = reference_widen(h[i], t);
  return w;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), 4 * a.size()) == 0);
}

void expect_same_stats(const tq::TensorStats& a, const tq::TensorStats& b) {
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(std::memcmp(&a.max_abs, &b.max_abs, sizeof a.max_abs), 0);
  EXPECT_EQ(std::memcmp(&a.mean, &b.mean, sizeof a.mean), 0);
  EXPECT_EQ(std::memcmp(&a.stddev, &b.stddev, sizeof a.stddev), 0);
}

const tq::HalfType kTypes[] = {tq::HalfType::kFloat16, tq::HalfType::kBFloat16};
const size_t kSizes[] = {0, 1, 5, 4095, 4097, 65537, 300001};

}  // namespace

TEST(HalfInput, WidenIsExactForEveryHalf) {
  for (tq::HalfType t : kTypes) {
    SCOPED_TRACE(tq::half_type_name(t));
    std::vector<uint16_t> all(65536 + 7);  // every bit pattern, plus a tail off the vector width
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    std::vector<float> got(all.size());
    tq::widen(tq::HalfTensor{all, t}, got);
    for (size_t i = 0; i < all.size(); ++i) {
      const float want = reference_widen(all[i], t);  // NaNs too: their bits are defined (fp16.h)
      ASSERT_EQ(std::memcmp(&got[i], &want, 4), 0) << i << ": " << got[i] << " against " << want;
    }
    std::vector<float> shorter(3);
    EXPECT_THROW(tq::widen(tq::HalfTensor{all, t}, shorter), tq::CodecError);
  }
  EXPECT_EQ(tq::parse_half_type("bfloat16"), tq::HalfType::kBFloat16);
  EXPECT_EQ(tq::parse_half_type("float16"), tq::HalfType::kFloat16);
  EXPECT_FALSE(tq::parse_half_type("half").has_value());
}

TEST(HalfInput, StatisticsAreTheWidenedTensorsBitForBit) {
  for (tq::HalfType t : kTypes)
    for (size_t n : kSizes) {
      SCOPED_TRACE(std::string(tq::half_type_name(t)) + " n=" + std::to_string(n));
      const auto h = halves(n, 1 + n, 0.02f, t);
      const auto w = widened(h, t);
      expect_same_stats(tq::compute_stats(tq::HalfTensor{h, t}), tq::compute_stats(w));
      std::mt19937_64 rng(n);
      std::normal_distribution<float> d(0.0f, 0.005f);
      std::vector<float> e(n);
      for (float& x : e) x = d(rng);
      expect_same_stats(tq::stats_of_sum(tq::HalfTensor{h, t}, e), tq::stats_of_sum(w, e));
    }
}

TEST(HalfInput, NonFiniteHalvesAreNamedAndMismatchedLengthsRefused) {
  for (tq::HalfType t : kTypes) {
    SCOPED_TRACE(tq::half_type_name(t));
    auto h = halves(10000, 3, 0.02f, t);
    h[6000] = t == tq::HalfType::kFloat16 ? 0x7C00 : 0x7F80;  // +Inf
    h[8000] = t == tq::HalfType::kFloat16 ? 0x7E00 : 0x7FC0;  // NaN
    try {
      tq::compute_stats(tq::HalfTensor{h, t});
      FAIL() << "no error";
    } catch (const tq::CodecError& e) {
      EXPECT_EQ(e.code(), tq::Errc::kNonFinite);
      EXPECT_NE(std::string(e.what()).find("element 6000"), std::string::npos) << e.what();
    }
    std::vector<uint8_t> out(tq::max_encoded_bytes(h.size()), 0xAB);
    EXPECT_THROW(tq::encode(tq::HalfTensor{h, t}, tq::EncodeParams{}, out), tq::CodecError);
    EXPECT_EQ(out[0], 0xAB);  // nothing written
    const std::vector<float> shorter(9999);
    EXPECT_THROW(tq::stats_of_sum(tq::HalfTensor{h, t}, shorter), tq::CodecError);
  }
}

// Every rounding and packing, whole tensors and slices, with and without a
// shared scale: the bytes of the float32 encode of the widened tensor.
TEST(HalfInput, EncodeWritesTheFloat32EncodesBytes) {
  for (tq::HalfType t : kTypes)
    for (size_t n : kSizes)
      for (tq::Packing packing : {tq::Packing::k2Bit, tq::Packing::kBase3, tq::Packing::kEntropy})
        for (tq::Rounding rounding : {tq::Rounding::kStochastic, tq::Rounding::kNearest}) {
          SCOPED_TRACE(std::string(tq::half_type_name(t)) + " n=" + std::to_string(n) + " " +
                       tq::packing_name(packing) + (rounding == tq::Rounding::kNearest ? " nearest" : ""));
          const auto h = halves(n, 11 + n, 0.02f, t);
          const auto w = widened(h, t);
          tq::EncodeParams p;
          p.seed = 42 + n;
          p.step = 3;
          p.tensor_id = 7;
          p.packing = packing;
          p.rounding = rounding;
          const tq::HalfTensor x{h, t};
          std::vector<uint8_t> got(tq::max_encoded_bytes(n, packing)), want(got.size());
          const size_t got_len = tq::encode(x, p, got), want_len = tq::encode(w, p, want);
          ASSERT_EQ(got_len, want_len);
          ASSERT_EQ(got, want);
          // A slice from element 4 * (n / 8), with a shared scale above the own one.
          const tq::TensorStats st = tq::compute_stats(x);
          p.shared_scale = 1.5f * tq::local_scale(st, p.clip_factor) + 1e-3f;
          p.element_offset = 4 * (n / 8);
          const uint64_t len = n - p.element_offset;
          std::vector<uint8_t> gs(tq::max_encoded_bytes(len, packing)), ws(gs.size());
          ASSERT_EQ(tq::encode_with_stats(x.subspan(p.element_offset, len), st, p, gs),
                    tq::encode_with_stats(std::span<const float>(w).subspan(p.element_offset, len), st, p, ws));
          ASSERT_EQ(gs, ws);
        }
}

TEST(HalfInput, ErrorFeedbackWritesTheFloat32PayloadAndResidual) {
  for (tq::HalfType t : kTypes)
    for (size_t n : kSizes)
      for (tq::Packing packing : {tq::Packing::k2Bit, tq::Packing::kEntropy})
        for (tq::Rounding rounding : {tq::Rounding::kStochastic, tq::Rounding::kNearest}) {
          SCOPED_TRACE(std::string(tq::half_type_name(t)) + " n=" + std::to_string(n) + " " +
                       tq::packing_name(packing) + (rounding == tq::Rounding::kNearest ? " nearest" : ""));
          const auto h = halves(n, 21 + n, 0.02f, t);
          const auto w = widened(h, t);
          std::mt19937_64 rng(n + 5);
          std::normal_distribution<float> d(0.0f, 0.004f);
          std::vector<float> e_half(n);
          for (float& v : e_half) v = d(rng);
          std::vector<float> e_float = e_half;
          tq::EncodeParams p;
          p.seed = 9;
          p.step = 2;
          p.tensor_id = 1;
          p.packing = packing;
          p.rounding = rounding;
          const tq::HalfTensor x{h, t};
          const tq::TensorStats st = tq::stats_of_sum(x, e_half);
          expect_same_stats(st, tq::stats_of_sum(w, e_float));
          std::vector<uint8_t> got(tq::max_encoded_bytes(n, packing)), want(got.size());
          ASSERT_EQ(tq::encode_error_feedback(x, e_half, st, p, got), tq::encode_error_feedback(w, e_float, st, p, want));
          ASSERT_EQ(got, want);
          ASSERT_TRUE(same_bits(e_half, e_float));
        }
}

TEST(HalfInput, ErrorFeedbackRefusesAResidualThatOverlapsOrDiffers) {
  const auto h = halves(4096, 1, 0.02f, tq::HalfType::kBFloat16);
  const tq::HalfTensor x{h, tq::HalfType::kBFloat16};
  std::vector<float> e(4095);
  std::vector<uint8_t> out(tq::max_encoded_bytes(4096), 0xCD);
  EXPECT_THROW(tq::encode_error_feedback(x, e, tq::compute_stats(x), tq::EncodeParams{}, out), tq::CodecError);
  EXPECT_EQ(out[0], 0xCD);
  std::vector<float> storage(4096);  // a residual lying over the halves
  const tq::HalfTensor over{std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(storage.data()), 4096),
                            tq::HalfType::kBFloat16};
  EXPECT_THROW(tq::encode_error_feedback(over, storage, tq::compute_stats(over), tq::EncodeParams{}, out),
               tq::CodecError);
  EXPECT_EQ(out[0], 0xCD);
}
