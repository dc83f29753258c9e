// The sync step logic of the ps without gRPC (comm/service/sync_steps.h):
// sums in replica order whatever the arrival order, shard-by-shard sums when
// every replica is needed, backup replicas and stale pushes, duplicates and
// bad buckets, the ring of kept steps and the reuse of their buffers.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "sync_steps.h"
#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;
namespace td = terngrad::comm::detail;

namespace {

using Outcome = td::SyncSteps::PushOutcome;

// The shards of one ps: a codec and an element count each.
struct Shards {
  std::vector<std::unique_ptr<tc::GradientCodec>> codecs;
  std::vector<uint64_t> elements;
  Shards(const std::string& codec, std::vector<uint64_t> n) : elements(std::move(n)) {
    for (size_t s = 0; s < elements.size(); ++s) codecs.push_back(tc::make_codec(codec));
  }
  std::vector<td::ShardCoding> coding() const {
    std::vector<td::ShardCoding> c;
    for (size_t s = 0; s < codecs.size(); ++s) c.push_back({codecs[s].get(), elements[s]});
    return c;
  }
  // A replica's encoded gradient of one shard at one step (distinct per all three).
  std::string payload(uint32_t shard, uint32_t replica, int64_t step) const {
    std::mt19937 gen(static_cast<uint32_t>(10007 * shard + 101 * replica + step + 1));
    std::normal_distribution<float> d(0.0f, 1e-2f);
    std::vector<float> grad(elements[shard]);
    for (float& x : grad) x = d(gen);
    std::string out(codecs[shard]->payload_bytes(grad.size()), '\0');
    codecs[shard]->encode(grad, tc::EncodeContext{}, std::span<uint8_t>(reinterpret_cast<uint8_t*>(out.data()), out.size()));
    return out;
  }
  // What the codec itself sums for these replicas, in the order given.
  std::vector<uint8_t> expected_sum(uint32_t shard, std::vector<uint32_t> replicas, int64_t step) const {
    std::vector<std::string> kept;
    for (uint32_t r : replicas) kept.push_back(payload(shard, r, step));
    std::vector<std::span<const uint8_t>> views;
    for (const std::string& p : kept) views.emplace_back(reinterpret_cast<const uint8_t*>(p.data()), p.size());
    std::vector<uint8_t> out;
    codecs[shard]->aggregate(views, elements[shard], out);
    return out;
  }
};

// A push as the service hands it over: payloads for `ids`, then (when
// accepted) take, sum, settle.
td::SyncSteps::PushResult push(td::SyncSteps& steps, const Shards& shards, uint32_t replica, int64_t step,
                               std::vector<uint32_t> ids, float loss = 0) {
  std::vector<std::string> payloads;
  for (uint32_t s : ids) payloads.push_back(shards.payload(s, replica, step));
  const td::SyncSteps::PushResult result = steps.push(replica, step, ids, payloads, loss);
  if (result.outcome == Outcome::kAccepted) {
    const td::SyncSteps::SumJob job = steps.take_sums(result.accepted);
    if (!job.empty()) {
      EXPECT_EQ(steps.sum(job), "");
    }
    steps.settle(job);
  }
  return result;
}

std::vector<uint32_t> every(size_t shards) {
  std::vector<uint32_t> ids;
  for (uint32_t s = 0; s < shards; ++s) ids.push_back(s);
  return ids;
}

}  // namespace

