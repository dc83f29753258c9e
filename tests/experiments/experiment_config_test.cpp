// ExperimentConfig: every shipped config parses, validates and turns into
// tg-train flags the trainer accepts at each of its grid points; syntax
// errors, unknown fields and invalid values are refused naming the file,
// line or field; the config -> flags mapping (batch split, epochs, learning
// rate per worker count, codec) is what the proto documents.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "experiment_config.h"
#include "terngrad/train/train_config.h"

namespace tx = terngrad::experiments;
namespace fs = std::filesystem;

namespace {

const char kValid[] = R"(
name: "t"
model { net: LENET }
dataset { format: SYNTHETIC }
training { total_batch: 64 steps: 100 }
optimizer { type: MOMENTUM learning_rate: 0.01 }
codec { name: "terngrad" }
)";

std::string error_of(const std::string& text) {
  try {
    tx::parse_experiment_config(text, "cfg.pbtxt");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

bool has_flag(const std::vector<std::string>& flags, const std::string& f) {
  return std::find(flags.begin(), flags.end(), f) != flags.end();
}

}  // namespace

TEST(ExperimentConfig, EveryShippedConfigRunsAtItsGridPoints) {
  int files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(TG_PAPER_CONFIGS)) {
    if (entry.path().extension() != ".pbtxt") continue;
    ++files;
    SCOPED_TRACE(entry.path().string());
    const tx::ExperimentConfig cfg = tx::load_experiment_config(entry.path().string());
    ASSERT_FALSE(cfg.name().empty());
    // The paper's worker counts, and the Fashion-MNIST grids'.
    for (int workers : {2, 4, 8, 16}) {
      if (cfg.training().has_total_batch() && cfg.training().total_batch() % workers != 0) continue;
      const tx::ExperimentConfig point = tx::at_grid_point(cfg, workers, 7, 0, entry.path().string());
      // Epoch arithmetic without the data: these configs state their epoch size.
      const int64_t examples = cfg.training().has_steps() && !cfg.optimizer().decay().has_decay_epochs()
                                   ? 0
                                   : tx::training_set_size(cfg);
      const auto flags = tx::train_flags(point, examples);
      terngrad::train::TrainConfig tc;
      ASSERT_NO_THROW(terngrad::train::parse_train_flags(flags, tc));
      ASSERT_NO_THROW(terngrad::train::validate(tc));
      EXPECT_EQ(tc.num_nodes, workers);
      EXPECT_EQ(tc.seed, 7u);
      // Each paper row reports top-1 or (GoogLeNet's table) top-5 only.
      for (const auto& p : cfg.paper()) EXPECT_GT(p.has_top1() ? p.top1() : p.top5(), 0.5) << p.table();
    }
  }
  EXPECT_GE(files, 14);
}

TEST(ExperimentConfig, TheAuthorsHyperparametersReachTheTrainer) {
  // AlexNet at 4 workers: lr 0.02, 74 epochs of ImageNet at total batch 512,
  // lr x0.1 every 20 epochs, dropout 0.2 with TernGrad, small variables fp32.
  const auto cfg = tx::load_experiment_config(std::string(TG_PAPER_CONFIGS) + "/paper/alexnet_imagenet_terngrad.pbtxt");
  const auto point = tx::at_grid_point(cfg, 4, 1, 0, "alexnet");
  const auto flags = tx::train_flags(point, tx::training_set_size(cfg));
  EXPECT_TRUE(has_flag(flags, "--initial_learning_rate=0.02"));
  EXPECT_TRUE(has_flag(flags, "--max_steps=185169"));   // ceil(74 * 1281167 / 512)
  EXPECT_TRUE(has_flag(flags, "--decay_steps=50046"));  // ceil(20 * 1281167 / 512)
  EXPECT_TRUE(has_flag(flags, "--keep_prob=0.8"));
  EXPECT_TRUE(has_flag(flags, "--size_to_binarize=9217"));
  EXPECT_TRUE(has_flag(flags, "--quantize_logits=false"));
  EXPECT_TRUE(has_flag(flags, "--grad_bits=2"));
  EXPECT_TRUE(has_flag(flags, "--batch_size=128"));

  // LeNet: the total batch of 64 is split among the workers.
  const auto lenet = tx::load_experiment_config(std::string(TG_PAPER_CONFIGS) + "/paper/lenet_mnist_fp32.pbtxt");
  const auto flags8 = tx::train_flags(tx::at_grid_point(lenet, 8, 2, 0, "lenet"), 0);
  EXPECT_TRUE(has_flag(flags8, "--batch_size=8"));
  EXPECT_TRUE(has_flag(flags8, "--grad_bits=32"));
  EXPECT_TRUE(has_flag(flags8, "--learning_rate_decay_type=polynomial"));
  EXPECT_TRUE(has_flag(flags8, "--learning_rate_power=0.5"));
  EXPECT_TRUE(has_flag(flags8, "--seed=2"));
  // --steps replaces the config's length.
  EXPECT_TRUE(has_flag(tx::train_flags(tx::at_grid_point(lenet, 2, 1, 300, "lenet"), 0), "--max_steps=300"));
}

