// The device decode of ternary sum payloads (quantize/cuda_sum.h) against
// the CPU decode_sum, its reference: same floats bit for bit for every R
// bit width and for lengths that end inside a byte and inside a field, and
// the same refusals (a field above 2R, nonzero padding) without writing the
// output. Skips with a message without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "terngrad/quantize/cuda.h"
#include "terngrad/quantize/cuda_sum.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_sum.h"

namespace tq = terngrad::quantize;
namespace tc = terngrad::quantize::cuda;

namespace {

#define REQUIRE_DEVICE()                                                                         \
  do {                                                                                           \
    if (!tc::device_available())                                                                 \
      GTEST_SKIP() << "no CUDA device: the device sum decode needs one (scripts/gpu_checks.sh)"; \
  } while (0)


// Random counts in [-R, R] packed by the CPU encoder.
std::vector<uint8_t> random_sum(uint64_t n, uint32_t r, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> u(-static_cast<int>(r), static_cast<int>(r));
  std::vector<int16_t> counts(n);
  for (auto& c : counts) c = static_cast<int16_t>(u(rng));
  std::vector<uint8_t> out(tq::sum_payload_bytes(n, r));
  tq::encode_sum(counts, scale, r, 3, 7, out);
  return out;
}

// Decodes on the device; returns the output (initialized to `fill`).
std::vector<float> device_decode(const std::vector<uint8_t>& payload, uint64_t n, float fill, bool* threw) {
  const tq::SumHeader h = tq::read_sum_header(payload);
  uint8_t* d_p = nullptr;
  float* d_out = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_p), payload.size()), cudaSuccess);
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d_out), std::max<uint64_t>(n, 1) * sizeof(float)), cudaSuccess);
  std::vector<float> out(n, fill);
  cudaMemcpy(d_p, payload.data(), payload.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(d_out, out.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  tc::SumDecoder dec;
  *threw = false;
  dec.decode_async(d_p, h, d_out, nullptr);
  try {
    dec.check(nullptr);
  } catch (const tq::CodecError& e) {
    *threw = true;
    EXPECT_EQ(e.code(), tq::Errc::kInvalidCode) << e.what();
  }
  cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(d_p);
  cudaFree(d_out);
  return out;
}

TEST(CudaSumDecode, MatchesCpuDecodeSumBitForBit) {
  REQUIRE_DEVICE();
  for (uint32_t r : {1u, 2u, 3u, 4u, 7u, 8u, 100u, 1000u, 32767u})
    for (uint64_t n : {uint64_t{1}, uint64_t{7}, uint64_t{8}, uint64_t{9}, uint64_t{1001}, uint64_t{1} << 18}) {
      SCOPED_TRACE("R = " + std::to_string(r) + ", n = " + std::to_string(n));
      const auto payload = random_sum(n, r, 0.0123f * static_cast<float>(r), n * 31 + r);
      std::vector<float> cpu(n);
      tq::decode_sum(payload, cpu);
      bool threw = false;
      const std::vector<float> gpu = device_decode(payload, n, -1.0f, &threw);
      ASSERT_FALSE(threw);
      ASSERT_EQ(std::memcmp(gpu.data(), cpu.data(), n * sizeof(float)), 0);
    }
}

TEST(CudaSumDecode, RefusesAFieldAbove2RAndWritesNothing) {
  REQUIRE_DEVICE();
  const uint64_t n = 1000;
  auto payload = random_sum(n, 2, 0.5f, 1);  // 3 bits per element, fields 0..4
  // Element 8 starts at bit 24, byte 3 of the body: field 7 > 4.
  payload[tq::kHeaderBytes + 3] |= 0x07;
  std::vector<float> cpu(n);
  EXPECT_THROW(tq::decode_sum(payload, cpu), tq::CodecError);
  bool threw = false;
  const std::vector<float> gpu = device_decode(payload, n, 42.0f, &threw);
  EXPECT_TRUE(threw);
  for (float v : gpu) ASSERT_EQ(v, 42.0f);
}

TEST(CudaSumDecode, RefusesNonzeroPadding) {
  REQUIRE_DEVICE();
  const uint64_t n = 5;  // 5 x 3 bits = 15: one padding bit
  auto payload = random_sum(n, 2, 0.5f, 2);
  payload.back() |= 0x80;
  bool threw = false;
  device_decode(payload, n, 0.0f, &threw);
  EXPECT_TRUE(threw);
}

}  // namespace
