// The ps's Init intake (comm/service/init_intake.h) without a server: an
// accepted Init's plan, and every refusal named, with its status code.
#include "init_intake.h"

#include <gtest/gtest.h>

#include <deque>
#include <string>
#include <vector>

#include "chunk_stream.h"
#include "server_state.h"

namespace tc = terngrad::comm;
namespace td = terngrad::comm::detail;
namespace rpc = terngrad::comm::rpc;

namespace {

// Two variables ("w": 1000 elements in two shards, "b": 10 in one).
rpc::InitHeader layout(bool sync, const std::string& codec = "terngrad") {
  rpc::InitHeader h;
  h.set_sync(sync);
  h.set_total_replicas(4);
  h.set_replicas_to_aggregate(4);
  h.set_global_step(7);
  auto* w = h.add_variables();
  w->set_name("w");
  w->set_size(1000);
  w->set_codec(codec);
  auto* b = h.add_variables();
  b->set_name("b");
  b->set_size(10);
  b->set_codec("fp32");
  for (auto [var, begin, count] : {std::tuple{0u, 0u, 600u}, std::tuple{0u, 600u, 400u}, std::tuple{1u, 0u, 10u}}) {
    auto* s = h.add_shards();
    s->set_variable(var);
    s->set_begin(begin);
    s->set_count(count);
  }
  return h;
}

rpc::InitChunk tensor(uint32_t shard, const std::string& slot, const std::string& data, uint64_t offset, uint64_t total) {
  rpc::InitChunk c;
  auto* t = c.mutable_tensor();
  t->set_shard(shard);
  t->set_slot(slot);
  t->set_offset(offset);
  t->set_total_bytes(total);
  t->set_data(data);
  return c;
}

struct Outcome {
  std::optional<td::InitRefusal> refusal;
  td::InitPlan plan;
};

Outcome take(const rpc::InitHeader& h, std::deque<rpc::InitChunk> chunks = {}, bool has_update_rule = true) {
  Outcome o;
  o.plan.header = h;
  o.refusal = td::take_init(
      o.plan,
      chunk_stream(chunks),
      {tc::kMaxReplicas, has_update_rule});
  return o;
}

void expect_refused(const Outcome& o, const std::string& words,
                    td::InitRefusal::Code code = td::InitRefusal::Code::kInvalidArgument) {
  ASSERT_TRUE(o.refusal.has_value()) << "accepted; expected a refusal naming: " << words;
  EXPECT_EQ(o.refusal->code, code) << o.refusal->message;
  EXPECT_EQ(o.refusal->message.rfind("Init: ", 0), 0u) << o.refusal->message;
  EXPECT_NE(o.refusal->message.find(words), std::string::npos) << o.refusal->message;
}

}  // namespace

TEST(InitIntake, AcceptsALayoutWithItsShardsAndCodecs) {
  const Outcome o = take(layout(true));
  ASSERT_FALSE(o.refusal) << o.refusal->message;
  ASSERT_EQ(o.plan.shards.size(), 3u);
  EXPECT_EQ(o.plan.shards[1].view.name, "w");
  EXPECT_EQ(o.plan.shards[1].view.begin, 600u);
  EXPECT_EQ(o.plan.shards[1].view.count, 400u);
  EXPECT_EQ(o.plan.shards[2].codec->spec(), "fp32");
  EXPECT_EQ(o.plan.presum_floats.size(), 2u);
  EXPECT_EQ(o.plan.server_states.size(), 3u);
  for (const auto& s : o.plan.server_states) EXPECT_TRUE(s.empty());
}

TEST(InitIntake, MultiRoundCodecsGetTheirPreRounds) {
  const Outcome o = take(layout(true, "powersgd:rank=2,rows=40"));
  // powersgd sends whole variables only: "w" in two shards is refused by name.
  expect_refused(o, "sends the whole variable only");
  rpc::InitHeader h = layout(true, "powersgd:rank=2,rows=40");
  h.mutable_shards()->DeleteSubrange(0, 2);
  auto* s = h.add_shards();
  s->set_variable(0);
  s->set_count(1000);
  const Outcome ok = take(h);
  ASSERT_FALSE(ok.refusal) << ok.refusal->message;
  EXPECT_FALSE(ok.plan.presum_floats[0].empty());
  EXPECT_TRUE(ok.plan.presum_floats[1].empty());
  expect_refused(take([&] { auto a = h; a.set_sync(false); return a; }()), "only a sync run has");
}

