#include "session.h"

#include "terngrad/comm/codec_choice.h"

#include "optimizer_handler.h"

#include <omp.h>

#include <algorithm>
#include <random>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <stdexcept>

#include "npy_io.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/element_range.h"
#include "terngrad/train/image_folder.h"
#include "terngrad/train/loss.h"
#include "terngrad/train/models.h"
#include "terngrad/train/tfrecord_source.h"

namespace terngrad::train::detail {

namespace {

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr char kServerStatePrefix[] = "server_state/";

std::string codec_blob_name(int worker, size_t variable) {
  return "codec/" + std::to_string(worker) + "/" + std::to_string(variable);
}

// Where a cluster replica that is not the chief keeps its workers' codec
// state (error-feedback residuals): the chief's checkpoint holds only its own.
std::string codec_state_dir(const std::string& train_dir, int worker) {
  return train_dir + "/codec-state/worker-" + std::to_string(worker);
}

}  // namespace

uint64_t stream_seed(uint64_t seed, int64_t step, int worker, Purpose purpose) {
  return mix(mix(mix(seed, static_cast<uint64_t>(purpose)), static_cast<uint64_t>(step)),
             static_cast<uint64_t>(worker));
}

namespace {

// --dataset_name=imagenet: streamed from data_dir, preprocessed per net
// (imagenet_preprocess.h's table).
void load_imagenet(const TrainConfig& cfg, bool need_train, DataSetup& d) {
  d.image_style = image_style_for_net(cfg.net);  // throws for nets without 224x224x3 inputs
  if (!cfg.preprocessing.empty())
    throw std::invalid_argument("--preprocessing=" + cfg.preprocessing +
                                " does not apply to --dataset_name=imagenet (preprocessed per --net: " +
                                image_style_name(d.image_style) + ")");
  const std::string format = cfg.data_format.empty() ? "tfrecord" : cfg.data_format;
  if (format == "folder") {
    // 1001 classes over 1000 folders: TF's converters' convention, label 0
    // = background, so the folders take labels 1..1000.
    const int folders = static_cast<int>(image_folder_classes(cfg.data_dir + "/train").size());
    const int32_t offset = cfg.num_classes == folders + 1 ? 1 : 0;
    ImageFolderSplits s = open_image_folder_splits(cfg.data_dir, offset, need_train);
    d.train_stream = s.train;
    d.test_stream = s.validation;
    d.num_classes = s.validation->num_classes();
  } else if (format == "tfrecord") {
    // build_imagenet_data.py's shards: train-*-of-* and validation-*-of-*,
    // labels 1..1000 with 0 left for "background", hence 1001 classes unless
    // --num_classes says otherwise (the loader refuses labels outside).
    auto open_split = [&](bool train) {
      auto src = std::make_shared<TfRecordSource>(tfrecord_split_files(cfg.data_dir, "imagenet", train),
                                                  cfg.skip_corrupt_records);
      if (src->damaged_regions() > 0)
        std::fprintf(stderr, "%s: stepped over %lld damaged regions (%llu bytes)\n", src->describe().c_str(),
                     static_cast<long long>(src->damaged_regions()),
                     static_cast<unsigned long long>(src->damaged_bytes()));
      return src;
    };
    if (need_train) {
      auto train = open_split(true);
      // Whole files per worker when there are enough of them (input_pipeline.h).
      d.train_stream_shards.resize(static_cast<size_t>(train->size()));
      for (int64_t i = 0; i < train->size(); ++i) d.train_stream_shards[static_cast<size_t>(i)] = train->shard_of(i);
      d.train_stream = std::move(train);
    }
    d.test_stream = open_split(false);
    d.num_classes = cfg.num_classes > 0 ? cfg.num_classes : 1001;
  } else {
    throw std::invalid_argument("--dataset_name=imagenet has no native format; --data_format=folder or tfrecord");
  }
  if (cfg.num_classes > 0) {
    if (cfg.num_classes < d.num_classes)
      throw std::invalid_argument("--num_classes=" + std::to_string(cfg.num_classes) + " but " +
                                  d.test_stream->describe() + " needs " + std::to_string(d.num_classes));
    d.num_classes = cfg.num_classes;
  }
}

}  // namespace

StreamOptions DataSetup::stream_options(const TrainConfig& cfg, bool train) const {
  StreamOptions o;
  o.preprocess = {image_style, train};
  o.batch_size = train ? cfg.batch_size : cfg.eval_batch_size;
  o.threads = cfg.data_threads;
  o.prefetch = cfg.prefetch_batches;
  o.skip_corrupt = cfg.skip_corrupt_records;
  o.num_classes = num_classes;
  return o;
}

DataSetup load_data(const TrainConfig& cfg, bool need_train) {
  DataSetup d;
  d.dataset = cfg.dataset;
  if (d.dataset.empty()) d.dataset = cfg.net == "lenet" ? "mnist" : cfg.net == "cifarnet" ? "cifar10" : "synthetic";
  // A format the dataset cannot be read from is refused, not ignored.
  const bool small = d.dataset == "mnist" || d.dataset == "cifar10";
  if ((small && cfg.data_format == "folder") || (d.dataset == "synthetic" && !cfg.data_format.empty() &&
                                                 cfg.data_format != "native"))
    throw std::invalid_argument("--data_format=" + cfg.data_format + " does not apply to --dataset_name=" + d.dataset +
                                (small ? " (native or tfrecord)" : " (generated in memory)"));
  const bool tfrecord = small && cfg.data_format == "tfrecord";
  // TF's converters' shards of tf.train.Example (datasets.h: tfrecord_split_files
  // lists the names taken); each example remembers its file, so the samplers
  // can give each worker whole files.
  auto load_tfrecord = [&](bool train) {
    TfRecordLoadOptions opt;
    opt.num_classes = 10;
    opt.skip_corrupt_records = cfg.skip_corrupt_records;
    TfRecordLoadStats st;
    Dataset ds = load_tfrecord_dataset(tfrecord_split_files(cfg.data_dir, d.dataset, train), opt, &st);
    if (st.skipped_records > 0 || st.damaged_regions > 0)
      std::fprintf(stderr, "%s: skipped %lld corrupt records and %lld damaged regions (%llu bytes); first: %s\n",
                   ds.source.c_str(), static_cast<long long>(st.skipped_records),
                   static_cast<long long>(st.damaged_regions), static_cast<unsigned long long>(st.damaged_bytes),
                   st.first_fault.c_str());
    return ds;
  };
  // The training split (when this process trains) and the test split, from
  // TFRecord shards or from the dataset's native files.
  auto load_splits = [&](Dataset (*native)(const std::string&, bool)) {
    if (need_train) d.train = tfrecord ? load_tfrecord(true) : native(cfg.data_dir, true);
    d.test = tfrecord ? load_tfrecord(false) : native(cfg.data_dir, false);
  };
  if (d.dataset == "mnist") {
    if (cfg.net != "lenet") throw std::invalid_argument("--dataset_name=mnist (28x28x1) fits only --net=lenet");
    load_splits(load_idx_dir);
    d.train_pre = d.eval_pre = Preprocess::kLeNet;
  } else if (d.dataset == "cifar10") {
    if (cfg.net != "cifarnet")
      throw std::invalid_argument("--dataset_name=cifar10 (32x32x3 cropped to 24x24) fits only --net=cifarnet");
    load_splits(load_cifar10);
    d.train_pre = Preprocess::kCifarTrain;
    d.eval_pre = Preprocess::kCifarEval;
  } else if (d.dataset == "imagenet") {
    load_imagenet(cfg, need_train, d);
    return d;
  } else {  // synthetic: the net's input size, learnable class structure
    const int64_t side = cfg.net == "lenet" ? 28 : cfg.net == "cifarnet" ? 24 : 224;
    const int64_t ch = cfg.net == "lenet" ? 1 : 3;
    const int classes = cfg.num_classes > 0 ? cfg.num_classes : (side == 224 ? 1000 : 10);  // ImageNet nets: 1000
    d.train = make_synthetic(cfg.synthetic_examples, side, side, ch, classes, cfg.seed);
    d.test = make_synthetic(std::max<int64_t>(cfg.synthetic_examples / 4, 1), side, side, ch, classes, cfg.seed + 1);
    d.train_pre = d.eval_pre = Preprocess::kStandardize;
  }
  d.num_classes = d.test.num_classes;
  if (cfg.preprocessing == "lenet") {
    d.train_pre = d.eval_pre = Preprocess::kLeNet;
  } else if (cfg.preprocessing == "cifar") {
    d.train_pre = Preprocess::kCifarTrain;
    d.eval_pre = Preprocess::kCifarEval;
  } else if (cfg.preprocessing == "standardize") {
    d.train_pre = d.eval_pre = Preprocess::kStandardize;
  }
  return d;
}

bool travels_fp32(const TrainConfig& cfg, const Param& p) {
  return static_cast<int64_t>(p.value.size()) < cfg.size_to_binarize || (p.is_logits && !cfg.quantize_logits);
}

std::vector<std::string> codec_plan(const TrainConfig& cfg, const ParamSet& params) {
  if (comm::is_auto_codec(cfg.codec)) {
    comm::parse_auto_codec(cfg.codec, cfg.sync_replicas);  // a bad candidate is refused here, at start
    return std::vector<std::string>(params.params.size(), "fp32");  // until the run decides (auto_codec.h)
  }
  comm::CodecConfig config;
  if (!cfg.codec.empty()) {
    config = comm::parse_codec_config(cfg.codec);
  } else if (cfg.grad_bits == 32) {
    config.params = comm::Fp32Params{};
  } else {
    comm::TernGradParams p;
    p.clip = static_cast<float>(cfg.clip_factor);
    p.share_scale = cfg.share_scale;
    config.params = p;
  }
  const std::string compressed = comm::to_spec(config);  // canonical: what the ps and the logs see
  auto* powersgd = std::get_if<comm::PowerSgdParams>(&config.params);
  if (powersgd && powersgd->rows != 0)
    throw std::invalid_argument("--codec=" + cfg.codec + ": rows=" + std::to_string(powersgd->rows) +
                                " is set per variable from its shape; leave it out (e.g. powersgd:rank=" +
                                std::to_string(powersgd->rank) + ")");
  std::vector<std::string> plan;
  for (const Param& p : params.params) {
    if (travels_fp32(cfg, p)) {
      plan.push_back("fp32");
    } else if (powersgd) {
      // The matrix: every dimension but the last by the last. A conv kernel
      // [kh, kw, in, out] is (kh kw in) x out, the transpose of the paper's
      // (out, in kh kw) reshape, whose rank-r approximation is the same; a
      // dense kernel [in, out] is itself. Vectors (biases; the paper sends
      // them uncompressed) and matrices that rank-r factors would not shrink
      // travel fp32.
      const uint64_t n = static_cast<uint64_t>(p.value.size());
      const uint64_t cols = p.value.shape.empty() ? n : static_cast<uint64_t>(p.value.shape.back());
      const uint64_t rows = cols == 0 ? 0 : n / cols, r = powersgd->rank;
      if (p.value.shape.size() < 2 || rows > 0xFFFFFFFFull || r * (rows + cols) >= rows * cols) {
        plan.push_back("fp32");
        continue;
      }
      powersgd->rows = static_cast<uint32_t>(rows);
      plan.push_back(comm::to_spec(config));
      powersgd->rows = 0;
    } else {
      plan.push_back(compressed);
    }
  }
  return plan;
}

std::string codec_summary(const std::vector<std::string>& plan) {
  std::map<std::string, int> count;
  for (const auto& p : plan) ++count[p];
  std::string s;
  for (const auto& [spec, k] : count)
    s += (s.empty() ? "" : ", ") + spec + " on " + std::to_string(k) + " of " + std::to_string(plan.size()) +
         " variables";
  return s;
}

namespace {

// Batch b of the evaluation: examples [b * eval_batch_size, ...) of the first `total`.
void eval_batch(const EvalData& test, const TrainConfig& cfg, int64_t total, int64_t b, std::vector<int64_t>& idx,
                Tensor& x, std::vector<int32_t>& labels) {
  const int64_t first = b * cfg.eval_batch_size, n = std::min(cfg.eval_batch_size, total - first);
  idx.resize(n);
  for (int64_t i = 0; i < n; ++i) idx[i] = first + i;
  test.fill(idx, x, labels);
}

int64_t eval_examples(const EvalData& test, const TrainConfig& cfg) {
  return cfg.max_eval_examples > 0 ? std::min(cfg.max_eval_examples, test.count) : test.count;
}

EvalResult eval_result(int64_t total, int64_t top1, int64_t top5) {
  EvalResult r;
  r.examples = total;
  r.top1 = total ? static_cast<double>(top1) / total : 0;
  r.top5 = total ? static_cast<double>(top5) / total : 0;
  return r;
}

}  // namespace

EvalData eval_data(const Dataset& test, Preprocess pre) {
  const Dataset* d = &test;
  return {test.count, [d, pre](const std::vector<int64_t>& idx, Tensor& x, std::vector<int32_t>& labels) {
            fill_batch(*d, idx, pre, 0, x, labels);
          }};
}

EvalData eval_data(const DataSetup& data, const TrainConfig& cfg, std::atomic<int64_t>* skipped) {
  if (!data.streamed()) return eval_data(data.test, data.eval_pre);
  std::shared_ptr<const ExampleSource> src = data.test_stream;
  const StreamOptions opts = data.stream_options(cfg, false);
  return {src->size(), [src, opts, skipped](const std::vector<int64_t>& idx, Tensor& x, std::vector<int32_t>& labels) {
            int64_t k = 0;
            // Evaluation draws nothing at random: seed 0 (a replacement for a
            // skipped example is still a pure function of its slot).
            load_batch(*src, idx, opts, 0, x, labels, &k);
            if (k) *skipped += k;
          }};
}

EvalResult evaluate(const Model& model, const Dataset& test, Preprocess pre, const TrainConfig& cfg) {
  return evaluate(model, eval_data(test, pre), cfg);
}

EvalResult evaluate(const Model& model, const EvalData& test, const TrainConfig& cfg) {
  const int64_t total = eval_examples(test, cfg);
  const int64_t batches = (total + cfg.eval_batch_size - 1) / cfg.eval_batch_size;
  int64_t top1 = 0, top5 = 0;
  // Exceptions must not leave the OpenMP region: the first failing batch's
  // (lowest index, so the same one however the batches were scheduled) is
  // rethrown after it.
  std::exception_ptr error;
  int64_t error_batch = batches;
#pragma omp parallel reduction(+ : top1, top5)
  {
    Model::Workspace ws = model.make_workspace();
    Tensor x;
    std::vector<int32_t> labels;
    std::vector<int64_t> idx;
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < batches; ++b) {
      try {
        eval_batch(test, cfg, total, b, idx, x, labels);
        int64_t c1 = 0, c5 = 0;
        topk_correct(model.predict(ws, x), labels, c1, c5);
        top1 += c1;
        top5 += c5;
      } catch (...) {
#pragma omp critical(tg_evaluate_error)
        if (b < error_batch) {
          error_batch = b;
          error = std::current_exception();
        }
      }
    }
  }
  if (error) std::rethrow_exception(error);
  return eval_result(total, top1, top5);
}

