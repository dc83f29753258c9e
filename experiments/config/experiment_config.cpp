#include "experiment_config.h"

#include "terngrad/comm/codec_choice.h"
#include "terngrad/comm/codec_config.h"
#include "terngrad/comm/link_rate.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "emulated_network.h"
#include "terngrad/train/datasets.h"
#include "terngrad/train/image_folder.h"
#include "terngrad/train/tfrecord.h"
#include "terngrad/train/train_config.h"

namespace terngrad::experiments {
namespace {

// Collects the parser's messages with the file name in front, as compilers do.
class ErrorList : public google::protobuf::io::ErrorCollector {
 public:
  explicit ErrorList(std::string source) : source_(std::move(source)) {}
  void AddError(int line, int column, const std::string& message) override {
    // The parser counts from 0; editors count from 1.
    out_ << source_ << ":" << line + 1 << ":" << column + 1 << ": " << message << "\n";
  }
  void AddWarning(int line, int column, const std::string& message) override { AddError(line, column, message); }
  std::string text() const { return out_.str(); }

 private:
  std::string source_;
  std::ostringstream out_;
};

[[noreturn]] void bad(const std::string& source, const std::string& field, const std::string& why,
                      const std::string& got) {
  throw std::invalid_argument(source + ": " + field + ": " + why + " (got " + got + ")");
}

std::string num(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

void check_positive(const std::string& source, const std::string& field, double v) {
  if (!(v > 0) || !std::isfinite(v)) bad(source, field, "must be a positive finite number", num(v));
}

void check_non_negative(const std::string& source, const std::string& field, double v) {
  if (!(v >= 0) || !std::isfinite(v)) bad(source, field, "must be >= 0", num(v));
}

bool is_terngrad(const Codec& c) { return c.name() == "terngrad"; }

double learning_rate_for(const ExperimentConfig& cfg, int workers) {
  for (const auto& w : cfg.optimizer().learning_rate_for_workers())
    if (w.workers() == workers) return w.learning_rate();
  return cfg.optimizer().learning_rate();
}

}  // namespace

ExperimentConfig parse_experiment_config(const std::string& text, const std::string& source) {
  ExperimentConfig cfg;
  ErrorList errors(source);
  google::protobuf::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &cfg)) {
    std::string msg = errors.text();
    if (msg.empty()) msg = source + ": not a valid ExperimentConfig\n";
    msg.pop_back();
    throw std::invalid_argument(msg);
  }
  if (cfg.seeds_size() == 0) cfg.add_seeds(1);
  validate_experiment(cfg, source);
  return cfg;
}

ExperimentConfig load_experiment_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument(path + ": cannot open the config file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_experiment_config(text.str(), path);
}

