// Philox4x32-10 against the known-answer vectors published with Random123
// (kat_vectors): the generator must be the standard one, not a look-alike.
#include "terngrad/quantize/philox.h"

#include <gtest/gtest.h>

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

}  // namespace