EvalResult evaluate_with(const LogitsFn& logits_of, const Dataset& test, Preprocess pre, const TrainConfig& cfg) {
  return evaluate_with(logits_of, eval_data(test, pre), cfg);
}

EvalResult evaluate_with(const LogitsFn& logits_of, const EvalData& test, const TrainConfig& cfg) {
  const int64_t total = eval_examples(test, cfg);
  const int64_t batches = (total + cfg.eval_batch_size - 1) / cfg.eval_batch_size;
  int64_t top1 = 0, top5 = 0;
  Tensor x, logits;
  std::vector<int32_t> labels;
  std::vector<int64_t> idx;
  for (int64_t b = 0; b < batches; ++b) {
    eval_batch(test, cfg, total, b, idx, x, labels);
    logits_of(x, logits);
    int64_t c1 = 0, c5 = 0;
    topk_correct(logits, labels, c1, c5);
    top1 += c1;
    top5 += c5;
  }
  return eval_result(total, top1, top5);
}

TrainingSession::TrainingSession(const TrainConfig& cfg, int num_workers, std::vector<int> workers,
                                 bool need_train_data)
    : cfg_(cfg), num_workers_(num_workers), workers_(std::move(workers)) {
  data_ = load_data(cfg_, need_train_data);
  ModelOptions mo;
  mo.num_classes = cfg_.num_classes > 0 ? cfg_.num_classes : data_.num_classes;
  mo.weight_decay = cfg_.weight_decay;
  mo.keep_prob = cfg_.keep_prob;
  model_ = make_model(cfg_.net, mo, cfg_.seed);
  plan_ = codec_plan(cfg_, params());

  optimizer_ = make_run_optimizer(cfg_);
  optimizer_->init(params());
  schedule_ = make_run_schedule(cfg_);
  if (cfg_.moving_average_decay > 0)
    ema_ = std::make_unique<ExponentialMovingAverage>(params(), cfg_.moving_average_decay);

  if (!need_train_data && !workers_.empty())
    throw std::invalid_argument("a training session without training data runs no workers");
  for (int w : workers_) {
    if (w < 0 || w >= num_workers_)
      throw std::invalid_argument("worker " + std::to_string(w) + " is outside [0, " + std::to_string(num_workers_) + ")");
    WorkerState st{w,
                   std::make_unique<WorkerBatches>(data_, cfg_, num_workers_, w, static_cast<int>(workers_.size())),
                   model_->make_workspace(),
                   model_->make_grads(),
                   {},
                   std::vector<float>(num_variables(), 0.0f),
                   false,
                   {},
                   {}};
    worker_.push_back(std::move(st));
  }
  make_codecs();
}

