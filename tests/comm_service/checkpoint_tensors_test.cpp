// What a ps hands the chief at Checkpoint (comm/service/checkpoint_tensors.h).
#include "checkpoint_tensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "chunks.h"
#include "server_state.h"

namespace tc = terngrad::comm;
namespace td = terngrad::comm::detail;

namespace {

// Momentum SGD's slot for every shard, filled with -(shard + 1).
struct RuleWithASlot : tc::UpdateHandler {
  std::vector<std::vector<float>> momentum;
  void init_shard(size_t shard, const tc::ShardView& v) override {
    if (momentum.size() <= shard) momentum.resize(shard + 1);
    momentum[shard].assign(v.count, -static_cast<float>(shard + 1));
  }
  void apply(size_t, int64_t, std::span<float>, std::span<const float>) override {}
  std::vector<std::pair<std::string, std::span<float>>> slots(size_t shard) override {
    return {{"Momentum", momentum[shard]}};
  }
};

std::vector<float> floats_of(const std::vector<uint8_t>& b) {
  std::vector<float> f(b.size() / 4);
  std::memcpy(f.data(), b.data(), b.size());
  return f;
}

}  // namespace

TEST(CheckpointTensors, AnAsyncShardGivesItsValuesThenItsSlots) {
  auto a = tc::make_codec("fp32"), b = tc::make_codec("fp32");
  const std::vector<td::ShardCoding> coding = {{a.get(), 3}, {b.get(), 2}};
  RuleWithASlot rule;
  td::AsyncUpdates updates(coding, 2, 0, rule);
  for (size_t s = 0; s < 2; ++s) {
    rule.init_shard(s, tc::ShardView{static_cast<uint32_t>(s), "v", 0, coding[s].elements, "fp32"});
    for (float& v : updates.values(s)) v = 10.0f * static_cast<float>(s + 1);
  }
  const std::vector<td::CheckpointTensor> t = td::async_checkpoint(updates, rule, 2);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].shard, 0u);
  EXPECT_EQ(t[0].slot, "");
  EXPECT_EQ(floats_of(t[0].bytes), std::vector<float>(3, 10.0f));
  EXPECT_EQ(t[1].slot, "Momentum");
  EXPECT_EQ(floats_of(t[1].bytes), std::vector<float>(3, -1.0f));
  EXPECT_EQ(t[3].shard, 1u);
  EXPECT_EQ(floats_of(t[3].bytes), std::vector<float>(2, -2.0f));
}

TEST(CheckpointTensors, ASyncPsKeepsOnlyTheStatesOfStepsItSummed) {
  auto codec = tc::make_codec("server_ef(terngrad:share_scale=0)");
  const std::vector<td::ShardCoding> coding = {{codec.get(), 100}};
  const td::SyncSteps steps(coding, 2, 2, 2, 10, std::vector<std::vector<uint8_t>>(1));
  EXPECT_FALSE(td::sync_checkpoint(steps, 10, 1).has_value()) << "step 10 is not summed yet";
  EXPECT_FALSE(td::sync_checkpoint(steps, 3, 1).has_value()) << "long gone";
}

TEST(CheckpointTensors, StreamsEachTensorInChunksAndStopsWhenAWriteFails) {
  std::vector<td::CheckpointTensor> t = {{0, "", std::vector<uint8_t>(td::kChunkBytes * 2 + 5, 7)},
                                         {1, td::kServerStateSlot, std::vector<uint8_t>(9, 1)}};
  struct Piece {
    uint32_t shard;
    std::string slot;
    uint64_t offset, total, size;
  };
  std::vector<Piece> seen;
  ASSERT_TRUE(td::stream_checkpoint(t, [&](uint32_t shard, const std::string& slot, uint64_t off, uint64_t total,
                                           std::span<const uint8_t> piece) {
    seen.push_back({shard, slot, off, total, piece.size()});
    return true;
  }));
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[1].offset, td::kChunkBytes);
  EXPECT_EQ(seen[2].size, 5u);
  EXPECT_EQ(seen[2].total, t[0].bytes.size());
  EXPECT_EQ(seen[3].slot, td::kServerStateSlot);
  int writes = 0;
  EXPECT_FALSE(td::stream_checkpoint(t, [&](uint32_t, const std::string&, uint64_t, uint64_t, std::span<const uint8_t>) {
    return ++writes < 2;
  }));
  EXPECT_EQ(writes, 2) << "nothing written after the failed write";
}
