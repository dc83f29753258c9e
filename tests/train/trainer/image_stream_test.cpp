// The trainer on streamed ImageNet-style data (--dataset_name=imagenet,
// --data_format=folder or tfrecord): AlexNet trains from the stream, evaluation streams
// the validation split, the loader's counters reach the result and the
// metrics, a resumed run sees the same batches, and bad data stops the run
// with an error naming the file (or is skipped and counted).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "../data/image_folder_util.h"
#include "session.h"  // private to the trainer: load_data and the evaluation
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/image_folder.h"
#include "terngrad/train/input_pipeline.h"
#include "terngrad/train/tf_example.h"
#include "terngrad/train/tfrecord.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/trainer.h"

namespace tt = terngrad::train;
namespace fs = std::filesystem;

namespace {

struct TinyImageNet {
  fs::path dir;
  TinyImageNet() {
    dir = fs::temp_directory_path() / ("tg_image_stream_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    tg_test::make_image_folder((dir / "train").string(), {"n01", "n02", "n03"}, 3, 70, 90);
    tg_test::make_image_folder((dir / "validation").string(), {"n01", "n02", "n03"}, 1, 70, 90);
  }
  ~TinyImageNet() { fs::remove_all(dir); }
};

tt::TrainConfig alexnet_run(const fs::path& data, const fs::path& train_dir) {
  tt::TrainConfig c;
  tt::parse_train_flags({"--net=alexnet", "--dataset_name=imagenet", "--data_format=folder", "--data_dir=" + data.string(),
                         "--batch_size=2", "--max_steps=2", "--num_nodes=2", "--grad_bits=2", "--optimizer=momentum",
                         "--initial_learning_rate=0.001", "--data_threads=2", "--prefetch_batches=2",
                         "--eval_batch_size=2", "--quiet=true", "--train_dir=" + train_dir.string()},
                        c);
  tt::validate(c);
  return c;
}

std::map<std::string, tt::Tensor> weights(const fs::path& train_dir) {
  auto ck = tt::load_newest_intact_checkpoint(train_dir.string(), [](const std::string&) {});
  return ck ? ck->tensors : std::map<std::string, tt::Tensor>{};
}

TEST(TrainerImageStream, AlexNetTrainsFromAFolderAndResumesOnTheSameBatches) {
  TinyImageNet data;
  const fs::path straight = data.dir / "straight", resumed = data.dir / "resumed";
  tt::TrainConfig c = alexnet_run(data.dir, straight);
  c.max_steps = 3;
  const tt::TrainResult r = tt::run_training(c);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.eval_examples, 3);  // the validation split: one image per class
  EXPECT_EQ(r.input_images, 3 * 2 * 2);
  EXPECT_GT(r.input_images_per_sec, 0);
  EXPECT_EQ(r.skipped_examples, 0);
  EXPECT_TRUE(std::isfinite(r.final_loss));
  std::ifstream metrics(straight / "metrics.jsonl");
  const std::string log((std::istreambuf_iterator<char>(metrics)), std::istreambuf_iterator<char>());
  EXPECT_NE(log.find("\"input_images_per_sec\""), std::string::npos) << log;