void TrainingSession::make_codecs() {
  for (WorkerState& w : worker_) {
    w.codecs.clear();
    for (size_t v = 0; v < num_variables(); ++v) w.codecs.push_back(comm::make_codec(plan_[v]));
  }
  presum_rounds_.clear();
  presum_sums_.assign(num_variables(), {});
  for (size_t v = 0; v < num_variables(); ++v) {
    const auto c = comm::make_codec(plan_[v]);
    presum_rounds_.push_back(c->presum_rounds());
    presum_sums_[v].resize(c->presum_rounds());
    for (uint32_t round = 0; round < c->presum_rounds(); ++round)
      presum_sums_[v][round].resize(c->presum_floats(round, static_cast<uint64_t>(params().params[v].value.size())));
  }
}

void TrainingSession::set_plan(std::vector<std::string> plan) {
  if (plan.size() != num_variables())
    throw std::invalid_argument("codec plan of " + std::to_string(plan.size()) + " codecs for " +
                                std::to_string(num_variables()) + " variables");
  for (size_t v = 0; v < plan.size(); ++v) {
    plan[v] = comm::make_codec(plan[v])->spec();  // canonical, and refused by name if unknown
    if (travels_fp32(cfg_, params().params[v]) && plan[v] != "fp32")
      throw std::invalid_argument("codec plan: " + params().params[v].name + " travels fp32 in this run (" +
                                  "--size_to_binarize / --quantize_logits), not " + plan[v]);
  }
  plan_ = std::move(plan);
  make_codecs();
}

