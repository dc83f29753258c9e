// Base-3 (codec 4) and entropy-coded (codec 5, 6) payloads: the rANS pieces
// against plain integer references, the payloads against the 2-bit payload
// of the same input (same codes, so the same decoded values), sizes, thread
// invariance and refusal of malformed input.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/ternary_sum.h"

namespace q = terngrad::quantize;
namespace rans = terngrad::quantize::rans;

namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> x(n);
  for (auto& v : x) v = d(rng);
  return x;
}

std::vector<uint8_t> encode(const std::vector<float>& x, q::Packing packing, q::EncodeParams p = {}) {
  p.packing = packing;
  if (p.seed == 0) p.seed = 1234;
  std::vector<uint8_t> out(q::max_encoded_bytes(x.size(), packing));
  out.resize(q::encode(x, p, out));
  return out;
}

std::vector<float> decode(const std::vector<uint8_t>& payload, size_t n) {
  std::vector<float> out(n, -7.0f);
  q::decode(payload, out);
  return out;
}

// The 2-bit code of element i of a codec-1 payload.
uint32_t code_at(const std::vector<uint8_t>& p, size_t i) { return (p[q::kHeaderBytes + i / 4] >> (2 * (i % 4))) & 3u; }

double empirical_entropy_bits(const std::vector<uint8_t>& two_bit, size_t n) {
  double c[3] = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) c[code_at(two_bit, i)] += 1;
  double h = 0;
  for (double v : c)
    if (v > 0) h -= v / n * std::log2(v / n);
  return h;
}

}  // namespace

TEST(Rans, DivisionByMagicIsExactForEveryFrequency) {
  std::mt19937 rng(5);
  for (uint32_t f = 1; f <= rans::kProbScale; ++f) {
    const uint64_t m = rans::make_enc_symbol(f, 0).magic;
    const uint32_t edge[] = {0u, 1u, f - 1, f, f + 1, 0xFFFFFFFFu, 0xFFFFFFFFu - f, (0xFFFFFFFFu / f) * f,
                             (0xFFFFFFFFu / f) * f - 1};
    for (uint32_t x : edge) ASSERT_EQ(rans::div_by_magic(x, m), x / f) << "x " << x << " f " << f;
    for (int k = 0; k < 64; ++k) {
      const uint32_t x = rng();
      ASSERT_EQ(rans::div_by_magic(x, m), x / f) << "x " << x << " f " << f;
    }
  }
}

TEST(Rans, TheModelMarginNeverGoesBelowOne) {
  // FORMAT.md's argument: with k symbols clamped up to 1, the excess is at
  // most k - 1 and the largest frequency at least floor((2^14 - k)/(N - k)),
  // so the remainder leaves it >= 1 for every N <= 255 symbols.
  for (uint32_t n = 2; n <= rans::kMaxSymbols; ++n)
    for (uint32_t k = 0; k < n; ++k)
      ASSERT_GE((rans::kProbScale - k) / (n - k), k) << n << " symbols, " << k << " clamped";
  // The element level at 12 bits for the alphabets that group (a <= 15).
  for (uint32_t a = 2; a <= 15; ++a)
    for (uint32_t k = 0; k < a; ++k) ASSERT_GE((4096u - k) / (a - k), k);
}

TEST(Rans, ModelsOfRandomCountsKeepTheirInvariants) {
  std::mt19937 rng(9);
  for (uint32_t a : {3u, 5u, 7u, 9u, 15u, 17u, 101u, 255u}) {
    const uint32_t g = rans::group_for_alphabet(a), e = rans::element_prob_bits(g);
    ASSERT_LE(rans::pow_u32(a, g), 255u);
    ASSERT_GT(rans::pow_u32(a, g + 1), 255u);
    for (int trial = 0; trial < 300; ++trial) {
      std::vector<uint32_t> c(a, 0);
      // Skewed: a few large counts, many tiny or zero ones.
      const uint32_t total = 1 + rng() % (5u << 14);
      for (uint32_t i = 0; i < total; ++i) {
        const uint32_t v = (rng() % 4 == 0) ? rng() % a : std::min<uint32_t>(a - 1, static_cast<uint32_t>(std::abs(
                                                               std::normal_distribution<double>(0, 1.5)(rng))));
        ++c[v];
      }
      std::vector<uint16_t> qv(a), f(rans::pow_u32(a, g));
      ASSERT_TRUE(rans::quantize_element_probs(c.data(), a, e, qv.data()));
      ASSERT_TRUE(rans::element_probs_valid(qv.data(), a, e));
      for (uint32_t v = 0; v < a; ++v) ASSERT_EQ(qv[v] > 0, c[v] > 0) << "value " << v;
      ASSERT_TRUE(rans::symbol_frequencies(qv.data(), a, g, f.data()));
      uint32_t sum = 0;
      for (uint32_t s = 0; s < f.size(); ++s) {
        bool possible = true;
        for (uint32_t j = 0, r = s; j < g; ++j, r /= a) possible = possible && qv[r % a] > 0;
        ASSERT_EQ(f[s] > 0, possible) << "symbol " << s;
        sum += f[s];
      }
      ASSERT_EQ(sum, rans::kProbScale);
    }
  }
}

