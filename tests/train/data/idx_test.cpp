// IDX (MNIST / Fashion-MNIST) loader: generated files, every error case, and
// the real Fashion-MNIST files when installed.
#include <cstdlib>

#include "terngrad/train/datasets.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

void put_be32(std::vector<uint8_t>& v, uint32_t x) {
  for (int s = 24; s >= 0; s -= 8) v.push_back(static_cast<uint8_t>(x >> s));
}

std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::vector<uint8_t> v;
  put_be32(v, magic);
  put_be32(v, n);
  put_be32(v, rows);
  put_be32(v, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) v.push_back(static_cast<uint8_t>((i * 7 + 3) % 256));
  return v;
}

std::vector<uint8_t> idx_labels(uint32_t n, uint32_t magic = 0x801) {
  std::vector<uint8_t> v;
  put_be32(v, magic);
  put_be32(v, n);
  for (uint32_t i = 0; i < n; ++i) v.push_back(static_cast<uint8_t>(i % 10));
  return v;
}

void expect_small_set(const Dataset& d) {
  EXPECT_EQ(d.count, 13);
  EXPECT_EQ(d.height, 5);
  EXPECT_EQ(d.width, 4);
  EXPECT_EQ(d.channels, 1);
  EXPECT_EQ(d.num_classes, 10);
  ASSERT_EQ(d.images.size(), 13u * 5 * 4);
  for (uint32_t i = 0; i < d.images.size(); ++i) ASSERT_EQ(d.images[i], (i * 7 + 3) % 256) << i;
  ASSERT_EQ(d.labels.size(), 13u);
  for (int i = 0; i < 13; ++i) EXPECT_EQ(d.labels[i], i % 10);
  check_dataset(d, "loaded");
}

TEST(Idx, LoadsUncompressed) {
  TempDir t;
  write_bytes(t / "im", idx_images(13, 5, 4));
  write_bytes(t / "lb", idx_labels(13));
  expect_small_set(load_idx(t / "im", t / "lb"));
}

TEST(Idx, LoadsGzip) {
  TempDir t;
  write_gz(t / "im.gz", idx_images(13, 5, 4));
  write_gz(t / "lb.gz", idx_labels(13));
  expect_small_set(load_idx(t / "im.gz", t / "lb.gz"));
}

TEST(Idx, DirUsesStandardNamesAndPrefersGz) {
  TempDir t;
  write_gz(t / "train-images-idx3-ubyte.gz", idx_images(13, 5, 4));
  write_bytes(t / "train-labels-idx1-ubyte", idx_labels(13));  // plain fallback
  write_bytes(t / "train-images-idx3-ubyte", {1, 2, 3});        // ignored: the .gz wins
  expect_small_set(load_idx_dir(t.path(), true));
  const std::string e = error_of<std::runtime_error>([&] { load_idx_dir(t.path(), false); });
  EXPECT_CONTAINS(e, t / "t10k-images-idx3-ubyte.gz");
}

TEST(Idx, WrongMagic) {
  TempDir t;
  write_bytes(t / "im", idx_images(3, 2, 2));
  write_bytes(t / "lb", idx_labels(3));
  // Files swapped: the images loader meets the labels magic.
  const std::string e = error_of<std::runtime_error>([&] { load_idx(t / "lb", t / "im"); });
  EXPECT_CONTAINS(e, t / "lb");
  EXPECT_CONTAINS(e, "bad magic 0x00000801, expected 0x00000803");
  write_bytes(t / "lb2", idx_labels(3, 0x802));
  const std::string e2 = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb2"); });
  EXPECT_CONTAINS(e2, "bad magic 0x00000802, expected 0x00000801");
}

