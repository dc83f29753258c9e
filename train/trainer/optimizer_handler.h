// The update rule a parameter server runs in async training: the run's
// optimizer and learning-rate schedule applied to each shard it holds, with
// the optimizer's slots as the shard's checkpointable state. This is what the
// training program plugs into comm::ParameterServer (which knows no model and
// no optimizer).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/ps_server.h"
#include "terngrad/train/layer.h"
#include "terngrad/train/lr_schedule.h"
#include "terngrad/train/optimizer.h"
#include "terngrad/train/train_config.h"

namespace terngrad::train::detail {

class OptimizerHandler final : public comm::UpdateHandler {
 public:
  explicit OptimizerHandler(const TrainConfig& cfg);
  void init_shard(size_t shard, const comm::ShardView& view) override;
  void apply(size_t shard, int64_t step, std::span<float> values, std::span<const float> grad) override;
  std::vector<std::pair<std::string, std::span<float>>> slots(size_t shard) override;

 private:
  struct ShardState {
    std::string name;  // the shard's variable
    size_t count = 0;  // elements
    std::unique_ptr<Optimizer> optimizer;  // init()ed with one parameter of count elements
  };
  TrainConfig cfg_;
  std::unique_ptr<LrSchedule> schedule_;
  std::vector<ShardState> shards_;
};

// The optimizer and schedule a run's flags describe (shared with the session).
std::unique_ptr<Optimizer> make_run_optimizer(const TrainConfig& cfg);
std::unique_ptr<LrSchedule> make_run_schedule(const TrainConfig& cfg);

}  // namespace terngrad::train::detail