namespace {

// The run's name and the paper's figures it quotes.
void check_name_and_paper(const ExperimentConfig& cfg, const std::string& source) {
  const std::string& name = cfg.name();
  if (name.empty()) bad(source, "name", "is required (it names the run directories)", "nothing");
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
      bad(source, "name", "may hold only letters, digits, '_', '-' and '.'", "\"" + name + "\"");
  for (int i = 0; i < cfg.paper_size(); ++i) {
    const PaperResult& r = cfg.paper(i);
    const std::string at = "paper[" + std::to_string(i) + "]";
    if (r.workers() < 1) bad(source, at + ".workers", "must be >= 1", num(r.workers()));
    if (!(r.top1() >= 0 && r.top1() <= 1)) bad(source, at + ".top1", "is an accuracy in [0, 1]", num(r.top1()));
    if (!(r.top5() >= 0 && r.top5() <= 1)) bad(source, at + ".top5", "is an accuracy in [0, 1]", num(r.top5()));
  }
}

// The net and its hyperparameters.
void check_model(const ExperimentConfig& cfg, const std::string& source) {
  const Model& m = cfg.model();
  if (m.net() == Model::NET_UNSPECIFIED) bad(source, "model.net", "is required: LENET, CIFARNET, ALEXNET, GOOGLENET or VGG_A", "nothing");
  if (m.num_classes() < 0) bad(source, "model.num_classes", "must be >= 0", num(m.num_classes()));
  if (m.keep_prob() != -1 && !(m.keep_prob() > 0 && m.keep_prob() <= 1))
    bad(source, "model.keep_prob", "is a probability in (0, 1] (or -1 for the net's default)", num(m.keep_prob()));
  if (m.weight_decay() != -1) check_non_negative(source, "model.weight_decay", m.weight_decay());
  if (!(m.moving_average_decay() >= 0 && m.moving_average_decay() < 1))
    bad(source, "model.moving_average_decay", "must be in [0, 1)", num(m.moving_average_decay()));
}

// The data, and which nets take its images.
void check_dataset(const ExperimentConfig& cfg, const std::string& source) {
  const Model& m = cfg.model();
  const Dataset& d = cfg.dataset();
  if (d.format() == Dataset::FORMAT_UNSPECIFIED)
    bad(source, "dataset.format", "is required: IDX, CIFAR10_BINARY, TFRECORD, IMAGE_FOLDER or SYNTHETIC", "nothing");
  if (d.format() != Dataset::SYNTHETIC && d.path().empty())
    bad(source, "dataset.path", "is required for " + Dataset::Format_Name(d.format()), "nothing");
  if (d.format() == Dataset::IDX && m.net() != Model::LENET)
    bad(source, "dataset.format", "IDX images are 28x28x1, which only LENET takes", "IDX with " + Model::Net_Name(m.net()));
  if (d.format() == Dataset::CIFAR10_BINARY && m.net() != Model::CIFARNET)
    bad(source, "dataset.format", "CIFAR10_BINARY images are 32x32x3, which only CIFARNET takes",
        "CIFAR10_BINARY with " + Model::Net_Name(m.net()));
  const bool imagenet_net = m.net() == Model::ALEXNET || m.net() == Model::GOOGLENET || m.net() == Model::VGG_A;
  if (d.format() == Dataset::IMAGE_FOLDER && !imagenet_net)
    bad(source, "dataset.format", "IMAGE_FOLDER streams ImageNet-style 224x224 inputs (ALEXNET, GOOGLENET, VGG_A)",
        "IMAGE_FOLDER with " + Model::Net_Name(m.net()));
  const bool streamed = imagenet_net && (d.format() == Dataset::TFRECORD || d.format() == Dataset::IMAGE_FOLDER);
  if (streamed && d.preprocessing() != Dataset::DEFAULT)
    bad(source, "dataset.preprocessing", "streamed ImageNet is preprocessed per net; leave it DEFAULT",
        Dataset::Preprocessing_Name(d.preprocessing()));
  if (d.synthetic_examples() < 1) bad(source, "dataset.synthetic_examples", "must be >= 1", num(d.synthetic_examples()));
  if (d.epoch_examples() < 0) bad(source, "dataset.epoch_examples", "must be >= 0", num(d.epoch_examples()));
}

// Workers, ps tasks, devices and emulated links.
void check_cluster(const ExperimentConfig& cfg, const std::string& source) {
  const Cluster& c = cfg.cluster();
  if (c.num_workers() < 1) bad(source, "cluster.num_workers", "must be >= 1", num(c.num_workers()));
  if (c.num_ps() < 1) bad(source, "cluster.num_ps", "must be >= 1", num(c.num_ps()));
  if (c.replicas_to_aggregate() < 0) bad(source, "cluster.replicas_to_aggregate", "must be >= 0", num(c.replicas_to_aggregate()));
  if (c.mode() == Cluster::IN_PROCESS && !c.sync())
    bad(source, "cluster.sync", "virtual workers in one process are synchronous; async needs mode: LOCAL_CLUSTER", "false");
  if (c.mode() == Cluster::IN_PROCESS && c.evaluator())
    bad(source, "cluster.evaluator", "an evaluator process needs mode: LOCAL_CLUSTER", "true");
  if (c.num_gpus() < 1) bad(source, "cluster.num_gpus", "must be >= 1", num(c.num_gpus()));
  if (c.num_gpus() > 1 && c.device() != Cluster::GPU)
    bad(source, "cluster.num_gpus", "several GPUs need device: GPU", num(c.num_gpus()));
  if (c.num_gpus() > 1 && c.mode() != Cluster::IN_PROCESS)
    bad(source, "cluster.num_gpus", "a LOCAL_CLUSTER replica is one worker on one GPU; several GPUs need mode: IN_PROCESS",
        num(c.num_gpus()));
  if (c.mode() == Cluster::IN_PROCESS && c.replicas_to_aggregate() > 0)
    bad(source, "cluster.replicas_to_aggregate", "backup workers need mode: LOCAL_CLUSTER", num(c.replicas_to_aggregate()));
  // "" is the default (loopback), so the fields count as set when non-empty.
  const std::string& link = c.link_rate();
  const std::string& ps_link = c.ps_link_rate();
  if (!link.empty() && !link_rate_problem(link).empty())
    bad(source, "cluster.link_rate", link_rate_problem(link), "\"" + link + "\"");
  if (!ps_link.empty() && !link_rate_problem(ps_link).empty())
    bad(source, "cluster.ps_link_rate", link_rate_problem(ps_link), "\"" + ps_link + "\"");
  if (!ps_link.empty() && link.empty())
    bad(source, "cluster.ps_link_rate", "needs link_rate (the other tasks' links)", "\"" + ps_link + "\"");
  if (!link.empty() && c.mode() != Cluster::LOCAL_CLUSTER)
    bad(source, "cluster.link_rate", "emulated links join task processes; they need mode: LOCAL_CLUSTER",
        "\"" + link + "\"");
}

// The batch and the run's length.
void check_training(const ExperimentConfig& cfg, const std::string& source) {
  const Training& t = cfg.training();
  if (t.batch_case() == Training::BATCH_NOT_SET)
    bad(source, "training", "needs batch_per_worker or total_batch", "neither");
  if (t.has_batch_per_worker()) check_positive(source, "training.batch_per_worker", t.batch_per_worker());
  if (t.has_total_batch()) check_positive(source, "training.total_batch", t.total_batch());
  if (t.length_case() == Training::LENGTH_NOT_SET) bad(source, "training", "needs steps or epochs", "neither");
  if (t.has_steps()) check_positive(source, "training.steps", t.steps());
  if (t.has_epochs()) check_positive(source, "training.epochs", t.epochs());
}

// The optimizer and its learning-rate schedule.
void check_optimizer(const ExperimentConfig& cfg, const std::string& source) {
  const Optimizer& o = cfg.optimizer();
  if (o.type() == Optimizer::TYPE_UNSPECIFIED)
    bad(source, "optimizer.type", "is required: SGD, MOMENTUM, ADAM or RMSPROP", "nothing");
  if (o.has_learning_rate() || o.learning_rate_for_workers_size() == 0)
    check_positive(source, "optimizer.learning_rate", o.learning_rate());
  for (int i = 0; i < o.learning_rate_for_workers_size(); ++i) {
    const auto& w = o.learning_rate_for_workers(i);
    const std::string at = "optimizer.learning_rate_for_workers[" + std::to_string(i) + "]";
    if (w.workers() < 1) bad(source, at + ".workers", "must be >= 1", num(w.workers()));
    check_positive(source, at + ".learning_rate", w.learning_rate());
  }
  if (!(o.momentum() >= 0 && o.momentum() < 1)) bad(source, "optimizer.momentum", "must be in [0, 1)", num(o.momentum()));
  const LearningRateDecay& lr = o.decay();
  if (lr.type() == LearningRateDecay::POLYNOMIAL) check_positive(source, "optimizer.decay.power", lr.power());
  check_non_negative(source, "optimizer.decay.end_learning_rate", lr.end_learning_rate());
  if (lr.type() == LearningRateDecay::EXPONENTIAL) {
    if (!(lr.factor() > 0 && lr.factor() <= 1)) bad(source, "optimizer.decay.factor", "must be in (0, 1]", num(lr.factor()));
    if (lr.period_case() == LearningRateDecay::PERIOD_NOT_SET)
      bad(source, "optimizer.decay", "EXPONENTIAL needs decay_steps or decay_epochs", "neither");
  }
  if (lr.has_decay_steps()) check_positive(source, "optimizer.decay.decay_steps", lr.decay_steps());
  if (lr.has_decay_epochs()) check_positive(source, "optimizer.decay.decay_epochs", lr.decay_epochs());
}

// Evaluation, checkpoints and logging.
void check_evaluation(const ExperimentConfig& cfg, const std::string& source) {
  const Evaluation& e = cfg.evaluation();
  check_non_negative(source, "evaluation.interval_steps", e.interval_steps());
  check_positive(source, "evaluation.batch_size", e.batch_size());
  check_non_negative(source, "evaluation.max_examples", e.max_examples());
  check_non_negative(source, "evaluation.save_interval_steps", e.save_interval_steps());
  check_positive(source, "evaluation.log_every_n_steps", e.log_every_n_steps());
}

// The codec.
void check_codec(const ExperimentConfig& cfg, const std::string& source) {
  const Codec& k = cfg.codec();
  if (k.name().empty()) bad(source, "codec.name", "is required: fp32, terngrad or a registry codec", "\"\"");
  if (k.has_name() && (k.name() == "fp32" || is_terngrad(k)) && !k.spec().empty())
    bad(source, "codec.spec", "is for registry codecs; " + k.name() + " takes its own fields", "\"" + k.spec() + "\"");
  const bool automatic = terngrad::comm::is_auto_codec(k.spec());
  if (!k.spec().empty()) {
    try {
      if (automatic)
        (void)terngrad::comm::parse_auto_codec(k.spec(), cfg.cluster().sync());
      else
        (void)terngrad::comm::parse_codec_config(k.spec());
    } catch (const std::invalid_argument& e) {
      bad(source, "codec.spec", e.what(), "\"" + k.spec() + "\"");
    }
  }
  if (k.has_auto_link_rate()) {
    if (!automatic) bad(source, "codec.auto_link_rate", "is for spec \"auto\" or \"auto(...)\"", "\"" + k.auto_link_rate() + "\"");
    if (const std::string why = terngrad::comm::link_rate_problem(k.auto_link_rate()); !why.empty())
      bad(source, "codec.auto_link_rate", why, "\"" + k.auto_link_rate() + "\"");
  }
  if (k.has_auto_link_changes()) {
    if (!automatic)
      bad(source, "codec.auto_link_changes", "is for spec \"auto\" or \"auto(...)\"", "\"" + k.auto_link_changes() + "\"");
    if (const std::string why = terngrad::comm::link_changes_problem(k.auto_link_changes()); !why.empty())
      bad(source, "codec.auto_link_changes", why, "\"" + k.auto_link_changes() + "\"");
  }
  check_positive(source, "codec.clip", k.clip());
  if (k.size_to_binarize() < 1) bad(source, "codec.size_to_binarize", "must be >= 1", num(k.size_to_binarize()));
}

// The seeds of the grid.
void check_seeds(const ExperimentConfig& cfg, const std::string& source) {
  for (int i = 0; i < cfg.seeds_size(); ++i)
    for (int j = 0; j < i; ++j)
      if (cfg.seeds(i) == cfg.seeds(j)) bad(source, "seeds", "lists a seed twice", num(cfg.seeds(i)));
}

}  // namespace

