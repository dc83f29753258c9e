// The values of an async run on one ps (async_updates.h).
#include "async_updates.h"

#include <stdexcept>

#include "chunks.h"

namespace terngrad::comm::detail {

AsyncUpdates::AsyncUpdates(std::vector<ShardCoding> shards, int replicas, int64_t first_step, UpdateHandler& handler,
                           int64_t last_step)
    : shards_(std::move(shards)), handler_(&handler), global_step_(first_step), last_step_(last_step) {
  if (replicas < 1) throw std::invalid_argument("AsyncUpdates: " + std::to_string(replicas) + " replicas");
  if (last_step < 0) throw std::invalid_argument("AsyncUpdates: last step " + std::to_string(last_step) + " is negative");
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (shards_[s].codec == nullptr) throw std::invalid_argument("AsyncUpdates: shard " + std::to_string(s) + " has no codec");
    values_.emplace_back(shards_[s].elements, 0.0f);
  }
  last_pushed_.assign(replicas, -1);
}

std::span<float> AsyncUpdates::values(size_t shard) { return values_.at(shard); }
std::span<const float> AsyncUpdates::values(size_t shard) const { return values_.at(shard); }

AsyncUpdates::Outcome AsyncUpdates::apply(uint32_t replica, int64_t step, std::span<const std::string> payloads) {
  if (replica >= last_pushed_.size())
    throw std::invalid_argument("AsyncUpdates: replica " + std::to_string(replica) + " of " +
                                std::to_string(last_pushed_.size()));
  if (payloads.size() != shards_.size())
    throw std::invalid_argument("AsyncUpdates: " + std::to_string(payloads.size()) + " payloads for " +
                                std::to_string(shards_.size()) + " shards");
  if (step <= last_pushed_[replica]) {
    ++duplicates_;
    return Outcome::kDuplicate;
  }
  if (last_step_ > 0 && global_step_ >= last_step_) return Outcome::kPastEnd;
  std::vector<float> grad;
  for (size_t s = 0; s < shards_.size(); ++s) {
    grad.assign(shards_[s].elements, 0.0f);
    shards_[s].codec->decode(as_bytes(payloads[s]), grad);
    handler_->apply(s, global_step_, values_[s], grad);
  }
  last_pushed_[replica] = step;
  ++global_step_;
  return Outcome::kApplied;
}

int64_t AsyncUpdates::last_pushed(uint32_t replica) const {
  if (replica >= last_pushed_.size())
    throw std::invalid_argument("AsyncUpdates: replica " + std::to_string(replica) + " of " +
                                std::to_string(last_pushed_.size()));
  return last_pushed_[replica];
}

}  // namespace terngrad::comm::detail
