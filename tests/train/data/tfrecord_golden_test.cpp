// Our reader on TFRecord files written by an independent writer: the PyPI
// package `tfrecord` (its own CRC-32C and tf.train.Example classes) with
// Pillow's PNG encoder, made by tests/data/tfrecord/make_golden.py and
// committed. Every record must read back exactly: labels, sizes, pixels.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "terngrad/train/datasets.h"
#include "terngrad/train/tfrecord.h"
#include "terngrad/train/tfrecord_source.h"
#include "test_util.h"

namespace tt = terngrad::train;

namespace {

const std::string kDir = TG_TFRECORD_GOLDEN_DIR;

struct Expected {
  std::string file;
  int index, label, height, width, channels;
};

std::vector<Expected> expected() {
  std::ifstream in(kDir + "/golden_expected.txt");
  std::vector<Expected> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    Expected e;
    ss >> e.file >> e.index >> e.label >> e.height >> e.width >> e.channels;
    out.push_back(e);
  }
  return out;
}

uint8_t pixel(int i, int y, int x, int c) { return static_cast<uint8_t>((37 * i + 11 * y + 5 * x + 71 * c) % 256); }

}  // namespace

TEST(TfRecordGolden, ReadsTheIndependentWritersRecordsExactly) {
  const std::vector<Expected> want = expected();
  ASSERT_EQ(want.size(), 6u);
  const std::vector<std::string> files = {kDir + "/golden_png_gray.tfrecord", kDir + "/golden-raw-00000-of-00002",
                                          kDir + "/golden-raw-00001-of-00002"};
  const tt::TfRecordSource src(files, false);
  ASSERT_EQ(src.size(), 6);
  for (int64_t i = 0; i < src.size(); ++i) {
    const Expected& e = want[static_cast<size_t>(i)];
    const tt::EncodedExample ex = src.read(i);
    EXPECT_EQ(ex.label, e.label) << i;
    EXPECT_EQ(ex.format, e.channels == 1 ? tt::ImageFormat::kPng : tt::ImageFormat::kRaw) << i;
    EXPECT_CONTAINS(ex.where, e.file);
    const tt::Image img = tt::decode_example(ex);
    ASSERT_EQ(img.height, e.height);
    ASSERT_EQ(img.width, e.width);
    ASSERT_EQ(img.channels, e.channels);
    for (int y = 0; y < e.height; ++y)
      for (int x = 0; x < e.width; ++x)
        for (int c = 0; c < e.channels; ++c)
          ASSERT_EQ(img.at(y, x)[c], pixel(e.index, y, x, c)) << e.file << " " << i << " " << y << "," << x << "," << c;
  }
}

TEST(TfRecordGolden, ShardSetAndEmptyFile) {
  const auto files = tt::resolve_tfrecord_files(kDir + "/golden-raw-*-of-*");
  ASSERT_EQ(files.size(), 2u);
  tt::TfRecordLoadOptions o;
  o.num_classes = 4;
  const tt::Dataset d = tt::load_tfrecord_dataset(files, o);
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(d.shard, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(tt::TfRecordFile(kDir + "/golden_no_records.tfrecord", false).size(), 0);
}

TEST(TfRecordGolden, OurFramingOfTheSameDataIsByteIdentical) {
  // Re-frame each record's data with our writer: the file must come out the same.
  const std::string path = kDir + "/golden_png_gray.tfrecord";
  const tt::TfRecordFile f(path, false);
  std::string ours;
  for (int64_t i = 0; i < f.size(); ++i) ours += tt::frame_tfrecord(f.read(i));
  EXPECT_EQ(ours, tg_test::read_text(path));
}
