// The ps's push-lead rule (comm/service/push_skew.h): when a replica's reply
// is held, and that the replica furthest behind is never held.
#include "push_skew.h"

#include <gtest/gtest.h>

namespace td = terngrad::comm::detail;

namespace {
constexpr uint64_t kKiB = 1024;
}  // namespace

TEST(PushSkew, HoldsOnlyAReplicaAheadOfOneStillSendingThisStep) {
  td::PushSkew s(3, 256 * kKiB);
  // Replica 0 has 600 KiB of step 5 in; replica 1 has 100 KiB and is sending.
  s.begin_read(0, 5);
  s.end_read(0);
  s.accepted(0, 5, 100 * kKiB);
  for (int i = 0; i < 5; ++i) s.accepted(0, 5, 100 * kKiB);
  s.begin_read(1, 5);
  s.end_read(1);
  s.accepted(1, 5, 100 * kKiB);
  EXPECT_FALSE(s.ahead(0, 5)) << "replica 1 is not sending: nothing to give the link to";
  s.begin_read(1, 5);
  EXPECT_TRUE(s.ahead(0, 5)) << "600 KiB against 100 KiB of a replica still sending, limit 256 KiB";
  EXPECT_FALSE(s.ahead(1, 5)) << "the replica behind is never held";
  EXPECT_FALSE(s.ahead(2, 5)) << "replica 2 has pushed nothing of step 5";
  EXPECT_FALSE(s.ahead(0, 6)) << "a hold is for the step the replica pushed";
  // Replica 1's push of 200 KiB lands: 300 KiB behind, more than 256 KiB but
  // within twice the largest push...
  s.end_read(1);
  s.accepted(1, 5, 200 * kKiB);
  s.begin_read(1, 5);
  EXPECT_FALSE(s.ahead(0, 5)) << "600 - 300 KiB is not more than twice the largest push (200 KiB)";
  s.end_read(1);
  // ...and a replica sending another step does not hold this one's.
  s.begin_read(2, 4);
  EXPECT_FALSE(s.ahead(0, 5));
  s.end_read(2);
}

TEST(PushSkew, TheLimitIsAtLeastTwiceTheLargestPushAndZeroNeverHolds) {
  td::PushSkew s(2, 64 * kKiB);
  s.accepted(0, 1, 512 * kKiB);
  s.accepted(0, 1, 512 * kKiB);
  s.begin_read(1, 1);
  EXPECT_FALSE(s.ahead(0, 1)) << "1 MiB ahead with pushes of 512 KiB: within two pushes";
  s.accepted(0, 1, 100 * kKiB);
  EXPECT_TRUE(s.ahead(0, 1)) << "1124 KiB ahead, more than 2 x 512 KiB";
  // A new step keeps the last step's largest push in the limit.
  s.accepted(0, 2, 2 * 100 * kKiB);
  s.accepted(0, 2, 1000 * kKiB);
  s.begin_read(1, 2);
  EXPECT_FALSE(s.ahead(0, 2)) << "1200 KiB ahead, within 2 x 1000 KiB";
  s.end_read(1);
  s.end_read(1);

  td::PushSkew off(2, 0);
  off.accepted(0, 1, 10 << 20);
  off.begin_read(1, 1);
  EXPECT_FALSE(off.ahead(0, 1)) << "limit 0: never hold";
}