void validate_experiment(const ExperimentConfig& cfg, const std::string& source) {
  check_name_and_paper(cfg, source);
  check_model(cfg, source);
  check_dataset(cfg, source);
  check_cluster(cfg, source);
  check_training(cfg, source);
  check_optimizer(cfg, source);
  check_evaluation(cfg, source);
  check_codec(cfg, source);
  check_seeds(cfg, source);
}

ExperimentConfig at_grid_point(const ExperimentConfig& cfg, int workers, uint64_t seed, int64_t steps_override,
                               const std::string& source) {
  ExperimentConfig p = cfg;
  if (workers < 1) bad(source, "cluster.num_workers", "must be >= 1", num(workers));
  p.mutable_cluster()->set_num_workers(workers);
  p.clear_seeds();
  p.add_seeds(seed);
  if (steps_override > 0) p.mutable_training()->set_steps(steps_override);
  const Training& t = p.training();
  // total_batch() multiplies these: an overflow there is undefined behaviour.
  if (t.has_batch_per_worker() && t.batch_per_worker() > std::numeric_limits<int64_t>::max() / workers)
    bad(source, "training.batch_per_worker", "times " + std::to_string(workers) + " workers exceeds 2^63",
        std::to_string(t.batch_per_worker()));
  if (t.has_total_batch() && t.total_batch() % workers != 0)
    bad(source, "training.total_batch", "does not divide among " + std::to_string(workers) + " workers",
        num(t.total_batch()));
  if (p.cluster().num_gpus() > workers)
    bad(source, "cluster.num_gpus", "exceeds the " + std::to_string(workers) + " workers", num(p.cluster().num_gpus()));
  if (p.cluster().replicas_to_aggregate() > workers)
    bad(source, "cluster.replicas_to_aggregate", "exceeds the " + std::to_string(workers) + " workers",
        num(p.cluster().replicas_to_aggregate()));
  return p;
}

