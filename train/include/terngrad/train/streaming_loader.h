// Batches streamed from an ExampleSource (image folder, TFRecord shards):
// worker threads read, decode and preprocess the examples of the next
// `prefetch` batches while the training step runs, so the step thread only
// takes batches that are ready.
//
// Determinism: batch k's indices come from the worker's ShardedSampler in
// order and its augmentation seed from seed_of(k); example slot b uses
// derive_seed(batch seed, b) (as fill_batch). Threads only decide who
// computes which example, never what it is, so batch contents are the same
// bits for any thread count, prefetch depth or timing, and equal to
// load_batch() run synchronously.
//
// Bad data: an example whose file cannot be read or decoded throws DataError
// naming the file and record in the consumer, at the batch that holds it.
// With skip_corrupt, it is replaced by a replacement drawn from the whole
// source by a pure function of the example's seed (up to 16 tries), and the
// failure counted. A label outside [0, num_classes) is always an error naming
// the file, record and label: that is a wrong --num_classes or label offset,
// not a damaged record, and skipping would hide it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "terngrad/train/example_source.h"
#include "terngrad/train/imagenet_preprocess.h"
#include "terngrad/train/input_pipeline.h"
#include "terngrad/train/tensor.h"

namespace terngrad::train {

struct StreamOptions {
  ImagePreprocess preprocess;
  int64_t batch_size = 32;
  int threads = 0;            // decoding threads (0 = std::thread::hardware_concurrency())
  int64_t prefetch = 2;       // batches decoded ahead of the consumer (>= 1)
  bool skip_corrupt = false;
  int num_classes = 0;        // labels must be in [0, num_classes)
  double stall_timeout_s = 600;  // next() gives up when no example finishes for this long
};

// Example `index` of src decoded and preprocessed into out (224*224*3
// floats) with its label; returns how many examples were skipped (0 unless
// opts.skip_corrupt and a replacement was needed). Thread-safe.
int64_t load_example(const ExampleSource& src, int64_t index, const StreamOptions& opts, uint64_t example_seed,
                     float* out, int32_t& label);

// A whole batch in the calling thread: x = [n, 224, 224, 3], labels [n];
// example b uses derive_seed(batch_seed, b). Adds skipped examples to *skipped.
void load_batch(const ExampleSource& src, const std::vector<int64_t>& indices, const StreamOptions& opts,
                uint64_t batch_seed, Tensor& x, std::vector<int32_t>& labels, int64_t* skipped = nullptr);

// The seed of example slot b of a batch seeded batch_seed (fill_batch's rule).
uint64_t example_seed(uint64_t batch_seed, int64_t b);

class StreamingLoader {
 public:
  using SeedFn = std::function<uint64_t(int64_t batch)>;
  struct Stats {
    int64_t batches = 0, images = 0;  // delivered to the consumer
    int64_t skipped = 0;              // replaced examples (skip_corrupt)
    double busy_s = 0;                // thread-seconds spent reading, decoding, preprocessing
    double wait_s = 0;                // seconds next() waited for a batch (input-bound time)
    double wall_s = 0;                // since construction
    int threads = 0;
    // What the threads could deliver if never waiting for the consumer:
    // images per busy thread-second times the threads.
    double capacity_per_s() const { return busy_s > 0 ? static_cast<double>(images) * threads / busy_s : 0; }
  };

  // The sampler is taken at its current state; the first batch is number
  // first_batch (seed_of(first_batch)). Starts the threads.
  StreamingLoader(std::shared_ptr<const ExampleSource> source, ShardedSampler sampler, StreamOptions opts,
                  int64_t first_batch, SeedFn seed_of);
  // Stops the threads (each finishes at most the example it is on) and joins.
  ~StreamingLoader();
  StreamingLoader(const StreamingLoader&) = delete;
  StreamingLoader& operator=(const StreamingLoader&) = delete;

  // The next batch (x and labels are swapped in, their old buffers reused).
  // Rethrows the error of the batch's first failing example (DataError
  // naming file and record); the loader then goes on with the next batch.
  // Throws std::runtime_error after stall_timeout_s without progress.
  void next(Tensor& x, std::vector<int32_t>& labels);
  int64_t next_batch_number() const { return next_batch_; }
  Stats stats() const;
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct Slot {
    int64_t number = 0;
    uint64_t seed = 0;
    std::vector<int64_t> indices;
    Tensor x;
    std::vector<int32_t> labels;
    int64_t claimed = 0, done = 0, skipped = 0;
    int64_t error_at = -1;  // lowest failing slot position
    std::exception_ptr error;
  };
  void plan_locked();
  void work();

  std::shared_ptr<const ExampleSource> source_;
  ShardedSampler sampler_;
  StreamOptions opts_;
  SeedFn seed_of_;
  int64_t next_batch_, planned_;

  mutable std::mutex m_;
  std::condition_variable work_cv_, ready_cv_;
  std::deque<std::unique_ptr<Slot>> queue_;  // planned batches, in order
  std::vector<Tensor> pool_;                 // buffers of consumed batches, reused
  bool stop_ = false;
  Stats stats_;
  std::chrono::steady_clock::time_point start_;
  std::vector<std::thread> threads_;
};

}  // namespace terngrad::train
