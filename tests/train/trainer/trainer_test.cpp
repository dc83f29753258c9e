// The virtual-worker trainer end to end on small synthetic data: it learns
// with fp32 and TernGrad gradients, counts bytes exactly as payload sizes
// (sent: the worker's payloads; received: the server's sums it pulls),
// is deterministic, and a resumed run equals an uninterrupted one bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "terngrad/quantize/format.h"
#include "terngrad/quantize/ternary_sum.h"
#include "terngrad/train/safetensors.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/trainer.h"

namespace tt = terngrad::train;
namespace fs = std::filesystem;

namespace {

tt::TrainConfig small_run() {
  tt::TrainConfig c;
  c.net = "lenet";
  c.dataset = "synthetic";
  c.synthetic_examples = 512;
  c.num_nodes = 4;
  c.batch_size = 8;
  c.max_steps = 40;
  c.optimizer = "momentum";
  c.initial_learning_rate = 0.01;
  c.moving_average_decay = 0.99;
  c.quiet = true;
  return c;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("tg_trainer_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

TEST(Trainer, LearnsWithFp32AndTernGrad) {
  for (int bits : {32, 2}) {
    tt::TrainConfig c = small_run();
    c.grad_bits = bits;
    const tt::TrainResult r = tt::run_training(c);
    EXPECT_EQ(r.steps, 40);
    EXPECT_GT(r.top1, 0.5) << "grad_bits " << bits;  // 10 classes: chance is 0.1
    EXPECT_GE(r.ema_top1, 0.0);
  }
}

TEST(Trainer, CountsBytesAsPayloadSizes) {
  tt::TrainConfig c = small_run();
  c.max_steps = 1;
  // LeNet variables: conv1 500+20, conv2 25000+50, fc3 1225000+500, logits 5000+10.
  const std::vector<int64_t> sizes = {500, 20, 25000, 50, 1225000, 500, 5000, 10};
  double fp32 = 0, tern = 0, tern_sum = 0, tern_small_fp32 = 0;
  for (int64_t n : sizes) {
    fp32 += 16 + 4.0 * n;  // fp32 codec: 16-byte header + raw floats
    tern += terngrad::quantize::max_encoded_bytes(n);
    tern_sum += terngrad::quantize::sum_payload_bytes(n, 4);  // counts in [-4, 4]: 4 bits each
    tern_small_fp32 += n < 1000 ? 16 + 4.0 * n : terngrad::quantize::max_encoded_bytes(n);
  }
  tt::TrainResult r = tt::run_training(c);
  EXPECT_EQ(r.bytes_sent_per_worker_step, fp32);
  EXPECT_EQ(r.bytes_recv_per_worker_step, fp32);  // the float32 sum
  c.grad_bits = 2;
  r = tt::run_training(c);
  EXPECT_EQ(r.bytes_sent_per_worker_step, tern);
  EXPECT_EQ(r.bytes_recv_per_worker_step, tern_sum);
  c.size_to_binarize = 1000;
  r = tt::run_training(c);
  EXPECT_EQ(r.bytes_sent_per_worker_step, tern_small_fp32);
  EXPECT_NE(r.codec_summary.find("fp32 on 5 of 8"), std::string::npos) << r.codec_summary;
  c.size_to_binarize = 1;
  c.quantize_logits = false;
  r = tt::run_training(c);
  EXPECT_NE(r.codec_summary.find("fp32 on 2 of 8"), std::string::npos) << r.codec_summary;
}

std::map<std::string, tt::Tensor> final_weights(const fs::path& dir) {
  return tt::read_safetensors((dir / "model.safetensors").string()).tensors;
}

// With error feedback the residuals are part of the state: a resumed run
// that lost them (a known failure of other libraries) would differ.
TEST(Trainer, DeterministicAndResumesBitExactly) {
  for (const char* codec :
       {"", "ef(terngrad)", "ef(terngrad:share_scale=0):momentum=0.5", "server_ef(terngrad)", "ef(server_ef(qsgd:levels=7,bucket=64))",
        "powersgd:rank=2", "ef(powersgd:rank=4)"}) {
    SCOPED_TRACE(codec);
    tt::TrainConfig c = small_run();
    c.grad_bits = 2;
    c.codec = codec;
    c.max_steps = 12;
    c.optimizer = "adam";  // slots and a step count to restore
    c.initial_learning_rate = 0.001;
    const fs::path straight = fresh_dir("straight"), resumed = fresh_dir("resumed"), again = fresh_dir("again");
    c.train_dir = straight.string();
    tt::run_training(c);
    c.train_dir = again.string();
    tt::run_training(c);
    EXPECT_EQ(final_weights(straight).size(), 8u);
    for (const auto& [name, t] : final_weights(straight))
      EXPECT_EQ(t.data, final_weights(again).at(name).data) << "not deterministic: " << name;

    c.train_dir = resumed.string();
    c.max_steps = 5;
    tt::run_training(c);
    c.max_steps = 12;
    const tt::TrainResult r = tt::run_training(c);  // resumes at step 5
    EXPECT_EQ(r.examples, 7 * 4 * 8);
    for (const auto& [name, t] : final_weights(straight))
      EXPECT_EQ(t.data, final_weights(resumed).at(name).data) << "resume differs: " << name;
    for (const auto& d : {straight, resumed, again}) fs::remove_all(d);
  }
}

// Batch norm's moving statistics are model state: exported beside the
// weights, folded from worker 0's batch once per step, checkpointed, and a
// resumed GoogLeNet run equals an uninterrupted one bit for bit (state included).
TEST(Trainer, BatchNormStateIsExportedAndResumesBitExactly) {
  tt::TrainConfig c;
  c.net = "googlenet";
  c.dataset = "synthetic";
  c.synthetic_examples = 8;
  c.num_classes = 10;
  c.num_nodes = 2;
  c.batch_size = 1;
  c.grad_bits = 2;
  c.optimizer = "momentum";
  c.initial_learning_rate = 0.01;
  c.max_eval_examples = 2;
  c.eval_batch_size = 2;
  c.quiet = true;
  const fs::path straight = fresh_dir("bn_straight"), resumed = fresh_dir("bn_resumed");
  c.max_steps = 3;
  c.train_dir = straight.string();
  tt::run_training(c);
  const auto weights = final_weights(straight);
  ASSERT_TRUE(weights.count("Conv2d_1a_7x7/BatchNorm/moving_mean"));
  ASSERT_TRUE(weights.count("Mixed_5c/Branch_3/Conv2d_0b_1x1/BatchNorm/moving_variance"));
  int moving = 0;
  for (const auto& [name, t] : weights) {
    if (name.find("/moving_") == std::string::npos) continue;
    ++moving;
    // Three folds at decay 0.9997 from (0, 1): changed, but only a little.
    const float init = name.ends_with("moving_mean") ? 0.0f : 1.0f;
    double moved = 0;
    for (float v : t.data) moved = std::max(moved, std::fabs(static_cast<double>(v) - init));
    EXPECT_GT(moved, 0.0) << name << " never folded";
  }
  EXPECT_EQ(moving, 114);

  c.train_dir = resumed.string();
  c.max_steps = 2;
  tt::run_training(c);
  c.max_steps = 3;
  tt::run_training(c);  // resumes at step 2, the state from the checkpoint
  for (const auto& [name, t] : weights) EXPECT_EQ(t.data, final_weights(resumed).at(name).data) << "resume differs: " << name;
  for (const auto& d : {straight, resumed}) fs::remove_all(d);
}

// A run that diverges meets a NaN inside the workers' parallel loop: it must
// end with an error naming the step, not terminate the process.
TEST(Trainer, ADivergedRunIsAClearErrorNotACrash) {
  for (const char* codec : {"terngrad", "server_ef(terngrad)"}) {
    SCOPED_TRACE(codec);
    tt::TrainConfig c = small_run();
    c.codec = codec;
    c.max_steps = 40;
    c.initial_learning_rate = 1e8;
    try {
      tt::run_training(c);
      ADD_FAILURE() << "diverged without an error";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("step "), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("finite"), std::string::npos) << e.what();
    }
  }
}

// A checkpoint's server states are checked against the model and codec on
// restore: a foreign or damaged entry is an error naming the file and entry.
TEST(Trainer, ForeignServerStatesInACheckpointAreRefusedByName) {
  tt::TrainConfig c = small_run();
  c.codec = "server_ef(terngrad)";
  c.max_steps = 3;
  const fs::path dir = fresh_dir("server-states");
  c.train_dir = dir.string();
  tt::run_training(c);
  const tt::Checkpoint ck = *tt::load_latest_checkpoint(c.train_dir);
  std::string present;
  for (const auto& [name, blob] : ck.blobs)
    if (name.starts_with("server_state/")) present = name;
  ASSERT_FALSE(present.empty()) << "the checkpoint holds no server state";
  const std::pair<std::string, std::string> bad[] = {
      {"server_state/99@0+5", "is for no slice of this model"},
      {"server_state/0@x+5", "malformed server state name"},
      {present, "bad magic"},
  };
  for (const auto& [name, expect] : bad) {
    SCOPED_TRACE(name);
    tt::BlobMap blobs = ck.blobs;
    blobs[name] = name == present ? std::vector<uint8_t>(blobs[present].size(), 0) : blobs[present];
    tt::save_checkpoint(c.train_dir, 3, ck.tensors, blobs, 3);
    c.max_steps = 4;
    try {
      tt::run_training(c);
      ADD_FAILURE() << "resumed from a checkpoint with " << name;
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("ckpt-3"), std::string::npos) << e.what();
    }
  }
  fs::remove_all(dir);
}

TEST(Trainer, MissingDatasetIsAClearError) {
  tt::TrainConfig c = small_run();
  c.dataset = "mnist";
  c.data_dir = "/nonexistent/fashion";
  try {
    tt::run_training(c);
    ADD_FAILURE();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/fashion"), std::string::npos) << e.what();
  }
}

// PowerSGD's matrix shape is each variable's own: a run-wide rows= is
// refused by name; the plan's per-variable specs show in the traffic (the
// pre-round's floats count both ways).
TEST(Trainer, PowerSgdTakesItsShapesFromTheVariables) {
  tt::TrainConfig c = small_run();
  c.codec = "ef(powersgd:rank=2,rows=8)";
  c.max_steps = 1;
  try {
    tt::run_training(c);
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("rows=8 is set per variable from its shape"), std::string::npos) << e.what();
  }
  c.codec = "powersgd:rank=2";
  const tt::TrainResult r = tt::run_training(c);
  EXPECT_GT(r.bytes_sent_per_worker_step, 0);
  EXPECT_LT(r.bytes_sent_per_worker_step, r.fp32_bytes_per_worker_step / 10);
}

}  // namespace
