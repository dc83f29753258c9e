// Slices: a tensor split into pieces (a variable sharded across parameter
// servers) and encoded piece by piece with the whole tensor's statistics gives
// exactly the bytes of the whole tensor's payload, on both CPU kernels.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "reference_codec.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"

namespace tq = terngrad::quantize;

namespace {

std::vector<uint8_t> encode_whole(const std::vector<float>& x, const tq::EncodeParams& p) {
  std::vector<uint8_t> out(tq::max_encoded_bytes(x.size()));
  tq::encode(x, p, out);
  return out;
}

// Concatenated bodies of the slices [cuts[i], cuts[i+1]).
std::vector<uint8_t> encode_slices(const std::vector<float>& x, const std::vector<uint64_t>& cuts,
                                   tq::EncodeParams p, std::vector<tq::PayloadHeader>* headers = nullptr) {
  const tq::TensorStats st = tq::compute_stats(x);
  std::vector<uint8_t> body;
  for (size_t s = 0; s + 1 < cuts.size(); ++s) {
    const std::span<const float> slice(x.data() + cuts[s], cuts[s + 1] - cuts[s]);
    std::vector<uint8_t> out(tq::max_encoded_bytes(slice.size()));
    p.element_offset = cuts[s];
    tq::encode_with_stats(slice, st, p, out);
    if (headers) headers->push_back(tq::inspect(out));
    body.insert(body.end(), out.begin() + tq::kHeaderBytes, out.end());
  }
  return body;
}

void expect_slices_match(const std::vector<float>& x, const std::vector<uint64_t>& cuts, tq::EncodeParams p) {
  const auto whole = encode_whole(x, p);
  std::vector<tq::PayloadHeader> headers;
  const auto body = encode_slices(x, cuts, p, &headers);
  ASSERT_EQ(body.size(), whole.size() - tq::kHeaderBytes);
  for (size_t k = 0; k < body.size(); ++k)
    ASSERT_EQ(body[k], whole[tq::kHeaderBytes + k]) << "body byte " << k;
  const float scale = tq::inspect(whole).scale;
  for (size_t s = 0; s < headers.size(); ++s) {
    EXPECT_EQ(headers[s].count, cuts[s + 1] - cuts[s]);
    EXPECT_EQ(headers[s].scale, scale) << "slice " << s << " must carry the whole tensor's scale";
    EXPECT_EQ(headers[s].tensor_id, p.tensor_id);
  }
}

TEST(SliceEncode, ConcatenatedSlicesEqualTheWholePayload) {
  const auto x = tg_test::gradient_like(300001, 11);
  tq::EncodeParams p;
  p.seed = 99;
  p.step = 5;
  p.tensor_id = 3;
  // Slice edges inside SIMD groups, at block edges (64 Ki elements) and a tiny slice.
  expect_slices_match(x, {0, 4, 1000, 65536, 65540, 200000, 300001}, p);
  p.clip_factor = 0.0f;
  expect_slices_match(x, {0, 150000, 300001}, p);
}

TEST(SliceEncode, SharedScaleSlices) {
  const auto x = tg_test::gradient_like(10000, 12);
  tq::EncodeParams p;
  p.seed = 7;
  p.shared_scale = 0.5f;
  expect_slices_match(x, {0, 2048, 4096, 10000}, p);
}

TEST(SliceEncode, EverySimdLevelAgreesWithThePortableKernels) {
  const auto x = tg_test::gradient_like(70001, 13);
  tq::EncodeParams p;
  p.seed = 1;
  p.step = 2;
  const tq::SimdLevel saved = tq::cpu_simd_level();
  tq::set_cpu_simd_level(tq::SimdLevel::kPortable);
  const auto portable = encode_slices(x, {0, 33332, 70001}, p);
  for (tq::SimdLevel level : tq::supported_simd_levels()) {
    tq::set_cpu_simd_level(level);
    EXPECT_EQ(encode_slices(x, {0, 33332, 70001}, p), portable) << tq::simd_level_name(level);
  }
  tq::set_cpu_simd_level(saved);
}

TEST(SliceEncode, RandomWordsComeFromTheWholeTensorPositions) {
  // A slice at offset o: element j of it draws the random bits of element
  // o + j. Offset 4100 starts in the middle of a version-2 block (8 elements).
  std::vector<float> x(8192, 0.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 7 == 0) ? 0.5f : 0.25f;
  const tq::TensorStats st = tq::compute_stats(x);
  for (tq::RandomStream stream : {tq::RandomStream::kPhilox10Word32, tq::RandomStream::kPhilox7Half16}) {
    for (uint64_t offset : {uint64_t{4096}, uint64_t{4100}}) {
      tq::EncodeParams p;
      p.clip_factor = 0.0f;
      p.seed = 42;
      p.step = 9;
      p.tensor_id = 1;
      p.element_offset = offset;
      p.stream = stream;
      const size_t len = 4000;
      std::vector<uint8_t> out(tq::max_encoded_bytes(len));
      tq::encode_with_stats(std::span<const float>(x.data() + offset, len), st, p, out);
      for (size_t j = 0; j < len; ++j) {
        const double t = tg_test::ref_keep_probability(x[offset + j], 0.5) * 16777216.0;
        const double u = tg_test::ref_uniform24(p.seed, p.step, p.tensor_id, offset + j, stream);
        const uint32_t code = (out[tq::kHeaderBytes + j / 4] >> (2 * (j % 4))) & 3u;
        ASSERT_EQ(code, u < t ? tq::kCodePlus : tq::kCodeZero)
            << "slice element " << j << " offset " << offset << " stream " << tq::random_stream_name(stream);
      }
    }
  }
}

TEST(SliceEncode, BadOffsetsAreRefused) {
  const auto x = tg_test::gradient_like(100, 14);
  const tq::TensorStats st = tq::compute_stats(x);
  std::vector<uint8_t> out(tq::max_encoded_bytes(50));
  tq::EncodeParams p;
  p.element_offset = 2;  // not on a body byte
  EXPECT_THROW(tq::encode_with_stats(std::span<const float>(x.data(), 50), st, p, out), tq::CodecError);
  p.element_offset = 52;  // 52 + 50 > 100
  try {
    tq::encode_with_stats(std::span<const float>(x.data(), 50), st, p, out);
    FAIL() << "slice beyond the tensor accepted";
  } catch (const tq::CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("element_offset 52"), std::string::npos) << e.what();
  }
}

}  // namespace
