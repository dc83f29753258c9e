// A cluster replica that is not the chief keeps its workers' codec state
// (error-feedback residuals) in its own files beside the chief's
// checkpoints. Killed between the chief's write of a checkpoint and its own,
// it restarts from the checkpoint before, whose state it holds (the sync
// loop then catches up), not from the newest with a zero residual.
#include <gtest/gtest.h>

#include <filesystem>

#include "replica_step.h"  // private to the trainer: the replica's step and its wire
#include "terngrad/comm/placement.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/trainer.h"

namespace tc = terngrad::comm;
namespace tt = terngrad::train;
namespace td = terngrad::train::detail;
namespace fs = std::filesystem;

namespace {

tt::TrainConfig ef_run(const std::string& train_dir) {
  tt::TrainConfig c;
  c.net = "lenet";
  c.dataset = "synthetic";
  c.synthetic_examples = 256;
  c.num_nodes = 2;
  c.batch_size = 8;
  c.max_steps = 1000;
  c.quiet = true;
  c.codec = "ef(terngrad)";
  c.train_dir = train_dir;
  return c;
}

// One step of replica 1's gradient and encode: its residuals move.
void encode_a_step(td::TrainingSession& s, int64_t step) {
  std::vector<tc::VariableSpec> vars;
  for (const auto& v : s.variables()) vars.push_back({v.name, v.size, v.codec});
  const tc::Layout layout = tc::place_variables(vars, 1, {});
  td::Wire wire(s, layout);
  auto replica = td::make_cpu_replica_step(s);
  replica->compute_gradient(step);
  replica->encode(step, replica->local_scales(), wire);
}

std::vector<std::vector<uint8_t>> states_of(const td::TrainingSession& s) {
  std::vector<std::vector<uint8_t>> out;
  for (size_t v = 0; v < s.num_variables(); ++v) out.push_back(s.codec(0, v).save_state());
  return out;
}

}  // namespace

TEST(ReplicaResume, AMissingOwnCodecStateFallsBackToTheCheckpointBefore) {
  const fs::path dir = fs::temp_directory_path() / ("tg_replica_resume_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const tt::TrainConfig c = ef_run(dir.string());
  td::TrainingSession chief(c, 2, {0});
  td::TrainingSession replica(c, 2, {1});
  encode_a_step(chief, 0);  // the chief's residuals go into its checkpoints
  encode_a_step(replica, 0);
  const auto at_200 = states_of(replica);
  ASSERT_FALSE(at_200.front().empty());
  chief.save(200);
  replica.save_codec_states(200);
  encode_a_step(replica, 1);
  const auto at_400 = states_of(replica);
  ASSERT_NE(at_400, at_200);
  chief.save(400);  // the replica is killed before its own write of step 400

  testing::internal::CaptureStderr();
  td::TrainingSession restarted(c, 2, {1});
  EXPECT_EQ(restarted.restore(), 200);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("ckpt-400.tgck: no codec state of worker 1"), std::string::npos) << said;
  EXPECT_NE(said.find("falling back to an earlier checkpoint"), std::string::npos) << said;
  EXPECT_EQ(said.find("its residual starts at zero"), std::string::npos) << said;
  EXPECT_EQ(states_of(restarted), at_200);

  // Its write of step 400 done: the newest checkpoint, its residuals.
  replica.save_codec_states(400);
  td::TrainingSession after_write(c, 2, {1});
  EXPECT_EQ(after_write.restore(), 400);
  EXPECT_EQ(states_of(after_write), at_400);
  // The chief's checkpoint holds its own workers' state: nothing to fall back for.
  testing::internal::CaptureStderr();
  td::TrainingSession chief_again(c, 2, {0});
  EXPECT_EQ(chief_again.restore(), 400);
  EXPECT_EQ(testing::internal::GetCapturedStderr().find("warning"), std::string::npos);

  // No checkpoint holds the replica's state (its files lost): the newest,
  // with a zero residual and a warning per variable, rather than none.
  fs::remove_all(dir / "codec-state");
  testing::internal::CaptureStderr();
  td::TrainingSession lost(c, 2, {1});
  EXPECT_EQ(lost.restore(), 400);
  const std::string lost_said = testing::internal::GetCapturedStderr();
  EXPECT_NE(lost_said.find("its residual starts at zero"), std::string::npos) << lost_said;
  fs::remove_all(dir);
}
