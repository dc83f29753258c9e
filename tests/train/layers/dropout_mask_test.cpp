// terngrad/train/dropout_mask.h, the hash the CPU Dropout layer and its GPU
// twin share: it is what the CPU layer's kept() answers, keeps about
// keep_prob of the elements, and still draws the masks it drew before it
// moved into the shared header (pinned values), so earlier runs reproduce.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "terngrad/train/dropout_mask.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {
namespace {

namespace dm = dropout_mask;

bool header_kept(const std::string& name, float keep_prob, uint64_t seed, uint64_t index) {
  return dm::kept_in(dm::stream_key(seed, dm::name_salt(name)), index, dm::keep_threshold(keep_prob));
}

TEST(DropoutMask, ReproducesTheLayersKept) {
  for (const std::string name : {"dropout6", "dropout7", "fc7_dropout"})
    for (float keep : {0.5f, 0.3f, 0.9f, 1.0f}) {
      const Dropout d(DropoutConfig{.name = name, .keep_prob = keep});
      EXPECT_EQ(d.mask_salt(), dm::name_salt(name));
      EXPECT_EQ(d.mask_threshold(), dm::keep_threshold(keep));
      for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0xDEADBEEFCAFE}}) {
        for (uint64_t i = 0; i < 2048; ++i)
          ASSERT_EQ(header_kept(name, keep, seed, i), d.kept(seed, i)) << name << " " << keep << " " << seed << " " << i;
        // Indices past 2^32 (a large activation tensor's tail).
        for (uint64_t i = (uint64_t{1} << 33) - 7; i < (uint64_t{1} << 33) + 7; ++i)
          ASSERT_EQ(header_kept(name, keep, seed, i), d.kept(seed, i)) << name << " " << i;
      }
    }
}

TEST(DropoutMask, KeepsAboutKeepProbOfTheElements) {
  constexpr int64_t n = 1 << 16;
  for (float keep : {0.1f, 0.5f, 0.9f}) {
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) kept += header_kept("dropout6", keep, 7, i);
    // Binomial(n, keep): within 5 standard deviations.
    const double expected = keep * static_cast<double>(n);
    EXPECT_NEAR(static_cast<double>(kept), expected, 5 * std::sqrt(expected * (1 - keep))) << keep;
  }
  // keep_prob 1: the threshold is 2^32, above every 32-bit hash.
  EXPECT_EQ(dm::keep_threshold(1.0f), uint64_t{1} << 32);
  for (int64_t i = 0; i < 4096; ++i) EXPECT_TRUE(header_kept("dropout6", 1.0f, 7, i)) << i;
}

TEST(DropoutMask, DrawsThePinnedMasks) {
  // Bit i = whether element i is kept; recorded from the layer before the
  // hash moved into dropout_mask.h. A change here changes every past run.
  struct Pin {
    const char* name;
    float keep;
    uint64_t seed, first64;
  };
  for (const Pin& p : {Pin{"dropout6", 0.5f, 0, 0x9d79f6fde30c6389ull},
                       Pin{"dropout6", 0.5f, 12345, 0x8f1cfd626f74a901ull},
                       Pin{"dropout7", 0.5f, 12345, 0xcb682cc38eefdd48ull},
                       Pin{"dropout7", 0.9f, 0xDEADBEEFCAFE, 0xffbfbffffffdfeefull}}) {
    uint64_t bits = 0;
    for (uint64_t i = 0; i < 64; ++i) bits |= uint64_t{header_kept(p.name, p.keep, p.seed, i)} << i;
    EXPECT_EQ(bits, p.first64) << p.name << " " << p.keep << " " << p.seed;
  }
}

}  // namespace
}  // namespace terngrad::train