ExperimentConfig at_link_rate(const ExperimentConfig& point, const std::string& rate, const std::string& source) {
  ExperimentConfig p = point;
  p.mutable_cluster()->set_link_rate(rate);
  validate_experiment(p, source + " (--link_rates=" + rate + ")");
  return p;
}

int64_t training_set_size(const ExperimentConfig& cfg) {
  const Dataset& d = cfg.dataset();
  if (d.epoch_examples() > 0) return d.epoch_examples();
  switch (d.format()) {
    case Dataset::IDX:
      return train::load_idx_dir(d.path(), true).count;
    case Dataset::CIFAR10_BINARY:
      return train::load_cifar10(d.path(), true).count;
    case Dataset::IMAGE_FOLDER:
      return train::open_image_folder_splits(d.path()).train->size();
    case Dataset::TFRECORD: {
      // Counting records needs only the headers (no decoding).
      const Model::Net net = cfg.model().net();
      const std::string name = net == Model::LENET ? "mnist" : net == Model::CIFARNET ? "cifar10" : "imagenet";
      int64_t n = 0;
      for (const std::string& f : train::tfrecord_split_files(d.path(), name, true)) n += train::TfRecordFile(f, false).size();
      return n;
    }
    default:
      return d.synthetic_examples();
  }
}