uint32_t TrainingSession::max_presum_rounds() const {
  uint32_t k = 0;
  for (uint32_t r : presum_rounds_) k = std::max(k, r);
  return k;
}

uint64_t TrainingSession::presum_floats(size_t v, uint32_t round) const {
  return presum_sums_[v].at(round).size();  // sized by the codec at construction
}

void TrainingSession::presum_variable(size_t local, int64_t step, size_t v, uint32_t round, std::span<float> out) {
  WorkerState& w = worker_[local];
  comm::EncodeContext ec;
  ec.tensor_id = static_cast<uint32_t>(v);
  ec.step = static_cast<uint32_t>(step);
  ec.seed = stream_seed(cfg_.seed, 0, w.global, Purpose::kCodec);
  for (uint32_t i = 0; i < round; ++i) ec.presums.emplace_back(presum_sums_[v].at(i));
  w.codecs[v]->presum(round, w.grads[v].data, ec, out);
}

comm::DecodeContext TrainingSession::decode_context(int64_t step, size_t v) const {
  comm::DecodeContext dc;
  dc.tensor_id = static_cast<uint32_t>(v);
  dc.step = static_cast<uint32_t>(step);
  for (const std::vector<float>& sum : presum_sums_[v]) dc.presums.emplace_back(sum);
  return dc;
}