TEST(Idx, TruncatedImages) {
  TempDir t;
  auto im = idx_images(10, 4, 4);
  im.resize(im.size() - 5);
  write_bytes(t / "im", im);
  write_bytes(t / "lb", idx_labels(10));
  std::string e = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb"); });
  EXPECT_CONTAINS(e, t / "im");
  EXPECT_CONTAINS(e, "truncated");
  EXPECT_CONTAINS(e, "implies 176 bytes, the file holds 171");
  // Truncated inside the header.
  write_bytes(t / "im", {0, 0, 8, 3, 0, 0});
  e = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb"); });
  EXPECT_CONTAINS(e, "truncated: header ends after 6 bytes, expected 16");
  // A complete gzip stream of truncated data, and a cut gzip stream.
  write_gz(t / "im.gz", im);
  e = error_of<std::runtime_error>([&] { load_idx(t / "im.gz", t / "lb"); });
  EXPECT_CONTAINS(e, "truncated");
  auto gz = read_bytes(t / "im.gz");
  write_gz(t / "full.gz", idx_images(10, 4, 4));
  gz = read_bytes(t / "full.gz");
  gz.resize(gz.size() / 2);
  write_bytes(t / "cut.gz", gz);
  e = error_of<std::runtime_error>([&] { load_idx(t / "cut.gz", t / "lb"); });
  EXPECT_CONTAINS(e, t / "cut.gz");
  EXPECT_CONTAINS(e, "truncated");
}

TEST(Idx, TrailingBytes) {
  TempDir t;
  auto im = idx_images(3, 2, 2);
  im.push_back(0);
  im.push_back(0);
  write_bytes(t / "im", im);
  write_bytes(t / "lb", idx_labels(3));
  std::string e = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb"); });
  EXPECT_CONTAINS(e, t / "im");
  EXPECT_CONTAINS(e, "2 trailing bytes after the 28 bytes");
  auto lb = idx_labels(3);
  lb.push_back(1);
  write_gz(t / "lb.gz", lb);
  write_bytes(t / "im", idx_images(3, 2, 2));
  e = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb.gz"); });
  EXPECT_CONTAINS(e, "1 trailing bytes after the 11 bytes");
}

TEST(Idx, CountMismatch) {
  TempDir t;
  write_bytes(t / "im", idx_images(100, 2, 2));
  write_bytes(t / "lb", idx_labels(99));
  const std::string e = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb"); });
  EXPECT_CONTAINS(e, "images file " + (t / "im") + " holds 100 images but labels file " + (t / "lb") + " holds 99");
}

TEST(Idx, LabelOutOfRange) {
  TempDir t;
  write_bytes(t / "im", idx_images(6, 2, 2));
  auto lb = idx_labels(6);
  lb[8 + 4] = 12;
  write_bytes(t / "lb", lb);
  const std::string e = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb"); });
  EXPECT_CONTAINS(e, t / "lb");
  EXPECT_CONTAINS(e, "label 12 at index 4 is out of range [0, 10)");
}

TEST(Idx, MissingFileAndZeroDimension) {
  TempDir t;
  write_bytes(t / "lb", idx_labels(3));
  std::string e = error_of<std::runtime_error>([&] { load_idx(t / "nope", t / "lb"); });
  EXPECT_CONTAINS(e, t / "nope");
  write_bytes(t / "im", idx_images(3, 0, 2));
  e = error_of<std::runtime_error>([&] { load_idx(t / "im", t / "lb"); });
  EXPECT_CONTAINS(e, "dimension 1 is 0");
}

TEST(Idx, RealFashionMnist) {
  const char* env = std::getenv("TG_FASHION_MNIST_DIR");
  const std::string dir = env ? env : TG_FASHION_MNIST_DEFAULT_DIR;
  if (!fs::exists(dir + "/train-images-idx3-ubyte.gz") && !fs::exists(dir + "/train-images-idx3-ubyte"))
    GTEST_SKIP() << "Fashion-MNIST not found in " << dir << " (set TG_FASHION_MNIST_DIR)";
  for (const bool train : {true, false}) {
    const Dataset d = load_idx_dir(dir, train);
    const int64_t n = train ? 60000 : 10000;
    EXPECT_EQ(d.count, n);
    EXPECT_EQ(d.height, 28);
    EXPECT_EQ(d.width, 28);
    EXPECT_EQ(d.channels, 1);
    check_dataset(d, d.source);
    // Fashion-MNIST is balanced: every class has a tenth of the examples.
    std::vector<int64_t> per_class(10, 0);
    for (int32_t l : d.labels) ++per_class.at(l);
    for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], n / 10) << "class " << c;
    // Real images, not blank: a healthy share of non-zero pixels.
    int64_t nonzero = 0;
    for (uint8_t p : d.images) nonzero += p != 0;
    EXPECT_GT(nonzero, static_cast<int64_t>(d.images.size()) / 4);
  }
}

}  // namespace