namespace {
int64_t total_batch(const ExperimentConfig& p) {
  const Training& t = p.training();
  return t.has_total_batch() ? t.total_batch() : t.batch_per_worker() * p.cluster().num_workers();
}
// More steps than any run takes, and few enough that the double converts to
// int64 exactly (a larger double's conversion is undefined behaviour).
constexpr double kMaxSteps = 1e15;

// field names what the epochs came from, for the error.
int64_t epochs_to_steps(const char* field, double epochs, int64_t train_examples, int64_t batch) {
  const double steps = std::ceil(epochs * static_cast<double>(train_examples) / static_cast<double>(batch));
  if (!(steps <= kMaxSteps))
    throw std::invalid_argument(std::string(field) + ": " + num(epochs) + " epochs of " +
                                std::to_string(train_examples) + " examples at a total batch of " +
                                std::to_string(batch) + " is " + num(steps) + " steps, more than " + num(kMaxSteps));
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}
}  // namespace

int64_t training_steps(const ExperimentConfig& p, int64_t train_examples) {
  if (p.training().has_steps()) return p.training().steps();
  return epochs_to_steps("training.epochs", p.training().epochs(), train_examples, total_batch(p));
}

std::string codec_label(const ExperimentConfig& cfg) {
  const Codec& k = cfg.codec();
  if (terngrad::comm::is_auto_codec(k.spec())) {  // the candidates, canonical: "auto(fp32,fp16,...)"
    std::string label;
    for (const std::string& c : terngrad::comm::parse_auto_codec(k.spec(), cfg.cluster().sync()).candidates)
      label += (label.empty() ? "auto(" : ",") + c;
    return label + ")";
  }
  if (!k.spec().empty()) return terngrad::comm::to_spec(terngrad::comm::parse_codec_config(k.spec()));
  return k.name();
}

// The codec's tg-train flags: a registry spec as --codec, fp32 and terngrad
// as the TernGrad scripts' --grad_bits and their fields.
static void add_codec_flags(const Codec& k, std::vector<std::string>& f) {
  auto flag = [&f](const std::string& name, const std::string& value) { f.push_back("--" + name + "=" + value); };
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  if (!k.spec().empty()) {
    flag("codec", k.spec());
  } else if (k.name() == "fp32") {
    flag("grad_bits", "32");
  } else if (is_terngrad(k)) {
    flag("grad_bits", "2");
    flag("clip_factor", num(k.clip()));
    flag("share_scale", b(k.share_scale()));
  } else {
    flag("codec", k.name());
  }
  if (k.has_auto_link_rate()) flag("auto_link_rate", k.auto_link_rate());
  if (k.has_auto_link_changes()) flag("auto_link_changes", k.auto_link_changes());
  flag("size_to_binarize", std::to_string(k.size_to_binarize()));
  flag("quantize_logits", b(k.quantize_logits()));
}