void TrainingSession::decode_sum(int64_t step, size_t v, uint64_t slice_count, std::span<const uint8_t> aggregate,
                                 std::span<float> out) {
  const comm::DecodeContext dc = decode_context(step, v);
  worker_.at(0).codecs[v]->decode_aggregate_with(aggregate, dc, out);
  for (WorkerState& w : worker_)
    if (w.codecs[v]->observes_aggregate()) w.codecs[v]->observe_aggregate(aggregate, slice_count, dc);
}

std::vector<TrainingSession::VariableInfo> TrainingSession::variables() const {
  std::vector<VariableInfo> out;
  const ParamSet& ps = model_->params();
  for (size_t v = 0; v < ps.size(); ++v)
    out.push_back({ps.params[v].name, static_cast<uint64_t>(ps.params[v].value.size()), plan_[v]});
  return out;
}

std::map<std::string, Tensor> TrainingSession::state_tensors() {
  std::map<std::string, Tensor> tensors;
  for (const Param& p : params().params) tensors[p.name] = p.value;
  for (const StateVar& v : model_->state().vars) tensors[v.name] = v.value;
  for (auto& [name, slot] : optimizer_->slots()) tensors[name] = *slot;
  if (ema_)
    for (auto& [name, shadow] : ema_->shadows()) tensors[name] = *shadow;
  return tensors;
}

BlobMap TrainingSession::codec_states() const {
  BlobMap blobs;
  for (const WorkerState& w : worker_)
    for (size_t v = 0; v < w.codecs.size(); ++v) {
      // A codec that keeps state writes it even when fresh (empty: nothing
      // encoded yet, or residuals flushed by a new plan), so a restore
      // tells a fresh state from a missing one.
      auto state = w.codecs[v]->save_state();
      if (!state.empty() || keeps_codec_state(*w.codecs[v])) blobs[codec_blob_name(w.global, v)] = std::move(state);
    }
  return blobs;
}

int64_t TrainingSession::restore() {
  return restore_newest([&](const Checkpoint& c) { return missing_codec_state(c); });
}

int64_t TrainingSession::restore_for_rewind() {
  // Every replica restores the checkpoint the chief picks: one whose step
  // each of them holds its codec state of, when its codecs keep one (each
  // writes its own as it passes the step; the three newest are kept).
  const bool stateful = std::any_of(worker_[0].codecs.begin(), worker_[0].codecs.end(),
                                    [](const auto& c) { return keeps_codec_state(*c); });
  return restore_newest([&](const Checkpoint& c) {
    std::string why = missing_codec_state(c);
    for (int k = 0; why.empty() && stateful && k < num_workers_; ++k) {
      if (std::find(workers_.begin(), workers_.end(), k) != workers_.end()) continue;
      const std::string theirs = checkpoint_path(codec_state_dir(cfg_.train_dir, k), c.step);
      if (!std::filesystem::exists(theirs))
        why = "worker " + std::to_string(k) + " has not written its codec state of this step (" + theirs + ")";
    }
    return why;
  });
}

void TrainingSession::restore_at(int64_t step, bool codec_states) {
  const std::string path = checkpoint_path(cfg_.train_dir, step);
  if (!std::filesystem::exists(path))
    throw std::runtime_error("the run was rewound to step " + std::to_string(step) + " but " + path +
                             " does not exist: every replica must see the chief's train_dir (same path, shared "
                             "storage)");
  restore_from(load_checkpoint(path), false, codec_states);
}

int64_t TrainingSession::restore_newest(const std::function<std::string(const Checkpoint&)>& why_unusable) {
  if (cfg_.train_dir.empty()) return 0;
  std::filesystem::create_directories(cfg_.train_dir);
  // A corrupt latest checkpoint costs the steps since the one before it,
  // not the run; the warning shows even with --quiet. So does one that
  // lacks a codec state: a replica's own are written beside the chief's
  // checkpoint, not in it, and a kill between the two writes leaves the
  // newest without them; the one before (both kept) resumes bit for bit.
  bool fell_back = false;
  auto ck = load_newest_intact_checkpoint(
      cfg_.train_dir,
      [&](const std::string& why) {
        std::fprintf(stderr, "warning: %s; falling back to an earlier checkpoint\n", why.c_str());
        fell_back = true;
      },
      why_unusable);
  if (!ck) return 0;
  restore_from(*ck, fell_back);
  return ck->step;
}

