// Disjoint per-worker shards reshuffled every epoch (input_pipeline.h).
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "counter_rng.h"
#include "terngrad/train/input_pipeline.h"

namespace terngrad::train {

ShardedSampler::ShardedSampler(int64_t dataset_size, int num_workers, int worker, uint64_t seed)
    : dataset_size_(dataset_size), num_workers_(num_workers), worker_(worker), seed_(seed) {
  if (num_workers <= 0 || worker < 0 || worker >= num_workers)
    throw std::invalid_argument("ShardedSampler: worker " + std::to_string(worker) + " of " +
                                std::to_string(num_workers) + " workers is not a valid worker index");
  if (dataset_size < num_workers)
    throw std::invalid_argument("ShardedSampler: " + std::to_string(dataset_size) + " examples cannot give each of " +
                                std::to_string(num_workers) + " workers a non-empty shard");
  for (int64_t i = worker_; i < dataset_size_; i += num_workers_) members_.push_back(i);
  shuffle_for_epoch();
}

ShardedSampler::ShardedSampler(const std::vector<int32_t>& group, int num_workers, int worker, uint64_t seed)
    : ShardedSampler(static_cast<int64_t>(group.size()), num_workers, worker, seed) {
  int64_t files = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0)
      throw std::invalid_argument("ShardedSampler: example " + std::to_string(i) + " is in file group " +
                                  std::to_string(group[i]) + " (groups are file indices >= 0)");
    files = std::max<int64_t>(files, int64_t{group[i]} + 1);
  }
  // Whole files only when every worker gets some examples that way (the
  // owner of empty files only would idle); otherwise strided, as without
  // groups. Every worker decides alike: the rule reads only `group`.
  if (files < num_workers) return;
  std::vector<int64_t> per_worker(static_cast<size_t>(num_workers), 0);
  for (int32_t g : group) ++per_worker[static_cast<size_t>(g % num_workers)];
  if (std::find(per_worker.begin(), per_worker.end(), 0) != per_worker.end()) return;
  std::vector<int64_t> mine;
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] % num_workers == worker) mine.push_back(static_cast<int64_t>(i));
  by_file_ = true;
  members_ = std::move(mine);
  shuffle_for_epoch();
}

void ShardedSampler::shuffle_for_epoch() {
  order_ = members_;
  detail::CounterRng rng(
      detail::derive_seed(detail::derive_seed(seed_, static_cast<uint64_t>(epoch_)), static_cast<uint64_t>(worker_)));
  // Fisher-Yates with our own unbiased draws (portable, see counter_rng.h).
  for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.below(i)]);
}

int64_t ShardedSampler::next() {
  if (position_ >= shard_size()) {
    ++epoch_;
    position_ = 0;
    shuffle_for_epoch();
  }
  return order_[static_cast<size_t>(position_++)];
}

void ShardedSampler::next_batch(int64_t batch_size, std::vector<int64_t>& out) {
  if (batch_size < 0) throw std::invalid_argument("ShardedSampler: batch size " + std::to_string(batch_size));
  out.resize(static_cast<size_t>(batch_size));
  for (int64_t& i : out) i = next();
}

void ShardedSampler::restore(const SamplerState& s) {
  if (s.epoch < 0) throw std::invalid_argument("ShardedSampler::restore: epoch " + std::to_string(s.epoch) + " < 0");
  if (s.position < 0 || s.position > shard_size())
    throw std::invalid_argument("ShardedSampler::restore: position " + std::to_string(s.position) +
                                " is outside worker " + std::to_string(worker_) + "'s shard [0, " +
                                std::to_string(shard_size()) + "] (saved for another dataset or worker count?)");
  epoch_ = s.epoch;
  position_ = s.position;
  shuffle_for_epoch();
}

void ShardedSampler::restore_after(int64_t consumed) {
  if (consumed < 0) throw std::invalid_argument("ShardedSampler::restore_after: " + std::to_string(consumed) + " < 0");
  // An epoch ends lazily: after exactly k * shard_size examples the position
  // is shard_size and the next draw starts epoch k.
  if (consumed == 0) restore({0, 0});
  else restore({(consumed - 1) / shard_size(), (consumed - 1) % shard_size() + 1});
}

}  // namespace terngrad::train
