// CIFAR-10 binary loader and writer, and Fashion-MNIST padded to CIFAR's shape.
#include "terngrad/train/datasets.h"
#include "test_util.h"

namespace {

using namespace terngrad::train;
using namespace tg_test;

Dataset random_cifar(int64_t n, uint64_t seed) { return make_synthetic(n, 32, 32, 3, 10, seed); }

void write_five_batches(const std::string& dir, const Dataset& d) {
  const int64_t per = d.count / 5;
  for (int b = 0; b < 5; ++b)
    write_cifar10_batch(dir + "/data_batch_" + std::to_string(b + 1) + ".bin", d, b * per,
                        b == 4 ? d.count - 4 * per : per);
}

TEST(Cifar10, RoundTripThroughBatchFiles) {
  TempDir t;
  const Dataset train = random_cifar(23, 1), test = random_cifar(7, 2);
  write_five_batches(t.path(), train);
  write_cifar10_batch(t / "test_batch.bin", test);
  const Dataset a = load_cifar10(t.path(), true), b = load_cifar10(t.path(), false);
  EXPECT_EQ(a.count, 23);
  EXPECT_EQ(a.height, 32);
  EXPECT_EQ(a.width, 32);
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.num_classes, 10);
  EXPECT_EQ(a.images, train.images);
  EXPECT_EQ(a.labels, train.labels);
  EXPECT_EQ(b.images, test.images);
  EXPECT_EQ(b.labels, test.labels);
  check_dataset(a, "a");
  // No temporary files left by the atomic writer.
  EXPECT_EQ(list_dir(t.path()).size(), 6u);
}

TEST(Cifar10, RecordLayoutIsLabelThenPlanarRgb) {
  TempDir t;
  const Dataset d = random_cifar(2, 3);
  write_cifar10_batch(t / "b.bin", d);
  const auto bytes = read_bytes(t / "b.bin");
  ASSERT_EQ(bytes.size(), 2u * 3073);
  for (int64_t r = 0; r < 2; ++r) {
    const uint8_t* rec = bytes.data() + r * 3073;
    EXPECT_EQ(rec[0], d.labels[r]);
    for (int64_t y : {0, 5, 31})
      for (int64_t x : {0, 17, 31})
        for (int64_t c = 0; c < 3; ++c)
          EXPECT_EQ(rec[1 + c * 1024 + y * 32 + x], d.image(r)[(y * 32 + x) * 3 + c]) << y << "," << x << "," << c;
  }
  EXPECT_EQ(load_cifar10_batch(t / "b.bin").images, d.images);
}

TEST(Cifar10, AcceptsTheTarballFolder) {
  TempDir t;
  fs::create_directory(t / "cifar-10-batches-bin");
  const Dataset test = random_cifar(4, 4);
  write_cifar10_batch(t / "cifar-10-batches-bin/test_batch.bin", test);
  EXPECT_EQ(load_cifar10(t.path(), false).labels, test.labels);
}

TEST(Cifar10, SizeNotAMultipleOfTheRecord) {
  TempDir t;
  write_cifar10_batch(t / "test_batch.bin", random_cifar(3, 5));
  auto bytes = read_bytes(t / "test_batch.bin");
  bytes.resize(bytes.size() + 5);
  write_bytes(t / "test_batch.bin", bytes);
  const std::string e = error_of<std::runtime_error>([&] { load_cifar10(t.path(), false); });
  EXPECT_CONTAINS(e, t / "test_batch.bin");
  EXPECT_CONTAINS(e, "size 9224 bytes is not a multiple of the 3073-byte record (remainder 5)");
  write_bytes(t / "test_batch.bin", {});
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_cifar10(t.path(), false); }), "empty");
}

TEST(Cifar10, MissingBatch) {
  TempDir t;
  write_five_batches(t.path(), random_cifar(10, 6));
  fs::remove(t / "data_batch_3.bin");
  const std::string e = error_of<std::runtime_error>([&] { load_cifar10(t.path(), true); });
  EXPECT_CONTAINS(e, t / "data_batch_3.bin");
  EXPECT_CONTAINS(e, "missing");
  EXPECT_CONTAINS(error_of<std::runtime_error>([&] { load_cifar10(t.path(), false); }), t / "test_batch.bin");
}

TEST(Cifar10, LabelOutOfRange) {
  TempDir t;
  write_cifar10_batch(t / "test_batch.bin", random_cifar(3, 7));
  auto bytes = read_bytes(t / "test_batch.bin");
  bytes[3073 * 2] = 10;
  write_bytes(t / "test_batch.bin", bytes);
  const std::string e = error_of<std::runtime_error>([&] { load_cifar10(t.path(), false); });
  EXPECT_CONTAINS(e, t / "test_batch.bin");
  EXPECT_CONTAINS(e, "label 10 of record 2 is out of range [0, 10)");
}

TEST(Cifar10, WriterRejectsBadInput) {
  TempDir t;
  const Dataset mnistish = make_synthetic(3, 28, 28, 1, 10, 1);
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { write_cifar10_batch(t / "x.bin", mnistish); }),
                  "32x32x3 images, the dataset's are 28x28x1");
  const Dataset d = random_cifar(3, 1);
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { write_cifar10_batch(t / "x.bin", d, 2, 5); }),
                  "slice [2, 7) is outside the dataset's 3 examples");
  Dataset many = make_synthetic(3, 32, 32, 3, 20, 1);
  many.labels = {0, 15, 1};
  EXPECT_CONTAINS(error_of<std::invalid_argument>([&] { write_cifar10_batch(t / "x.bin", many); }),
                  "label 15 of example 1");
  EXPECT_TRUE(list_dir(t.path()).empty());
}

TEST(Cifar10, PadToCifarCentresAndReplicatesGray) {
  const Dataset m = make_synthetic(5, 28, 28, 1, 10, 9);
  const Dataset p = pad_to_cifar(m);
  EXPECT_EQ(p.count, 5);
  EXPECT_EQ(p.height, 32);
  EXPECT_EQ(p.width, 32);
  EXPECT_EQ(p.channels, 3);
  EXPECT_EQ(p.labels, m.labels);
  check_dataset(p, "padded");
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t y = 0; y < 32; ++y)
      for (int64_t x = 0; x < 32; ++x)
        for (int64_t c = 0; c < 3; ++c) {
          const bool inside = y >= 2 && y < 30 && x >= 2 && x < 30;
          const uint8_t want = inside ? m.image(i)[(y - 2) * 28 + (x - 2)] : 0;
          ASSERT_EQ(p.image(i)[(y * 32 + x) * 3 + c], want) << i << " " << y << " " << x << " " << c;
        }
  // The later experiment's path: padded Fashion-MNIST through CIFAR files.
  TempDir t;
  write_cifar10_batch(t / "test_batch.bin", p);
  EXPECT_EQ(load_cifar10(t.path(), false).images, p.images);
  EXPECT_THROW(pad_to_cifar(make_synthetic(1, 33, 10, 1, 10, 1)), std::invalid_argument);
}

}  // namespace