void TrainingSession::restore_from(const Checkpoint& ck, bool fell_back, bool codec_states) {
  load_weights(ck);
  for (auto& [name, slot] : optimizer_->slots()) {
    auto it = ck.tensors.find(name);
    if (it == ck.tensors.end()) throw std::runtime_error(ck.path + ": optimizer slot " + name + " missing");
    *slot = it->second;
  }
  auto opt = ck.blobs.find("optimizer_state");
  if (opt == ck.blobs.end()) throw std::runtime_error(ck.path + ": optimizer_state missing");
  optimizer_->load_state(opt->second);
  for (WorkerState& w : worker_) {
    w.batches->restore_after(ck.step);
    std::optional<Checkpoint> own;
    const std::string own_path = own_codec_state_path(w, ck.step);
    for (size_t v = 0; v < w.codecs.size(); ++v) {
      if (!codec_states) {
        w.codecs[v]->load_state({});
        continue;
      }
      const std::string name = codec_blob_name(w.global, v);
      const BlobMap* blobs = &ck.blobs;
      if (!blobs->count(name) && std::filesystem::exists(own_path)) {
        if (!own) own = load_checkpoint(own_path);
        blobs = &own->blobs;
      }
      if (auto it = blobs->find(name); it != blobs->end()) {
        w.codecs[v]->load_state(it->second);
        continue;
      }
      w.codecs[v]->load_state({});  // fresh (a rewind restores a session that ran on)
      if (keeps_codec_state(*w.codecs[v]))
        std::fprintf(stderr,
                     "warning: worker %d, variable %zu (%s): no codec state (error-feedback residual, warm start) "
                     "for step %lld in %s or %s; its residual starts at zero\n",
                     w.global, v, plan_[v].c_str(), static_cast<long long>(ck.step), ck.path.c_str(),
                     own_path.c_str());
    }
  }
  server_states_.clear();
  for (const auto& [name, blob] : ck.blobs)
    if (name.starts_with(kServerStatePrefix)) server_states_[name] = blob;
  check_server_states(ck.path);
  if (!cfg_.quiet || fell_back)
    std::fprintf(stderr, "resuming from %s at step %lld\n", ck.path.c_str(), static_cast<long long>(ck.step));
}

// The worker's codec state: in the checkpoint (in-process runs, the chief's
// workers) or in its own file at the same step (other replicas).
std::string TrainingSession::own_codec_state_path(const WorkerState& w, int64_t step) const {
  return checkpoint_path(codec_state_dir(cfg_.train_dir, w.global), step);
}

bool TrainingSession::keeps_codec_state(const comm::GradientCodec& codec) {
  return codec.config().error_feedback || codec.observes_aggregate();
}

std::string TrainingSession::missing_codec_state(const Checkpoint& ck) const {
  for (const WorkerState& w : worker_) {
    const std::string own_path = own_codec_state_path(w, ck.step);
    for (size_t v = 0; v < w.codecs.size(); ++v)
      if (keeps_codec_state(*w.codecs[v]) && !ck.blobs.count(codec_blob_name(w.global, v)) &&
          !std::filesystem::exists(own_path))
        return "no codec state of worker " + std::to_string(w.global) + " at its step (neither in it nor " + own_path +
               ": the replica stopped between the two writes)";
  }
  return "";
}

void TrainingSession::load_weights(const Checkpoint& ck) {
  restore_params(params(), ck.tensors);
  restore_state(model_->state(), ck.tensors);
  if (ema_) {
    for (auto& [name, shadow] : ema_->shadows()) {
      auto it = ck.tensors.find(name);
      if (it != ck.tensors.end()) *shadow = it->second;
    }
  }
}

std::string TrainingSession::server_state_name(size_t variable, uint64_t begin, uint64_t count) {
  return kServerStatePrefix + std::to_string(variable) + "@" + std::to_string(begin) + "+" + std::to_string(count);
}

// Every server state names a slice of a variable whose codec keeps one, and
// is one that codec takes: a checkpoint from another model or codec fails
// here, naming the entry.
void TrainingSession::check_server_states(const std::string& path) const {
  const std::vector<VariableInfo> vars = variables();
  for (const auto& [name, blob] : server_states_) {
    const std::string rest = name.substr(std::strlen(kServerStatePrefix));
    const size_t at = rest.find('@'), plus = rest.find('+');
    uint64_t v = 0, begin = 0, count = 0;
    try {
      if (at == std::string::npos || plus == std::string::npos || plus < at ||
          rest.find_first_not_of("0123456789@+") != std::string::npos)
        throw 0;
      v = std::stoull(rest.substr(0, at));
      begin = std::stoull(rest.substr(at + 1, plus - at - 1));
      count = std::stoull(rest.substr(plus + 1));
    } catch (...) {
      throw std::runtime_error(path + ": malformed server state name \"" + name + "\"");
    }
    if (v >= vars.size() || count == 0 || begin >= vars[v].size || count > vars[v].size - begin)
      throw std::runtime_error(path + ": server state \"" + name + "\" is for no slice of this model");
    const comm::GradientCodec& c = codec(0, v);
    if (!c.aggregate_keeps_state())
      throw std::runtime_error(path + ": server state \"" + name + "\" for variable " + vars[v].name +
                               ", whose codec " + c.spec() + " keeps none");
    try {
      c.validate_aggregate_state(blob, count);
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": " + name + ": " + e.what());
    }
  }
}

void TrainingSession::save(int64_t step) {
  if (cfg_.train_dir.empty()) return;
  BlobMap blobs = codec_states();
  for (const auto& [name, blob] : server_states_)
    if (!blob.empty()) blobs[name] = blob;
  blobs["optimizer_state"] = optimizer_->save_state();
  if (comm::is_auto_codec(cfg_.codec)) {  // a resumed run keeps the codecs its states were made with
    std::string plan;
    for (const std::string& spec : plan_) plan += spec + "\n";
    blobs[kCodecPlanBlob].assign(plan.begin(), plan.end());
  }
  save_checkpoint(cfg_.train_dir, step, state_tensors(), blobs, 3);
}

