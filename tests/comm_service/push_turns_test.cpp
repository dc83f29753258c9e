// The ps's push turns in async runs (comm/service/push_turns.h): who may push
// next, in the order asked, once no other push has more than the lead to come
// and no turn given before is still unused.
#include "push_turns.h"

#include <gtest/gtest.h>

#include <chrono>

namespace td = terngrad::comm::detail;

namespace {
using Clock = td::PushTurns::Clock;
constexpr auto kReservation = std::chrono::milliseconds(20);
}  // namespace

TEST(PushTurns, ALoneReplicaPushesAtOnce) {
  td::PushTurns t(2, 256 << 10, kReservation);
  const Clock::time_point now = Clock::now();
  t.ask(1);
  EXPECT_TRUE(t.take(1, now));
  EXPECT_FALSE(t.take(1, now)) << "a turn is taken once per ask";
}

TEST(PushTurns, AReplicaWaitsWhileAnotherPushHasMoreThanTheLeadToCome) {
  td::PushTurns t(3, 256 << 10, kReservation);
  const Clock::time_point now = Clock::now();
  t.begin_read(0);
  t.ask(1);
  EXPECT_FALSE(t.take(1, now)) << "replica 0's push is far from done";
  t.nearly_done(0);
  EXPECT_TRUE(t.take(1, now)) << "at most the lead is left of replica 0's push";
  t.end_read(0, /*far_from_done=*/false);
  // A push read whole (or refused) without nearly_done first also frees the link.
  t.begin_read(1);
  t.ask(2);
  EXPECT_FALSE(t.take(2, now));
  t.end_read(1, /*far_from_done=*/true);
  EXPECT_TRUE(t.take(2, now));
}

TEST(PushTurns, TurnsGoInTheOrderAsked) {
  td::PushTurns t(3, 0, kReservation);
  const Clock::time_point now = Clock::now();
  t.begin_read(0);
  t.ask(2);
  t.ask(1);
  t.ask(2);  // asking again keeps the place
  t.end_read(0, true);
  EXPECT_FALSE(t.take(1, now)) << "replica 2 asked first";
  EXPECT_TRUE(t.take(2, now));
  EXPECT_FALSE(t.take(1, now)) << "replica 2 holds its turn until its push begins";
  t.begin_read(2);
  EXPECT_FALSE(t.take(1, now)) << "replica 2's push is far from done";
  t.end_read(2, true);
  EXPECT_TRUE(t.take(1, now));
}

TEST(PushTurns, AnUnusedTurnLapses) {
  td::PushTurns t(2, 0, kReservation);
  const Clock::time_point now = Clock::now();
  t.ask(0);
  ASSERT_TRUE(t.take(0, now));
  t.ask(1);
  EXPECT_FALSE(t.take(1, now + kReservation / 2)) << "replica 0 has not begun its push";
  ASSERT_TRUE(t.next_lapse(now).has_value());
  EXPECT_EQ(*t.next_lapse(now), now + kReservation);
  EXPECT_FALSE(t.next_lapse(now + kReservation).has_value()) << "lapsed: nothing to wait for";
  EXPECT_TRUE(t.take(1, now + kReservation)) << "a replica that did not push within the reservation holds no one up";
}

TEST(PushTurns, AReplicaThatWithdrawsLeavesTheQueue) {
  td::PushTurns t(3, 0, kReservation);
  const Clock::time_point now = Clock::now();
  t.begin_read(0);
  t.ask(1);
  t.ask(2);
  t.withdraw(1);
  t.end_read(0, true);
  EXPECT_TRUE(t.take(2, now)) << "replica 1 left the queue";
}
