// Each optimizer against a float64 transcription of the TensorFlow 1.x rule.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "optim_test_util.h"
#include "terngrad/train/optimizer.h"

namespace tt = terngrad::train;
using namespace optim_test;

namespace {

// Reference state for one scalar element: the rule mutates (w, s0, s1).
using Rule = std::function<void(double& w, double& s0, double& s1, double g, double lr, int t)>;

// Runs `steps` updates of optimizer and reference with the same gradients and
// learning rates, and compares every weight after every step.
void check_against_reference(tt::Optimizer& opt, const Rule& rule, double s0_init, int steps, double rel_tol) {
  ParamSet ps = small_model();
  auto w = as_double(ps);
  std::vector<std::vector<double>> s0, s1;
  for (const auto& v : w) {
    s0.emplace_back(v.size(), s0_init);
    s1.emplace_back(v.size(), 0.0);
  }
  for (int t = 1; t <= steps; ++t) {
    const GradSet g = grads_for(ps, t);
    const float lr = 0.05f * (1.0f + 0.1f * static_cast<float>(t % 3));  // a changing schedule
    opt.apply(ps, g, lr);
    for (size_t i = 0; i < w.size(); ++i)
      for (size_t j = 0; j < w[i].size(); ++j) {
        rule(w[i][j], s0[i][j], s1[i][j], g[i].data[j], lr, t);
        const double got = ps.params[i].value.data[j];
        ASSERT_NEAR(got, w[i][j], rel_tol * std::max(1.0, std::fabs(w[i][j])))
            << opt.name() << " step " << t << " param " << i << " element " << j;
      }
  }
  EXPECT_EQ(opt.steps(), steps);
}

}  // namespace

TEST(Optimizer, GradientDescentMatchesReference) {
  auto opt = tt::make_optimizer("sgd");
  check_against_reference(*opt, [](double& w, double&, double&, double g, double lr, int) { w -= lr * g; }, 0.0,
                          10, 1e-6);
  EXPECT_TRUE(opt->slots().empty());
}

TEST(Optimizer, MomentumMatchesReference) {
  auto opt = tt::make_optimizer("momentum", {.momentum = 0.8});
  check_against_reference(*opt,
                          [](double& w, double& a, double&, double g, double lr, int) {
                            a = 0.8 * a + g;
                            w -= lr * a;
                          },
                          0.0, 10, 1e-6);
}

TEST(Optimizer, NesterovMomentumMatchesReference) {
  auto opt = tt::make_optimizer("momentum", {.momentum = 0.9, .nesterov = true});
  check_against_reference(*opt,
                          [](double& w, double& a, double&, double g, double lr, int) {
                            a = 0.9 * a + g;
                            w -= lr * g + lr * 0.9 * a;
                          },
                          0.0, 10, 1e-6);
}

TEST(Optimizer, MomentumDefaultsToPointNine) {
  auto a = tt::make_optimizer("momentum");
  auto b = tt::make_optimizer("momentum", {.momentum = 0.9});
  ParamSet pa = small_model(), pb = small_model();
  for (int t = 1; t <= 3; ++t) {
    a->apply(pa, grads_for(pa, t), 0.1f);
    b->apply(pb, grads_for(pb, t), 0.1f);
  }
  EXPECT_EQ(pa.params[0].value.data, pb.params[0].value.data);
}

TEST(Optimizer, AdamMatchesReference) {
  auto opt = tt::make_optimizer("adam");
  check_against_reference(*opt,
                          [](double& w, double& m, double& v, double g, double lr, int t) {
                            const double lr_t = lr * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
                            m = 0.9 * m + 0.1 * g;
                            v = 0.999 * v + 0.001 * g * g;
                            w -= lr_t * m / (std::sqrt(v) + 1e-8);
                          },
                          0.0, 12, 2e-5);
}

