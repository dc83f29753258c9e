// DeviceTrainState against the CPU trainer's objects: the moving average on
// the device against ExponentialMovingAverage (the same expression; FMA
// contraction may differ, so 1e-6 relative), the state's exact round trip
// through the host objects, and the mismatches it refuses by name.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "gpu_test_util.h"
#include "terngrad/train/cuda/device_train_state.h"

namespace terngrad::train::cuda {
namespace {

using testing::random_tensor;
using testing::relative_error;

ParamSet two_params() {
  ParamSet ps;
  ps.params.push_back(Param{"conv/weights", random_tensor({3, 3, 2, 4}, 1), 0.0f});
  ps.params.push_back(Param{"conv/biases", random_tensor({4}, 2), 0.0f});
  return ps;
}

TEST(DeviceTrainState, MovingAverageMatchesCpu) {
  TG_REQUIRE_GPU();
  GpuContext ctx;
  ParamSet cpu = two_params();
  ExponentialMovingAverage cpu_average(cpu, 0.99);
  DeviceTrainState dev(cpu, GpuOptimizerOptions{"sgd"}, true, ctx.stream());
  auto optimizer = make_optimizer("sgd");
  optimizer->init(cpu);
  for (int64_t step = 0; step < 20; ++step) {
    // Move the weights on both sides identically (upload), then average.
    for (Param& p : cpu.params) p.value = random_tensor(p.value.shape, 100 + step);
    dev.upload_params(cpu, ctx.stream());
    cpu_average.update(cpu, step);
    dev.update_average(static_cast<float>(1.0 - cpu_average.decay_at(step)), ctx.stream());
  }
  ParamSet host = two_params();
  ExponentialMovingAverage host_average(host, 0.99);
  auto host_optimizer = make_optimizer("sgd");
  host_optimizer->init(host);
  dev.download(HostTrainState{&host, host_optimizer.get(), &host_average}, ctx.stream());
  auto want = cpu_average.shadows(), got = host_average.shadows();
  ASSERT_EQ(got.size(), want.size());
  for (size_t v = 0; v < want.size(); ++v)
    EXPECT_LE(relative_error(*got[v].second, *want[v].second), 1e-6) << want[v].first;
}

TEST(DeviceTrainState, RoundTripThroughTheHostIsExact) {
  TG_REQUIRE_GPU();
  GpuContext ctx;
  ParamSet a = two_params();
  auto opt_a = make_optimizer("adam");
  opt_a->init(a);
  for (auto& [name, slot] : opt_a->slots()) *slot = random_tensor(slot->shape, std::hash<std::string>{}(name));
  opt_a->set_steps(37);
  ExponentialMovingAverage avg_a(a, 0.9);
  for (auto& [name, shadow] : avg_a.shadows()) *shadow = random_tensor(shadow->shape, 7 + name.size());

  GpuOptimizerOptions o;
  o.name = "adam";
  DeviceTrainState dev(two_params(), o, true, ctx.stream());
  dev.upload(HostTrainState{&a, opt_a.get(), &avg_a}, ctx.stream());

  ParamSet b = two_params();
  for (Param& p : b.params) p.value = random_tensor(p.value.shape, 999);
  auto opt_b = make_optimizer("adam");
  opt_b->init(b);
  ExponentialMovingAverage avg_b(b, 0.9);
  dev.download(HostTrainState{&b, opt_b.get(), &avg_b}, ctx.stream());
  EXPECT_EQ(opt_b->steps(), 37);
  for (size_t v = 0; v < a.size(); ++v) EXPECT_EQ(b.params[v].value.data, a.params[v].value.data);
  auto sa = opt_a->slots(), sb = opt_b->slots();
  ASSERT_EQ(sa.size(), 4u);
  for (size_t k = 0; k < sa.size(); ++k) EXPECT_EQ(sb[k].second->data, sa[k].second->data) << sa[k].first;
  auto ha = avg_a.shadows(), hb = avg_b.shadows();
  for (size_t k = 0; k < ha.size(); ++k) EXPECT_EQ(hb[k].second->data, ha[k].second->data) << ha[k].first;
}

void expect_refused(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "not refused; expected a message containing \"" << needle << "\"";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(DeviceTrainState, MismatchesAreRefusedByName) {
  TG_REQUIRE_GPU();
  GpuContext ctx;
  ParamSet ps = two_params();
  DeviceTrainState dev(ps, GpuOptimizerOptions{"momentum"}, false, ctx.stream());
  auto momentum = make_optimizer("momentum");
  momentum->init(ps);
  auto adam = make_optimizer("adam");
  adam->init(ps);
  ExponentialMovingAverage average(ps, 0.9);
  expect_refused([&] { dev.download(HostTrainState{&ps, adam.get(), nullptr}, ctx.stream()); }, "adam");
  expect_refused([&] { dev.download(HostTrainState{&ps, momentum.get(), &average}, ctx.stream()); },
                 "moving average");
  ParamSet renamed = two_params();
  renamed.params[1].name = "conv/bias";
  expect_refused([&] { dev.upload_params(renamed, ctx.stream()); }, "conv/bias");
  ParamSet fewer = two_params();
  fewer.params.pop_back();
  expect_refused([&] { dev.download_params(fewer, ctx.stream()); }, "1 host parameters for 2");
}

}  // namespace
}  // namespace terngrad::train::cuda