TEST(SyncSteps, SumsInReplicaOrderWhateverTheArrivalOrder) {
  const Shards shards("fp32", {1000, 20});
  td::SyncSteps steps(shards.coding(), 3, 3, 8, 0);
  EXPECT_EQ(push(steps, shards, 2, 0, every(2), 3.0f).outcome, Outcome::kAccepted);
  EXPECT_EQ(push(steps, shards, 0, 0, every(2), 1.0f).outcome, Outcome::kAccepted);
  EXPECT_EQ(steps.missing(), std::vector<uint32_t>{1});
  EXPECT_EQ(steps.global_step(), 0);
  EXPECT_FALSE(steps.sums_of(0)->complete);
  EXPECT_EQ(push(steps, shards, 1, 0, every(2), 2.5f).outcome, Outcome::kAccepted);

  EXPECT_EQ(steps.global_step(), 1);
  EXPECT_EQ(steps.current_step(), 1);
  const auto sums = steps.sums_of(0);
  ASSERT_NE(sums, nullptr);
  EXPECT_TRUE(sums->complete);
  EXPECT_EQ(sums->contributions, 3u);
  EXPECT_EQ(sums->mean_loss, static_cast<float>((1.0 + 2.5 + 3.0) / 3));
  for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(sums->shards[s], shards.expected_sum(s, {0, 1, 2}, 0)) << "shard " << s;
  for (uint32_t r = 0; r < 3; ++r) EXPECT_EQ(steps.last_pushed(r), 0);
  EXPECT_EQ(steps.missing(), (std::vector<uint32_t>{0, 1, 2}));  // of step 1
}

TEST(SyncSteps, BucketsAreSummedShardByShardWhenEveryReplicaIsNeeded) {
  const Shards shards("terngrad", {64, 32, 16});
  td::SyncSteps steps(shards.coding(), 2, 2, 8, 7);
  EXPECT_EQ(push(steps, shards, 0, 7, {1}, 1.0f).outcome, Outcome::kAccepted);
  const auto sums = steps.sums_of(7);
  ASSERT_NE(sums, nullptr);
  EXPECT_FALSE(sums->ready[1]);  // replica 1 has not delivered it

  EXPECT_EQ(push(steps, shards, 1, 7, {1}, 2.0f).outcome, Outcome::kAccepted);
  EXPECT_EQ(sums->ready, (std::vector<bool>{false, true, false}));
  EXPECT_EQ(sums->ready_count, 1u);
  EXPECT_EQ(sums->shards[1], shards.expected_sum(1, {0, 1}, 7));
  EXPECT_FALSE(sums->complete);
  EXPECT_EQ(steps.missing(), (std::vector<uint32_t>{0, 1}));

  EXPECT_EQ(push(steps, shards, 0, 7, {2, 0}, 9.0f).outcome, Outcome::kAccepted);  // a later bucket's loss is not kept
  EXPECT_EQ(steps.missing(), std::vector<uint32_t>{1});
  EXPECT_EQ(steps.last_pushed(0), 7);
  EXPECT_EQ(steps.last_pushed(1), -1);
  EXPECT_EQ(push(steps, shards, 1, 7, {0, 2}, 9.0f).outcome, Outcome::kAccepted);
  EXPECT_TRUE(sums->complete);
  EXPECT_EQ(sums->mean_loss, 1.5f);
  EXPECT_EQ(steps.global_step(), 8);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(sums->shards[s], shards.expected_sum(s, {0, 1}, 7)) << "shard " << s;
}

