// tf.train.Example records (tf_example.h), TfRecordSource and
// load_tfrecord_dataset: decoding, and every content fault (bad proto,
// missing or mistyped feature, undecodable PNG, label out of range, mixed
// sizes) as a DataError naming the file and record; skip mode counts.
#include <gtest/gtest.h>

#include "terngrad/train/datasets.h"
#include "terngrad/train/image_codec.h"
#include "terngrad/train/tf_example.h"
#include "terngrad/train/tfrecord.h"
#include "terngrad/train/tfrecord_source.h"
#include "test_util.h"

namespace tt = terngrad::train;
using tg_test::error_of;
using tg_test::TempDir;

namespace {

tt::Image gray(int64_t h, int64_t w, int seed) {
  tt::Image img;
  img.height = h, img.width = w, img.channels = 1;
  for (int64_t i = 0; i < h * w; ++i) img.pixels.push_back(static_cast<uint8_t>((i * 7 + seed * 31) & 0xFF));
  return img;
}

std::string png_example(const tt::Image& img, int64_t label) {
  const std::vector<uint8_t> png = tt::encode_png(img);
  return tt::make_tf_example({reinterpret_cast<const char*>(png.data()), png.size()}, "png", label, img.height,
                             img.width, img.channels);
}

void write_records(const std::string& path, const std::vector<std::string>& records) {
  tt::TfRecordWriter w(path);
  for (const auto& r : records) w.write(r);
  w.commit();
}

}  // namespace

TEST(TfExample, PngAndRawRoundTrip) {
  const tt::Image img = gray(5, 4, 1);
  tt::EncodedExample e = tt::parse_tf_example(png_example(img, 7), "f: record 0");
  EXPECT_EQ(e.format, tt::ImageFormat::kPng);
  EXPECT_EQ(e.label, 7);
  EXPECT_EQ(tt::decode_example(e).pixels, img.pixels);
  const std::string raw = tt::make_tf_example({reinterpret_cast<const char*>(img.pixels.data()), img.pixels.size()},
                                              "raw", 3, 5, 4, 1);
  e = tt::parse_tf_example(raw, "f: record 1");
  EXPECT_EQ(e.format, tt::ImageFormat::kRaw);
  EXPECT_EQ(e.raw_height, 5);
  EXPECT_EQ(e.raw_width, 4);
  EXPECT_EQ(tt::decode_example(e).pixels, img.pixels);
}

TEST(TfExample, FaultsNameTheRecordAndTheFeature) {
  std::string msg = error_of<tt::DataError>([] { tt::parse_tf_example("\xff\xff\xff", "f: record 3"); });
  EXPECT_CONTAINS(msg, "f: record 3");
  EXPECT_CONTAINS(msg, "not a tf.train.Example");
  // An empty record is a valid, featureless Example: the first feature looked for is missing.
  msg = error_of<tt::DataError>([] { tt::parse_tf_example("", "f: record 4"); });
  EXPECT_CONTAINS(msg, "f: record 4");
  EXPECT_CONTAINS(msg, "is missing");
  // Raw without its dimensions.
  msg = error_of<tt::DataError>([] {
    const std::string ex = tt::make_tf_example("abc", "raw", 1, 1, 3, 1);
    // Drop image/height by building the record without it: easiest is to
    // corrupt its key (same length, so the proto stays well-formed).
    std::string s = ex;
    const size_t at = s.find("image/height");
    s.replace(at, 12, "image/heighX");
    tt::parse_tf_example(s, "f: record 5");
  });
  EXPECT_CONTAINS(msg, "f: record 5");
  EXPECT_CONTAINS(msg, "feature image/height is missing");
  // image/format holding an int64: swap the keys image/format and image/height
  // (both 12 bytes, so the proto stays well-formed).
  msg = error_of<tt::DataError>([] {
    std::string s = tt::make_tf_example("abc", "png", 1, 1, 3, 1);
    s.replace(s.find("image/format"), 12, "image/XXXXXX");
    s.replace(s.find("image/height"), 12, "image/format");
    tt::parse_tf_example(s, "f: record 7");
  });
  EXPECT_CONTAINS(msg, "f: record 7");
  EXPECT_CONTAINS(msg, "feature image/format is a int64_list, expected a bytes_list");
  msg = error_of<tt::DataError>([] { tt::parse_tf_example(tt::make_tf_example("abc", "gif", 1, 1, 1, 1), "f: record 6"); });
  EXPECT_CONTAINS(msg, "f: record 6");
  EXPECT_CONTAINS(msg, "gif");
}

// ---- load_tfrecord_dataset and TfRecordSource ------------------------------

TEST(TfRecordDataset, LoadsShardsAndRemembersEachExamplesFile) {
  TempDir dir;
  write_records(dir / "train-00000-of-00002", {png_example(gray(6, 5, 0), 0), png_example(gray(6, 5, 1), 1)});
  write_records(dir / "train-00001-of-00002", {png_example(gray(6, 5, 2), 9)});
  const auto files = tt::resolve_tfrecord_files(dir / "train-*-of-*");
  const tt::Dataset d = tt::load_tfrecord_dataset(files);
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.height, 6);
  EXPECT_EQ(d.width, 5);
  EXPECT_EQ(d.channels, 1);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{0, 1, 9}));
  EXPECT_EQ(d.shard, (std::vector<int32_t>{0, 0, 1}));
  EXPECT_EQ(d.shard_files, files);
  const tt::Image third = gray(6, 5, 2);
  EXPECT_TRUE(std::equal(third.pixels.begin(), third.pixels.end(), d.image(2)));

  const tt::TfRecordSource src(files, false);
  EXPECT_EQ(src.size(), 3);
  EXPECT_EQ(src.num_shards(), 2);
  EXPECT_EQ(src.shard_of(1), 0);
  EXPECT_EQ(src.shard_of(2), 1);
  EXPECT_EQ(src.read(2).label, 9);
  EXPECT_CONTAINS(src.read(2).where, "train-00001-of-00002: record 0 (offset 0)");
  EXPECT_THROW(src.read(3), std::out_of_range);
  EXPECT_CONTAINS(src.describe(), "2 TFRecord files");
}

