#include "worker_batches.h"

#include <algorithm>
#include <thread>

#include "session.h"

namespace terngrad::train::detail {

namespace {

// TFRecord shards, in memory or streamed, remember each example's file: then
// every worker gets whole files of its own (input_pipeline.h); other data is
// sharded by example.
ShardedSampler make_sampler(const DataSetup& data, int num_workers, int worker, uint64_t seed) {
  const std::vector<int32_t>& files = data.streamed() ? data.train_stream_shards : data.train.shard;
  if (files.empty()) return ShardedSampler(data.train_size(), num_workers, worker, seed);
  return ShardedSampler(files, num_workers, worker, seed);
}

}  // namespace

WorkerBatches::WorkerBatches(const DataSetup& data, const TrainConfig& cfg, int num_workers, int worker,
                             int local_workers)
    : data_(&data),
      batch_size_(cfg.batch_size),
      seed_(cfg.seed),
      worker_(worker),
      sampler_(make_sampler(data, num_workers, worker, stream_seed(cfg.seed, 0, worker, Purpose::kSampler))) {
  if (data.streamed()) {
    stream_opts_ = data.stream_options(cfg, true);
    const int total = cfg.data_threads > 0 ? cfg.data_threads : static_cast<int>(std::thread::hardware_concurrency());
    stream_opts_.threads = std::max(1, total / std::max(1, local_workers));
  }
}

void WorkerBatches::next(int64_t step, Tensor& x, std::vector<int32_t>& labels) {
  if (!data_->streamed()) {
    sampler_.next_batch(batch_size_, idx_);
    fill_batch(data_->train, idx_, data_->train_pre, stream_seed(seed_, step, worker_, Purpose::kAugment), x, labels);
    return;
  }
  if (!stream_) {
    // Started at the first batch, not at construction: restore_after() may
    // move the sampler first, and processes that never train start no threads.
    const uint64_t seed = seed_;
    const int worker = worker_;
    stream_ = std::make_unique<StreamingLoader>(
        data_->train_stream, sampler_, stream_opts_, batches_,
        [seed, worker](int64_t k) { return stream_seed(seed, k, worker, Purpose::kAugment); });
  }
  ++batches_;  // first: a batch that throws (bad data) is still consumed by the loader
  stream_->next(x, labels);
}

void WorkerBatches::restore_after(int64_t batches) {
  stream_.reset();
  sampler_.restore_after(batches * batch_size_);
  batches_ = batches;
}

std::optional<StreamingLoader::Stats> WorkerBatches::stream_stats() const {
  if (!stream_) return std::nullopt;
  return stream_->stats();
}

}  // namespace terngrad::train::detail