TEST(Base3, SameCodesAsTwoBitAndExactlyOnePointSixBits) {
  for (size_t n : {0u, 1u, 4u, 5u, 6u, 19u, 20u, 21u, 1000u, 81919u, 81920u, 81921u, 300007u}) {
    const auto x = gaussian(n, static_cast<uint32_t>(n) + 1);
    const auto two = encode(x, q::Packing::k2Bit);
    const auto b3 = encode(x, q::Packing::kBase3);
    ASSERT_EQ(b3.size(), q::kHeaderBytes + (n + 4) / 5) << n;
    ASSERT_EQ(b3[5], q::kCodecTernaryBase3);
    for (size_t i = 0; i < n; ++i) {
      uint32_t s = b3[q::kHeaderBytes + i / 5];
      for (size_t j = 0; j < i % 5; ++j) s /= 3;
      ASSERT_EQ(s % 3, code_at(two, i)) << "n " << n << " element " << i;
    }
    EXPECT_EQ(decode(b3, n), decode(two, n)) << n;
    EXPECT_EQ(q::inspect(b3).codec, q::kCodecTernaryBase3);
    EXPECT_EQ(q::payload_length(b3), b3.size());
  }
}

TEST(Entropy, DecodesToTheTwoBitValuesAndStaysUnderTheBase3Size) {
  for (size_t n : {0u, 3u, 100u, 5000u, 81920u, 81925u, 200003u, 1u << 20}) {
    const auto x = gaussian(n, static_cast<uint32_t>(n) + 7);
    const auto two = encode(x, q::Packing::k2Bit);
    const auto ent = encode(x, q::Packing::kEntropy);
    ASSERT_LE(ent.size(), q::max_encoded_bytes(n, q::Packing::kEntropy)) << n;
    EXPECT_EQ(decode(ent, n), decode(two, n)) << n;
    EXPECT_EQ(q::payload_length(ent), ent.size());
    std::vector<float> acc(n, 1.0f), ref(n, 1.0f);
    q::decode_accumulate(ent, acc);
    q::decode_accumulate(two, ref);
    EXPECT_EQ(acc, ref);
    if (n >= 5000) {
      ASSERT_EQ(ent[5], q::kCodecTernaryEntropy) << n;
      // Within 2% (plus the header and block overheads) of the codes' empirical entropy.
      const double bits = 8.0 * ent.size() / n, h = empirical_entropy_bits(two, n);
      EXPECT_LT(bits, h * 1.02 + 8.0 * (q::kEntropyHeaderBytes + 200.0 * (n / 81920 + 1)) / n) << n;
      if (n >= 81920) EXPECT_LT(bits, 1.3) << "Gaussian with the 2.5-sigma clip, n " << n;
    } else if (n < 100) {
      EXPECT_EQ(ent[5], q::kCodecTernaryBase3) << "tiny tensors: base-3 is smaller";
    }
  }
}

