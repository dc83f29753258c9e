// Private to the trainer: where one worker's training batches come from.
// Either an in-memory Dataset (ShardedSampler + fill_batch, seeded by the
// step, exactly as before streaming existed) or a streamed ExampleSource
// (ShardedSampler + StreamingLoader: decoded and preprocessed by threads
// ahead of the step). The session asks for "the batch of step s" and does not
// care which.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "terngrad/train/input_pipeline.h"
#include "terngrad/train/streaming_loader.h"
#include "terngrad/train/tensor.h"
#include "terngrad/train/train_config.h"

namespace terngrad::train::detail {

struct DataSetup;

class WorkerBatches {
 public:
  // `local_workers`: how many workers this process runs, which share the
  // --data_threads decoding threads (each stream gets its share, at least 1).
  WorkerBatches(const DataSetup& data, const TrainConfig& cfg, int num_workers, int worker, int local_workers);

  // The batch of `step`. In memory: the sampler's next indices, augmented
  // with the (seed, step, worker) stream. Streamed: the worker's next batch
  // since the start of the run, k, augmented with the (seed, k, worker)
  // stream; in synchronous runs k is the step (one batch per step from step
  // 0 or from the restored step), so both agree with a resumed run.
  void next(int64_t step, Tensor& x, std::vector<int32_t>& labels);

  // Continues as a run that has taken `batches` batches (checkpoint resume):
  // the sampler jumps there and a running stream restarts from there.
  void restore_after(int64_t batches);

  // Streamed only: the loader's counters (nullopt in memory or before the
  // first batch).
  std::optional<StreamingLoader::Stats> stream_stats() const;

 private:
  const DataSetup* data_;
  int64_t batch_size_;
  uint64_t seed_;
  int worker_;
  ShardedSampler sampler_;
  StreamOptions stream_opts_;
  int64_t batches_ = 0;  // streamed: batches taken since the start of the run
  std::unique_ptr<StreamingLoader> stream_;
  std::vector<int64_t> idx_;
};

}  // namespace terngrad::train::detail
