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

namespace {

// 7 files of uneven sizes (3, 0, 5, 1, 4, 2, 6 examples), file-ordered.
std::vector<int32_t> seven_files() {
  std::vector<int32_t> g;
  const int sizes[] = {3, 0, 5, 1, 4, 2, 6};
  for (int f = 0; f < 7; ++f)
    for (int k = 0; k < sizes[f]; ++k) g.push_back(f);
  return g;
}

TEST(ShardedSamplerFiles, WorkersOwnDisjointWholeFilesCoveringEverything) {
  const std::vector<int32_t> group = seven_files();
  for (int workers : {1, 2, 3, 4}) {
    std::vector<int> seen(group.size(), 0);
    for (int w = 0; w < workers; ++w) {
      ShardedSampler s(group, workers, w, 5);
      EXPECT_TRUE(s.by_file());
      for (int epoch = 0; epoch < 2; ++epoch)
        for (int64_t i : draw(s, s.shard_size())) {
          EXPECT_EQ(group[i] % workers, w) << "example " << i << " of file " << group[i];
          if (epoch == 0) ++seen.at(i);
        }
    }
    for (size_t i = 0; i < group.size(); ++i) EXPECT_EQ(seen[i], 1) << i << " with " << workers << " workers";
  }
}

TEST(ShardedSamplerFiles, FewerFilesThanWorkersKeepsStridedSharding) {
  const std::vector<int32_t> group(40, 0);  // one file (slim's mnist_train.tfrecord)
  for (int w = 0; w < 4; ++w) {
    ShardedSampler by_group(group, 4, w, 11), strided(40, 4, w, 11);
    EXPECT_FALSE(by_group.by_file());
    EXPECT_EQ(draw(by_group, 25), draw(strided, 25));  // identical sequence, epochs included
  }
}

TEST(ShardedSamplerFiles, OneWorkerSeesWhatTheUngroupedSamplerSees) {
  // Same members in the same order, so the same shuffles: a single-worker run
  // from TFRecord shards takes exactly the batches of the same data from IDX.
  const std::vector<int32_t> group = seven_files();
  ShardedSampler by_group(group, 1, 0, 3), plain(static_cast<int64_t>(group.size()), 1, 0, 3);
  EXPECT_TRUE(by_group.by_file());
  EXPECT_EQ(draw(by_group, 60), draw(plain, 60));
}

TEST(ShardedSamplerFiles, RestoreReproducesTheSequence) {
  const std::vector<int32_t> group = seven_files();
  ShardedSampler a(group, 2, 1, 8);
  draw(a, 13);
  const SamplerState st = a.state();
  const std::vector<int64_t> rest = draw(a, 20);
  ShardedSampler b(group, 2, 1, 8);
  b.restore(st);
  EXPECT_EQ(draw(b, 20), rest);
  ShardedSampler c(group, 2, 1, 8);
  c.restore_after(13);
  EXPECT_EQ(draw(c, 20), rest);
}

TEST(ShardedSamplerFiles, RejectsNegativeGroups) {
  const std::vector<int32_t> group = {0, 0, -1, 1};
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { ShardedSampler(group, 2, 0, 1); }), "example 2");
}

TEST(ShardedSamplerFiles, AWorkerWhoseFilesAreEmptyMakesEveryoneStride) {
  // 7 workers: worker 1 would own only file 1, which is empty.
  const std::vector<int32_t> group = seven_files();
  for (int w = 0; w < 7; ++w) {
    ShardedSampler s(group, 7, w, 1), strided(static_cast<int64_t>(group.size()), 7, w, 1);
    EXPECT_FALSE(s.by_file());
    EXPECT_EQ(draw(s, 9), draw(strided, 9));
  }
}

}  // namespace
