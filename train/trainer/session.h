// Private to the trainer: everything one training process holds, and the
// pieces of a step, shared by the in-process virtual-worker loop
// (trainer.cpp) and a cluster replica's CPU step (cpu_replica_step.cpp), so
// the two run the same arithmetic and give the same bits.
//
// A step of worker w (its global index among all workers of the run):
//   compute_gradient(w)        batch, forward/backward, weight decay, local scales
//   encode(w, shared scales)   one payload per slice of each variable
//   ...the payloads are summed per slice (codec aggregate(), here or on a ps)...
//   apply(sums, 1/R)           decode_aggregate, average, optimizer, EMA
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "terngrad/comm/gradient_codec.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/datasets.h"
#include "terngrad/train/example_source.h"
#include "terngrad/train/imagenet_preprocess.h"
#include "terngrad/train/input_pipeline.h"
#include "terngrad/train/streaming_loader.h"
#include "terngrad/train/lr_schedule.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/model.h"
#include "terngrad/train/moving_average.h"
#include "terngrad/train/optimizer.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/trainer.h"
#include "worker_batches.h"

namespace terngrad::train::detail {

// Counter-based seeds: every random stream of the run (augmentation, dropout,
// codec) is a pure function of (run seed, step, worker, purpose), so a resumed
// run draws exactly what the uninterrupted run would have drawn, and a
// distributed worker draws what the same virtual worker would have.
enum class Purpose : uint64_t { kAugment = 1, kDropout = 2, kCodec = 3, kSampler = 4 };
uint64_t stream_seed(uint64_t seed, int64_t step, int worker, Purpose purpose);

struct DataSetup {
  Dataset train, test;
  Preprocess train_pre, eval_pre;
  std::string dataset;  // resolved name: mnist | cifar10 | imagenet | synthetic
  int num_classes = 0;  // the model's output classes
  // imagenet: streamed from disk instead of train/test (train_stream is null
  // in processes that do not train), preprocessed per net.
  std::shared_ptr<const ExampleSource> train_stream, test_stream;
  // The file of each train_stream example when it comes from TFRecord shards
  // (empty otherwise): the samplers give workers whole files.
  std::vector<int32_t> train_stream_shards;
  ImageStyle image_style = ImageStyle::kAlexNet;

  bool streamed() const { return test_stream != nullptr; }
  int64_t train_size() const { return streamed() ? (train_stream ? train_stream->size() : 0) : train.count; }
  int64_t test_size() const { return streamed() ? test_stream->size() : test.count; }
  // The loader settings of the train or eval stream from the flags.
  StreamOptions stream_options(const TrainConfig& cfg, bool train) const;
};
DataSetup load_data(const TrainConfig& cfg, bool need_train = true);

// Which codec spec each variable travels with: the run's codec for large
// enough variables (and the logits only with quantize_logits), fp32 otherwise.
// PowerSGD gets each variable's matrix shape (rows=) from its parameter's
// shape; vectors and matrices it would not shrink travel fp32.
// --codec=auto: every variable "fp32" until the run decides (auto_codec.h,
// TrainingSession::set_plan); a bad candidate is refused here.
std::vector<std::string> codec_plan(const TrainConfig& cfg, const ParamSet& params);
// Whether a variable travels fp32 whatever the codec (--size_to_binarize,
// --quantize_logits=false).
bool travels_fp32(const TrainConfig& cfg, const Param& p);
// "terngrad:clip=2.5 on 6 of 8 variables, fp32 on 2 of 8 variables".
std::string codec_summary(const std::vector<std::string>& plan);

struct EvalResult {
  double top1 = 0, top5 = 0;
  int64_t examples = 0;
};
// --device=gpu: the whole in-process run on the CUDA backend (gpu_trainer.cpp;
// without CUDA, gpu_trainer_stub.cpp throws saying so).
TrainResult run_training_gpu(const TrainConfig& cfg);

EvalResult evaluate(const Model& model, const Dataset& test, Preprocess pre, const TrainConfig& cfg);

// An evaluation set however it is stored: `count` examples, and a fill that
// puts examples `idx` (preprocessed for evaluation) into x and labels. fill
// is called from several threads at once.
struct EvalData {
  int64_t count = 0;
  std::function<void(const std::vector<int64_t>& idx, Tensor& x, std::vector<int32_t>& labels)> fill;
};
EvalData eval_data(const Dataset& test, Preprocess pre);
// The streamed validation split; skipped examples (skip_corrupt_records) are
// added to *skipped, which must outlive the EvalData.
EvalData eval_data(const DataSetup& data, const TrainConfig& cfg, std::atomic<int64_t>* skipped);
EvalResult evaluate(const Model& model, const EvalData& test, const TrainConfig& cfg);

// The logits ([n, classes]) of a batch: evaluation on another backend.
using LogitsFn = std::function<void(const Tensor& x, Tensor& logits)>;
// evaluate() with the logits from `logits_of`, one batch after another
// (the same batches, preprocessing and counting).
EvalResult evaluate_with(const LogitsFn& logits_of, const Dataset& test, Preprocess pre, const TrainConfig& cfg);
EvalResult evaluate_with(const LogitsFn& logits_of, const EvalData& test, const TrainConfig& cfg);

// Model, optimizer, schedule, EMA, and the state of the workers this process runs.
class TrainingSession {
 public:
  // workers: the global indices of the workers this process runs (all of
  // [0, num_workers) in-process; one in a distributed worker).
  // need_train_data: false for processes that only evaluate or aggregate.
  TrainingSession(const TrainConfig& cfg, int num_workers, std::vector<int> workers,
                  bool need_train_data = true);
  // Pinned: each worker's WorkerBatches points at data_.
  TrainingSession(const TrainingSession&) = delete;
  TrainingSession& operator=(const TrainingSession&) = delete;

