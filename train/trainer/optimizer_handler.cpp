#include "optimizer_handler.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace terngrad::train::detail {

std::unique_ptr<Optimizer> make_run_optimizer(const TrainConfig& cfg) {
  OptimizerOptions oo;
  if (cfg.optimizer == "momentum") oo.momentum = cfg.momentum;
  return make_optimizer(cfg.optimizer, oo);
}

std::unique_ptr<LrSchedule> make_run_schedule(const TrainConfig& cfg) {
  LrScheduleOptions so;
  so.initial = cfg.initial_learning_rate;
  so.decay_steps = cfg.decay_steps > 0 ? cfg.decay_steps : static_cast<double>(std::max<int64_t>(cfg.max_steps, 1));
  so.decay_rate = cfg.learning_rate_decay_factor;
  so.end = cfg.end_learning_rate;
  so.power = cfg.learning_rate_power;
  so.staircase = cfg.staircase;
  return make_lr_schedule(cfg.learning_rate_decay_type, so);
}

OptimizerHandler::OptimizerHandler(const TrainConfig& cfg) : cfg_(cfg), schedule_(make_run_schedule(cfg)) {}

void OptimizerHandler::init_shard(size_t shard, const comm::ShardView& view) {
  if (shards_.size() <= shard) shards_.resize(shard + 1);
  ShardState& s = shards_[shard];
  s.name = view.name;
  s.count = view.count;
  ParamSet shape;  // names and sizes the slots; the values live in the ps (apply_to)
  Param p;
  p.name = view.name;
  p.value.shape = {static_cast<int64_t>(view.count)};
  p.value.data.assign(view.count, 0.0f);
  shape.add(std::move(p));
  s.optimizer = make_run_optimizer(cfg_);
  s.optimizer->init(shape);
}

void OptimizerHandler::apply(size_t shard, int64_t step, std::span<float> values, std::span<const float> grad) {
  ShardState& s = shards_.at(shard);
  if (values.size() != s.count || grad.size() != values.size())
    throw std::invalid_argument("OptimizerHandler: shard " + std::to_string(shard) + " sizes disagree");
  // Adam's bias correction counts updates: in async training that is the global step.
  s.optimizer->set_steps(step);
  // On the ps's own values: no copy in or out (the update is apply()'s).
  s.optimizer->apply_to(values, grad, static_cast<float>(schedule_->lr(step)));
}

std::vector<std::pair<std::string, std::span<float>>> OptimizerHandler::slots(size_t shard) {
  ShardState& s = shards_.at(shard);
  std::vector<std::pair<std::string, std::span<float>>> out;
  const std::string prefix = s.name + "/";
  for (auto& [name, tensor] : s.optimizer->slots()) out.emplace_back(name.substr(prefix.size()), tensor->data);
  return out;
}

}  // namespace terngrad::train::detail
