// The ps's dense sums (dense_sum.h) against a scalar reference written here
// from the rule (acc = +0, then acc += v_r in body order, float32), bit for
// bit: every size class around the vector widths (4, 8, 16 floats, four
// vectors a step) with odd tails, 1 to 8 bodies, bodies and output off any
// alignment (a body follows a 16-byte payload header; offsets 4 and 1 here),
// sums large enough for OpenMP blocks and for the streaming-store path,
// values that make the order of the adds visible, and the special values.
// ctest runs this suite once per SIMD level (TG_CPU_SIMD); DenseSumLevels
// also compares every supported level with the portable kernels directly.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/dense_sum.h"
#include "terngrad/quantize/fp16.h"

namespace tq = terngrad::quantize;

namespace {

const std::vector<size_t> kSizes = {0, 1, 2, 3, 7, 15, 16, 17, 31, 63, 64, 65, 255, 1023, 4097};
// Past the parallel threshold (2^17 elements): several OpenMP blocks, the last one partial.
constexpr size_t kLarge = (size_t{1} << 20) + 3;
// Past the size from which the output is written with non-temporal stores
// (4M elements, dense_sum_cpu.cpp), where each block first sums up to the
// output's next 64-byte boundary with the portable kernel.
constexpr size_t kHuge = (size_t{1} << 22) + 5;
const std::vector<size_t> kBodyCounts = {1, 2, 3, 4, 8};
constexpr size_t kGuard = 64;  // bytes around the output that must stay untouched
constexpr uint8_t kGuardByte = 0xA5;

// Float32 values whose sum depends on the order of the adds: magnitudes over
// 2^-30..2^30 (so most adds round), and now and then a special value: +-0,
// +-Inf, NaN, a subnormal, or a value near FLT_MAX (overflow to Inf).
float random_f32(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 99), exp(-30, 30);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  const float sign = (rng() & 1) ? -1.0f : 1.0f;
  switch (pick(rng)) {
    case 0: return sign * 0.0f;
    case 1: return sign * std::numeric_limits<float>::infinity();
    case 2: return std::numeric_limits<float>::quiet_NaN();
    case 3: return sign * std::numeric_limits<float>::denorm_min() * static_cast<float>(rng() % 1000);
    case 4: return sign * std::numeric_limits<float>::max() * 0.75f;
    default: return sign * std::ldexp(mant(rng), exp(rng));
  }
}

// Random halves, every bit pattern possible (subnormals, Inf and NaN included).
uint16_t random_f16(std::mt19937_64& rng) { return static_cast<uint16_t>(rng()); }

// R bodies of n elements, each starting `offset` bytes into its own buffer,
// little-endian: what payloads hold after their header.
struct Bodies {
  std::vector<std::vector<uint8_t>> storage;
  std::vector<const uint8_t*> ptrs;
};

Bodies make_f32_bodies(size_t r, size_t n, size_t offset, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bodies b;
  for (size_t i = 0; i < r; ++i) {
    b.storage.emplace_back(offset + 4 * n);
    for (size_t e = 0; e < n; ++e) {
      const uint32_t u = std::bit_cast<uint32_t>(random_f32(rng));
      for (int k = 0; k < 4; ++k) b.storage.back()[offset + 4 * e + k] = static_cast<uint8_t>(u >> (8 * k));
    }
  }
  for (auto& s : b.storage) b.ptrs.push_back(s.data() + offset);
  return b;
}