  const TrainConfig& cfg() const { return cfg_; }
  Model& model() { return *model_; }
  ParamSet& params() { return model_->params(); }
  size_t num_variables() const { return model_->params().size(); }
  const DataSetup& data() const { return data_; }
  const std::vector<std::string>& plan() const { return plan_; }
  // Replaces the codec of every variable (--codec=auto decides after the
  // session exists): canonical specs, one per variable; the workers' codecs
  // and pre-round sums are made anew. Before any step and before restore().
  // Throws std::invalid_argument naming a bad spec, a count that is not the
  // variables', or a codec for a variable that travels fp32.
  void set_plan(std::vector<std::string> plan);
  // --codec=auto: the plan train_dir's newest checkpoint was written with
  // (blob "codec_plan"), so a resumed run keeps the codecs its error-feedback
  // states belong to; nullopt without one. Throws naming the checkpoint when
  // the blob does not hold one codec per variable.
  std::optional<std::vector<std::string>> checkpointed_plan() const;
  static constexpr const char* kCodecPlanBlob = "codec_plan";
  Optimizer& optimizer() { return *optimizer_; }
  ExponentialMovingAverage* ema() { return ema_.get(); }
  double lr(int64_t step) const { return schedule_->lr(step); }
  int num_workers() const { return num_workers_; }
  const std::vector<int>& workers() const { return workers_; }

  // Variables as (name, elements, codec spec), in model order.
  struct VariableInfo {
    std::string name;
    uint64_t size;
    std::string codec;
  };
  std::vector<VariableInfo> variables() const;

  // Loads train_dir's latest checkpoint (weights, optimizer slots, EMA
  // shadows; sampler positions when it holds them for this process's
  // workers, else derived from the step) and returns its step; 0 without one.
  int64_t restore();
  // A sync cluster's rewind (a ps restarted; WorkerClient::rewind_run): the
  // chief restores its newest checkpoint whose step every other replica
  // holds its codec state of (0: none, nothing restored); every other
  // replica then restores exactly that step's (restore_at; std::runtime_error
  // when the file is missing or corrupt).
  int64_t restore_for_rewind();
  // codec_states=false: every codec starts fresh (a new --codec=auto plan
  // from this step: plan_recheck.h), whatever the files hold.
  void restore_at(int64_t step, bool codec_states = true);
  // Weights and EMA shadows of a checkpoint (what an evaluator needs).
  void load_weights(const Checkpoint& ck);
  // Writes a checkpoint of this process's state at `step` (atomic, keeps 3).
  void save(int64_t step);
  // A cluster replica other than the chief: its workers' codec state
  // (error-feedback residuals) at `step`, in
  // <train_dir>/codec-state/worker-<w>/ (atomic, keeps 3; nothing for
  // stateless codecs). restore() reads it back at the chief's step.
  void save_codec_states(int64_t step);
  // The checkpoint's tensors: weights, model state (batch norm moving
  // statistics), optimizer slots, EMA shadows.
  std::map<std::string, Tensor> state_tensors();