TEST(ExperimentConfig, RegistryCodecsPassTheirSpec) {
  std::string text = kValid;
  text.replace(text.find("codec { name: \"terngrad\" }"), 26, "codec { name: \"fp16\" }");
  const auto cfg = tx::parse_experiment_config(text, "t");
  EXPECT_EQ(tx::codec_label(cfg), "fp16");
  EXPECT_TRUE(has_flag(tx::train_flags(tx::at_grid_point(cfg, 2, 1, 0, "t"), 0), "--codec=fp16"));
}

// spec "auto": the run chooses (tg-train --codec=auto); the label names the
// candidates, and auto_link_rate and auto_link_changes reach the trainer.
TEST(ExperimentConfig, AutoCodecPassesItsSpecAndLinkRate) {
  std::string text = kValid;
  text.replace(text.find("codec { name: \"terngrad\" }"), 26,
               "codec { spec: \"auto\" auto_link_rate: \"1gbit\" auto_link_changes: \"100:10gbit\" }");
  const auto cfg = tx::parse_experiment_config(text, "t");
  EXPECT_EQ(tx::codec_label(cfg), "auto(fp32,fp16,ef(server_ef(terngrad:clip=2.5,share_scale=1,round=nearest)))");
  const auto flags = tx::train_flags(tx::at_grid_point(cfg, 2, 1, 0, "t"), 0);
  EXPECT_TRUE(has_flag(flags, "--codec=auto"));
  EXPECT_TRUE(has_flag(flags, "--auto_link_rate=1gbit"));
  EXPECT_TRUE(has_flag(flags, "--auto_link_changes=100:10gbit"));
}

TEST(ExperimentConfig, SyntaxErrorsAndUnknownFieldsNameFileLineAndField) {
  std::string e = error_of(std::string(kValid) + "modle { net: LENET }\n");
  EXPECT_NE(e.find("cfg.pbtxt:8:"), std::string::npos) << e;
  EXPECT_NE(e.find("modle"), std::string::npos) << e;
  e = error_of(std::string(kValid) + "evaluation { interval: 5 }\n");
  EXPECT_NE(e.find("interval"), std::string::npos) << e;
  e = error_of("name: \"t\" model { net: VGG }");
  EXPECT_NE(e.find("VGG"), std::string::npos) << e;
  e = error_of("name: \"t\" model { net: LENET ");
  EXPECT_NE(e.find("cfg.pbtxt:1:"), std::string::npos) << e;
}

// `text` with the line that starts like `line` replaced by it (or added).
std::string with_line(std::string text, const std::string& line) {
  const std::string head = line.substr(0, line.find_first_of(" {:") + 1);
  const size_t at = text.find("\n" + head);
  if (at == std::string::npos) return text + line + "\n";
  const size_t end = text.find('\n', at + 1);
  return text.replace(at + 1, end - at - 1, line);
}