Bodies make_f16_bodies(size_t r, size_t n, size_t offset, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bodies b;
  for (size_t i = 0; i < r; ++i) {
    b.storage.emplace_back(offset + 2 * n);
    for (size_t e = 0; e < n; ++e) {
      const uint16_t h = random_f16(rng);
      b.storage.back()[offset + 2 * e] = static_cast<uint8_t>(h);
      b.storage.back()[offset + 2 * e + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  for (auto& s : b.storage) b.ptrs.push_back(s.data() + offset);
  return b;
}

float load_f32(const uint8_t* p) {
  return std::bit_cast<float>(static_cast<uint32_t>(p[0] | (p[1] << 8) | (p[2] << 16)) |
                              (static_cast<uint32_t>(p[3]) << 24));
}

// The rule, element by element.
std::vector<float> reference_f32(const Bodies& b, size_t n) {
  std::vector<float> out(n);
  for (size_t e = 0; e < n; ++e) {
    float acc = 0.0f;
    for (const uint8_t* p : b.ptrs) acc += load_f32(p + 4 * e);
    out[e] = acc;
  }
  return out;
}

std::vector<float> reference_f16(const Bodies& b, size_t n) {
  std::vector<float> out(n);
  for (size_t e = 0; e < n; ++e) {
    float acc = 0.0f;
    for (const uint8_t* p : b.ptrs) acc += tq::fp16::to_float(static_cast<uint16_t>(p[2 * e] | (p[2 * e + 1] << 8)));
    out[e] = acc;
  }
  return out;
}

using SumFn = void (*)(std::span<const uint8_t* const>, size_t, uint8_t*);

// Runs the sum into a guarded buffer, `out_offset` bytes past a 64-byte
// boundary's guard, and returns the raw output bytes (4n).
std::vector<uint8_t> run_sum(SumFn fn, const Bodies& b, size_t n, size_t out_offset) {
  std::vector<uint8_t> buf(kGuard + out_offset + 4 * n + kGuard, kGuardByte);
  uint8_t* out = buf.data() + kGuard + out_offset;
  fn(b.ptrs, n, out);
  for (size_t i = 0; i < kGuard + out_offset; ++i) EXPECT_EQ(buf[i], kGuardByte) << "wrote before the output, byte " << i;
  for (size_t i = kGuard + out_offset + 4 * n; i < buf.size(); ++i)
    EXPECT_EQ(buf[i], kGuardByte) << "wrote past the output, byte " << i;
  return {out, out + 4 * n};
}

std::string hex_bits(float f) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", static_cast<unsigned>(std::bit_cast<uint32_t>(f)));
  return buf;
}

// Bit for bit, except that two NaNs agree whatever their payloads (dense_sum.h).
::testing::AssertionResult same_sum(const std::vector<float>& want, const std::vector<uint8_t>& got) {
  for (size_t e = 0; e < want.size(); ++e) {
    const float g = load_f32(got.data() + 4 * e);
    const bool ok = std::isnan(want[e]) ? std::isnan(g) : std::bit_cast<uint32_t>(want[e]) == std::bit_cast<uint32_t>(g);
    if (!ok)
      return ::testing::AssertionFailure() << "element " << e << ": want " << want[e] << " (" << hex_bits(want[e])
                                           << "), got " << g << " (" << hex_bits(g) << ")";
  }
  return ::testing::AssertionSuccess();
}

struct Case {
  size_t n, r, offset;
};

std::vector<Case> cases(size_t elem_bytes) {
  std::vector<Case> out;
  // Offsets: aligned, one element past (the payload header leaves bodies 16
  // bytes in; 4 for float32 is what any non-vector-aligned start looks like),
  // and an odd byte.
  for (size_t n : kSizes)
    for (size_t r : kBodyCounts)
      for (size_t offset : {size_t{0}, elem_bytes, size_t{1}}) out.push_back({n, r, offset});
  for (size_t r : kBodyCounts) out.push_back({kLarge, r, 4});
  out.push_back({kHuge, 3, elem_bytes});
  out.push_back({kHuge, 2, 1});  // an output off 4-byte alignment: no streaming stores
  return out;
}

std::string label(const Case& c) {
  return "n=" + std::to_string(c.n) + " R=" + std::to_string(c.r) + " offset=" + std::to_string(c.offset) +
         " level=" + tq::simd_level_name(tq::cpu_simd_level());
}

}  // namespace

TEST(DenseSum, F32MatchesTheScalarReference) {
  for (const Case& c : cases(4)) {
    SCOPED_TRACE(label(c));
    const Bodies b = make_f32_bodies(c.r, c.n, c.offset, 1000 * c.n + 10 * c.r + c.offset);
    ASSERT_TRUE(same_sum(reference_f32(b, c.n), run_sum(tq::dense_sum_f32, b, c.n, c.offset)));
  }
}

TEST(DenseSum, F16MatchesTheScalarReference) {
  for (const Case& c : cases(2)) {
    SCOPED_TRACE(label(c));
    const Bodies b = make_f16_bodies(c.r, c.n, c.offset, 2000 * c.n + 10 * c.r + c.offset);
    ASSERT_TRUE(same_sum(reference_f16(b, c.n), run_sum(tq::dense_sum_f16, b, c.n, c.offset)));
  }
}

// The rule's two visible consequences, by hand: the adds go in body order
// ((0 + 1e8) + 1) - 1e8 = 0, where 1 + (1e8 - 1e8) would be 1), and the
// leading +0 turns a lone -0 into +0. 64 elements: the vector loops see it.
TEST(DenseSum, AddsInBodyOrderFromPositiveZero) {
  constexpr size_t n = 64;
  auto body_of = [](float v) {
    std::vector<uint8_t> b(4 * n);
    for (size_t e = 0; e < n; ++e) std::memcpy(b.data() + 4 * e, &v, 4);  // little-endian hosts only
    return b;
  };
  if (std::endian::native != std::endian::little) GTEST_SKIP() << "the bodies here are written natively";
  const auto big = body_of(1e8f), one = body_of(1.0f), minus_big = body_of(-1e8f), minus_zero = body_of(-0.0f);
  std::vector<uint8_t> out(4 * n);
  const uint8_t* ordered[] = {big.data(), one.data(), minus_big.data()};
  tq::dense_sum_f32(ordered, n, out.data());
  for (size_t e = 0; e < n; ++e) ASSERT_EQ(std::bit_cast<uint32_t>(load_f32(out.data() + 4 * e)), 0u) << e;
  const uint8_t* lone[] = {minus_zero.data()};
  tq::dense_sum_f32(lone, n, out.data());
  for (size_t e = 0; e < n; ++e) ASSERT_EQ(std::bit_cast<uint32_t>(load_f32(out.data() + 4 * e)), 0u) << e;
  const uint8_t* none[] = {nullptr};
  std::fill(out.begin(), out.end(), uint8_t{0xFF});
  tq::dense_sum_f32(std::span<const uint8_t* const>(none, 0), n, out.data());
  for (size_t e = 0; e < n; ++e) ASSERT_EQ(std::bit_cast<uint32_t>(load_f32(out.data() + 4 * e)), 0u) << e;
}

// Every level this CPU runs against the portable kernels, in one process
// (the suites above compare each level with the reference under ctest).
TEST(DenseSumLevels, EveryLevelGivesThePortableBits) {
  const tq::SimdLevel saved = tq::cpu_simd_level();
  for (const Case& c : {Case{4097, 3, 4}, Case{kLarge, 4, 4}, Case{65, 8, 1}}) {
    const Bodies f32 = make_f32_bodies(c.r, c.n, c.offset, 77 + c.n);
    const Bodies f16 = make_f16_bodies(c.r, c.n, c.offset, 78 + c.n);
    tq::set_cpu_simd_level(tq::SimdLevel::kPortable);
    const auto want32 = run_sum(tq::dense_sum_f32, f32, c.n, 0);
    const auto want16 = run_sum(tq::dense_sum_f16, f16, c.n, 0);
    for (tq::SimdLevel level : tq::supported_simd_levels()) {
      tq::set_cpu_simd_level(level);
      SCOPED_TRACE(label(c));
      std::vector<float> w32(c.n), w16(c.n);
      for (size_t e = 0; e < c.n; ++e) {
        w32[e] = load_f32(want32.data() + 4 * e);
        w16[e] = load_f32(want16.data() + 4 * e);
      }
      EXPECT_TRUE(same_sum(w32, run_sum(tq::dense_sum_f32, f32, c.n, 0)));
      EXPECT_TRUE(same_sum(w16, run_sum(tq::dense_sum_f16, f16, c.n, 0)));
    }
  }
  tq::set_cpu_simd_level(saved);
}