TEST(Optimizer, AdamWithCustomBetasAndEpsilon) {
  auto opt = tt::make_optimizer("adam", {.beta1 = 0.5, .beta2 = 0.9, .epsilon = 0.1});
  check_against_reference(*opt,
                          [](double& w, double& m, double& v, double g, double lr, int t) {
                            const double lr_t = lr * std::sqrt(1 - std::pow(0.9, t)) / (1 - std::pow(0.5, t));
                            m = 0.5 * m + 0.5 * g;
                            v = 0.9 * v + 0.1 * g * g;
                            w -= lr_t * m / (std::sqrt(v) + 0.1);
                          },
                          0.0, 12, 2e-5);
}

TEST(Optimizer, AdamFirstStepIsAboutLrTimesSign) {
  // With bias correction the first step is lr * g / (|g| + eps / sqrt(1 - b2)).
  auto opt = tt::make_optimizer("adam");
  ParamSet ps;
  ps.add(Param{"w", tensor({2}, {1.0f, 1.0f})});
  opt->apply(ps, {tensor({2}, {0.3f, -2.0f})}, 0.01f);
  EXPECT_NEAR(ps.params[0].value.data[0], 0.99f, 1e-6);
  EXPECT_NEAR(ps.params[0].value.data[1], 1.01f, 1e-6);
}

TEST(Optimizer, RmsPropMatchesReference) {
  auto opt = tt::make_optimizer("rmsprop");
  check_against_reference(*opt,
                          [](double& w, double& ms, double& mom, double g, double lr, int) {
                            ms = 0.9 * ms + 0.1 * g * g;
                            mom = 0.0 * mom + lr * g / std::sqrt(ms + 1e-10);
                            w -= mom;
                          },
                          1.0, 12, 1e-5);
}

TEST(Optimizer, RmsPropWithMomentumMatchesReference) {
  auto opt = tt::make_optimizer("rmsprop", {.momentum = 0.9, .epsilon = 1.0, .decay = 0.95});
  check_against_reference(*opt,
                          [](double& w, double& ms, double& mom, double g, double lr, int) {
                            ms = 0.95 * ms + 0.05 * g * g;
                            mom = 0.9 * mom + lr * g / std::sqrt(ms + 1.0);
                            w -= mom;
                          },
                          1.0, 12, 1e-5);
}

TEST(Optimizer, SlotsAreNamedAsTensorFlowNamesThem) {
  struct Case {
    const char* optimizer;
    std::vector<std::string> names;
    float initial;
  };
  for (const Case& c :
       {Case{"sgd", {}, 0.0f}, Case{"momentum", {"conv1/weights/Momentum", "logits/biases/Momentum"}, 0.0f},
        Case{"adam", {"conv1/weights/Adam", "conv1/weights/Adam_1", "logits/biases/Adam", "logits/biases/Adam_1"}, 0.0f},
        Case{"rmsprop",
             {"conv1/weights/RMSProp", "conv1/weights/RMSProp_1", "logits/biases/RMSProp", "logits/biases/RMSProp_1"},
             1.0f}}) {
    SCOPED_TRACE(c.optimizer);
    auto opt = tt::make_optimizer(c.optimizer);
    EXPECT_TRUE(opt->slots().empty());  // nothing before init() or the first apply()
    const ParamSet ps = small_model();
    opt->init(ps);
    opt->init(ps);  // idempotent
    const auto slots = opt->slots();
    ASSERT_EQ(slots.size(), c.names.size());
    for (size_t k = 0; k < slots.size(); ++k) {
      EXPECT_EQ(slots[k].first, c.names[k]);
      const Tensor& p = ps.params[k * ps.size() / slots.size()].value;
      EXPECT_EQ(slots[k].second->shape, p.shape);
      ASSERT_EQ(slots[k].second->data.size(), p.data.size());
      // RMSProp's mean square starts at one, its momentum at zero.
      const bool second = c.names[k].ends_with("_1");
      for (float v : slots[k].second->data) EXPECT_EQ(v, second ? 0.0f : c.initial);
    }
  }
}

