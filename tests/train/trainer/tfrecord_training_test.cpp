// Training from TFRecord shards (--data_format=tfrecord) against training
// from the same images as IDX files: the images are identical (PNG is
// lossless), so the runs are identical bit for bit, step losses included,
// when the sampler hands out the same examples: one worker (its whole-file
// shard is everything, in the same order), or several workers reading one
// file (fewer files than workers: strided, as for IDX).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "terngrad/train/datasets.h"
#include "terngrad/train/image_codec.h"
#include "terngrad/train/tf_example.h"
#include "terngrad/train/tfrecord.h"
#include "terngrad/train/trainer.h"

namespace tt = terngrad::train;
namespace fs = std::filesystem;

namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() / ("tg_tfrecord_training_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p;
}

void put_be32(std::ofstream& out, uint32_t v) {
  const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  out.write(b, 4);
}

void write_idx(const fs::path& dir, const std::string& stem, const tt::Dataset& d) {
  std::ofstream img(dir / (stem + "-images-idx3-ubyte"), std::ios::binary);
  put_be32(img, 0x803);
  put_be32(img, static_cast<uint32_t>(d.count));
  put_be32(img, 28);
  put_be32(img, 28);
  img.write(reinterpret_cast<const char*>(d.images.data()), static_cast<std::streamsize>(d.images.size()));
  std::ofstream lab(dir / (stem + "-labels-idx1-ubyte"), std::ios::binary);
  put_be32(lab, 0x801);
  put_be32(lab, static_cast<uint32_t>(d.count));
  for (int32_t l : d.labels) lab.put(static_cast<char>(l));
}

// d's examples [first, last) as one TFRecord file of PNG Examples.
void write_tfrecord(const fs::path& path, const tt::Dataset& d, int64_t first, int64_t last) {
  tt::TfRecordWriter w(path.string());
  for (int64_t i = first; i < last; ++i) {
    tt::Image img;
    img.height = d.height, img.width = d.width, img.channels = d.channels;
    img.pixels.assign(d.image(i), d.image(i) + d.image_bytes());
    const std::vector<uint8_t> png = tt::encode_png(img);
    w.write(tt::make_tf_example({reinterpret_cast<const char*>(png.data()), png.size()}, "png", d.labels[i], 28, 28, 1));
  }
  w.commit();
}

struct Sets {
  tt::Dataset train, test;
};
const Sets& sets() {
  static const Sets s = [] {
    Sets s;
    s.train = tt::make_synthetic(240, 28, 28, 1, 10, 1);
    s.test = tt::make_synthetic(60, 28, 28, 1, 10, 2);
    // make_synthetic's images are uint8 already: what IDX and PNG both store exactly.
    return s;
  }();
  return s;
}

std::vector<std::string> losses(const fs::path& train_dir) {
  std::ifstream in(train_dir / "metrics.jsonl");
  std::vector<std::string> out;
  std::string line;
  const std::regex loss("\"event\":\"train\",\"step\":([0-9]+),\"loss\":([^,]+)");
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_search(line, m, loss)) out.push_back(m[1].str() + ":" + m[2].str());
  return out;
}

tt::TrainConfig run_config(const fs::path& data, const fs::path& train_dir, int workers) {
  tt::TrainConfig c;
  c.net = "lenet";
  c.dataset = "mnist";
  c.data_dir = data.string();
  c.num_nodes = workers;
  c.batch_size = 8;
  c.max_steps = 12;
  c.log_every_n_steps = 1;
  c.optimizer = "momentum";
  c.initial_learning_rate = 0.01;
  c.train_dir = train_dir.string();
  c.quiet = true;
  return c;
}

void expect_same_runs(const fs::path& idx, const fs::path& tfr, int workers, const std::string& name) {
  const fs::path run_idx = fresh_dir(name + "_run_idx"), run_tfr = fresh_dir(name + "_run_tfr");
  const tt::TrainResult a = tt::run_training(run_config(idx, run_idx, workers));
  tt::TrainConfig c = run_config(tfr, run_tfr, workers);
  c.data_format = "tfrecord";
  const tt::TrainResult b = tt::run_training(c);
  const std::vector<std::string> la = losses(run_idx), lb = losses(run_tfr);
  ASSERT_EQ(la.size(), 12u);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(a.final_loss, b.final_loss);
  EXPECT_EQ(a.top1, b.top1);
  EXPECT_EQ(a.eval_examples, b.eval_examples);
  fs::remove_all(run_idx);
  fs::remove_all(run_tfr);
}

}  // namespace

TEST(TfRecordTraining, ShardedTfRecordTrainsExactlyAsIdxWithOneWorker) {
  const fs::path idx = fresh_dir("idx"), tfr = fresh_dir("tfr");
  write_idx(idx, "train", sets().train);
  write_idx(idx, "t10k", sets().test);
  for (int k = 0; k < 3; ++k)
    write_tfrecord(tfr / ("train-0000" + std::to_string(k) + "-of-00003"), sets().train, 80 * k, 80 * (k + 1));
  write_tfrecord(tfr / "validation-00000-of-00001", sets().test, 0, 60);
  expect_same_runs(idx, tfr, 1, "one");
  fs::remove_all(idx);
  fs::remove_all(tfr);
}

TEST(TfRecordTraining, SlimSingleFileTrainsExactlyAsIdxWithTwoWorkers) {
  const fs::path idx = fresh_dir("idx2"), tfr = fresh_dir("tfr2");
  write_idx(idx, "train", sets().train);
  write_idx(idx, "t10k", sets().test);
  write_tfrecord(tfr / "mnist_train.tfrecord", sets().train, 0, 240);
  write_tfrecord(tfr / "mnist_test.tfrecord", sets().test, 0, 60);
  expect_same_runs(idx, tfr, 2, "two");
  fs::remove_all(idx);
  fs::remove_all(tfr);
}

TEST(TfRecordTraining, MissingShardStopsTheRunNamingIt) {
  const fs::path tfr = fresh_dir("missing");
  write_tfrecord(tfr / "train-00000-of-00002", sets().train, 0, 10);
  write_tfrecord(tfr / "validation-00000-of-00001", sets().test, 0, 10);
  tt::TrainConfig c = run_config(tfr, fresh_dir("missing_run"), 1);
  c.data_format = "tfrecord";
  try {
    tt::run_training(c);
    FAIL() << "trained without shard 1";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("train-00001-of-00002"), std::string::npos) << e.what();
  }
  fs::remove_all(tfr);
}