TEST(ExperimentConfig, InvalidValuesNameTheField) {
  struct Case {
    std::vector<std::string> lines;
    std::string field;
  } cases[] = {
      {{"optimizer { type: MOMENTUM learning_rate: -1 }"}, "optimizer.learning_rate"},
      {{"optimizer { type: MOMENTUM learning_rate: 0.1 momentum: 1.5 }"}, "optimizer.momentum"},
      {{"optimizer { type: SGD learning_rate: 0.1 decay { type: EXPONENTIAL } }"}, "optimizer.decay"},
      {{"cluster { sync: false }"}, "cluster.sync"},
      {{"cluster { evaluator: true }"}, "cluster.evaluator"},
      {{"cluster { num_workers: 0 }"}, "cluster.num_workers"},
      {{"model { net: LENET keep_prob: 0 }"}, "model.keep_prob"},
      {{"codec { name: \"terngrad\" clip: 0 }"}, "codec.clip"},
      {{"codec { name: \"terngrad\" spec: \"fp16\" }"}, "codec.spec"},
      {{"codec { spec: \"auto(fp32,zstd)\" }"}, "codec.spec"},
      {{"cluster { sync: false mode: LOCAL_CLUSTER }", "codec { spec: \"auto(fp32,ef(server_ef(terngrad)))\" }"},
       "codec.spec"},
      {{"codec { spec: \"fp16\" auto_link_rate: \"1gbit\" }"}, "codec.auto_link_rate"},
      {{"codec { spec: \"auto\" auto_link_rate: \"fast\" }"}, "codec.auto_link_rate"},
      {{"codec { spec: \"fp16\" auto_link_changes: \"5:1gbit\" }"}, "codec.auto_link_changes"},
      {{"codec { spec: \"auto\" auto_link_changes: \"5:1gbit,3:1mbit\" }"}, "codec.auto_link_changes"},
      {{"evaluation { batch_size: 0 }"}, "evaluation.batch_size"},
      {{"dataset { format: IDX }"}, "dataset.path"},
      {{"model { net: CIFARNET }", "dataset { format: IDX path: \"/x\" }"}, "dataset.format"},
      {{"model { net: LENET }", "dataset { format: IMAGE_FOLDER path: \"/x\" }"}, "dataset.format"},
      {{"model { net: ALEXNET }", "dataset { format: TFRECORD path: \"/x\" preprocessing: CIFAR }"},
       "dataset.preprocessing"},
      {{"dataset { format: TFRECORD }"}, "dataset.path"},
      {{"seeds: [3, 3]"}, "seeds"},
      {{"name: \"a/b\""}, "name"},
      {{"paper { workers: 2 top1: 99.2 }"}, "paper[0].top1"},
      {{"cluster { num_gpus: 0 device: GPU }"}, "cluster.num_gpus"},
      {{"cluster { num_gpus: 2 }"}, "cluster.num_gpus"},
      {{"cluster { mode: LOCAL_CLUSTER num_gpus: 2 device: GPU }"}, "cluster.num_gpus"},
      {{"cluster { mode: LOCAL_CLUSTER link_rate: \"fast\" }"}, "cluster.link_rate"},
      {{"cluster { mode: LOCAL_CLUSTER link_rate: \"100\" }"}, "cluster.link_rate"},
      {{"cluster { mode: LOCAL_CLUSTER link_rate: \"1gbit\" ps_link_rate: \"9zbit\" }"}, "cluster.ps_link_rate"},
      {{"cluster { mode: LOCAL_CLUSTER ps_link_rate: \"50mbit\" }"}, "cluster.ps_link_rate"},
      {{"cluster { link_rate: \"100mbit\" }"}, "cluster.link_rate"},
  };
  for (const auto& c : cases) {
    std::string text = kValid;
    for (const auto& line : c.lines) text = with_line(text, line);
    const std::string e = error_of(text);
    EXPECT_NE(e.find("cfg.pbtxt: " + c.field + ":"), std::string::npos) << c.lines.back() << " -> " << e;
  }
  EXPECT_NE(error_of("model { net: LENET }").find("name"), std::string::npos);
  std::string no_batch = kValid;
  no_batch.replace(no_batch.find("total_batch: 64 "), 16, "");
  EXPECT_NE(error_of(no_batch).find("training: needs batch_per_worker or total_batch"), std::string::npos);
}