TEST(SyncSteps, BackupReplicasCloseTheStepAndLaterPushesAreStale) {
  const Shards shards("fp32", {40, 8});
  td::SyncSteps steps(shards.coding(), 3, 2, 8, 0);
  EXPECT_EQ(push(steps, shards, 2, 0, every(2), 4.0f).outcome, Outcome::kAccepted);
  EXPECT_EQ(steps.global_step(), 0);

  // Replica 0 makes the step; while it is summed (lock released), the step
  // is closed: replica 1's push is stale, counted once for its step.
  std::vector<std::string> p0 = {shards.payload(0, 0, 0), shards.payload(1, 0, 0)};
  ASSERT_EQ(steps.push(0, 0, every(2), p0, 2.0f).outcome, Outcome::kAccepted);
  const td::SyncSteps::SumJob job = steps.take_sums(every(2));
  ASSERT_FALSE(job.empty());
  std::vector<std::string> p1 = {shards.payload(0, 1, 0)};
  const td::SyncSteps::PushResult late = steps.push(1, 0, std::vector<uint32_t>{0}, p1, 0.0f);
  EXPECT_EQ(late.outcome, Outcome::kStale);
  EXPECT_TRUE(late.counted_stale);
  ASSERT_NE(steps.sums_of(0), nullptr);  // the closed step is still found while summed
  EXPECT_FALSE(steps.sums_of(0)->complete);
  EXPECT_EQ(steps.missing(), std::vector<uint32_t>{1});
  EXPECT_EQ(steps.sum(job), "");
  EXPECT_TRUE(steps.settle(job));

  const auto sums = steps.sums_of(0);
  EXPECT_TRUE(sums->complete);
  EXPECT_EQ(sums->contributions, 2u);
  EXPECT_EQ(sums->mean_loss, 3.0f);
  for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(sums->shards[s], shards.expected_sum(s, {0, 2}, 0)) << "shard " << s;
  EXPECT_EQ(steps.global_step(), 1);

  // Replica 1's next bucket of step 0: stale again, not counted again.
  const td::SyncSteps::PushResult later = push(steps, shards, 1, 0, {1});
  EXPECT_EQ(later.outcome, Outcome::kStale);
  EXPECT_FALSE(later.counted_stale);
  EXPECT_EQ(steps.stale(), 1u);
  // Replica 0 retrying step 0, which it delivered: a duplicate, not stale.
  EXPECT_EQ(push(steps, shards, 0, 0, every(2)).outcome, Outcome::kDuplicate);
  EXPECT_EQ(steps.duplicates(), 1u);
  EXPECT_EQ(steps.stale(), 1u);
}

