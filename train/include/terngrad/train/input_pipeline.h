// Preprocessing, augmentation and sharded batching for the CPU trainer.
//
// Reproducibility: every random choice is a pure function of a 64-bit seed.
// fill_batch takes one seed per (step, worker) and derives one per example
// slot from it; the sampler reshuffles with a seed derived from (seed, epoch,
// worker). A run resumed from a checkpoint (sampler state + step) therefore
// sees exactly the batches and augmentations the uninterrupted run would.
// Random streams are SplitMix64 with our own uniform mapping (not the
// standard library's distributions, which differ between implementations).
#pragma once

#include <cstdint>
#include <vector>

#include "terngrad/train/datasets.h"
#include "terngrad/train/tensor.h"

namespace terngrad::train {

enum class Preprocess {
  // LeNet on MNIST (TernGrad's lenet preprocessing): x/255, then (x-0.5)*2,
  // i.e. [-1, 1]. No augmentation.
  kLeNet,
  // CifarNet training, as TF's cifar10_input.distorted_inputs: random 24x24
  // crop, random horizontal flip, random brightness (delta uniform in
  // [-63, 63] on the 0..255 scale = [-63/255, 63/255] on [0, 1]), random
  // contrast (factor uniform in [0.2, 1.8], (x - mean_c) * f + mean_c per
  // channel), then per-image standardization.
  kCifarTrain,
  // CifarNet evaluation: centre 24x24 crop, then per-image standardization.
  kCifarEval,
  // Per-image standardization at full size (synthetic AlexNet data).
  kStandardize,
  kImageNetLike = kStandardize,
};

inline constexpr int64_t kCifarCrop = 24;

// Per-example output shape [h, w, c] of a dataset under a preprocessing.
// Throws std::invalid_argument when the images are smaller than the crop.
Shape example_shape(const Dataset& d, Preprocess p);

// Fills out = [indices.size(), h', w', c] floats and labels (both resized,
// reusing their allocations) with the preprocessed examples. `seed` drives
// the augmentation (kCifarTrain only): example slot b uses a seed derived
// from (seed, b). Pass one seed per (step, worker); evaluation passes any
// constant. Indices outside [0, d.count) throw std::out_of_range.
// Thread-safe for distinct outputs (no shared state, no OpenMP inside).
void fill_batch(const Dataset& d, const std::vector<int64_t>& indices, Preprocess p, uint64_t seed, Tensor& out,
                std::vector<int32_t>& labels);

// ---- The building blocks, exposed for tests and tools ---------------------

// The random distortion of one CifarNet training example.
struct CifarDistortion {
  int64_t crop_y = 0, crop_x = 0;  // top-left corner of the 24x24 window
  bool flip = false;               // mirror left-right
  float brightness = 0.0f;         // added, on the 0..255 scale
  float contrast = 1.0f;           // per-channel contrast factor
};

// Draws crop offsets in [0, h-24] x [0, w-24], a fair coin for the flip,
// brightness in [-63, 63] and contrast in [0.2, 1.8], in that order.
CifarDistortion draw_cifar_distortion(uint64_t example_seed, int64_t height, int64_t width);

// Applies a distortion to one HWC uint8 image and standardizes the result
// into out (24 x 24 x channels floats). Computation is on the 0..255 scale
// as in cifar10_input.py (which casts uint8 to float without rescaling);
// scale matters only for standardization's stddev floor.
void apply_cifar_distortion(const uint8_t* image, int64_t height, int64_t width, int64_t channels,
                            const CifarDistortion& dist, float* out);

// tf.image.per_image_standardization in place:
// (x - mean) / max(stddev, 1/sqrt(n)) over all n values of one image.
void per_image_standardize(float* x, int64_t n);

// ---- Sharding --------------------------------------------------------------

struct SamplerState {
  int64_t epoch = 0;     // completed passes over this worker's shard
  int64_t position = 0;  // examples of the current epoch already handed out
};

// Worker `worker` of `num_workers` owns the strided shard
// {i : i % num_workers == worker} of [0, dataset_size) (shard sizes differ by
// at most one; strided rather than contiguous so every shard sees all parts
// of a file-ordered dataset). The shard is visited in a fresh random order
// every epoch, seeded by (seed, epoch, worker); batches run across epoch
// boundaries. The state (epoch, position) fully determines what comes next.
//
// File groups (TFRecord shards, "each worker its own disjoint shards"): given
// group[i] = the file example i came from (Dataset::shard), and at least as
// many files (max group + 1) as workers, worker w owns the examples of the
// files f with f % num_workers == w instead, so no two workers read the same
// file. With fewer files than workers, or when some worker's files would all
// be empty, the strided sharding above is kept (whole files cannot go round).
// Without groups nothing changes.
class ShardedSampler {
 public:
  ShardedSampler(int64_t dataset_size, int num_workers, int worker, uint64_t seed);
  // group.size() is the dataset size; groups are non-negative file indices.
  // Throws std::invalid_argument when a group is negative.
  ShardedSampler(const std::vector<int32_t>& group, int num_workers, int worker, uint64_t seed);

  // out = the next batch_size indices (resized).
  void next_batch(int64_t batch_size, std::vector<int64_t>& out);
  int64_t next();

  SamplerState state() const { return {epoch_, position_}; }
  // Jumps to a saved state; throws std::invalid_argument naming the field
  // when epoch < 0 or position is outside [0, shard_size].
  void restore(const SamplerState& s);
  // The state after `consumed` examples from the start (every step of a
  // synchronous run takes one batch, so a resumed worker needs only the step).
  void restore_after(int64_t consumed);

  int64_t shard_size() const { return static_cast<int64_t>(members_.size()); }
  // True when this worker's shard is whole files (see the class comment).
  bool by_file() const { return by_file_; }
  // This epoch's visiting order (dataset indices).
  const std::vector<int64_t>& epoch_order() const { return order_; }

 private:
  void shuffle_for_epoch();
  int64_t dataset_size_;
  int num_workers_, worker_;
  uint64_t seed_;
  int64_t epoch_ = 0, position_ = 0;
  bool by_file_ = false;
  std::vector<int64_t> members_;  // this worker's examples, ascending
  std::vector<int64_t> order_;    // members_ in this epoch's order
};

}  // namespace terngrad::train