TEST(ExperimentConfig, GpuRunsReachTheTrainer) {
  auto cfg = tx::parse_experiment_config(with_line(kValid, "cluster { device: GPU num_gpus: 2 }"), "t");
  const auto flags = tx::train_flags(tx::at_grid_point(cfg, 4, 1, 0, "t"), 0);
  EXPECT_TRUE(has_flag(flags, "--device=gpu"));
  EXPECT_TRUE(has_flag(flags, "--num_gpus=2"));
  terngrad::train::TrainConfig check;
  terngrad::train::parse_train_flags(flags, check);
  EXPECT_NO_THROW(terngrad::train::validate(check));
  EXPECT_EQ(check.num_gpus, 2);
  // More GPUs than workers at a grid point is refused naming the field.
  try {
    tx::at_grid_point(cfg, 1, 1, 0, "t");
    FAIL() << "2 GPUs for 1 worker";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cluster.num_gpus"), std::string::npos) << e.what();
  }
  // A CPU config says nothing about devices: its flags are what they were.
  cfg = tx::parse_experiment_config(kValid, "t");
  for (const auto& f : tx::train_flags(tx::at_grid_point(cfg, 2, 1, 0, "t"), 0))
    EXPECT_TRUE(f.rfind("--device", 0) != 0 && f.rfind("--num_gpus", 0) != 0) << f;
}

TEST(ExperimentConfig, TfRecordDatasetsReachTheTrainer) {
  for (const auto& [net, name] : {std::pair<std::string, std::string>{"LENET", "mnist"}, {"CIFARNET", "cifar10"}}) {
    const auto cfg = tx::parse_experiment_config(
        with_line(with_line(kValid, "model { net: " + net + " }"), "dataset { format: TFRECORD path: \"/d\" }"), "t");
    const auto flags = tx::train_flags(tx::at_grid_point(cfg, 2, 1, 0, "t"), 100);
    EXPECT_TRUE(has_flag(flags, "--dataset_name=" + name)) << net;
    EXPECT_TRUE(has_flag(flags, "--data_format=tfrecord")) << net;
    terngrad::train::TrainConfig check;
    terngrad::train::parse_train_flags(flags, check);
    EXPECT_EQ(check.data_format, "tfrecord");
    EXPECT_EQ(check.data_dir, "/d");
  }
}

TEST(ExperimentConfig, ImageNetDatasetsStreamToTheTrainer) {
  for (const auto& [format, data_format] :
       {std::pair<std::string, std::string>{"TFRECORD", "tfrecord"}, {"IMAGE_FOLDER", "folder"}}) {
    for (const std::string net : {"ALEXNET", "GOOGLENET", "VGG_A"}) {
      const auto cfg = tx::parse_experiment_config(
          with_line(with_line(kValid, "model { net: " + net + " num_classes: 1001 }"),
                    "dataset { format: " + format + " path: \"/imagenet\" epoch_examples: 1281167 }"),
          "t");
      const auto flags = tx::train_flags(tx::at_grid_point(cfg, 2, 1, 0, "t"), 100);
      EXPECT_TRUE(has_flag(flags, "--dataset_name=imagenet")) << net << " " << format;
      EXPECT_TRUE(has_flag(flags, "--data_format=" + data_format)) << net << " " << format;
      terngrad::train::TrainConfig check;
      terngrad::train::parse_train_flags(flags, check);
      EXPECT_EQ(check.dataset, "imagenet");
      EXPECT_EQ(check.data_dir, "/imagenet");
    }
  }
}

TEST(ExperimentConfig, GridPointsThatCannotSplitTheBatchAreRefused) {
  const auto cfg = tx::parse_experiment_config(kValid, "cfg.pbtxt");
  try {
    tx::at_grid_point(cfg, 3, 1, 0, "cfg.pbtxt");
    FAIL() << "64 examples do not split among 3 workers";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("training.total_batch"), std::string::npos) << e.what();
  }
}

TEST(ExperimentConfig, TextRoundTrips) {
  const auto cfg = tx::parse_experiment_config(kValid, "cfg.pbtxt");
  const auto again = tx::parse_experiment_config(tx::to_text(cfg), "again");
  EXPECT_EQ(tx::to_text(again), tx::to_text(cfg));
}

