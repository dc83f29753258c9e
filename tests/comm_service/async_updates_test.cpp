// The async step logic of the ps without gRPC (comm/service/async_updates.h):
// each push decoded and handed to the update rule at the global step, which
// advances; retries dropped; a failing update rule leaves the replica's push
// uncounted; bad calls rejected before anything changes.
#include <gtest/gtest.h>

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "async_updates.h"
#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;
namespace td = terngrad::comm::detail;

namespace {

// Plain SGD with rate 1 (values -= grad), recording every call.
struct RecordingRule : tc::UpdateHandler {
  struct Call {
    size_t shard;
    int64_t step;
  };
  std::vector<Call> calls;
  bool fail = false;
  void init_shard(size_t, const tc::ShardView&) override {}
  void apply(size_t shard, int64_t step, std::span<float> values, std::span<const float> grad) override {
    if (fail) throw std::runtime_error("the rule refuses");
    calls.push_back({shard, step});
    for (size_t i = 0; i < values.size(); ++i) values[i] -= grad[i];
  }
  std::vector<std::pair<std::string, std::span<float>>> slots(size_t) override { return {}; }
};

std::string fp32_payload(tc::GradientCodec& codec, const std::vector<float>& grad) {
  std::string out(codec.payload_bytes(grad.size()), '\0');
  codec.encode(grad, tc::EncodeContext{}, std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size()));
  return out;
}

struct TwoShards {
  std::unique_ptr<tc::GradientCodec> a = tc::make_codec("fp32"), b = tc::make_codec("fp32");
  std::vector<td::ShardCoding> coding() const { return {{a.get(), 3}, {b.get(), 2}}; }
  std::vector<std::string> payloads(float x) const {
    return {fp32_payload(*a, {x, 2 * x, 3 * x}), fp32_payload(*b, {-x, 0.5f * x})};
  }
};

}  // namespace

TEST(AsyncUpdates, AppliesEachPushAtTheGlobalStep) {
  const TwoShards shards;
  RecordingRule rule;
  td::AsyncUpdates updates(shards.coding(), 2, 5, rule);
  ASSERT_EQ(updates.shards(), 2u);
  EXPECT_EQ(updates.values(0).size(), 3u);
  EXPECT_EQ(updates.values(1).size(), 2u);

  EXPECT_EQ(updates.apply(1, 0, shards.payloads(1.0f)), td::AsyncUpdates::Outcome::kApplied);
  EXPECT_EQ(updates.global_step(), 6);
  ASSERT_EQ(rule.calls.size(), 2u);
  EXPECT_EQ(rule.calls[0].shard, 0u);
  EXPECT_EQ(rule.calls[0].step, 5);
  EXPECT_EQ(rule.calls[1].shard, 1u);
  EXPECT_EQ(rule.calls[1].step, 5);

  EXPECT_EQ(updates.apply(0, 0, shards.payloads(0.5f)), td::AsyncUpdates::Outcome::kApplied);
  EXPECT_EQ(updates.global_step(), 7);
  EXPECT_EQ(rule.calls.back().step, 6);
  const std::vector<float> v0(updates.values(0).begin(), updates.values(0).end());
  const std::vector<float> v1(updates.values(1).begin(), updates.values(1).end());
  EXPECT_EQ(v0, (std::vector<float>{-1.5f, -3.0f, -4.5f}));
  EXPECT_EQ(v1, (std::vector<float>{1.5f, -0.75f}));
  EXPECT_EQ(updates.last_pushed(0), 0);
  EXPECT_EQ(updates.last_pushed(1), 0);

  // A retry of a step the replica pushed: dropped, counted, nothing applied.
  EXPECT_EQ(updates.apply(1, 0, shards.payloads(100.0f)), td::AsyncUpdates::Outcome::kDuplicate);
  EXPECT_EQ(updates.duplicates(), 1u);
  EXPECT_EQ(updates.global_step(), 7);
  EXPECT_EQ(rule.calls.size(), 4u);
  EXPECT_EQ(updates.values(0)[0], -1.5f);
}

TEST(AsyncUpdates, AFailingUpdateRuleLeavesThePushUncounted) {
  const TwoShards shards;
  RecordingRule rule;
  td::AsyncUpdates updates(shards.coding(), 1, 0, rule);
  rule.fail = true;
  EXPECT_THROW(updates.apply(0, 0, shards.payloads(1.0f)), std::runtime_error);
  EXPECT_EQ(updates.last_pushed(0), -1);
  EXPECT_EQ(updates.global_step(), 0);
  // A malformed payload: decoding throws the same way.
  rule.fail = false;
  std::vector<std::string> bad = shards.payloads(1.0f);
  bad[1].pop_back();
  EXPECT_THROW(updates.apply(0, 0, bad), std::exception);
  EXPECT_EQ(updates.global_step(), 0);
}

TEST(AsyncUpdates, MalformedCallsThrowBeforeAnythingChanges) {
  const TwoShards shards;
  RecordingRule rule;
  td::AsyncUpdates updates(shards.coding(), 2, 0, rule);
  EXPECT_THROW(updates.apply(2, 0, shards.payloads(1.0f)), std::invalid_argument);  // replica 2 of 2
  std::vector<std::string> one = {shards.payloads(1.0f)[0]};
  EXPECT_THROW(updates.apply(0, 0, one), std::invalid_argument);  // one payload, two shards
  EXPECT_THROW(updates.values(2), std::out_of_range);
  EXPECT_THROW(updates.last_pushed(2), std::invalid_argument);
  EXPECT_TRUE(rule.calls.empty());
  EXPECT_EQ(updates.global_step(), 0);
  EXPECT_EQ(updates.duplicates(), 0u);

  EXPECT_THROW(td::AsyncUpdates(shards.coding(), 0, 0, rule), std::invalid_argument);
  EXPECT_THROW(td::AsyncUpdates(std::vector<td::ShardCoding>{td::ShardCoding{nullptr, 4}}, 1, 0, rule),
               std::invalid_argument);
}

// A run of N steps applies exactly N pushes: once the global step reaches
// the last step, pushes are dropped and nothing changes (concurrent replicas
// that pulled step N-1 together cannot carry the run to N+1).
TEST(AsyncUpdates, NoPushIsAppliedPastTheLastStep) {
  const TwoShards shards;
  RecordingRule rule;
  td::AsyncUpdates updates(shards.coding(), 2, 3, rule, /*last_step=*/5);
  EXPECT_EQ(updates.apply(0, 3, shards.payloads(1)), td::AsyncUpdates::Outcome::kApplied);
  EXPECT_EQ(updates.apply(1, 3, shards.payloads(1)), td::AsyncUpdates::Outcome::kApplied);
  ASSERT_EQ(updates.global_step(), 5);
  const std::vector<float> before(updates.values(0).begin(), updates.values(0).end());
  EXPECT_EQ(updates.apply(0, 4, shards.payloads(7)), td::AsyncUpdates::Outcome::kPastEnd);
  EXPECT_EQ(updates.global_step(), 5);
  EXPECT_EQ(rule.calls.size(), 4u) << "two pushes of two shards, none after the last step";
  EXPECT_EQ(std::vector<float>(updates.values(0).begin(), updates.values(0).end()), before);
  EXPECT_EQ(updates.last_pushed(0), 3) << "a dropped push is not the replica's last applied step";
  EXPECT_THROW(td::AsyncUpdates(shards.coding(), 2, 0, rule, -1), std::invalid_argument);
}