std::optional<std::vector<std::string>> TrainingSession::checkpointed_plan() const {
  if (cfg_.train_dir.empty() || !std::filesystem::exists(cfg_.train_dir)) return std::nullopt;
  const auto ck = load_newest_intact_checkpoint(cfg_.train_dir, [](const std::string&) {});
  if (!ck) return std::nullopt;
  const auto it = ck->blobs.find(kCodecPlanBlob);
  if (it == ck->blobs.end()) return std::nullopt;
  std::vector<std::string> plan;
  std::string line;
  for (uint8_t b : it->second) {
    if (b != '\n') {
      line += static_cast<char>(b);
      continue;
    }
    plan.push_back(line);
    line.clear();
  }
  if (!line.empty() || plan.size() != num_variables())
    throw std::runtime_error(ck->path + ": blob " + kCodecPlanBlob + " holds " + std::to_string(plan.size()) +
                             " codecs" + (line.empty() ? "" : " and an unterminated line") + " for " +
                             std::to_string(num_variables()) + " variables");
  return plan;
}

void TrainingSession::save_codec_states(int64_t step) {
  if (cfg_.train_dir.empty()) return;
  for (const WorkerState& w : worker_) {
    BlobMap blobs;
    for (size_t v = 0; v < w.codecs.size(); ++v)
      if (auto state = w.codecs[v]->save_state(); !state.empty() || keeps_codec_state(*w.codecs[v]))
        blobs[codec_blob_name(w.global, v)] = std::move(state);  // empty: fresh (codec_states())
    if (!blobs.empty()) save_checkpoint(codec_state_dir(cfg_.train_dir, w.global), step, {}, blobs, 3);
  }
}

void TrainingSession::next_batch(size_t local, int64_t step, Tensor& x, std::vector<int32_t>& labels) {
  WorkerState& w = worker_[local];
  w.batches->next(step, x, labels);
}

void TrainingSession::save_gradients(size_t local, int64_t step) const {
  if (cfg_.save_gradients.empty() || step % cfg_.save_gradients_every != 0) return;
  const std::filesystem::path dir = std::filesystem::path(cfg_.save_gradients) / ("step-" + std::to_string(step)) /
                                    ("worker-" + std::to_string(worker_[local].global));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error("--save_gradients: cannot create " + dir.string() + ": " + ec.message());
  const ParamSet& ps = model_->params();
  for (size_t v = 0; v < ps.size(); ++v) {
    std::vector<uint64_t> shape(ps.params[v].value.shape.begin(), ps.params[v].value.shape.end());
    std::string name = ps.params[v].name;
    std::replace(name.begin(), name.end(), '/', '_');
    char index[24];  // a size_t in decimal, "-" and the NUL always fit
    std::snprintf(index, sizeof index, "%02zu-", v);
    tools::write_tensor((dir / (index + name + ".npy")).string(), tools::TensorFormat::kNpy, shape,
                        worker_[local].grads[v].data);
  }
}

float TrainingSession::compute_gradient(size_t local, int64_t step, const VariableReady& ready,
                                        const Model::ParamsNeeded& needed, const VariablePartReady& part_ready) {
  WorkerState& w = worker_[local];
  next_batch(local, step, w.x, w.labels);
  ForwardContext ctx;
  ctx.training = true;
  ctx.dropout_seed = stream_seed(cfg_.seed, step, w.global, Purpose::kDropout);
  const ParamSet& ps = model_->params();
  std::vector<bool> done(ps.size(), false);
  std::vector<int64_t> decayed(ps.size(), 0);  // [v] elements [0, this) have their weight decay
  auto decay = [&](size_t v, int64_t end) {
    const Param& p = ps.params[v];
    if (p.weight_decay != 0.0f) {
      float* g = w.grads[v].ptr();
      const float* x = p.value.ptr();
      const float wd = p.weight_decay;
      for (int64_t i = decayed[v]; i < end; ++i) g[i] += wd * x[i];
    }
    decayed[v] = std::max(decayed[v], end);
  };
  // Weight decay and the local scale complete a variable's gradient.
  auto finish = [&](float loss, size_t v) {
    decay(v, ps.params[v].value.size());
    w.scales[v] = w.codecs[v]->wants_shared_scale() ? w.codecs[v]->local_scale(w.grads[v].data) : 0.0f;
    done[v] = true;
    if (ready) ready(loss, v);
  };
  Model::GradsReady layer_done;
  if (ready)
    layer_done = [&](float loss, size_t first, size_t end) {
      for (size_t v = end; v-- > first;) finish(loss, v);
    };
  Model::GradsPartReady part_done;
  if (part_ready)
    part_done = [&](float loss, size_t v, int64_t elements) {
      decay(v, elements);
      part_ready(loss, v, elements);
    };
  const float loss = model_->forward_backward(w.ws, w.x, w.labels, w.grads, ctx, layer_done, needed, part_done);
  // Batch norm's moving statistics: from this process's first worker's batch
  // (session.h says why that is safe while the other workers compute).
  if (local == 0) model_->fold_state(w.ws);
  for (size_t v = ps.size(); v-- > 0;)
    if (!done[v]) finish(loss, v);
  return loss;
}

