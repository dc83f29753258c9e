// The trainer on a streamed image folder (--dataset_name=imagenet
// --data_format=folder): AlexNet trains from the stream, evaluation streams
// the validation split, the loader's counters reach the result and the
// metrics, a resumed run sees the same batches, and bad data stops the run
// with an error naming the file (or is skipped and counted).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "../data/image_folder_util.h"
#include "session.h"  // private to the trainer: load_data and the evaluation
#include "terngrad/train/checkpoint.h"
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
  c.data_format.clear();  // imagenet defaults to tfrecord, not in this build
  try {
    terngrad::train::detail::load_data(c);
    ADD_FAILURE() << "accepted tfrecord";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("--data_format=folder"), std::string::npos) << e.what();
  }
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
