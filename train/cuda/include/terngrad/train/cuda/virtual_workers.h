// N virtual workers on one or several GPUs, the GPU form of the in-process
// trainer's step (train/trainer/trainer.cpp, session.h). Each worker has its
// own stream, cuBLAS/cuDNN handles, activations and gradients; per step:
//   1. upload its batch (host data pipeline), forward/backward on the device,
//      weight decay added to the gradient (what TernGrad ternarizes);
//   2. its local TernGrad scale per variable (the CUDA codec's statistics),
//      written to device memory (and copied to the other GPUs);
//   3. once every worker's scales are in (events), encode every ternary
//      variable with the CUDA codec into a device payload, the shared scale
//      being the max over workers taken on the device (what an
//      all-reduce(max) would give); with several GPUs the packed payloads
//      (and fp32 gradients) are copied to every other GPU: an all-gather of
//      exactly the bytes TernGrad puts on the wire;
//   4. every GPU's aggregation stream sums all N payloads in worker order on
//      its device (exact counts for shared scales), averages, and applies the
//      optimizer (and moving average) to its copy of the weights.
// With config.host_threads, steps 1 and 3 are issued from one host thread per
// worker (ThreadTeam). Gradients never leave the devices. Parameter
// localization: every GPU holds the weights and applies the same update to
// the same sums in the same order, so the copies stay bit-identical without
// broadcasting weights.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/quantize/cuda.h"
#include "terngrad/train/cuda/device_train_state.h"
#include "terngrad/train/cuda/gpu_codec_step.h"
#include "terngrad/train/cuda/gpu_model.h"
#include "terngrad/train/cuda/gpu_optimizer.h"
#include "terngrad/train/cuda/thread_team.h"

namespace terngrad::train::cuda {

struct VirtualWorkersConfig {
  int num_workers = 1;
  std::vector<std::string> plan;  // codec spec per variable (TrainingSession::plan())
  GpuOptimizerOptions optimizer;
  // Seed of worker w's codec stream (the CPU trainer's
  // stream_seed(seed, 0, w, Purpose::kCodec)), one per worker.
  std::vector<uint64_t> codec_seeds;
  // Keep a moving average of the weights on the device (update_average()).
  bool moving_average = false;
  // Seed of worker w's dropout masks at a step (the CPU trainer's
  // stream_seed(seed, step, w, Purpose::kDropout), so GPU and CPU runs drop
  // the same units). Required, even for nets without dropout.
  std::function<uint64_t(int64_t step, int worker)> dropout_seed;
  // CUDA devices the workers are spread over, in contiguous blocks (worker w
  // on devices[w * size / num_workers]); empty: the current device. A device
  // may be listed twice (separate weight copies on one GPU: what the tests
  // use to run the several-GPU path on one).
  std::vector<int> devices;
  // Issue each worker's launches from its own host thread (from the second
  // step on): one thread issuing every worker's ~100 kernels and cuDNN calls
  // in turn leaves the device waiting for the host (bench/RESULTS.md, the
  // AlexNet step on an H100). The same work on the same streams either way:
  // the results are bit-identical.
  bool host_threads = true;
};

class VirtualWorkers {
 public:
  // cpu_model: built, outlives this; its current weights are uploaded.
  VirtualWorkers(const Model& cpu_model, VirtualWorkersConfig cfg);
  ~VirtualWorkers();

  // One synchronous step. batches[w], labels[w]: worker w's batch (labels
  // already validated by the data pipeline). Returns the mean loss over
  // workers (N floats are read back: the step's only synchronization).
  // A step that throws (NaN gradients, a malformed payload, a CUDA error)
  // leaves the object unusable until upload_state() restores a state.
  // The same as stage(batches, labels) then step_staged(step, lr), each
  // worker's copy enqueued just before its forward pass.
  float step(int64_t step, const std::vector<Tensor>& batches, const std::vector<std::vector<int32_t>>& labels,
             float lr);

