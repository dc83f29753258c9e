// ThreadTeam (host threads only: these run without a GPU): every member runs
// once per run, at once; the team is reused run after run; a member's
// exception comes back to the caller after every member finished.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "terngrad/train/cuda/thread_team.h"

namespace terngrad::train::cuda {
namespace {

TEST(ThreadTeam, EveryMemberRunsOncePerRunOnItsOwnThread) {
  ThreadTeam team(4);
  EXPECT_EQ(team.size(), 4);
  for (int run = 0; run < 200; ++run) {
    std::vector<int> calls(4, 0);
    std::mutex mu;
    std::set<std::thread::id> threads;
    team.run([&](int m) {
      ++calls[static_cast<size_t>(m)];
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
    ASSERT_EQ(calls, std::vector<int>(4, 1)) << "run " << run;
    ASSERT_EQ(threads.size(), 4u) << "run " << run;
    ASSERT_EQ(threads.count(std::this_thread::get_id()), 1u) << "member 0 is the caller";
  }
}

// The members run at the same time: each waits (bounded) until all have
// started, which a team running them one after another would never see.
TEST(ThreadTeam, MembersRunConcurrently) {
  ThreadTeam team(3);
  std::atomic<int> started{0};
  std::atomic<int> met{0};
  team.run([&](int) {
    ++started;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 3 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    if (started.load() == 3) ++met;
  });
  EXPECT_EQ(met.load(), 3);
}

TEST(ThreadTeam, TheLowestThrowingMembersExceptionComesBackAfterAllFinish) {
  ThreadTeam team(4);
  std::atomic<int> finished{0};
  try {
    team.run([&](int m) {
      ++finished;
      if (m == 2 || m == 3) throw std::runtime_error("member " + std::to_string(m));
    });
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "member 2");
  }
  EXPECT_EQ(finished.load(), 4);
  // Still usable, with no stale error.
  std::atomic<int> ran{0};
  team.run([&](int) { ++ran; });
  EXPECT_EQ(ran.load(), 4);
}

TEST(ThreadTeam, OneMemberIsTheCallerAlone) {
  ThreadTeam team(1);
  std::thread::id who;
  team.run([&](int m) {
    EXPECT_EQ(m, 0);
    who = std::this_thread::get_id();
  });
  EXPECT_EQ(who, std::this_thread::get_id());
  EXPECT_THROW(team.run([](int) { throw std::logic_error("x"); }), std::logic_error);
}

TEST(ThreadTeam, RefusesAnEmptyTeam) {
  EXPECT_THROW(ThreadTeam(0), std::invalid_argument);
  EXPECT_THROW(ThreadTeam(-2), std::invalid_argument);
}

}  // namespace
}  // namespace terngrad::train::cuda
