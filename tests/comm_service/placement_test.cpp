// Placement: small variables whole, large ones split into aligned shards of
// at least the minimum size, spread over the ps tasks; the layout is
// deterministic and its fingerprint changes with anything that matters.
#include <gtest/gtest.h>

#include <numeric>

#include "terngrad/comm/placement.h"

namespace tc = terngrad::comm;

namespace {

std::vector<tc::VariableSpec> lenet_like() {
  return {{"conv1/weights", 500, "fp32"},  {"conv1/biases", 20, "fp32"},  {"conv2/weights", 25000, "t"},
          {"conv2/biases", 50, "fp32"},    {"fc3/weights", 1225000, "t"}, {"fc3/biases", 500, "fp32"},
          {"logits/weights", 5000, "t"},   {"logits/biases", 10, "fp32"}};
}

void expect_covers_every_element(const tc::Layout& l) {
  for (size_t v = 0; v < l.variables.size(); ++v) {
    uint64_t next = 0;
    for (size_t s : l.shards_of[v]) {
      EXPECT_EQ(l.shards[s].variable, v);
      EXPECT_EQ(l.shards[s].begin, next) << l.variables[v].name;
      EXPECT_EQ(l.shards[s].begin % tc::kShardAlignment, 0u);
      EXPECT_GT(l.shards[s].count, 0u);
      next += l.shards[s].count;
    }
    EXPECT_EQ(next, l.variables[v].size) << l.variables[v].name;
  }
  size_t placed = 0;
  for (int p = 0; p < l.num_ps; ++p)
    for (size_t s : l.shards_on[p]) {
      EXPECT_EQ(l.shards[s].ps, p);
      ++placed;
    }
  EXPECT_EQ(placed, l.shards.size());
}

TEST(Placement, OnePsHoldsEverythingWhole) {
  const auto l = tc::place_variables(lenet_like(), 1);
  expect_covers_every_element(l);
  EXPECT_EQ(l.shards.size(), 8u);
}

TEST(Placement, LargeVariablesSplitAcrossPsTasks) {
  const auto l = tc::place_variables(lenet_like(), 2);
  expect_covers_every_element(l);
  // fc3/weights (4.9 MB) splits in two (max_shards = 2), on different tasks.
  ASSERT_EQ(l.shards_of[4].size(), 2u);
  EXPECT_NE(l.shards[l.shards_of[4][0]].ps, l.shards[l.shards_of[4][1]].ps);
  // conv2/weights (100 KB) is below the 256 KiB minimum: whole.
  EXPECT_EQ(l.shards_of[2].size(), 1u);
  // By size, the two tasks end within one small variable of each other.
  uint64_t load[2] = {0, 0};
  for (const auto& s : l.shards) load[s.ps] += s.count;
  EXPECT_LT(std::max(load[0], load[1]) - std::min(load[0], load[1]), 30000u);
}

TEST(Placement, MinimumShardSizeAndMaxShards) {
  tc::PlacementOptions o;
  o.min_shard_bytes = 1 << 20;  // 4.9 MB -> 4 shards of >= 1 MiB
  o.max_shards = 16;
  const auto l = tc::place_variables(lenet_like(), 3, o);
  expect_covers_every_element(l);
  EXPECT_EQ(l.shards_of[4].size(), 4u);
  for (size_t s : l.shards_of[4]) EXPECT_GE(4 * l.shards[s].count, (1u << 20) - 4 * tc::kShardAlignment);
  o.strategy = tc::PlacementStrategy::kRoundRobin;
  const auto rr = tc::place_variables(lenet_like(), 3, o);
  expect_covers_every_element(rr);
  for (size_t s = 0; s < rr.shards.size(); ++s) EXPECT_EQ(rr.shards[s].ps, static_cast<int>(s % 3));
}

TEST(Placement, FingerprintTracksTheLayoutAndSettings) {
  const auto a = tc::place_variables(lenet_like(), 2);
  const uint64_t f = tc::layout_fingerprint(a, true, 4, 4);
  EXPECT_EQ(f, tc::layout_fingerprint(tc::place_variables(lenet_like(), 2), true, 4, 4));
  EXPECT_NE(f, tc::layout_fingerprint(a, false, 4, 4));
  EXPECT_NE(f, tc::layout_fingerprint(a, true, 4, 3));
  EXPECT_NE(f, tc::layout_fingerprint(tc::place_variables(lenet_like(), 1), true, 4, 4));
  auto other = lenet_like();
  other[6].codec = "fp16";
  EXPECT_NE(f, tc::layout_fingerprint(tc::place_variables(other, 2), true, 4, 4));
}

// max_shard_bytes splits a large variable past max_shards (even on one ps),
// so each shard fits one message and sums can flow back shard by shard.
TEST(Placement, MaxShardBytesCapsEveryShard) {
  tc::PlacementOptions o;
  o.max_shard_bytes = 1 << 20;
  const tc::Layout l = tc::place_variables({{"big", 1000003, "fp32"}, {"small", 100, "fp32"}}, 1, o);
  ASSERT_EQ(l.shards_of[0].size(), 4u);  // 4,000,012 bytes in shards of at most ~1 MiB
  uint64_t covered = 0;
  for (size_t s : l.shards_of[0]) {
    EXPECT_EQ(l.shards[s].begin, covered);
    EXPECT_LE(4 * l.shards[s].count, o.max_shard_bytes + 4 * tc::kShardAlignment);
    covered += l.shards[s].count;
  }
  EXPECT_EQ(covered, 1000003u);
  EXPECT_EQ(l.shards_of[1].size(), 1u);
  o.max_shard_bytes = 0;  // no cap: one ps holds the variable whole
  EXPECT_EQ(tc::place_variables({{"big", 1000003, "fp32"}}, 1, o).shards.size(), 1u);
}

TEST(Placement, BadArguments) {
  EXPECT_THROW(tc::place_variables(lenet_like(), 0), std::invalid_argument);
  tc::PlacementOptions o;
  o.min_shard_bytes = 0;
  EXPECT_THROW(tc::place_variables(lenet_like(), 1, o), std::invalid_argument);
  EXPECT_THROW(tc::parse_placement_strategy("random"), std::invalid_argument);
}

}  // namespace