  // The two halves of step(): stage() validates the batches and labels and
  // enqueues their copies to the workers' devices (each on its worker's
  // stream, after that worker's last step); step_staged() trains on what
  // was staged last. A staged batch stays until the next stage(), so a
  // benchmark can time the step on data already on the device, as a GPU
  // data pipeline would deliver it.
  void stage(const std::vector<Tensor>& batches, const std::vector<std::vector<int32_t>>& labels);
  float step_staged(int64_t step, float lr);

  // After step(): the moving average's update with the CPU average's
  // 1 - decay_at(step) (config.moving_average must be set).
  void update_average(float one_minus_decay);

  // After step(): batch norm's moving statistics folded from worker 0's
  // batch into the host model state (Model::state(), which evaluation,
  // checkpoints and export read), as the CPU trainer folds worker 0's.
  // Nothing for nets without state.
  void fold_state(StateSet& state);

  // Copies the device weights into `params` (evaluation, export).
  void download_params(ParamSet& params);
  // Weights, optimizer slots and steps, average: to the host objects
  // (checkpoints, evaluation of the average) and back (resuming).
  void download_state(const HostTrainState& host);
  void upload_state(const HostTrainState& host);
  // Evaluation on the device: the logits ([n, classes]) of a batch x at the
  // trained weights, or at their moving average (config.moving_average).
  void predict(const Tensor& x, bool average, Tensor& logits);
  // Worker w's payload of variable v from the last step, as packed bytes on
  // the host (what a distributed worker would push; empty for fp32).
  std::vector<uint8_t> payload_to_host(int w, size_t v);
  // Payload bytes one worker produces per step (fp32 variables counted as 4n).
  double bytes_per_worker_step() const;
  // Host seconds the last step took to enqueue its work (launches, library
  // calls); the rest of its wall time was spent waiting for the devices. A
  // step whose enqueue time nears its wall time is bound by the host.
  double last_enqueue_seconds() const { return last_enqueue_seconds_; }

  // The first GPU's weights (every GPU's copy is the same).
  const DeviceParams& params() const;
  int num_devices() const { return static_cast<int>(devices_.size()); }

 private:
  struct Device;  // one GPU's weights, optimizer and aggregation
  struct Worker;
  const Model& model_;
  VirtualWorkersConfig cfg_;
  GpuModel gpu_;
  std::vector<VariableCodec> codecs_;
  std::vector<std::unique_ptr<Device>> devices_;  // destroyed after the workers
  std::vector<std::unique_ptr<Worker>> workers_;
  bool failed_ = false;  // the last step (or state change) threw part-way: see step()
  void require_usable(const char* what) const;
  bool staged_ = false;  // every worker has a batch on its device
  double last_enqueue_seconds_ = 0;
  bool warmed_up_ = false;            // a step has completed (the first is issued from one thread)
  std::unique_ptr<ThreadTeam> team_;  // one member per worker (config.host_threads), else null
  float* host_losses_ = nullptr;      // pinned, one per worker: the step's losses come down here
  void check_batches(const std::vector<Tensor>& batches, const std::vector<std::vector<int32_t>>& labels) const;
  void upload_batch(int w, const Tensor& batch, const std::vector<int32_t>& labels);
  // batches, labels: uploaded worker by worker as the step is enqueued; null: the staged ones.
  float run_step(int64_t step, float lr, const std::vector<Tensor>* batches,
                 const std::vector<std::vector<int32_t>>* labels);
  void enqueue_step(int64_t step, float lr, const std::vector<Tensor>* batches,
                    const std::vector<std::vector<int32_t>>* labels);
  // Waits for every stream and clears every workspace's error record;
  // returns the error to report, if any.
  std::exception_ptr settle_all();
  std::unique_ptr<Worker> evaluator_;  // predict()'s context on the first GPU, made on first use
};

}  // namespace terngrad::train::cuda