TEST(TfRecordDataset, EmptyShardsKeepTheNumbering) {
  TempDir dir;
  write_records(dir / "s-0-of-3", {png_example(gray(2, 2, 0), 1)});
  write_records(dir / "s-1-of-3", {});
  write_records(dir / "s-2-of-3", {png_example(gray(2, 2, 1), 2)});
  const tt::TfRecordSource src(tt::resolve_tfrecord_files(dir / "s-*"), false);
  EXPECT_EQ(src.size(), 2);
  EXPECT_EQ(src.shard_of(0), 0);
  EXPECT_EQ(src.shard_of(1), 2);
}

TEST(TfRecordDataset, ContentFaultsNameFileRecordAndValue) {
  TempDir dir;
  const std::string f = dir / "train-00000-of-00001";
  auto load = [&](const std::vector<std::string>& recs, int classes = 10) {
    write_records(f, recs);
    tt::TfRecordLoadOptions o;
    o.num_classes = classes;
    return tt::load_tfrecord_dataset({f}, o);
  };
  const std::string ok = png_example(gray(4, 4, 0), 1);
  std::string msg = error_of<tt::DataError>([&] { load({ok, "\x0a\x05garbage"}); });
  EXPECT_CONTAINS(msg, f + ": record 1 (offset");
  EXPECT_CONTAINS(msg, "not a tf.train.Example");

  msg = error_of<tt::DataError>([&] {
    std::vector<uint8_t> junk = {0x89, 'P', 'N', 'G', 0, 1, 2, 3};
    load({ok, ok, tt::make_tf_example({reinterpret_cast<const char*>(junk.data()), junk.size()}, "png", 1, 4, 4, 1)});
  });
  EXPECT_CONTAINS(msg, f + ": record 2");

  msg = error_of<tt::DataError>([&] { load({ok, png_example(gray(4, 4, 1), 10)}); });
  EXPECT_CONTAINS(msg, f + ": record 1");
  EXPECT_CONTAINS(msg, "label 10 is outside [0, 10)");

  msg = error_of<tt::DataError>([&] { load({ok, png_example(gray(5, 4, 1), 1)}); });
  EXPECT_CONTAINS(msg, f + ": record 1");
  EXPECT_CONTAINS(msg, "5x4x1");

  std::string no_label = ok;
  no_label.replace(no_label.find("image/class/label"), 17, "image/class/lab_l");
  msg = error_of<tt::DataError>([&] { load({no_label}); });
  EXPECT_CONTAINS(msg, f + ": record 0");
  EXPECT_CONTAINS(msg, "feature image/class/label is missing");
}

TEST(TfRecordDataset, SkipModeSkipsAndCountsDamagedRecords) {
  TempDir dir;
  const std::string f = dir / "train-00000-of-00001";
  std::string bytes;
  for (int i = 0; i < 5; ++i) bytes += tt::frame_tfrecord(png_example(gray(3, 3, i), i));
  const size_t r1 = tt::frame_tfrecord(png_example(gray(3, 3, 0), 0)).size();
  bytes[r1 + 12 + 3] ^= 0x20;                                 // record 1: bad data CRC
  bytes.resize(bytes.size() - 5);                             // record 4: truncated
  tg_test::write_bytes(f, std::vector<uint8_t>(bytes.begin(), bytes.end()));
  EXPECT_THROW(tt::load_tfrecord_dataset({f}), tt::DataError);
  tt::TfRecordLoadOptions o;
  o.skip_corrupt_records = true;
  tt::TfRecordLoadStats st;
  const tt::Dataset d = tt::load_tfrecord_dataset({f}, o, &st);
  EXPECT_EQ(d.count, 3);
  EXPECT_EQ(d.labels, (std::vector<int32_t>{0, 2, 3}));
  EXPECT_EQ(st.skipped_records, 1);
  EXPECT_EQ(st.damaged_regions, 1);
  EXPECT_GT(st.damaged_bytes, 0u);
  EXPECT_CONTAINS(st.first_fault, "record 4");  // found first: the index is built before records are read
}

TEST(TfRecordDataset, SplitFilesTakeTheConvertersNames) {
  TempDir dir;
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::tfrecord_split_files(dir.path(), "mnist", true); }),
                  "mnist_train.tfrecord, train-mnist.tfrecord, train-*-of-*");
  write_records(dir / "mnist_test.tfrecord", {});
  EXPECT_EQ(tt::tfrecord_split_files(dir.path(), "mnist", false), std::vector<std::string>{dir / "mnist_test.tfrecord"});
  write_records(dir / "test-00000-of-00001", {});
  write_records(dir / "train-00001-of-00002", {});
  EXPECT_CONTAINS(error_of<tt::DataError>([&] { tt::tfrecord_split_files(dir.path(), "cifar10", true); }),
                  "train-00000-of-00002");
  EXPECT_EQ(tt::tfrecord_split_files(dir.path(), "cifar10", false),
            std::vector<std::string>{dir / "test-00000-of-00001"});
}