  // --- one step; `local` indexes workers() ---
  // Batch, forward/backward, weight decay added to the gradient, local scales
  // of the codecs that share them. Returns the mean cross-entropy.
  // ready, when given, is called with each variable as soon as its gradient
  // is complete (during the backward pass, last layer first), so it can be
  // encoded and sent while the rest computes.
  //
  // Model state (batch norm's moving mean and variance) is updated here, from
  // the batch of local worker 0 only, once per step, as TF's multi-tower code
  // updates it from one tower: worker 0 of an in-process run; in a cluster
  // each replica folds its own batch into its own copy, and the chief's copy
  // is the one it checkpoints and evaluates. Concurrent compute_gradient
  // calls of other workers do not read the state (a training forward uses
  // the batch statistics), so the fold needs no lock; evaluation runs
  // between steps.
  //
  // needed, when given, is Model::forward_backward's params_needed: called
  // before the forward pass reads each variable (or a Dense layer's block).
  // part_ready, when given, gets (loss, v, elements) as elements [0, elements)
  // of v's gradient are final, weight decay included (Model's
  // grads_part_ready), before ready(v).
  using VariableReady = std::function<void(float loss, size_t v)>;
  using VariablePartReady = Model::GradsPartReady;
  float compute_gradient(size_t local, int64_t step, const VariableReady& ready = {},
                         const Model::ParamsNeeded& needed = {}, const VariablePartReady& part_ready = {});
  // The batch compute_gradient draws at `step` (advancing the sampler), for a
  // backend that computes the gradient elsewhere (--device=gpu).
  void next_batch(size_t local, int64_t step, Tensor& x, std::vector<int32_t>& labels);
  // --save_gradients: worker `local`'s gradient of every variable at `step`
  // (step-S/worker-W/ of the directory)
  // as .npy files (train_config.h says where), if step is one to save.
  void save_gradients(size_t local, int64_t step) const;
  // Local scale of each variable (0 for codecs without scale sharing).
  const std::vector<float>& local_scales(size_t local) const { return worker_[local].scales; }
  // Encodes worker `local`'s gradient: slices[v] cut variable v, outs[v][i]
  // receives slice i. shared[v]: the max of every worker's local scale.
  void encode(size_t local, int64_t step, const std::vector<float>& shared,
              const std::vector<std::vector<comm::ElementRange>>& slices,
              const std::vector<std::vector<std::span<uint8_t>>>& outs);
  // Multi-round codecs (GradientCodec::presum_rounds()): variable v's
  // pre-rounds (0 for single-round codecs) and the floats of round `round`.
  uint32_t presum_rounds(size_t v) const { return presum_rounds_[v]; }
  uint32_t max_presum_rounds() const;
  uint64_t presum_floats(size_t v, uint32_t round) const;
  // Worker `local`'s vector of pre-round `round` of variable v at `step`,
  // from its gradient and presum_sums(v)'s earlier rounds.
  void presum_variable(size_t local, int64_t step, size_t v, uint32_t round, std::span<float> out);
  // This step's sums of variable v's pre-rounds over all workers, [round]:
  // whoever sums them (the trainer in process, the ps in a cluster) fills
  // round i before round i+1 and encode() read them; decode_sum() reads them.
  std::vector<std::vector<float>>& presum_sums(size_t v) { return presum_sums_[v]; }
  // The step's sum of a slice of variable v (an aggregate() payload) decoded
  // into out by worker 0's codec, and handed to every local worker's codec
  // that observes sums (PowerSGD's warm start).
  void decode_sum(int64_t step, size_t v, uint64_t slice_count, std::span<const uint8_t> aggregate,
                  std::span<float> out);
  // encode() of variable v alone (the same bits).
  void encode_variable(size_t local, int64_t step, size_t v, const std::vector<float>& shared,
                       std::span<const comm::ElementRange> slices, std::span<const std::span<uint8_t>> outs);
  // --comm_only: in place of compute_gradient, a fixed pseudo-random
  // gradient (drawn once, about N(0, 0.01)) with its local scales; calls
  // ready for every variable, last first, as a backward pass would. Loss 0.
  float fixed_gradient(size_t local, const VariableReady& ready = {});
  const comm::GradientCodec& codec(size_t local, size_t v) const { return *worker_[local].codecs[v]; }
  // update_sum[v] = the decoded sum of R workers' gradients; applies
  // optimizer(update_sum / R) at `step`, then the EMA.
  void apply(int64_t step, GradSet& update_sum, int replicas);
  // apply() a piece at a time, for a replica that applies each shard as
  // soon as its sum has arrived: apply_range() over disjoint element ranges
  // covering every variable, in any order, then finish_apply(). The same
  // arithmetic as apply() (Optimizer::apply_range); std::invalid_argument
  // for a range outside variable v.
  void apply_range(int64_t step, GradSet& update_sum, size_t v, int64_t begin, int64_t count, int replicas);
  void finish_apply();
  // A zero gradient set shaped like the variables.
  GradSet make_grads() const { return model_->make_grads(); }