std::vector<std::string> train_flags(const ExperimentConfig& p, int64_t train_examples) {
  const int workers = p.cluster().num_workers();
  const Training& t = p.training();
  const int64_t per_worker = t.has_total_batch() ? t.total_batch() / workers : t.batch_per_worker();
  const int64_t steps = training_steps(p, train_examples);
  std::vector<std::string> f;
  auto flag = [&f](const std::string& name, const std::string& value) { f.push_back("--" + name + "=" + value); };
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };

  static const char* const kNets[] = {"", "lenet", "cifarnet", "alexnet", "googlenet", "vgg_a"};
  flag("net", kNets[p.model().net()]);
  static const char* const kFormats[] = {"", "mnist", "cifar10", "synthetic", "", ""};
  const Dataset& d = p.dataset();
  if (d.format() == Dataset::TFRECORD || d.format() == Dataset::IMAGE_FOLDER) {
    const Model::Net net = p.model().net();
    flag("dataset_name", net == Model::LENET ? "mnist" : net == Model::CIFARNET ? "cifar10" : "imagenet");
    flag("data_format", d.format() == Dataset::TFRECORD ? "tfrecord" : "folder");
  } else {
    flag("dataset_name", kFormats[d.format()]);
  }
  if (!d.path().empty()) flag("data_dir", d.path());
  static const char* const kPre[] = {"", "lenet", "cifar", "standardize"};
  if (d.preprocessing() != Dataset::DEFAULT) flag("preprocessing", kPre[d.preprocessing()]);
  if (d.format() == Dataset::SYNTHETIC) flag("synthetic_examples", std::to_string(d.synthetic_examples()));
  if (p.model().num_classes() > 0) flag("num_classes", std::to_string(p.model().num_classes()));
  flag("keep_prob", num(p.model().keep_prob()));
  flag("weight_decay", num(p.model().weight_decay()));
  flag("moving_average_decay", num(p.model().moving_average_decay()));

  flag("num_nodes", std::to_string(workers));
  if (p.cluster().device() == Cluster::GPU) flag("device", "gpu");
  if (p.cluster().device() == Cluster::GPU && p.cluster().num_gpus() > 1)
    flag("num_gpus", std::to_string(p.cluster().num_gpus()));
  flag("batch_size", std::to_string(per_worker));
  flag("max_steps", std::to_string(steps));

  const Optimizer& o = p.optimizer();
  static const char* const kOpt[] = {"", "sgd", "momentum", "adam", "rmsprop"};
  flag("optimizer", kOpt[o.type()]);
  flag("initial_learning_rate", num(learning_rate_for(p, workers)));
  flag("momentum", num(o.momentum()));
  const LearningRateDecay& lr = o.decay();
  static const char* const kDecay[] = {"fixed", "polynomial", "exponential"};
  flag("learning_rate_decay_type", kDecay[lr.type()]);
  flag("learning_rate_power", num(lr.power()));
  flag("end_learning_rate", num(lr.end_learning_rate()));
  flag("learning_rate_decay_factor", num(lr.factor()));
  flag("staircase", b(lr.staircase()));
  if (lr.has_decay_steps()) flag("decay_steps", num(lr.decay_steps()));
  if (lr.has_decay_epochs())
    flag("decay_steps", std::to_string(epochs_to_steps("optimizer.decay.decay_epochs", lr.decay_epochs(), train_examples, total_batch(p))));

  add_codec_flags(p.codec(), f);

  flag("seed", std::to_string(p.seeds(0)));
  const Evaluation& e = p.evaluation();
  flag("eval_interval_steps", std::to_string(e.interval_steps()));
  flag("eval_batch_size", std::to_string(e.batch_size()));
  flag("max_eval_examples", std::to_string(e.max_examples()));
  flag("save_interval_steps", std::to_string(e.save_interval_steps()));
  flag("log_every_n_steps", std::to_string(e.log_every_n_steps()));
  if (p.cluster().mode() == Cluster::LOCAL_CLUSTER) {
    flag("sync_replicas", b(p.cluster().sync()));
    if (p.cluster().replicas_to_aggregate() > 0)
      flag("replicas_to_aggregate", std::to_string(p.cluster().replicas_to_aggregate()));
  }
  return f;
}

std::string to_text(const ExperimentConfig& cfg) {
  std::string out;
  google::protobuf::TextFormat::PrintToString(cfg, &out);
  return out;
}

}  // namespace terngrad::experiments
