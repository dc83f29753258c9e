// A codec whose payload size depends on the values ("varsize_counting", the
// test codec of tests/support/varsize_test_codec.h counting the bytes its
// payloads use) through the trainer: the in-process trainer sums and counts
// only the used bytes, and a cluster replica's wire pushes only them (its
// views, cut per shard) and counts what it pushed.
#include <gtest/gtest.h>

#include <atomic>

#include "replica_step.h"  // private to the trainer: the replica's step and its wire
#include "terngrad/comm/placement.h"
#include "terngrad/train/trainer.h"
#include "varsize_test_codec.h"

namespace tc = terngrad::comm;
namespace tt = terngrad::train;
namespace td = terngrad::train::detail;

namespace {

constexpr const char* kCounting = "varsize_counting";
std::atomic<uint64_t> g_sent{0};  // used bytes of every payload encoded

void register_counting_codec() {
  static const bool registered = [] {
    tc::register_codec(kCounting, [](const tc::CodecSpec& s) {
      return std::make_unique<varsize_test::VarSizeCodec>(varsize_test::threshold_of(s), kCounting, &g_sent);
    });
    return true;
  }();
  (void)registered;
}

tt::TrainConfig small_run() {
  tt::TrainConfig c;
  c.net = "lenet";
  c.dataset = "synthetic";
  c.synthetic_examples = 512;
  c.num_nodes = 4;
  c.batch_size = 8;
  c.max_steps = 3;
  c.quiet = true;
  // Gradient elements at or below 1e-3 are not sent: sizes vary per step and worker.
  c.codec = std::string(kCounting) + ":threshold=0.001";
  return c;
}

}  // namespace

TEST(VariableSizeTrainer, InProcessCountsTheMeanOfTheBytesSent) {
  register_counting_codec();
  const tt::TrainConfig c = small_run();
  g_sent = 0;
  const tt::TrainResult r = tt::run_training(c);
  EXPECT_EQ(r.steps, c.max_steps);
  const double measured = static_cast<double>(g_sent.load()) / (c.num_nodes * c.max_steps);
  EXPECT_EQ(r.bytes_sent_per_worker_step, measured);
  // Not the capacity: every element's value would be that.
  double capacity = 0;
  auto codec = tc::make_codec(c.codec);
  for (int64_t n : {500, 20, 25000, 50, 1225000, 500, 5000, 10}) capacity += codec->payload_bytes(n);
  EXPECT_LT(r.bytes_sent_per_worker_step, capacity);
  EXPECT_GT(r.bytes_sent_per_worker_step, capacity / 100);
}

// A replica's wire over several shards per variable: after encoding, each
// shard's view is its payload's used bytes, which its codec decodes; the
// step's bytes are their sum.
TEST(VariableSizeTrainer, AReplicaPushesOnlyTheUsedBytesOfEachShard) {
  register_counting_codec();
  tt::TrainConfig c = small_run();
  c.num_nodes = 2;
  td::TrainingSession s(c, 2, {0});
  std::vector<tc::VariableSpec> vars;
  for (const auto& v : s.variables()) vars.push_back({v.name, v.size, v.codec});
  tc::PlacementOptions o;
  o.min_shard_bytes = 4096;
  o.max_shard_bytes = 64 * 1024;  // fc3 (1225000 floats) in many shards
  const tc::Layout layout = tc::place_variables(vars, 2, o);
  ASSERT_GT(layout.shards.size(), layout.variables.size());
  td::Wire wire(s, layout);
  auto step = td::make_cpu_replica_step(s);
  step->compute_gradient(0);
  g_sent = 0;
  step->encode(0, std::vector<float>(s.num_variables(), 0.0f), wire);
  double pushed = 0;
  size_t shorter = 0;
  for (size_t sh = 0; sh < layout.shards.size(); ++sh) {
    const tc::ShardSpec& shard = layout.shards[sh];
    const tc::GradientCodec& codec = s.codec(0, shard.variable);
    ASSERT_EQ(wire.views[sh].data(), wire.payloads[sh].data());
    ASSERT_EQ(wire.views[sh].size(), codec.encoded_size(wire.payloads[sh], shard.count)) << sh;
    shorter += wire.views[sh].size() < wire.payloads[sh].size();
    std::vector<float> decoded(shard.count);
    codec.decode(wire.views[sh], decoded);  // exactly one payload: no more, no less
    pushed += static_cast<double>(wire.views[sh].size());
  }
  EXPECT_GT(shorter, 0u);
  EXPECT_EQ(pushed, static_cast<double>(g_sent.load()));
  EXPECT_EQ(wire.step_bytes(), pushed);  // no pre-rounds for this codec
}

// terngrad:pack= changes the bytes, never the codes: training is identical
// (the same loss every step, so the same final loss and accuracy), and the
// entropy-coded payloads are the smallest.
TEST(VariableSizeTrainer, TernGradPackingsTrainIdenticallyWithFewerBytes) {
  tt::TrainConfig c = small_run();
  c.max_steps = 6;
  c.size_to_binarize = 1;  // every variable ternarized, biases too
  c.codec = "";
  c.grad_bits = 2;
  std::vector<tt::TrainResult> r;
  for (const char* spec : {"terngrad", "terngrad:pack=base3", "terngrad:pack=entropy"}) {
    c.codec = spec;
    r.push_back(tt::run_training(c));
  }
  for (size_t k = 1; k < r.size(); ++k) {
    EXPECT_EQ(r[k].final_loss, r[0].final_loss) << k;
    EXPECT_EQ(r[k].top1, r[0].top1) << k;
  }
  EXPECT_LT(r[1].bytes_sent_per_worker_step, r[0].bytes_sent_per_worker_step);
  EXPECT_LT(r[2].bytes_sent_per_worker_step, r[1].bytes_sent_per_worker_step);
  EXPECT_LT(r[2].bytes_recv_per_worker_step, r[0].bytes_recv_per_worker_step);
}
