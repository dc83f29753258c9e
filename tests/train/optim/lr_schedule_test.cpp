// Learning-rate schedules against their closed forms.
#include <gtest/gtest.h>

#include <cmath>

#include "terngrad/train/lr_schedule.h"

namespace tt = terngrad::train;

TEST(LrSchedule, FixedIsConstant) {
  auto s = tt::make_lr_schedule("fixed", {.initial = 0.03});
  for (int64_t step : {0, 1, 1000, 1000000}) EXPECT_EQ(s->lr(step), 0.03);
}

TEST(LrSchedule, PolynomialMatchesClosedForm) {
  const tt::LrScheduleOptions o{.initial = 0.1, .decay_steps = 1000, .end = 0.001, .power = 0.5};
  auto s = tt::make_lr_schedule("polynomial", o);
  for (int64_t step : {0, 1, 250, 500, 999, 1000, 1001, 5000}) {
    const double k = std::min<double>(step, 1000);
    EXPECT_DOUBLE_EQ(s->lr(step), (0.1 - 0.001) * std::pow(1 - k / 1000, 0.5) + 0.001) << step;
  }
  EXPECT_DOUBLE_EQ(s->lr(0), 0.1);
  EXPECT_DOUBLE_EQ(s->lr(1000), 0.001);
  EXPECT_DOUBLE_EQ(s->lr(2000), 0.001);  // held at the end value, no cycling
  auto linear = tt::make_lr_schedule("polynomial", {.initial = 1.0, .decay_steps = 10});
  EXPECT_DOUBLE_EQ(linear->lr(3), 0.7);
}

TEST(LrSchedule, ExponentialMatchesClosedForm) {
  auto smooth = tt::make_lr_schedule("exponential", {.initial = 0.5, .decay_steps = 100, .decay_rate = 0.1});
  auto stairs =
      tt::make_lr_schedule("exponential", {.initial = 0.5, .decay_steps = 100, .decay_rate = 0.1, .staircase = true});
  for (int64_t step : {0, 1, 50, 99, 100, 150, 250, 1000}) {
    EXPECT_DOUBLE_EQ(smooth->lr(step), 0.5 * std::pow(0.1, step / 100.0)) << step;
    EXPECT_DOUBLE_EQ(stairs->lr(step), 0.5 * std::pow(0.1, std::floor(step / 100.0))) << step;
  }
  EXPECT_DOUBLE_EQ(stairs->lr(99), 0.5);
  EXPECT_DOUBLE_EQ(stairs->lr(100), 0.05);
}

TEST(LrSchedule, ErrorsNameScheduleOptionAndValue) {
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no throw)";
  };
  auto expect_has = [](const std::string& m, std::initializer_list<const char*> parts) {
    for (const char* p : parts) EXPECT_NE(m.find(p), std::string::npos) << "'" << p << "' not in: " << m;
  };
  expect_has(message([] { tt::make_lr_schedule("cosine", {}); }), {"'cosine'", "fixed", "polynomial", "exponential"});
  expect_has(message([] { tt::make_lr_schedule("polynomial", {.decay_steps = 0}); }),
             {"polynomial", "decay_steps = 0"});
  expect_has(message([] { tt::make_lr_schedule("exponential", {.decay_steps = -5}); }),
             {"exponential", "decay_steps = -5"});
  expect_has(message([] { tt::make_lr_schedule("exponential", {.decay_steps = 10, .decay_rate = 0}); }),
             {"decay_rate = 0"});
  expect_has(message([] { tt::make_lr_schedule("fixed", {.initial = NAN}); }), {"fixed", "initial = nan"});
  expect_has(message([] { tt::make_lr_schedule("polynomial", {.decay_steps = 10, .power = -1}); }), {"power = -1"});
  expect_has(message([] { tt::make_lr_schedule("polynomial", {.decay_steps = 10, .end = -0.1}); }), {"end = -0.1"});
}

TEST(LrSchedule, DescribeNamesTheSchedule) {
  EXPECT_EQ(tt::make_lr_schedule("fixed", {.initial = 0.25})->describe(), "fixed(0.25)");
  EXPECT_EQ(tt::make_lr_schedule("polynomial", {.initial = 0.5, .decay_steps = 10, .power = 2})->describe(),
            "polynomial(initial=0.5, end=0, decay_steps=10, power=2)");
}