TEST(Entropy, NearestRoundingSlicesAndSharedScaleKeepTheirFlags) {
  const auto x = gaussian(200000, 3);
  q::EncodeParams p;
  p.rounding = q::Rounding::kNearest;
  p.shared_scale = 10.0f;
  const auto ent = encode(x, q::Packing::kEntropy, p);
  const q::PayloadHeader h = q::inspect(ent);
  EXPECT_TRUE(h.nearest());
  EXPECT_TRUE(h.shared_scale());
  EXPECT_EQ(h.seed, 0u);
  EXPECT_EQ(decode(ent, x.size()), decode(encode(x, q::Packing::k2Bit, p), x.size()));
  // A slice draws the whole tensor's random words: its values are those elements'.
  const q::TensorStats st = q::compute_stats(x);
  q::EncodeParams sp;
  sp.seed = 99;
  sp.element_offset = 40000;
  std::vector<float> part(x.begin() + 40000, x.begin() + 140000);
  for (q::Packing pk : {q::Packing::k2Bit, q::Packing::kBase3, q::Packing::kEntropy}) {
    sp.packing = pk;
    std::vector<uint8_t> out(q::max_encoded_bytes(part.size(), pk));
    out.resize(q::encode_with_stats(part, st, sp, out));
    std::vector<float> whole(x.size()), mine(part.size());
    sp.element_offset = 0;
    std::vector<uint8_t> w(q::max_encoded_bytes(x.size(), q::Packing::k2Bit));
    q::EncodeParams wp = sp;
    wp.packing = q::Packing::k2Bit;
    q::encode_with_stats(x, st, wp, w);
    sp.element_offset = 40000;
    q::decode(w, whole);
    q::decode(out, mine);
    EXPECT_TRUE(std::equal(mine.begin(), mine.end(), whole.begin() + 40000)) << q::packing_name(pk);
  }
}

TEST(Entropy, BytesDoNotDependOnTheThreadCount) {
  const auto x = gaussian(1 << 20, 11);
  const int before = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = encode(x, q::Packing::kEntropy);
  omp_set_num_threads(std::max(2, before));
  const auto many = encode(x, q::Packing::kEntropy);
  omp_set_num_threads(before);
  EXPECT_EQ(one, many);
}

TEST(Entropy, HeavierTailsCostFewerBits) {
  // A Student-t-like gradient (most elements far below the clip): fewer kept.
  std::mt19937 rng(2);
  std::student_t_distribution<float> t(2.0f);
  std::vector<float> x(1 << 20);
  for (auto& v : x) v = t(rng);
  const auto ent = encode(x, q::Packing::kEntropy);
  const auto two = encode(x, q::Packing::k2Bit);
  const double bits = 8.0 * ent.size() / x.size();
  EXPECT_LT(bits, empirical_entropy_bits(two, x.size()) + 0.03);
  EXPECT_EQ(decode(ent, x.size()), decode(two, x.size()));
}

TEST(Entropy, EveryCorruptionIsRefusedOrDecodesToTernaryValues) {
  const auto x = gaussian(30000, 4);
  const auto ent = encode(x, q::Packing::kEntropy);
  ASSERT_EQ(ent[5], q::kCodecTernaryEntropy);
  const float s = q::inspect(ent).scale;
  std::mt19937 rng(8);
  int refused = 0, accepted = 0;
  for (size_t i = 0; i < ent.size(); i += (i < 200 ? 1 : 37)) {
    auto bad = ent;
    bad[i] ^= static_cast<uint8_t>(1u << (rng() % 8));
    std::vector<float> out(x.size(), 5.0f);
    try {
      q::decode(bad, out);
      ++accepted;  // a flipped bit inside a stream can still decode: then to +-s or 0 only
      for (float v : out) ASSERT_TRUE(v == 0.0f || v == s || v == -s) << "byte " << i;
    } catch (const q::CodecError&) {
      ++refused;
      for (float v : out) ASSERT_EQ(v, 5.0f) << "a refused payload wrote its output, byte " << i;
    }
  }
  EXPECT_GT(refused, accepted);  // the end-state check catches most stream damage
  for (size_t len : {size_t{0}, size_t{10}, size_t{51}, ent.size() - 1}) {
    std::vector<uint8_t> cut(ent.begin(), ent.begin() + static_cast<std::ptrdiff_t>(len));
    std::vector<float> out(x.size());
    EXPECT_THROW(q::decode(cut, out), q::CodecError) << len;
  }
}

