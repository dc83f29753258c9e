// ShardedSampler: disjoint covering shards, per-epoch reshuffles, and exact
// continuation from a saved state.
#include <set>

#include "terngrad/train/input_pipeline.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

std::vector<int64_t> draw(ShardedSampler& s, int64_t n) {
  std::vector<int64_t> out;
  s.next_batch(n, out);
  return out;
}

TEST(ShardedSampler, ShardsAreDisjointAndCoverTheDataset) {
  const int64_t size = 100;
  const int workers = 3;
  std::vector<int> seen(size, 0);
  for (int w = 0; w < workers; ++w) {
    ShardedSampler s(size, workers, w, 5);
    EXPECT_EQ(s.shard_size(), w == 0 ? 34 : 33);
    for (int64_t i : draw(s, s.shard_size())) {
      EXPECT_EQ(i % workers, w);
      ++seen.at(i);
    }
  }
  for (int64_t i = 0; i < size; ++i) EXPECT_EQ(seen[i], 1) << i;
}

TEST(ShardedSampler, ReshufflesEveryEpoch) {
  ShardedSampler s(50, 2, 1, 9);
  const int64_t n = s.shard_size();
  std::vector<std::vector<int64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<int64_t> ep = draw(s, n);
    std::vector<int64_t> sorted = ep;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t k = 0; k < n; ++k) ASSERT_EQ(sorted[k], 2 * k + 1);  // a permutation of the shard
    epochs.push_back(ep);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_EQ(s.state().epoch, 2);
  EXPECT_EQ(s.state().position, n);
}

TEST(ShardedSampler, BatchesRunAcrossEpochBoundaries) {
  ShardedSampler s(10, 1, 0, 3);
  std::vector<int64_t> all;
  for (int b = 0; b < 5; ++b) {
    const auto batch = draw(s, 4);
    all.insert(all.end(), batch.begin(), batch.end());
  }
  for (int e = 0; e < 2; ++e) {
    std::set<int64_t> ep(all.begin() + 10 * e, all.begin() + 10 * e + 10);
    EXPECT_EQ(ep.size(), 10u) << "epoch " << e;
  }
  EXPECT_EQ(s.state().epoch, 1);
  EXPECT_EQ(s.state().position, 10);
}

TEST(ShardedSampler, DeterministicPerSeedAndWorker) {
  ShardedSampler a(1000, 4, 2, 17), b(1000, 4, 2, 17), c(1000, 4, 2, 18);
  const auto da = draw(a, 600), db = draw(b, 600), dc = draw(c, 600);
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
}

TEST(ShardedSampler, RestoreMidEpochReproducesTheSequence) {
  for (const int64_t skip : {0, 57, 250, 251, 500}) {
    ShardedSampler a(1000, 4, 3, 21);
    draw(a, skip);
    const SamplerState st = a.state();
    const auto expect = draw(a, 700);
    ShardedSampler b(1000, 4, 3, 21);
    b.restore(st);
    EXPECT_EQ(draw(b, 700), expect) << "after " << skip;
  }
}

TEST(ShardedSampler, RestoreAfterMatchesTheStateOfThatManyDraws) {
  for (const int64_t consumed : {0, 1, 249, 250, 251, 500, 777}) {
    ShardedSampler a(1000, 4, 1, 5);
    draw(a, consumed);
    ShardedSampler b(1000, 4, 1, 5);
    b.restore_after(consumed);
    EXPECT_EQ(b.state().epoch, a.state().epoch) << consumed;
    EXPECT_EQ(b.state().position, a.state().position) << consumed;
    EXPECT_EQ(draw(b, 300), draw(a, 300)) << "after " << consumed;
  }
}

TEST(ShardedSampler, RejectsBadArgumentsAndStates) {
  EXPECT_THROW(ShardedSampler(10, 0, 0, 1), std::invalid_argument);
  EXPECT_THROW(ShardedSampler(10, 2, 2, 1), std::invalid_argument);
  EXPECT_CONTAINS(error_of<std::invalid_argument>([] { ShardedSampler(3, 4, 0, 1); }), "non-empty shard");
  ShardedSampler s(10, 2, 0, 1);
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { s.restore({0, 6}); }), "position 6 is outside");
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { s.restore({-1, 0}); }), "epoch -1");
}

}  // namespace