  // Raw and (if enabled) EMA test accuracy of the current weights; with
  // `device`, of the weights and average it computes logits with (a GPU run).
  struct DeviceLogits {
    LogitsFn raw, average;
  };
  void evaluate_into(TrainResult& r, const DeviceLogits* device = nullptr);

  // Codec state blobs of this process's workers (for checkpoints).
  BlobMap codec_states() const;

  // Streamed input of this process's workers, summed: loader counters and
  // examples skipped as corrupt (training and evaluation).
  StreamingLoader::Stats input_stats() const;

  // The server side's codec state (server_ef() residuals), per variable
  // slice, by server_state_name(): kept here in-process (the in-process
  // server), or fetched from the ps by the chief before it checkpoints.
  // save() writes every entry, restore() reads them back.
  static std::string server_state_name(size_t variable, uint64_t begin, uint64_t count);
  std::vector<uint8_t>& server_state(size_t variable, uint64_t begin, uint64_t count) {
    return server_states_[server_state_name(variable, begin, count)];
  }
  BlobMap& server_states() { return server_states_; }

 private:
  struct WorkerState {
    int global = 0;
    std::unique_ptr<WorkerBatches> batches;
    Model::Workspace ws;
    GradSet grads;
    std::vector<std::unique_ptr<comm::GradientCodec>> codecs;
    std::vector<float> scales;
    bool fixed = false;  // grads hold fixed_gradient's values
    Tensor x;
    std::vector<int32_t> labels;
  };
  void check_server_states(const std::string& path) const;
  // Codecs whose state a resumed run needs (an error-feedback residual, a
  // warm start); the file a non-chief replica keeps a worker's in; and, for
  // restore(), why a checkpoint lacks one of this process's ("" if none).
  static bool keeps_codec_state(const comm::GradientCodec& codec);
  std::string own_codec_state_path(const WorkerState& w, int64_t step) const;
  std::string missing_codec_state(const Checkpoint& ck) const;
  int64_t restore_newest(const std::function<std::string(const Checkpoint&)>& why_unusable);
  void restore_from(const Checkpoint& ck, bool fell_back, bool codec_states = true);
  void make_codecs();  // the workers' codecs and pre-round sums, from plan_
  comm::DecodeContext decode_context(int64_t step, size_t v) const;
  BlobMap server_states_;
  std::vector<uint32_t> presum_rounds_;                      // [variable]
  std::vector<std::vector<std::vector<float>>> presum_sums_;  // [variable][round]

  TrainConfig cfg_;
  int num_workers_;
  std::vector<int> workers_;
  DataSetup data_;
  std::unique_ptr<Model> model_;
  std::vector<std::string> plan_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LrSchedule> schedule_;
  std::unique_ptr<ExponentialMovingAverage> ema_;
  std::vector<WorkerState> worker_;
  std::atomic<int64_t> eval_skipped_{0};
};

// Shared by the trainers (trainer.cpp): an evaluation's line in metrics.jsonl
// and on the console, and model.safetensors of the session's weights.
void log_eval(JsonlWriter* log, int64_t step, const TrainResult& r, bool quiet);
void export_model(TrainingSession& s, int64_t step);

}  // namespace terngrad::train::detail