  c = alexnet_run(data.dir, resumed);  // 2 steps, then resume to 3
  tt::run_training(c);
  c.max_steps = 3;
  const tt::TrainResult r2 = tt::run_training(c);
  EXPECT_EQ(r2.examples, 1 * 2 * 2);
  const auto a = weights(straight), b = weights(resumed);
  ASSERT_FALSE(a.empty());
  for (const auto& [name, t] : a) EXPECT_TRUE(t.data == b.at(name).data) << "resume differs: " << name;
}

TEST(TrainerImageStream, ACorruptImageStopsTheRunNamingItOrIsSkipped) {
  TinyImageNet data;
  const std::string bad = (data.dir / "train" / "n02" / "001.jpg").string();
  fs::resize_file(bad, 300);  // truncated: the JPEG signature survives
  tt::TrainConfig c = alexnet_run(data.dir, "");
  c.train_dir.clear();
  c.max_steps = 3;  // 3 steps x 2 workers x 2 = 12 draws over 9 images: every image is read
  try {
    tt::run_training(c);
    ADD_FAILURE() << "trained over a truncated JPEG";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  c.skip_corrupt_records = true;
  const tt::TrainResult r = tt::run_training(c);
  EXPECT_GE(r.skipped_examples, 1);
}

TEST(TrainerImageStream, NetsWithoutImageNetInputsAndTooFewClassesAreClearErrors) {
  TinyImageNet data;
  tt::TrainConfig c = alexnet_run(data.dir, "");
  c.net = "lenet";
  EXPECT_THROW(tt::run_training(c), std::invalid_argument);
  c = alexnet_run(data.dir, "");
  c.num_classes = 2;  // the folder has 3
  EXPECT_THROW(tt::run_training(c), std::invalid_argument);
}

TEST(TrainerImageStream, NumClasses1001OverThousandFoldersShiftsLabelsByOne) {
  TinyImageNet data;
  tt::TrainConfig c = alexnet_run(data.dir, "");
  c.num_classes = 4;  // 3 folders + background: TF's converters' convention
  const terngrad::train::detail::DataSetup d = terngrad::train::detail::load_data(c);
  EXPECT_EQ(d.num_classes, 4);
  ASSERT_TRUE(d.streamed());
  EXPECT_EQ(d.train_size(), 9);
  EXPECT_EQ(d.test_size(), 3);
  EXPECT_EQ(d.test_stream->read(0).label, 1);
  EXPECT_EQ(d.test_stream->read(2).label, 3);
  c.num_classes = 0;
  EXPECT_EQ(terngrad::train::detail::load_data(c).test_stream->read(0).label, 0);
  c.data_format.clear();  // imagenet defaults to tfrecord: a folder of JPEG folders has no shards
  try {
    terngrad::train::detail::load_data(c);
    ADD_FAILURE() << "accepted a folder as tfrecord";
  } catch (const tt::DataError& e) {
    EXPECT_NE(std::string(e.what()).find("train-*-of-*"), std::string::npos) << e.what();
  }
}

// build_imagenet_data.py's layout: the same JPEG (and PNG) bytes as tf.train.Example
// records in train-0000k-of-00002 / validation-00000-of-00001, labels 1..3
// (0 = background). Streamed, they decode to exactly the folder's examples,
// each of the two workers reads one whole shard, and training runs.
TEST(TrainerImageStream, AlexNetStreamsImageNetTfRecordShardsOneFilePerWorker) {
  TinyImageNet data;
  const tt::ImageFolderSplits folder = tt::open_image_folder_splits(data.dir.string(), 1);
  auto write_split = [&](const tt::ImageFolderSource& src, const std::string& split, int shards) {
    for (int k = 0; k < shards; ++k) {
      char name[64];
      std::snprintf(name, sizeof name, "%s-%05d-of-%05d", split.c_str(), k, shards);
      tt::TfRecordWriter w((data.dir / name).string());
      for (int64_t i = k; i < src.size(); i += shards) {
        const tt::EncodedExample e = src.read(i);
        const tt::Image img = tt::decode_example(e);
        w.write(tt::make_tf_example({reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size()},
                                    e.format == tt::ImageFormat::kPng ? "png" : "JPEG", e.label,
                                    img.height, img.width, img.channels));
      }
      w.commit();
    }
  };
  write_split(*folder.train, "train", 2);
  write_split(*folder.validation, "validation", 1);

  const fs::path run_dir = data.dir / "run";
  tt::TrainConfig c = alexnet_run(data.dir, run_dir);
  c.data_format = "tfrecord";
  c.num_classes = 4;
  const terngrad::train::detail::DataSetup d = terngrad::train::detail::load_data(c);
  ASSERT_TRUE(d.streamed());
  EXPECT_EQ(d.num_classes, 4);
  EXPECT_EQ(d.train_size(), 9);
  EXPECT_EQ(d.test_size(), 3);
  for (int64_t i = 0; i < 3; ++i) {
    const tt::EncodedExample a = d.test_stream->read(i), b = folder.validation->read(i);
    EXPECT_EQ(a.label, b.label);
    EXPECT_EQ(a.bytes, b.bytes);
  }
  // Shard 0 holds examples 0, 2, 4, 6, 8 of the folder; worker 0 of 2 owns exactly it.
  ASSERT_EQ(d.train_stream_shards.size(), 9u);
  tt::ShardedSampler s0(d.train_stream_shards, 2, 0, 7), s1(d.train_stream_shards, 2, 1, 7);
  EXPECT_EQ(s0.shard_size(), 5);
  EXPECT_EQ(s1.shard_size(), 4);
  for (int64_t i : s0.epoch_order()) EXPECT_EQ(d.train_stream_shards[static_cast<size_t>(i)], 0);

  const tt::TrainResult r = tt::run_training(c);
  EXPECT_EQ(r.steps, 2);
  EXPECT_EQ(r.eval_examples, 3);
  EXPECT_EQ(r.input_images, 2 * 2 * 2);
  EXPECT_TRUE(std::isfinite(r.final_loss));
}

// The validation split is decoded inside evaluate()'s OpenMP region: a bad
// file there must come out as an error naming it, not terminate the process.
TEST(TrainerImageStream, ACorruptValidationImageIsNamedByTheEvaluation) {
  TinyImageNet data;
  const std::string bad = (data.dir / "validation" / "n03" / "000.jpg").string();
  fs::resize_file(bad, 200);
  tt::TrainConfig c = alexnet_run(data.dir, "");
  c.eval_batch_size = 1;  // three batches over the OpenMP threads
  c.moving_average_decay = 0;
  terngrad::train::detail::TrainingSession s(c, 1, {}, /*need_train_data=*/false);
  tt::TrainResult r;
  try {
    s.evaluate_into(r);
    ADD_FAILURE() << "evaluated over a truncated JPEG";
  } catch (const tt::DataError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  c.skip_corrupt_records = true;
  terngrad::train::detail::TrainingSession skipping(c, 1, {}, false);
  skipping.evaluate_into(r);
  EXPECT_EQ(r.eval_examples, 3);
  EXPECT_EQ(r.skipped_examples, 1);
}

}  // namespace

namespace {

// A --data_format the dataset cannot be read from stops the run naming both,
// instead of silently reading something else.
TEST(TrainerImageStream, AFormatTheDatasetHasNoneOfIsRefused) {
  tt::TrainConfig c;
  c.net = "lenet";
  c.data_format = "folder";
  try {
    terngrad::train::detail::load_data(c);
    ADD_FAILURE() << "accepted --data_format=folder for mnist";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--data_format=folder does not apply to --dataset_name=mnist"),
              std::string::npos)
        << e.what();
  }
  c.net = "alexnet";
  c.dataset = "synthetic";
  c.data_format = "tfrecord";
  EXPECT_THROW(terngrad::train::detail::load_data(c), std::invalid_argument);
  c.data_format = "native";
  c.synthetic_examples = 4;
  EXPECT_EQ(terngrad::train::detail::load_data(c).train.count, 4);
}

}  // namespace