TEST(Optimizer, SaveRestoreContinuesIdentically) {
  for (const char* name : {"sgd", "momentum", "adam", "rmsprop"}) {
    SCOPED_TRACE(name);
    const tt::OptimizerOptions o{.momentum = 0.5};
    auto a = tt::make_optimizer(name, o);
    ParamSet pa = small_model();
    for (int t = 1; t <= 5; ++t) a->apply(pa, grads_for(pa, t), 0.01f);

    // Checkpoint: weights, slots, scalar state.
    ParamSet pb = pa;
    std::vector<std::pair<std::string, Tensor>> saved;
    for (auto& [n, s] : a->slots()) saved.emplace_back(n, *s);
    const std::vector<uint8_t> blob = a->save_state();

    auto b = tt::make_optimizer(name, o);
    b->init(pb);
    auto slots = b->slots();
    ASSERT_EQ(slots.size(), saved.size());
    for (size_t k = 0; k < slots.size(); ++k) {
      ASSERT_EQ(slots[k].first, saved[k].first);
      *slots[k].second = saved[k].second;
    }
    b->load_state(blob);
    EXPECT_EQ(b->steps(), 5);

    for (int t = 6; t <= 10; ++t) {
      a->apply(pa, grads_for(pa, t), 0.01f);
      b->apply(pb, grads_for(pb, t), 0.01f);
    }
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa.params[i].value.data, pb.params[i].value.data);
    auto sa = a->slots(), sb = b->slots();
    for (size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sa[k].second->data, sb[k].second->data);
  }
}

TEST(Optimizer, AdamNeedsItsStepCountRestored) {
  auto a = tt::make_optimizer("adam");
  ParamSet pa = small_model();
  for (int t = 1; t <= 3; ++t) a->apply(pa, grads_for(pa, t), 0.01f);
  ParamSet pb = pa;
  auto b = tt::make_optimizer("adam");
  b->init(pb);
  auto sa = a->slots(), sb = b->slots();
  for (size_t k = 0; k < sa.size(); ++k) *sb[k].second = *sa[k].second;
  // No load_state: b believes this is step 1, so its bias correction differs.
  a->apply(pa, grads_for(pa, 4), 0.01f);
  b->apply(pb, grads_for(pb, 4), 0.01f);
  EXPECT_NE(pa.params[0].value.data, pb.params[0].value.data);
}

TEST(Optimizer, StateBlobsAreChecked) {
  auto adam = tt::make_optimizer("adam");
  auto rms = tt::make_optimizer("rmsprop");
  const auto blob = adam->save_state();
  try {
    rms->load_state(blob);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'adam'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(adam->load_state(std::span(blob).first(blob.size() - 1)), std::invalid_argument);
  EXPECT_THROW(adam->load_state({}), std::invalid_argument);
  auto bad_magic = blob;
  bad_magic[0] ^= 1;
  EXPECT_THROW(adam->load_state(bad_magic), std::invalid_argument);
  adam->load_state(blob);
  EXPECT_EQ(adam->steps(), 0);
}

TEST(Optimizer, ApplyChecksCountsAndSizes) {
  auto opt = tt::make_optimizer("momentum");
  ParamSet ps = small_model();
  GradSet g = grads_for(ps, 1);
  GradSet short_set(g.begin(), g.begin() + 1);
  EXPECT_THROW(opt->apply(ps, short_set, 0.1f), std::invalid_argument);
  GradSet wrong = g;
  wrong[1].data.pop_back();
  try {
    opt->apply(ps, wrong, 0.1f);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("logits/biases"), std::string::npos) << e.what();
  }
  // A checkpoint that restored a slot of the wrong size is caught too.
  opt->slots()[0].second->data.resize(3);
  try {
    opt->apply(ps, g, 0.1f);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("conv1/weights/Momentum"), std::string::npos) << e.what();
  }
  ParamSet other = small_model();
  other.params[0].name = "renamed";
  EXPECT_THROW(opt->init(other), std::invalid_argument);
}