TEST(Entropy, RefusalsNameTheProblem) {
  const auto x = gaussian(100000, 6);
  const auto ent = encode(x, q::Packing::kEntropy);
  auto expect_message = [&](std::vector<uint8_t> p, const std::string& needle) {
    std::vector<float> out(x.size());
    try {
      q::decode(p, out);
      ADD_FAILURE() << "accepted; expected: " << needle;
    } catch (const q::CodecError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto with_crc = [](std::vector<uint8_t> p) {
    q::store_le32(p.data() + q::kEntropyCrcOffset, q::crc32_ieee(p.data(), q::kEntropyCrcOffset));
    return p;
  };
  auto p = ent;
  p[q::kEntropyLanesOffset] = 33;
  expect_message(with_crc(p), "lanes 33");
  p = ent;
  p[q::kEntropyGroupOffset] = 4;
  expect_message(with_crc(p), "elements per symbol 4");
  p = ent;
  q::store_le64(p.data() + q::kEntropyLengthOffset, ent.size() + 1);
  expect_message(with_crc(p), "length field");
  p = ent;
  p[q::kEntropyHeaderBytes + 4] ^= 1;  // block 0's first probability: no longer sums to 2^12
  expect_message(p, "block 0");
  p = ent;
  p[20] ^= 1;  // tensor id without fixing the CRC
  expect_message(p, "CRC");
  std::vector<float> wrong(x.size() + 1);
  try {
    q::decode(ent, wrong);
    ADD_FAILURE();
  } catch (const q::CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("payload holds 100000"), std::string::npos) << e.what();
  }
}

TEST(Base3, RefusesBytesAbove242AndNonzeroPadding) {
  const auto x = gaussian(12, 1);
  auto b3 = encode(x, q::Packing::kBase3);
  std::vector<float> out(12);
  auto bad = b3;
  bad[q::kHeaderBytes] = 243;
  EXPECT_THROW(q::decode(bad, out), q::CodecError);
  bad = b3;
  bad.back() = 9;  // n = 12: the last byte holds 2 elements, digits 2..4 must be 0 (byte < 9)
  try {
    q::decode(bad, out);
    ADD_FAILURE();
  } catch (const q::CodecError& e) {
    EXPECT_NE(std::string(e.what()).find("beyond element 11"), std::string::npos) << e.what();
  }
}

// repack() gives encode()'s bytes of the other packing, for every pair of
// packings, at sizes around the block and symbol edges, with both streams,
// nearest rounding and a shared scale (the header fields travel).
TEST(Repack, GivesTheBytesEncodeWritesInTheOtherPacking) {
  const q::Packing all[] = {q::Packing::k2Bit, q::Packing::kBase3, q::Packing::kEntropy};
  const uint64_t block = uint64_t{5} << q::rans::kEncoderBlockLog2;
  for (uint64_t n : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{20}, uint64_t{1001}, block - 3, block, block + 6,
                     3 * block + 17}) {
    const auto x = gaussian(n, static_cast<uint32_t>(n) + 5);
    for (int variant = 0; variant < 3; ++variant) {
      q::EncodeParams p;
      p.seed = 77;
      p.step = 9;
      p.tensor_id = 4;
      if (variant == 1) p.stream = q::RandomStream::kPhilox10Word32;
      if (variant == 2) {
        p.rounding = q::Rounding::kNearest;
        p.shared_scale = 6.0f;
      }
      for (q::Packing from : all) {
        const auto src = encode(x, from, p);
        for (q::Packing to : all) {
          SCOPED_TRACE(std::to_string(n) + " elements, variant " + std::to_string(variant) + ", " +
                       q::packing_name(from) + " -> " + q::packing_name(to));
          std::vector<uint8_t> out(q::max_encoded_bytes(n, to));
          out.resize(q::repack(src, to, out));
          EXPECT_EQ(out, encode(x, to, p));
        }
      }
    }
  }
}

TEST(Repack, RefusesACorruptPayloadOrAShortBufferAndWritesNothing) {
  const auto x = gaussian(5000, 2);
  const auto ent = encode(x, q::Packing::kEntropy);
  std::vector<uint8_t> out(q::max_encoded_bytes(x.size(), q::Packing::k2Bit), 0x5A);
  auto bad = ent;
  bad[q::kHeaderVersionOffset] = 3;
  EXPECT_THROW(q::repack(bad, q::Packing::k2Bit, out), q::CodecError);
  auto b3 = encode(x, q::Packing::kBase3);
  b3[q::kHeaderBytes + 100] = 243;  // not a base-3 byte
  EXPECT_THROW(q::repack(b3, q::Packing::kEntropy, out), q::CodecError);
  auto two = encode(x, q::Packing::k2Bit);
  two[q::kHeaderBytes + 10] |= 0x03;  // element 40 takes the reserved code 0b11
  EXPECT_THROW(q::repack(two, q::Packing::kBase3, out), q::CodecError);
  std::vector<uint8_t> shorter(q::max_encoded_bytes(x.size(), q::Packing::k2Bit) - 1, 0x5A);
  try {
    q::repack(ent, q::Packing::k2Bit, shorter);
    ADD_FAILURE() << "a buffer one byte short was taken";
  } catch (const q::CodecError& e) {
    EXPECT_EQ(e.code(), q::Errc::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("output buffer has"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::all_of(shorter.begin(), shorter.end(), [](uint8_t b) { return b == 0x5A; }));
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t b) { return b == 0x5A; }));
}