// Emulated links: the rates parse and validate, and stay in the config
// (tg-experiment passes them to tg-cluster, which is not a tg-train flag).
TEST(ExperimentConfig, LinkRatesAreCheckedAndKept) {
  std::string text = with_line(kValid, "cluster { mode: LOCAL_CLUSTER num_workers: 2 link_rate: \"100mbit\" "
                                       "ps_link_rate: \"1gbit\" }");
  const tx::ExperimentConfig cfg = tx::parse_experiment_config(text, "cfg.pbtxt");
  EXPECT_EQ(cfg.cluster().link_rate(), "100mbit");
  EXPECT_EQ(cfg.cluster().ps_link_rate(), "1gbit");
  const tx::ExperimentConfig point = tx::at_grid_point(cfg, 2, 1, 0, "cfg.pbtxt");
  for (const auto& f : tx::train_flags(point, 0)) EXPECT_EQ(f.find("link_rate"), std::string::npos) << f;
  // A sweep point at another rate; an IN_PROCESS config cannot have one.
  EXPECT_EQ(tx::at_link_rate(point, "10gbit", "cfg.pbtxt").cluster().link_rate(), "10gbit");
  try {
    tx::at_link_rate(point, "10gbits", "cfg.pbtxt");
    ADD_FAILURE() << "accepted 10gbits";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.pbtxt (--link_rates=10gbits): cluster.link_rate: unknown unit"),
              std::string::npos) << e.what();
  }
  const tx::ExperimentConfig in_process = tx::parse_experiment_config(kValid, "cfg.pbtxt");
  try {
    tx::at_link_rate(in_process, "1gbit", "cfg.pbtxt");
    ADD_FAILURE() << "IN_PROCESS with a link rate";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("need mode: LOCAL_CLUSTER"), std::string::npos) << e.what();
  }
  // The text form keeps them (config.pbtxt in each run directory).
  EXPECT_NE(tx::to_text(cfg).find("link_rate: \"100mbit\""), std::string::npos);
}

// Found by fuzz/fuzz_experiment_config: epochs * examples / batch beyond
// int64 was converted anyway (undefined behaviour; UBSan's float-cast-overflow).
TEST(ExperimentConfig, EpochsBeyondAnyStepCountAreRefused) {
  std::string text = kValid;
  text.replace(text.find("steps: 100"), 10, "epochs: 1e89");
  const tx::ExperimentConfig cfg = tx::parse_experiment_config(text, "cfg.pbtxt");
  const tx::ExperimentConfig point = tx::at_grid_point(cfg, 2, 1, 0, "cfg.pbtxt");
  try {
    tx::train_flags(point, 60000);
    FAIL() << "train_flags accepted 1e89 epochs";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("training.epochs: 1e+89 epochs of 60000 examples at a total batch of 64"),
              std::string::npos)
        << e.what();
  }
  // The same for the decay's period.
  text = kValid;
  text.replace(text.find("learning_rate: 0.01"), 19,
               "learning_rate: 0.01 decay { type: EXPONENTIAL decay_epochs: 1e300 }");
  const tx::ExperimentConfig decay = tx::at_grid_point(tx::parse_experiment_config(text, "cfg.pbtxt"), 2, 1, 0, "cfg.pbtxt");
  EXPECT_THROW(tx::train_flags(decay, 60000), std::invalid_argument);
}

// Found by fuzz/fuzz_experiment_config: batch_per_worker times the workers
// overflowed int64 in the total batch.
TEST(ExperimentConfig, BatchPerWorkerTimesWorkersMustFit) {
  std::string text = kValid;
  text.replace(text.find("total_batch: 64"), 15, "batch_per_worker: 4611686018427387904");
  const tx::ExperimentConfig cfg = tx::parse_experiment_config(text, "cfg.pbtxt");
  EXPECT_NO_THROW(tx::at_grid_point(cfg, 1, 1, 0, "cfg.pbtxt"));
  try {
    tx::at_grid_point(cfg, 2, 1, 0, "cfg.pbtxt");
    FAIL() << "at_grid_point accepted a total batch of 2^63";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.pbtxt: training.batch_per_worker: times 2 workers exceeds 2^63 "
                                         "(got 4611686018427387904)"),
              std::string::npos)
        << e.what();
  }
}