TEST(Optimizer, FactoryErrorsNameTheProblem) {
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no throw)";
  };
  const std::string unknown = message([] { tt::make_optimizer("adagrad"); });
  for (const char* part : {"'adagrad'", "sgd", "momentum", "adam", "rmsprop"})
    EXPECT_NE(unknown.find(part), std::string::npos) << unknown;
  EXPECT_NE(message([] { tt::make_optimizer("adam", {.beta1 = 1.0}); }).find("beta1 = 1"), std::string::npos);
  EXPECT_NE(message([] { tt::make_optimizer("adam", {.beta2 = -0.5}); }).find("beta2 = -0.5"), std::string::npos);
  EXPECT_NE(message([] { tt::make_optimizer("adam", {.epsilon = 0.0}); }).find("epsilon = 0"), std::string::npos);
  EXPECT_NE(message([] { tt::make_optimizer("momentum", {.momentum = -1.0}); }).find("momentum = -1"),
            std::string::npos);
  EXPECT_NE(message([] { tt::make_optimizer("rmsprop", {.decay = 1.5}); }).find("decay = 1.5"), std::string::npos);
  EXPECT_NE(message([] { tt::make_optimizer("rmsprop", {.epsilon = NAN}); }).find("epsilon = nan"),
            std::string::npos);
}

TEST(Optimizer, LargeTensorsGiveTheSameResultAsSmallOnes) {
  // Above the parallel threshold the loop runs on several threads; every
  // element is independent, so the result must equal the serial one.
  constexpr size_t kBig = 100000;
  for (const char* name : {"sgd", "momentum", "adam", "rmsprop"}) {
    SCOPED_TRACE(name);
    auto big = tt::make_optimizer(name);
    ParamSet pb;
    pb.add(Param{"w", tensor({int64_t{kBig}}, normals(kBig, 3))});
    constexpr size_t kChunk = 1000;
    auto one = tt::make_optimizer(name);
    ParamSet chunks;
    for (size_t c = 0; c < kBig / kChunk; ++c)
      chunks.add(Param{std::to_string(c),
                       tensor({int64_t{kChunk}}, std::vector<float>(pb.params[0].value.data.begin() + c * kChunk,
                                                                     pb.params[0].value.data.begin() + (c + 1) * kChunk))});
    for (int t = 1; t <= 3; ++t) {
      const auto g = normals(kBig, 50 + t);
      big->apply(pb, {tensor({int64_t{kBig}}, g)}, 0.01f);
      GradSet gc;
      for (size_t c = 0; c < kBig / kChunk; ++c)
        gc.push_back(tensor({int64_t{kChunk}}, std::vector<float>(g.begin() + c * kChunk, g.begin() + (c + 1) * kChunk)));
      one->apply(chunks, gc, 0.01f);
    }
    for (size_t c = 0; c < kBig / kChunk; ++c)
      for (size_t j = 0; j < kChunk; ++j)
        ASSERT_EQ(pb.params[0].value.data[c * kChunk + j], chunks.params[c].value.data[j]);
  }
}

// A replica applies each shard as its sum arrives (apply_range over
// disjoint ranges, in any order, then finish_step): the same weights and
// slots as apply(), bit for bit, for every optimizer, Adam's step count
// included. Ranges of odd sizes and offsets (so the vectorized loops start
// and end mid-vector), one variable past the size above which the updates
// run on OpenMP threads, and apply_variable (one whole range).
TEST(Optimizer, ApplyingRangeByRangeIsApplyBitForBit) {
  for (const char* name : {"sgd", "momentum", "adam", "rmsprop"}) {
    SCOPED_TRACE(name);
    auto whole = tt::make_optimizer(name);
    auto split = tt::make_optimizer(name);
    auto make = [] {
      ParamSet ps = small_model();
      ps.add(Param{"fc3/weights", tensor({301, 331}, normals(301 * 331, 7)), 0.0f, false});
      return ps;
    };
    ParamSet a = make(), b = make();
    const int64_t big = b.params[2].value.size();
    // fc3 in ranges that arrive out of order: [0, 17), [17, 40000), [40000, big - 5), [big - 5, big).
    const std::vector<std::pair<int64_t, int64_t>> ranges = {{40000, big - 5 - 40000}, {0, 17}, {big - 5, 5}, {17, 40000 - 17}};
    for (int t = 1; t <= 4; ++t) {
      const GradSet g = grads_for(a, t);
      const float lr = 0.05f * static_cast<float>(t);
      whole->apply(a, g, lr);
      for (const auto& [begin, count] : ranges) split->apply_range(b, g, 2, begin, count, lr);
      split->apply_range(b, g, 0, 5, 7, lr);
      split->apply_range(b, g, 0, 0, 5, lr);
      split->apply_variable(b, g, 1, lr);
      split->finish_step();
      for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a.params[i].value.data, b.params[i].value.data) << t << " " << i;
    }
    EXPECT_EQ(split->steps(), whole->steps());
    const auto sa = whole->slots(), sb = split->slots();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sa[k].second->data, sb[k].second->data) << sa[k].first;
  }
}