TEST(InitIntake, RefusesBadCountsAndLayoutsByName) {
  auto with = [](auto edit) { rpc::InitHeader h = layout(true); edit(h); return h; };
  expect_refused(take(with([](rpc::InitHeader& h) { h.set_total_replicas(0); })), "total_replicas 0");
  expect_refused(take(with([](rpc::InitHeader& h) { h.set_total_replicas(tc::kMaxReplicas + 1); })), "total_replicas");
  expect_refused(take(with([](rpc::InitHeader& h) { h.set_replicas_to_aggregate(5); })), "replicas_to_aggregate 5");
  expect_refused(take(with([](rpc::InitHeader& h) { h.set_last_step(-3); })), "last_step -3 is negative");
  expect_refused(take(with([](rpc::InitHeader& h) { h.set_checkpoint_interval_steps(-1); })),
                 "checkpoint_interval_steps -1 is negative");
  expect_refused(take(with([](rpc::InitHeader& h) { h.mutable_variables(0)->set_size(uint64_t{1} << 41); })),
                 "more than 2^40");
  expect_refused(take(with([](rpc::InitHeader& h) { h.mutable_shards(2)->set_variable(9); })), "names variable 9 of 2");
  expect_refused(take(with([](rpc::InitHeader& h) { h.mutable_shards(1)->set_count(401); })), "shard 1 lies outside w");
  expect_refused(take(with([](rpc::InitHeader& h) { h.mutable_variables(0)->set_codec("terngrad:clip=-1"); })), "w: ");
  expect_refused(take(layout(false), {}, /*has_update_rule=*/false), "needs an update rule",
                 td::InitRefusal::Code::kFailedPrecondition);
  expect_refused(take(layout(false, "ef(server_ef(terngrad:round=nearest))")), "only a sync run forms");
}

TEST(InitIntake, AsyncValuesAndSlotsArriveWholeOrAreRefused) {
  const std::string values(4 * 600, '\1'), half(4 * 300, '\2');
  Outcome o = take(layout(false), {tensor(0, "", half, 0, values.size()), tensor(0, "", half, half.size(), values.size()),
                                   tensor(2, "Momentum", std::string(40, '\3'), 0, 40)});
  ASSERT_FALSE(o.refusal) << o.refusal->message;
  ASSERT_EQ(o.plan.slot_names[0], std::vector<std::string>{""});
  EXPECT_EQ(o.plan.slot_bytes[0][0].bytes().size(), values.size());
  EXPECT_EQ(o.plan.slot_names[2], std::vector<std::string>{"Momentum"});
  EXPECT_TRUE(o.plan.slot_names[1].empty());
  expect_refused(take(layout(false), {tensor(0, "", half, 0, values.size())}), "shard 0 slot \"\" is incomplete");
  expect_refused(take(layout(false), {tensor(2, "", std::string(36, '\0'), 0, 36)}), "has the wrong size");
  expect_refused(take(layout(false), {tensor(3, "", values, 0, values.size())}), "unknown shard 3");
  rpc::InitChunk second;
  *second.mutable_header() = layout(false);
  expect_refused(take(layout(false), {second}), "a second header");
  std::deque<rpc::InitChunk> many;
  for (int k = 0; k < 17; ++k) many.push_back(tensor(2, "slot" + std::to_string(k), std::string(40, '\0'), 0, 40));
  expect_refused(take(layout(false), many), "more than 16 slots for shard 2");
}

TEST(InitIntake, SyncTakesOnlyServerStatesAndTheirCodecsCheckThem) {
  expect_refused(take(layout(true), {tensor(0, "", std::string(2400, '\0'), 0, 2400)}), "sync runs keep no values");
  // terngrad keeps no server state: any state for it is refused by its codec.
  expect_refused(take(layout(true), {tensor(0, td::kServerStateSlot, "xyz", 0, 3)}), "shard 0 (w): ");
  // server_ef keeps one: its own fresh state (empty) is not sent; a garbled one is refused.
  const std::string spec = "ef(server_ef(terngrad:round=nearest))";
  expect_refused(take(layout(true, spec), {tensor(1, td::kServerStateSlot, std::string(16, '\7'), 0, 16)}),
                 "shard 1 (w): ");
  const Outcome fresh = take(layout(true, spec));
  ASSERT_FALSE(fresh.refusal) << fresh.refusal->message;
  EXPECT_TRUE(fresh.plan.server_states[1].empty());
}
