// The pre-rounds of multi-round codecs on ps 0 without gRPC
// (comm/service/presum_exchange.h): the checks of a report, the sum in
// replica order of the first replicas needed, late and retried reports, and
// refused reports that change nothing.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "presum_exchange.h"

namespace td = terngrad::comm::detail;

namespace {

using Recorded = td::PresumExchange::Recorded;
using Ids = std::vector<uint32_t>;
using Floats = std::vector<float>;

// Variable 0: one round of 2 floats; 1: none (a single-round codec); 2: one round of 3.
td::PresumExchange make(int replicas, int needed) { return td::PresumExchange({{2}, {}, {3}}, replicas, needed, 4); }

std::string report(td::PresumExchange& x, uint32_t replica, int64_t step, Ids named, Floats values,
                   Recorded* recorded = nullptr) {
  Ids covered;
  if (std::string bad = x.select(0, named, values, &covered); !bad.empty()) return bad;
  const Recorded r = x.record(replica, step, 0, covered, values);
  if (recorded) *recorded = r;
  return "";
}

}  // namespace

TEST(PresumExchange, SelectNamesWhatIsWrongAndChangesNothing) {
  td::PresumExchange x = make(2, 2);
  EXPECT_TRUE(x.any());
  Ids covered;
  EXPECT_EQ(x.select(0, {}, Floats{1, 2, 3, 4, 5}, &covered), "");
  EXPECT_EQ(covered, (Ids{0, 2}));
  covered = {9};
  EXPECT_EQ(x.select(0, Ids{1}, Floats{}, &covered), "ExchangePresums: variable 1 has 0 pre-rounds, not a round 0");
  EXPECT_EQ(x.select(1, {}, Floats{}, &covered), "ExchangePresums: no variable has a round 1");
  EXPECT_EQ(x.select(0, Ids{3}, Floats{1}, &covered), "ExchangePresums: variable 3 of 3");
  EXPECT_EQ(x.select(0, Ids{0, 0}, Floats{1, 2, 3, 4}, &covered), "ExchangePresums: variable 0 named twice");
  EXPECT_EQ(x.select(0, Ids{2}, Floats{1, 2}, &covered),
            "ExchangePresums: 2 values for round 0 of 1 variables, which take 3");
  EXPECT_EQ(x.select(0, Ids{0}, Floats{1, std::numeric_limits<float>::quiet_NaN()}, &covered),
            "ExchangePresums: value 1 is NaN or Inf");
  EXPECT_NE(x.select(0, Ids{0}, Floats{std::numeric_limits<float>::infinity(), 0}, &covered), "");
  EXPECT_EQ(covered, Ids{9});  // untouched by a refused report
  EXPECT_FALSE(x.kept(0));     // and nothing recorded
  EXPECT_THROW(x.record(2, 0, 0, Ids{0}, Floats{1, 2}), std::invalid_argument);  // replica 2 of 2
  EXPECT_THROW(x.record(0, 0, 0, Ids{0}, Floats{1}), std::invalid_argument);
  EXPECT_FALSE(x.kept(0));
  EXPECT_FALSE(td::PresumExchange({{}, {}}, 1, 1, 4).any());
  EXPECT_THROW(td::PresumExchange({{1}}, 2, 3, 4), std::invalid_argument);
}

TEST(PresumExchange, TheSumIsInReplicaOrderOfTheFirstReplicasNeeded) {
  td::PresumExchange x = make(4, 3);
  Recorded r{};
  // Replicas 3, 0, 1 report in that order; the sum is ((0 + r0) + r1) + r3:
  // (1e8 + 1) rounds to 1e8, so replica order gives 0 where arrival order
  // ((-1e8 + 1e8) + 1) would give 1.
  EXPECT_EQ(report(x, 3, 5, Ids{0}, Floats{-1e8f, 1}, &r), "");
  EXPECT_EQ(r, Recorded::kNew);
  EXPECT_EQ(report(x, 0, 5, Ids{0}, Floats{1e8f, 2}), "");
  EXPECT_FALSE(x.complete(5, 0, Ids{0}));
  EXPECT_EQ(x.missing(5, 0, Ids{0}), (Ids{1, 2}));
  EXPECT_EQ(report(x, 1, 5, Ids{0}, Floats{1, 4}), "");
  ASSERT_TRUE(x.complete(5, 0, Ids{0}));
  const Floats first = x.sums(5, 0, Ids{0});
  EXPECT_EQ(first, (Floats{0, 7}));
  // A late replica is acknowledged and not summed; a retry keeps the first values.
  EXPECT_EQ(report(x, 2, 5, Ids{0}, Floats{5, 100}, &r), "");
  EXPECT_EQ(r, Recorded::kNew);
  EXPECT_EQ(report(x, 0, 5, Ids{0}, Floats{7, 7}, &r), "");
  EXPECT_EQ(r, Recorded::kRepeated);
  EXPECT_EQ(x.sums(5, 0, Ids{0}), first);
  EXPECT_TRUE(x.missing(5, 0, Ids{0}).empty());
  // Variable 2 of the same step is its own sum.
  EXPECT_FALSE(x.complete(5, 0, Ids{0, 2}));
  EXPECT_THROW(x.sums(5, 0, Ids{0, 2}), std::invalid_argument);
}

TEST(PresumExchange, OnlyTheLastStepsAreKept) {
  td::PresumExchange x({{1}}, 1, 1, 2);
  for (int64_t s = 0; s < 3; ++s) EXPECT_EQ(report(x, 0, s, {}, Floats{1.0f * s}), "");
  EXPECT_FALSE(x.kept(0));
  EXPECT_TRUE(x.kept(1) && x.kept(2));
  EXPECT_EQ(x.sums(2, 0, Ids{0}), Floats{2});
  td::PresumExchange none({{1}}, 1, 1, 0);
  Recorded r{};
  EXPECT_EQ(report(none, 0, 0, {}, Floats{1}, &r), "");
  EXPECT_EQ(r, Recorded::kTooOld);
}