// The async ps applies each shard on its own values (apply_to): apply()'s
// weights, slots and step count, bit for bit, for every optimizer, on a
// variable past the OpenMP size; a set of other than one parameter, other
// sizes, or a split step in progress are refused.
TEST(Optimizer, ApplyToOutsideStorageIsApplyBitForBit) {
  for (const char* name : {"sgd", "momentum", "adam", "rmsprop"}) {
    SCOPED_TRACE(name);
    auto whole = tt::make_optimizer(name);
    auto outside = tt::make_optimizer(name);
    ParamSet a;
    a.add(Param{"fc3/weights", tensor({301, 331}, normals(301 * 331, 9)), 0.0f, false});
    ParamSet shape = a;
    outside->init(shape);
    std::vector<float> values = a.params[0].value.data;  // held outside the optimizer
    for (int t = 1; t <= 4; ++t) {
      const GradSet g = grads_for(a, t);
      const float lr = 0.05f * static_cast<float>(t);
      whole->apply(a, g, lr);
      outside->apply_to(values, g[0].data, lr);
      ASSERT_EQ(values, a.params[0].value.data) << t;
    }
    EXPECT_EQ(outside->steps(), whole->steps());
    const auto sa = whole->slots(), sb = outside->slots();
    ASSERT_EQ(sa.size(), sb.size());
    for (size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sa[k].second->data, sb[k].second->data) << sa[k].first;
    std::vector<float> short_values(values.size() - 1);
    EXPECT_THROW(outside->apply_to(short_values, std::vector<float>(values.size() - 1), 0.1f), std::invalid_argument);
    EXPECT_THROW(outside->apply_to(values, std::vector<float>(values.size() + 1), 0.1f), std::invalid_argument);
  }
  auto two = tt::make_optimizer("momentum");
  ParamSet ps = small_model();
  two->init(ps);
  std::vector<float> w(ps.params[0].value.size()), g(w.size());
  EXPECT_THROW(two->apply_to(w, g, 0.1f), std::invalid_argument) << "a set of " << ps.size() << " parameters";
}

TEST(Optimizer, ApplyingAVariableTwiceOrFinishingEarlyIsRefused) {
  auto opt = tt::make_optimizer("momentum");
  ParamSet ps = small_model();
  const GradSet g = grads_for(ps, 1);
  opt->apply_variable(ps, g, 0, 0.1f);
  try {
    opt->apply_variable(ps, g, 0, 0.1f);
    FAIL() << "a variable applied twice in one step";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("applied twice"), std::string::npos) << e.what();
  }
  try {
    opt->finish_step();
    FAIL() << "finish_step with a variable missing";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("before '" + ps.params[1].name + "'"), std::string::npos) << e.what();
  }
  EXPECT_THROW(opt->apply(ps, g, 0.1f), std::logic_error) << "apply() in the middle of a split step";
  EXPECT_THROW(opt->apply_variable(ps, g, ps.size(), 0.1f), std::invalid_argument);
  // A range outside the parameter, and one that would apply elements twice.
  EXPECT_THROW(opt->apply_range(ps, g, 1, 3, 3, 0.1f), std::invalid_argument) << "5 elements";
  EXPECT_THROW(opt->apply_range(ps, g, 1, -1, 2, 0.1f), std::invalid_argument);
  opt->apply_range(ps, g, 1, 0, 3, 0.1f);
  EXPECT_THROW(opt->apply_range(ps, g, 1, 2, 3, 0.1f), std::logic_error) << "3 + 3 of 5 elements";
  try {
    opt->finish_step();
    FAIL() << "finish_step with a parameter half applied";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("3 of 5 elements"), std::string::npos) << e.what();
  }
  EXPECT_EQ(opt->steps(), 0);
}