// Packed inputs are summed block by block (whole symbols, whole output
// bytes): the bytes of the int16 route, sum_shared() + encode_sum(), at
// every edge of those blocks, with mixed packings; a corrupt input throws
// before the output is touched.
TEST(PackedSum, BlockwiseSumEqualsSumSharedThenEncodeSum) {
  for (size_t n : {size_t{1}, size_t{5}, size_t{7}, size_t{39}, size_t{40}, size_t{41}, size_t{65519}, size_t{65520},
                   size_t{65521}, size_t{131041}, size_t{200003}}) {
    for (uint32_t r : {1u, 3u, 4u}) {
      SCOPED_TRACE(::testing::Message() << "n " << n << " r " << r);
      std::vector<std::vector<uint8_t>> payloads;
      for (uint32_t w = 0; w < r; ++w) {
        q::EncodeParams p;
        p.seed = 300 + w;
        p.shared_scale = 6.0f;
        const q::Packing pk = w % 3 == 0 ? q::Packing::kBase3 : w % 3 == 1 ? q::Packing::kEntropy : q::Packing::k2Bit;
        payloads.push_back(encode(gaussian(n, 70 + w), pk, p));
      }
      std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
      std::vector<int16_t> counts(n);
      const float scale = q::sum_shared(views, counts);
      std::vector<uint8_t> want(q::sum_payload_bytes(n, r)), got(want.size(), 0xA5);
      const q::PayloadHeader h = q::read_header(payloads[0]);
      want.resize(q::encode_sum(counts, scale, r, h.tensor_id, h.step, want));
      ASSERT_EQ(q::sum_payloads(views, got), want.size());
      EXPECT_EQ(got, want);
      if (n < 40) continue;
      std::vector<uint8_t> bad = payloads[0];  // a base-3 payload: a byte above 242
      bad[q::kHeaderBytes + n / 10] = 250;
      views[0] = bad;
      std::vector<uint8_t> untouched(want.size(), 0xA5);
      EXPECT_THROW(q::sum_payloads(views, untouched), q::CodecError);
      EXPECT_TRUE(std::all_of(untouched.begin(), untouched.end(), [](uint8_t b) { return b == 0xA5; }));
    }
  }
}

TEST(EntropySum, SmallerThanBitPackedAndTheSameSum) {
  const size_t n = 300000;
  for (uint32_t r : {1u, 2u, 4u, 8u}) {
    std::vector<std::vector<uint8_t>> payloads;
    for (uint32_t w = 0; w < r; ++w) {
      q::EncodeParams p;
      p.seed = 100 + w;
      p.shared_scale = 6.0f;  // above every worker's own 2.5-sigma scale
      // mixed packings: the sum does not care how each worker packed
      const q::Packing pk = w % 3 == 0 ? q::Packing::kEntropy : w % 3 == 1 ? q::Packing::k2Bit : q::Packing::kBase3;
      payloads.push_back(encode(gaussian(n, 50 + w), pk, p));
    }
    std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
    std::vector<uint8_t> fixed(q::sum_payload_bytes(n, r)), ent(q::sum_payload_bytes(n, r));
    fixed.resize(q::sum_payloads(views, fixed));
    ent.resize(q::sum_payloads(views, ent, q::SumPacking::kEntropy));
    ASSERT_EQ(fixed.size(), q::sum_payload_bytes(n, r));
    ASSERT_EQ(ent[5], q::kCodecTernarySumEntropy) << r;
    std::vector<float> a(n), b(n);
    q::decode_sum(fixed, a);
    q::decode_sum(ent, b);
    EXPECT_EQ(a, b) << r;
    const q::SumHeader h = q::inspect_sum(ent);
    EXPECT_EQ(h.contributions, r);
    EXPECT_EQ(h.codec, q::kCodecTernarySumEntropy);
    if (r == 4) EXPECT_LT(ent.size(), 0.75 * fixed.size()) << "at least 25% smaller at 4 replicas";
  }
}