TEST(SyncSteps, RetriesAreDuplicatesAndBadBucketsChangeNothing) {
  const Shards shards("fp32", {16, 16, 16});
  td::SyncSteps steps(shards.coding(), 2, 2, 8, 0);
  EXPECT_EQ(push(steps, shards, 0, 0, {0}).outcome, Outcome::kAccepted);
  EXPECT_EQ(push(steps, shards, 0, 0, {0}).outcome, Outcome::kDuplicate);
  EXPECT_EQ(steps.duplicates(), 1u);
  EXPECT_EQ(push(steps, shards, 0, 1, {1}).outcome, Outcome::kAhead);
  EXPECT_EQ(steps.missing(), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(steps.last_pushed(0), -1);
  // A bucket cut differently (a replica restarted mid-step, whose buckets
  // hold other shards): the repeated shard is dropped, the first delivery
  // stays, the new one is kept.
  const td::SyncSteps::PushResult cut = push(steps, shards, 0, 0, {1, 0});
  EXPECT_EQ(cut.outcome, Outcome::kAccepted);
  EXPECT_EQ(cut.accepted, (std::vector<uint32_t>{1}));
  EXPECT_EQ(cut.repeated, 1u);
  // The step completes as usual, its sums the first deliveries'.
  EXPECT_EQ(push(steps, shards, 0, 0, {2}).outcome, Outcome::kAccepted);
  EXPECT_EQ(push(steps, shards, 1, 0, {0, 1, 2}).outcome, Outcome::kAccepted);
  EXPECT_EQ(steps.global_step(), 1);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(steps.sums_of(0)->shards[s], shards.expected_sum(s, {0, 1}, 0));
  EXPECT_EQ(steps.duplicates(), 1u);
  EXPECT_EQ(steps.stale(), 0u);
}

TEST(SyncSteps, MalformedCallsThrowBeforeAnythingChanges) {
  const Shards shards("fp32", {16, 16});
  td::SyncSteps steps(shards.coding(), 2, 1, 8, 0);
  std::vector<std::string> one = {shards.payload(0, 0, 0)};
  std::vector<std::string> two = {shards.payload(0, 0, 0), shards.payload(0, 0, 0)};
  EXPECT_THROW(steps.push(2, 0, std::vector<uint32_t>{0}, one, 0.0f), std::invalid_argument);       // replica 2 of 2
  EXPECT_THROW(steps.push(0, 0, std::vector<uint32_t>{0, 0}, two, 0.0f), std::invalid_argument);    // shard named twice
  EXPECT_THROW(steps.push(0, 0, std::vector<uint32_t>{2}, one, 0.0f), std::invalid_argument);       // shard 2 of 2
  EXPECT_THROW(steps.push(0, 0, std::vector<uint32_t>{0, 1}, one, 0.0f), std::invalid_argument);    // one payload, two shards
  EXPECT_THROW(steps.last_pushed(2), std::invalid_argument);
  EXPECT_EQ(steps.missing(), (std::vector<uint32_t>{0, 1}));
  EXPECT_FALSE(one[0].empty());  // not moved from
  EXPECT_EQ(push(steps, shards, 0, 0, {0, 1}).outcome, Outcome::kAccepted);
  EXPECT_EQ(steps.global_step(), 1);

  EXPECT_THROW(td::SyncSteps(shards.coding(), 2, 0, 8, 0), std::invalid_argument);
  EXPECT_THROW(td::SyncSteps(shards.coding(), 2, 3, 8, 0), std::invalid_argument);
  EXPECT_THROW(td::SyncSteps(std::vector<td::ShardCoding>{td::ShardCoding{nullptr, 4}}, 1, 1, 8, 0), std::invalid_argument);
}

TEST(SyncSteps, APayloadThatCannotBeSummedIsReportedNotThrown) {
  const Shards shards("fp32", {16});
  td::SyncSteps steps(shards.coding(), 2, 1, 8, 3);
  std::vector<std::string> bad = {""};  // the service validates first; here nobody did
  ASSERT_EQ(steps.push(1, 3, std::vector<uint32_t>{0}, bad, 0.0f).outcome, Outcome::kAccepted);
  const td::SyncSteps::SumJob job = steps.take_sums(std::vector<uint32_t>{0});
  const std::string error = steps.sum(job);
  EXPECT_EQ(error.rfind("summing step 3: ", 0), 0u) << error;
  EXPECT_FALSE(steps.sums_of(3)->complete);
  EXPECT_EQ(steps.global_step(), 3);
}

TEST(SyncSteps, KeepsTheLastStepsForLatePullers) {
  const Shards shards("fp32", {12});
  td::SyncSteps steps(shards.coding(), 1, 1, 2, 0);
  for (int64_t step = 0; step < 3; ++step) ASSERT_EQ(push(steps, shards, 0, step, {0}).outcome, Outcome::kAccepted);
  EXPECT_EQ(steps.sums_of(0), nullptr);  // displaced by steps 1 and 2
  for (int64_t step = 1; step < 3; ++step) {
    ASSERT_NE(steps.sums_of(step), nullptr);
    EXPECT_TRUE(steps.sums_of(step)->complete);
    EXPECT_EQ(steps.sums_of(step)->shards[0], shards.expected_sum(0, {0}, step));
  }
  ASSERT_NE(steps.sums_of(3), nullptr);  // being collected
  EXPECT_FALSE(steps.sums_of(3)->complete);
  EXPECT_EQ(steps.sums_of(4), nullptr);
  EXPECT_EQ(steps.last_pushed(0), 2);
}

TEST(SyncSteps, BuffersOfStepsEveryReplicaPulledServeLaterSteps) {
  const Shards shards("fp32", {4096});
  td::SyncSteps steps(shards.coding(), 1, 1, 8, 0);
  ASSERT_EQ(push(steps, shards, 0, 0, {0}).outcome, Outcome::kAccepted);
  std::shared_ptr<td::StepSums> held = steps.sums_of(0);
  const uint8_t* buffer = held->shards[0].data();
  steps.pulled(held, 0);
  EXPECT_EQ(steps.sums_of(0), nullptr);  // every replica has it
  held.reset();
  // Step 1 was started before step 0 was dropped; step 2 gets its buffer.
  ASSERT_EQ(push(steps, shards, 0, 1, {0}).outcome, Outcome::kAccepted);
  ASSERT_EQ(push(steps, shards, 0, 2, {0}).outcome, Outcome::kAccepted);
  EXPECT_EQ(steps.sums_of(2)->shards[0].data(), buffer);
  EXPECT_EQ(steps.sums_of(2)->shards[0], shards.expected_sum(0, {0}, 2));
}

TEST(SyncSteps, AReplicasRepeatedPullsDoNotDropAStepAnotherStillNeeds) {
  const Shards shards("fp32", {64});
  td::SyncSteps steps(shards.coding(), 2, 2, 8, 0);
  ASSERT_EQ(push(steps, shards, 0, 0, {0}).outcome, Outcome::kAccepted);
  ASSERT_EQ(push(steps, shards, 1, 0, {0}).outcome, Outcome::kAccepted);
  ASSERT_TRUE(steps.sums_of(0) && steps.sums_of(0)->complete);
  for (int i = 0; i < 5; ++i) steps.pulled(steps.sums_of(0), 0);  // replica 0 asks again and again
  ASSERT_NE(steps.sums_of(0), nullptr) << "replica 1 has not pulled step 0 yet";
  EXPECT_EQ(steps.sums_of(0)->shards[0], shards.expected_sum(0, {0, 1}, 0));
  steps.pulled(steps.sums_of(0), 1);
  EXPECT_EQ(steps.sums_of(0), nullptr);  // now every replica has it
  EXPECT_THROW(steps.pulled(steps.sums_of(1), 2), std::invalid_argument);
}

TEST(SyncSteps, SumsStillStreamedAreNotReused) {
  const Shards shards("fp32", {4096});
  td::SyncSteps steps(shards.coding(), 1, 1, 8, 0);
  ASSERT_EQ(push(steps, shards, 0, 0, {0}).outcome, Outcome::kAccepted);
  const std::shared_ptr<td::StepSums> held = steps.sums_of(0);
  const std::shared_ptr<td::StepSums> streaming = steps.sums_of(0);  // a second puller, still writing
  steps.pulled(held, 0);
  EXPECT_EQ(steps.sums_of(0), nullptr);
  for (int64_t step = 1; step < 4; ++step) ASSERT_EQ(push(steps, shards, 0, step, {0}).outcome, Outcome::kAccepted);
  EXPECT_EQ(streaming->shards[0], shards.expected_sum(0, {0}, 0));
}

TEST(SyncSteps, AClosedStepHasNothingMoreToTake) {
  const Shards shards("fp32", {16});
  td::SyncSteps steps(shards.coding(), 3, 1, 8, 0);
  std::vector<std::string> p = {shards.payload(0, 1, 0)};
  ASSERT_EQ(steps.push(1, 0, std::vector<uint32_t>{0}, p, 0.0f).outcome, Outcome::kAccepted);
  const td::SyncSteps::SumJob job = steps.take_sums(std::vector<uint32_t>{0});
  EXPECT_FALSE(job.empty());
  EXPECT_TRUE(steps.take_sums(std::vector<uint32_t>{0}).empty());  // summed once, by the first taker
  EXPECT_THROW(steps.take_sums(std::vector<uint32_t>{1}), std::invalid_argument);
  EXPECT_EQ(steps.sum(job), "");
  EXPECT_TRUE(steps.settle(job));
  EXPECT_EQ(steps.global_step(), 1);
  EXPECT_EQ(steps.sums_of(0)->contributions, 1u);
  EXPECT_EQ(steps.sums_of(0)->shards[0], shards.expected_sum(0, {1}, 0));
}

// server_ef(): each shard's server state goes from sum to sum in step order,
// starts from the one given (a checkpoint's), and the states after the last
// step, and after the checkpoint steps among the last keep_steps, stay for
// the chief's checkpoint even once every replica has pulled that step's sums.
TEST(SyncSteps, ServerStatesFollowTheSumsAndOutliveThePulls) {
  const Shards shards("server_ef(terngrad:share_scale=0)", {1000, 64});
  // Where the ps resumes from: the state one earlier sum left (step 9).
  std::vector<std::vector<uint8_t>> start(2), expect_state(2);
  std::vector<std::vector<std::vector<uint8_t>>> expect_sum(3, std::vector<std::vector<uint8_t>>(2));
  for (uint32_t s = 0; s < 2; ++s) {
    std::vector<std::string> kept = {shards.payload(s, 0, 9), shards.payload(s, 1, 9)};
    const std::vector<std::span<const uint8_t>> views = {
        {reinterpret_cast<const uint8_t*>(kept[0].data()), kept[0].size()},
        {reinterpret_cast<const uint8_t*>(kept[1].data()), kept[1].size()}};
    std::vector<uint8_t> out;
    shards.codecs[s]->aggregate_step(views, shards.elements[s], {0, 9, 0}, start[s], out);
  }
  td::SyncSteps steps(shards.coding(), 2, 2, 2, 10, start);
  steps.keep_states_every(2);  // the chief checkpoints after steps 11, 13, ...
  EXPECT_EQ(*steps.server_states_after(9), start) << "the states Init gave";
  // The same arithmetic by hand: the codec's aggregate_step in step order.
  expect_state = start;
  for (int64_t step = 10; step < 13; ++step)
    for (uint32_t s = 0; s < 2; ++s) {
      std::vector<std::string> kept = {shards.payload(s, 0, step), shards.payload(s, 1, step)};
      const std::vector<std::span<const uint8_t>> views = {
          {reinterpret_cast<const uint8_t*>(kept[0].data()), kept[0].size()},
          {reinterpret_cast<const uint8_t*>(kept[1].data()), kept[1].size()}};
      shards.codecs[s]->aggregate_step(views, shards.elements[s], {0, static_cast<uint32_t>(step), 0}, expect_state[s],
                                       expect_sum[step - 10][s]);
      if (step == 11) {
        ASSERT_NE(expect_state[s], start[s]);
      }
    }
  std::vector<std::vector<std::vector<uint8_t>>> states_after(3);
  for (int64_t step = 10; step < 13; ++step) {
    EXPECT_EQ(steps.server_states_after(step), nullptr) << "before its sum";
    for (uint32_t r = 0; r < 2; ++r) EXPECT_EQ(push(steps, shards, r, step, every(2)).outcome, Outcome::kAccepted);
    const auto sums = steps.sums_of(step);
    ASSERT_NE(sums, nullptr);
    for (uint32_t s = 0; s < 2; ++s) EXPECT_EQ(sums->shards[s], expect_sum[step - 10][s]) << "step " << step;
    for (uint32_t r = 0; r < 2; ++r) steps.pulled(sums, r);  // every replica pulled: the sums go
    EXPECT_EQ(steps.sums_of(step), nullptr);
    const auto* states = steps.server_states_after(step);
    ASSERT_NE(states, nullptr) << "step " << step;
    states_after[step - 10] = *states;
  }
  EXPECT_EQ(states_after[2], expect_state);  // the last step's states, as the codec computes them
  EXPECT_NE(states_after[1], states_after[2]);
  EXPECT_EQ(steps.server_states_after(10), nullptr) << "not a checkpoint step, nor the last";
  ASSERT_NE(steps.server_states_after(11), nullptr) << "a checkpoint step, copied aside";
  EXPECT_EQ(*steps.server_states_after(11), states_after[1]);
  // A stateless layout keeps none.
  const Shards plain("fp32", {100});
  td::SyncSteps none(plain.coding(), 1, 1, 2, 0);
  EXPECT_EQ(push(none, plain, 0, 0, every(1)).outcome, Outcome::kAccepted);
  EXPECT_EQ(none.server_states_after(0), nullptr);
  EXPECT_THROW(td::SyncSteps(shards.coding(), 2, 2, 2, 0, std::vector<std::vector<uint8_t>>(3)), std::invalid_argument);
  EXPECT_THROW(steps.keep_states_every(-1), std::invalid_argument);
}

// The live states serve the last step until a sum of the next step begins
// (not at its first push: the step's first shard summed), whether every
// replica is needed (shard by shard) or backups make the step (whole); the
// copies of checkpoint steps stay while they are among the last keep_steps.
TEST(SyncSteps, TheLastStepsStatesLastUntilTheNextSumBeginsAndCheckpointStepsStayInTheWindow) {
  for (const bool backups : {false, true}) {
    SCOPED_TRACE(backups ? "2 of 3 replicas make a step" : "every replica is needed");
    const Shards shards("server_ef(terngrad:share_scale=0)", {300, 64});
    td::SyncSteps steps(shards.coding(), backups ? 3 : 2, 2, 3, 0);
    steps.keep_states_every(4);  // steps 3, 7, ...
    std::vector<std::vector<std::vector<uint8_t>>> after;  // [step][shard]
    for (int64_t step = 0; step < 8; ++step) {
      ASSERT_NE(steps.server_states_after(step - 1), nullptr) << "step " << step;
      if (!backups) {
        // One shard from each replica: shard 0 is summed, shard 1 not yet.
        EXPECT_EQ(push(steps, shards, 0, step, {0}).outcome, Outcome::kAccepted);
        ASSERT_NE(steps.server_states_after(step - 1), nullptr) << "nothing summed at one replica's push";
        EXPECT_EQ(push(steps, shards, 1, step, {0}).outcome, Outcome::kAccepted);
        EXPECT_EQ(steps.server_states_after(step - 1) != nullptr, (step - 1) % 4 == 3 && step >= 4)
            << "a sum of step " << step << " began: only a checkpoint step's copy is left";
        EXPECT_EQ(push(steps, shards, 0, step, {1}).outcome, Outcome::kAccepted);
        EXPECT_EQ(push(steps, shards, 1, step, {1}).outcome, Outcome::kAccepted);
      } else {
        EXPECT_EQ(push(steps, shards, 2, step, every(2)).outcome, Outcome::kAccepted);
        ASSERT_NE(steps.server_states_after(step - 1), nullptr) << "one of the two replicas needed";
        EXPECT_EQ(push(steps, shards, 1, step, every(2)).outcome, Outcome::kAccepted);  // makes the step
        EXPECT_EQ(push(steps, shards, 0, step, every(2)).outcome, Outcome::kStale);
      }
      ASSERT_EQ(steps.global_step(), step + 1);
      const auto* live = steps.server_states_after(step);
      ASSERT_NE(live, nullptr) << "step " << step;
      after.push_back(*live);
      if (step > 0) {
        EXPECT_NE(after[step], after[step - 1]);
      }
    }
    // global step 8, keep_steps 3: steps 5..7 are in the window; 3 left it.
    EXPECT_EQ(steps.server_states_after(3), nullptr) << "a checkpoint step out of the window";
    for (int64_t step : {4, 5, 6}) EXPECT_EQ(steps.server_states_after(step), nullptr) << "step " << step;
    ASSERT_NE(steps.server_states_after(7), nullptr);
    EXPECT_EQ(*steps.server_states_after(7), after[7]);
    // The next step's sum moves the live states on; step 7's copy stays.
    EXPECT_EQ(push(steps, shards, 1, 8, every(2)).outcome, Outcome::kAccepted);
    EXPECT_EQ(push(steps, shards, backups ? 2 : 0, 8, every(2)).outcome, Outcome::kAccepted);
    ASSERT_NE(steps.server_states_after(7), nullptr);
    EXPECT_EQ(*steps.server_states_after(7), after[7]) << "the copy, not the live states";
    ASSERT_NE(steps.server_states_after(8), nullptr);
    EXPECT_NE(*steps.server_states_after(8), after[7]);
  }
}