float TrainingSession::fixed_gradient(size_t local, const VariableReady& ready) {
  WorkerState& w = worker_[local];
  if (!w.fixed) {
    std::mt19937_64 rng(stream_seed(cfg_.seed, 0, w.global, Purpose::kCodec) ^ 0x5eedf15edull);
    std::normal_distribution<float> normal(0.0f, 0.01f);
    for (size_t v = 0; v < w.grads.size(); ++v)
      for (float& g : w.grads[v].data) g = normal(rng);
    w.fixed = true;
  }
  // Every step, as compute_gradient does: under error feedback the scale is
  // that of gradient + residual, which changes (a scale kept from the first
  // step fell below the encoder's own, and the run failed at step 2).
  for (size_t v = 0; v < w.grads.size(); ++v)
    w.scales[v] = w.codecs[v]->wants_shared_scale() ? w.codecs[v]->local_scale(w.grads[v].data) : 0.0f;
  for (size_t v = w.grads.size(); ready && v-- > 0;) ready(0.0f, v);
  return 0.0f;
}

void TrainingSession::encode(size_t local, int64_t step, const std::vector<float>& shared,
                             const std::vector<std::vector<comm::ElementRange>>& slices,
                             const std::vector<std::vector<std::span<uint8_t>>>& outs) {
  for (size_t v = 0; v < worker_[local].codecs.size(); ++v) encode_variable(local, step, v, shared, slices[v], outs[v]);
}

void TrainingSession::encode_variable(size_t local, int64_t step, size_t v, const std::vector<float>& shared,
                                      std::span<const comm::ElementRange> slices,
                                      std::span<const std::span<uint8_t>> outs) {
  WorkerState& w = worker_[local];
  comm::EncodeContext ec;
  ec.tensor_id = static_cast<uint32_t>(v);
  ec.step = static_cast<uint32_t>(step);
  ec.seed = stream_seed(cfg_.seed, 0, w.global, Purpose::kCodec);
  // A late backup worker may find the shared scale below its own: it then
  // encodes with its own, and the server sums that slice in float32.
  if (w.codecs[v]->wants_shared_scale()) ec.shared_scale = std::max(shared[v], w.scales[v]);
  for (const std::vector<float>& sum : presum_sums_[v]) ec.presums.emplace_back(sum);
  w.codecs[v]->encode_slices(w.grads[v].data, ec, slices, outs);
}

void TrainingSession::apply(int64_t step, GradSet& update_sum, int replicas) {
  const float inv_r = 1.0f / static_cast<float>(replicas);
  for (Tensor& t : update_sum)
    for (float& g : t.data) g *= inv_r;
  optimizer_->apply(params(), update_sum, static_cast<float>(schedule_->lr(step)));
  if (ema_) ema_->update(params(), step);
}

void TrainingSession::apply_range(int64_t step, GradSet& update_sum, size_t v, int64_t begin, int64_t count,
                                  int replicas) {
  const Tensor& sum = update_sum.at(v);
  check_element_range("apply_range", "variable " + std::to_string(v), begin, count, sum.size());
  const float inv_r = 1.0f / static_cast<float>(replicas);
  for (float& g : std::span<float>(update_sum[v].data).subspan(begin, count)) g *= inv_r;
  optimizer_->apply_range(params(), update_sum, v, begin, count, static_cast<float>(schedule_->lr(step)));
  if (ema_) ema_->update_range(params(), v, begin, count, step);
}

void TrainingSession::finish_apply() { optimizer_->finish_step(); }

StreamingLoader::Stats TrainingSession::input_stats() const {
  StreamingLoader::Stats sum;
  for (const WorkerState& w : worker_)
    if (auto st = w.batches->stream_stats()) {
      sum.batches += st->batches;
      sum.images += st->images;
      sum.skipped += st->skipped;
      sum.busy_s += st->busy_s;
      sum.wait_s += st->wait_s;
      sum.wall_s = std::max(sum.wall_s, st->wall_s);
      sum.threads += st->threads;
    }
  sum.skipped += eval_skipped_.load();
  return sum;
}

void TrainingSession::evaluate_into(TrainResult& r, const DeviceLogits* device) {
  const EvalData test = eval_data(data_, cfg_, &eval_skipped_);
  const EvalResult raw = device ? evaluate_with(device->raw, test, cfg_) : evaluate(*model_, test, cfg_);
  r.top1 = raw.top1;
  r.top5 = raw.top5;
  r.eval_examples = raw.examples;
  if (data_.streamed()) {
    const StreamingLoader::Stats in = input_stats();
    r.input_images = in.images;
    r.input_images_per_sec = in.capacity_per_s();
    r.input_wait_seconds = in.wait_s;
    r.skipped_examples = in.skipped;
  }
  if (!ema_) return;
  EvalResult e;
  if (device) {
    e = evaluate_with(device->average, test, cfg_);
  } else {
    ema_->swap(params());
    try {
      e = evaluate(*model_, test, cfg_);
    } catch (...) {
      ema_->swap(params());  // the raw weights back before the error leaves
      throw;
    }
    ema_->swap(params());
  }
  r.ema_top1 = e.top1;
  r.ema_top5 = e.top5;
}

}  // namespace terngrad::train::detail
