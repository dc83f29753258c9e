// The ps's replica table (comm/service/replica_table.h) with an injected
// clock: Register's replacement rule and the liveness verdicts, no sleeps.
#include "replica_table.h"

#include <gtest/gtest.h>

#include <string>

namespace td = terngrad::comm::detail;
using std::chrono::seconds;

namespace {

const td::SteadyTime t0{};  // the table never reads the clock: any origin will do

std::string name(uint32_t r) { return r == 0 ? "chief" : "worker " + std::to_string(r); }
int64_t pushed(uint32_t r) { return 10 + r; }

td::ReplicaTable registered(size_t n) {
  td::ReplicaTable t;
  t.reset(n);
  for (uint32_t r = 0; r < n; ++r) t.join(r, "s" + std::to_string(r), "host:" + std::to_string(r), true, t0);
  return t;
}

}  // namespace

TEST(ReplicaTable, RegisterFirstSameAndReplacedProcesses) {
  td::ReplicaTable t;
  t.reset(3);
  EXPECT_EQ(t.unregistered(), (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(t.join(1, "a", "h:1", false, t0), td::ReplicaTable::Join::kFirst);
  EXPECT_EQ(t.join(1, "a", "h:1", false, t0 + seconds(1)), td::ReplicaTable::Join::kSame);
  // Without proof another process may not take a live replica's name...
  EXPECT_EQ(t.join(1, "b", "h:2", false, t0 + seconds(2)), td::ReplicaTable::Join::kRefused);
  EXPECT_EQ(t[1].session, "a");
  EXPECT_EQ(t[1].label, "h:1");
  EXPECT_EQ(t[1].last_heard, t0 + seconds(1)) << "a refusal changes nothing";
  // ...with proof (a cluster secret's token) it replaces the old process.
  EXPECT_EQ(t.join(1, "b", "h:2", true, t0 + seconds(3)), td::ReplicaTable::Join::kReplaced);
  EXPECT_EQ(t[1].session, "b");
  EXPECT_EQ(t.unregistered(), (std::vector<uint32_t>{0, 2}));
  EXPECT_TRUE(td::same_session("abc", "abc"));
  EXPECT_FALSE(td::same_session("abc", "abd"));
  EXPECT_FALSE(td::same_session("abc", "ab"));
}

TEST(ReplicaTable, ASilentWorkerIsGoneOnceAndAGoneOneMayBeReplaced) {
  td::ReplicaTable t = registered(3);
  t.heard(0, t0 + seconds(50));
  t.heard(2, t0 + seconds(50));
  EXPECT_TRUE(t.judge(t0 + seconds(60), 60.0, true, 2, name, pushed).newly_gone.empty()) << "60 s is not past 60";
  td::ReplicaTable::Verdict v = t.judge(t0 + seconds(61), 60.0, true, 2, name, pushed);
  ASSERT_EQ(v.newly_gone.size(), 1u);
  EXPECT_EQ(v.newly_gone[0], "worker 1 (host:1) has been silent for 61 s (last pushed step 11)");
  EXPECT_FALSE(v.failure) << "2 replicas left, a step needs 2";
  EXPECT_TRUE(t[1].gone);
  EXPECT_TRUE(t.judge(t0 + seconds(62), 60.0, true, 2, name, pushed).newly_gone.empty()) << "reported once";
  // Without proof, a new process may take a gone replica's name.
  EXPECT_EQ(t.join(1, "new", "host:9", false, t0 + seconds(70)), td::ReplicaTable::Join::kReplaced);
  EXPECT_FALSE(t[1].gone);
}

TEST(ReplicaTable, TheRunCannotGoOnWithoutTheChiefOrEnoughReplicas) {
  td::ReplicaTable t = registered(3);
  t.heard(1, t0 + seconds(100));
  t.heard(2, t0 + seconds(100));
  td::ReplicaTable::Verdict v = t.judge(t0 + seconds(100), 60.0, true, 1, name, pushed);
  ASSERT_TRUE(v.failure);
  EXPECT_EQ(*v.failure, "chief (host:0) has been silent for 100 s (last pushed step 10); it is the chief, so the run cannot finish");

  td::ReplicaTable u = registered(3);
  u.heard(0, t0 + seconds(100));
  v = u.judge(t0 + seconds(100), 60.0, true, 3, name, pushed);
  ASSERT_TRUE(v.failure);
  EXPECT_NE(v.failure->find("worker 1 (host:1) has been silent for 100 s"), std::string::npos) << *v.failure;
  EXPECT_NE(v.failure->find("; worker 2 (host:2)"), std::string::npos) << *v.failure;
  EXPECT_NE(v.failure->find("only 1 replicas left and a step needs 3"), std::string::npos) << *v.failure;

  // A replica that finished is never silent, and counts toward the step.
  td::ReplicaTable w = registered(3);
  w[1].done = true;
  w.heard(0, t0 + seconds(100));
  w.heard(2, t0 + seconds(100));
  v = w.judge(t0 + seconds(100), 60.0, true, 3, name, pushed);
  EXPECT_FALSE(v.failure);
  EXPECT_TRUE(v.newly_gone.empty());
  // Async runs have no step quorum: silent workers are only gone.
  td::ReplicaTable a = registered(3);
  a.heard(0, t0 + seconds(100));
  v = a.judge(t0 + seconds(100), 60.0, false, 3, name, pushed);
  EXPECT_FALSE(v.failure);
  EXPECT_EQ(v.newly_gone.size(), 2u);
}

TEST(ReplicaTable, StartupWaitsForInitAndEveryRegisterWithinTheTimeout) {
  td::ReplicaTable t;
  // Before Init the table is empty: only the chief's Init is awaited.
  auto v = t.judge_startup(false, t0, t0 + seconds(5), 10, name);
  EXPECT_FALSE(v.complete);
  EXPECT_FALSE(v.failure);
  v = t.judge_startup(false, t0, t0 + seconds(11), 10, name);
  ASSERT_TRUE(v.failure);
  EXPECT_EQ(*v.failure, "chief (the chief) did not initialize this ps within 10 s");

  t.reset(3);
  t.join(0, "s0", "h:0", true, t0 + seconds(1));
  v = t.judge_startup(true, t0, t0 + seconds(9), 10, name);
  EXPECT_FALSE(v.complete);
  EXPECT_FALSE(v.failure) << "within the timeout, the missing replicas may still come";
  v = t.judge_startup(true, t0, t0 + seconds(12), 10, name);
  EXPECT_FALSE(v.complete);
  ASSERT_TRUE(v.failure);
  EXPECT_EQ(*v.failure, "never joined within 10 s: worker 1, worker 2");

  t.join(1, "s1", "h:1", true, t0 + seconds(12));
  t.join(2, "s2", "h:2", true, t0 + seconds(12));
  v = t.judge_startup(true, t0, t0 + seconds(100), 10, name);
  EXPECT_TRUE(v.complete) << "every replica registered: liveness (judge) rules from now on";
  EXPECT_FALSE(v.failure);
}