TEST(EntropySum, RefusesAMalformedSum) {
  const size_t n = 50000;
  std::vector<int16_t> c(n);
  std::mt19937 rng(1);
  for (auto& v : c) v = static_cast<int16_t>(static_cast<int>(rng() % 9) - 4 + (rng() % 3 == 0 ? 0 : 0));
  for (auto& v : c) v = static_cast<int16_t>(rng() % 4 == 0 ? v : 0);
  std::vector<uint8_t> out(q::sum_payload_bytes(n, 4));
  out.resize(q::encode_sum(c, 0.5f, 4, 1, 2, q::SumPacking::kEntropy, out));
  ASSERT_EQ(out[5], q::kCodecTernarySumEntropy);
  std::vector<float> d(n);
  q::decode_sum(out, d);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(d[i], 0.5f * c[i]);
  auto bad = out;
  q::store_le32(bad.data() + q::kEntropySumContributionsOffset, 128);
  EXPECT_THROW(q::decode_sum(bad, d), q::CodecError);
  bad = out;
  bad.pop_back();
  EXPECT_THROW(q::decode_sum(bad, d), q::CodecError);
  std::vector<float> wrong(n - 1);
  EXPECT_THROW(q::decode_sum(out, wrong), q::CodecError);
}

namespace {
// A valid codec-5 payload of `count` zeros in the fewest bytes: blocks of
// 2^20 symbols, one lane, q = (4096, 0, 0), so every symbol has frequency
// 2^14 and each block's stream is its one lane state 2^16 (no words).
std::vector<uint8_t> all_zero_entropy_payload(uint64_t count) {
  rans::Layout l{count, 3, 5, 1, 20};
  std::vector<uint8_t> p(q::kEntropyHeaderBytes + l.blocks() * (l.entry_bytes() + 4));
  for (uint64_t j = 0; j < l.blocks(); ++j) {
    uint8_t* d = p.data() + q::kEntropyHeaderBytes + j * l.entry_bytes();
    q::store_le32(d, 4);
    d[4] = 0x00;
    d[5] = 0x10;  // q_0 = 4096
    q::store_le32(p.data() + q::kEntropyHeaderBytes + l.directory_bytes() + 4 * j, rans::kStateLow);
  }
  q::EntropyHeader h;
  h.codec = q::kCodecTernaryEntropy;
  h.count = count;
  h.scale_bits = 0x3f800000u;
  h.lanes = 1;
  h.block_log2 = 20;
  h.group = 5;
  h.length = p.size();
  q::write_entropy_header(p.data(), h);
  return p;
}
}  // namespace

TEST(EntropySum, AnOutputTooSmallForTheClaimedCountIsRefusedBeforeAllocating) {
  // 183 KB claiming 2^36 elements: the sum's int16 counts would be 128 GiB.
  // sum_payloads() sized them from the first header before checking `out`
  // (found while writing the codec-6 fuzz harness); now the output's size is
  // checked first, as encode_sum() would check it.
  const auto small = all_zero_entropy_payload(1000);
  std::vector<float> zeros(1000, 5.0f);
  q::decode(small, zeros);  // the construction is a valid payload
  EXPECT_EQ(zeros, std::vector<float>(1000, 0.0f));
  const auto huge = all_zero_entropy_payload(uint64_t{1} << 36);
  ASSERT_LT(huge.size(), 200000u);
  EXPECT_EQ(q::read_header(huge).count, uint64_t{1} << 36);
  const std::span<const uint8_t> one[] = {huge};
  std::vector<uint8_t> out(1000);
  for (q::SumPacking packing : {q::SumPacking::kBitPacked, q::SumPacking::kEntropy}) {
    try {
      q::sum_payloads(one, out, packing);
      ADD_FAILURE() << "accepted";
    } catch (const q::CodecError& e) {
      EXPECT_EQ(e.code(), q::Errc::kBufferTooSmall) << e.what();
    }
  }
}
