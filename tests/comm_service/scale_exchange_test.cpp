// Scale sharing on ps 0 without gRPC (comm/service/scale_exchange.h): the
// checks of a report, the per-variable max once enough replicas reported,
// retried reports, subsets of variables, and the steps kept.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "scale_exchange.h"

namespace td = terngrad::comm::detail;

namespace {

using Recorded = td::ScaleExchange::Recorded;
using Ids = std::vector<uint32_t>;
using Scales = std::vector<float>;

// select() then record(), as the service does; returns select()'s error or "".
std::string report(td::ScaleExchange& x, uint32_t replica, int64_t step, Ids named, Scales scales,
                   Recorded* recorded = nullptr) {
  Ids covered;
  if (std::string bad = x.select(named, scales, &covered); !bad.empty()) return bad;
  const Recorded r = x.record(replica, step, covered, scales);
  if (recorded) *recorded = r;
  return "";
}

}  // namespace

TEST(ScaleExchange, SelectNamesWhatIsWrong) {
  const td::ScaleExchange x(3, 2, 2, 8);
  Ids covered;
  EXPECT_EQ(x.select({}, Scales{1, 2, 3}, &covered), "");
  EXPECT_EQ(covered, (Ids{0, 1, 2}));
  EXPECT_EQ(x.select(Ids{2, 0}, Scales{1, 2}, &covered), "");
  EXPECT_EQ(covered, (Ids{2, 0}));

  covered = {7};
  EXPECT_EQ(x.select(Ids{3}, Scales{1}, &covered), "ExchangeScales: variable 3 of 3");
  EXPECT_EQ(x.select(Ids{1, 1}, Scales{1, 1}, &covered), "ExchangeScales: variable 1 named twice");
  EXPECT_EQ(x.select({}, Scales{1, 2}, &covered), "ExchangeScales: 2 scales for 3 variables");
  EXPECT_EQ(x.select(Ids{0}, Scales{-1.0f}, &covered),
            "ExchangeScales: scale " + std::to_string(-1.0f) + " is not a finite non-negative number");
  EXPECT_NE(x.select(Ids{0}, Scales{std::numeric_limits<float>::quiet_NaN()}, &covered), "");
  EXPECT_NE(x.select(Ids{0}, Scales{std::numeric_limits<float>::infinity()}, &covered), "");
  EXPECT_EQ(covered, Ids{7});  // untouched by a rejected report
}

TEST(ScaleExchange, TheMaxIsFinalOnceEnoughReplicasReported) {
  td::ScaleExchange x(2, 3, 2, 8);
  Recorded r{};
  EXPECT_EQ(report(x, 1, 4, {}, Scales{0.5f, 2.0f}, &r), "");
  EXPECT_EQ(r, Recorded::kNew);
  EXPECT_TRUE(x.kept(4));
  EXPECT_FALSE(x.complete(4, Ids{0, 1}));
  EXPECT_EQ(x.missing(4, Ids{0, 1}), (Ids{0, 2}));

  EXPECT_EQ(report(x, 2, 4, {}, Scales{1.5f, 0.25f}, &r), "");
  ASSERT_TRUE(x.complete(4, Ids{0, 1}));
  EXPECT_EQ(x.maxima(4, Ids{0, 1}), (Scales{1.5f, 2.0f}));
  EXPECT_EQ(x.maxima(4, Ids{1, 0}), (Scales{2.0f, 1.5f}));  // in the order asked
  EXPECT_EQ(x.missing(4, Ids{0, 1}), Ids{0});                // replica 0 may still report
  EXPECT_FALSE(x.kept(5));
  EXPECT_FALSE(x.complete(5, Ids{0}));
  EXPECT_THROW(x.maxima(5, Ids{0}), std::invalid_argument);
}

TEST(ScaleExchange, ARetriedReportKeepsTheFirstScales) {
  td::ScaleExchange x(1, 2, 2, 8);
  Recorded r{};
  EXPECT_EQ(report(x, 0, 0, {}, Scales{1.0f}, &r), "");
  EXPECT_EQ(report(x, 0, 0, {}, Scales{9.0f}, &r), "");
  EXPECT_EQ(r, Recorded::kRepeated);
  EXPECT_FALSE(x.complete(0, Ids{0}));  // one replica, counted once
  EXPECT_EQ(report(x, 1, 0, {}, Scales{0.5f}, &r), "");
  EXPECT_EQ(x.maxima(0, Ids{0}), Scales{1.0f});
}

TEST(ScaleExchange, VariablesCompleteOneLayerAtATime) {
  td::ScaleExchange x(3, 2, 2, 8);
  EXPECT_EQ(report(x, 0, 1, Ids{2}, Scales{3.0f}), "");
  EXPECT_EQ(report(x, 1, 1, Ids{2}, Scales{4.0f}), "");
  EXPECT_TRUE(x.complete(1, Ids{2}));
  EXPECT_FALSE(x.complete(1, Ids{0, 2}));
  EXPECT_EQ(x.missing(1, Ids{0, 2}), (Ids{0, 1}));
  EXPECT_EQ(x.maxima(1, Ids{2}), Scales{4.0f});
  Recorded r{};
  EXPECT_EQ(report(x, 0, 1, {}, Scales{1.0f, 1.0f, 1.0f}, &r), "");  // variable 2 again: kept as it was
  EXPECT_EQ(r, Recorded::kNew);
  EXPECT_EQ(report(x, 1, 1, Ids{0, 1}, Scales{2.0f, 0.0f}), "");
  EXPECT_EQ(x.maxima(1, Ids{0, 1, 2}), (Scales{2.0f, 1.0f, 4.0f}));
}

TEST(ScaleExchange, OnlyTheLastStepsAreKept) {
  td::ScaleExchange x(1, 1, 1, 2);
  for (int64_t step = 0; step < 3; ++step) EXPECT_EQ(report(x, 0, step, {}, Scales{1.0f}), "");
  EXPECT_FALSE(x.kept(0));
  EXPECT_TRUE(x.kept(1));
  EXPECT_TRUE(x.kept(2));
  EXPECT_TRUE(x.missing(0, Ids{0}).empty());

  td::ScaleExchange none(1, 1, 1, 0);
  Recorded r{};
  EXPECT_EQ(report(none, 0, 0, {}, Scales{1.0f}, &r), "");
  EXPECT_EQ(r, Recorded::kTooOld);
  EXPECT_FALSE(none.kept(0));
}

TEST(ScaleExchange, BadCallsThrow) {
  EXPECT_THROW(td::ScaleExchange(1, 2, 3, 8), std::invalid_argument);
  EXPECT_THROW(td::ScaleExchange(1, 2, 0, 8), std::invalid_argument);
  td::ScaleExchange x(2, 2, 1, 8);
  EXPECT_THROW(x.record(2, 0, Ids{0}, Scales{1.0f}), std::invalid_argument);       // replica 2 of 2
  EXPECT_THROW(x.record(0, 0, Ids{2}, Scales{1.0f}), std::invalid_argument);       // variable 2 of 2
  EXPECT_THROW(x.record(0, 0, Ids{0, 1}, Scales{1.0f}), std::invalid_argument);    // one scale, two variables
  EXPECT_FALSE(x.kept(0));  // nothing was recorded
  EXPECT_THROW(x.complete(0, Ids{5}), std::invalid_argument);
}
