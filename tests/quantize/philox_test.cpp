// Philox4x32-10 against the known-answer vectors published with Random123
// (kat_vectors): the generator must be the standard one, not a look-alike.
#include "terngrad/quantize/philox.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/philox_batch.h"

namespace {

using terngrad::quantize::philox4x32_10;

struct Kat {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t expected[4];
};

TEST(Philox, KnownAnswerVectors) {
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& k : kats) {
    const auto r = philox4x32_10({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, {{k.key[0], k.key[1]}});
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.expected[i]) << "word " << i;
  }
}

// Philox4x32-7, the version-2 stream's generator: the same file's 7-round vectors.
TEST(Philox, SevenRoundKnownAnswerVectors) {
  const Kat kats[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
  };
  for (const Kat& k : kats) {
    const auto r = terngrad::quantize::philox4x32_7({{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}}, {{k.key[0], k.key[1]}});
    for (int i = 0; i < 4; ++i) EXPECT_EQ(r.v[i], k.expected[i]) << "word " << i;
  }
}

// PhiloxStream (the vector Philox behind the encode kernels, for other
// codecs) gives philox4x32_10()'s or philox4x32_7()'s words at every level,
// for runs of any length and start: vector steps of 32, 8 and 4 blocks,
// scalar tails, low counter words that wrap inside a run, high words that
// change between calls.
TEST(Philox, StreamMatchesScalarAtEveryLevel) {
  namespace tq = terngrad::quantize;
  const tq::SimdLevel saved = tq::cpu_simd_level();
  const uint64_t starts[] = {0, 1, 5, 1000003, 0xFFFFFFFFull - 40, 0xFFFFFFFFull - 3, 0xFFFFFFFFull,
                             0x1FFFFFFF0ull, 0x123456789ull};
  const size_t lengths[] = {0, 1, 3, 4, 7, 8, 9, 31, 32, 33, 45, 48, 49, 64, 81, 100, 128, 131};
  for (tq::SimdLevel level : tq::supported_simd_levels()) {
    tq::set_cpu_simd_level(level);
    for (int rounds : {10, 7}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{0x0123456789ABCDEFull}}) {
        tq::PhiloxStream stream(seed, 77, 0xFEEDu, rounds);  // one object across calls: cached high words must follow
        for (uint64_t k0 : starts) {
          for (size_t blocks : lengths) {
            std::vector<uint32_t> got(4 * blocks + 1, 0xDEADBEEFu);
            stream.words(k0, blocks, got.data());
            for (size_t b = 0; b < blocks; ++b) {
              const uint64_t k = k0 + b;
              const tq::Philox4x32Counter c{{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), 77u, 0xFEEDu}};
              const tq::Philox4x32Key key{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
              const auto r = rounds == 7 ? tq::philox4x32_7(c, key) : tq::philox4x32_10(c, key);
              for (int j = 0; j < 4; ++j)
                ASSERT_EQ(got[4 * b + j], r.v[j]) << tq::simd_level_name(level) << " rounds=" << rounds
                                                  << " k0=" << k0 << " blocks=" << blocks << " block " << b
                                                  << " word " << j;
            }
            EXPECT_EQ(got[4 * blocks], 0xDEADBEEFu) << "wrote past the run";
          }
        }
      }
    }
  }
  tq::set_cpu_simd_level(saved);
}

TEST(Philox, StreamRefusesOtherRoundCounts) {
  namespace tq = terngrad::quantize;
  for (int rounds : {0, 6, 8, 11}) EXPECT_THROW(tq::PhiloxStream(1, 2, 3, rounds), std::invalid_argument) << rounds;
}

}  // namespace
