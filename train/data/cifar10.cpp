// CIFAR-10 binary batches: loader, writer and the Fashion-MNIST-to-CIFAR padding.
#include <filesystem>
#include <stdexcept>

#include "file_io.h"
#include "terngrad/train/datasets.h"

namespace terngrad::train {

namespace {

constexpr int kNumClasses = 10;
constexpr int64_t kPlane = kCifarSide * kCifarSide;

// Appends one batch file's records to d (already shaped 32x32x3).
void append_batch(const std::string& path, Dataset& d) {
  if (!std::filesystem::exists(path)) throw std::runtime_error(path + ": missing CIFAR-10 batch file");
  const std::vector<uint8_t> bytes = detail::read_file(path);
  if (bytes.empty()) throw std::runtime_error(path + ": empty CIFAR-10 batch file");
  if (bytes.size() % kCifarRecordBytes != 0)
    throw std::runtime_error(path + ": size " + std::to_string(bytes.size()) + " bytes is not a multiple of the " +
                             std::to_string(kCifarRecordBytes) + "-byte record (remainder " +
                             std::to_string(bytes.size() % kCifarRecordBytes) + ")");
  const int64_t n = static_cast<int64_t>(bytes.size()) / kCifarRecordBytes;
  const size_t base = d.images.size();
  d.images.resize(base + static_cast<size_t>(n * 3 * kPlane));
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* rec = bytes.data() + r * kCifarRecordBytes;
    if (rec[0] >= kNumClasses)
      throw std::runtime_error(path + ": label " + std::to_string(rec[0]) + " of record " + std::to_string(r) +
                               " is out of range [0, " + std::to_string(kNumClasses) + ")");
    d.labels.push_back(rec[0]);
    // Planar RGB (CHW) to interleaved HWC.
    uint8_t* out = d.images.data() + base + r * 3 * kPlane;
    for (int64_t p = 0; p < kPlane; ++p)
      for (int64_t c = 0; c < 3; ++c) out[p * 3 + c] = rec[1 + c * kPlane + p];
  }
  d.count += n;
}

Dataset empty_cifar(const std::string& source) {
  Dataset d;
  d.height = d.width = kCifarSide;
  d.channels = 3;
  d.num_classes = kNumClasses;
  d.source = source;
  return d;
}

}  // namespace

Dataset load_cifar10_batch(const std::string& path) {
  Dataset d = empty_cifar(path);
  append_batch(path, d);
  return d;
}

Dataset load_cifar10(const std::string& dir, bool train) {
  std::vector<std::string> names;
  if (train) {
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  } else {
    names.push_back("test_batch.bin");
  }
  // Accept the folder the official tarball extracts to as well.
  std::string base = dir;
  const std::string nested = dir + "/cifar-10-batches-bin";
  if (!std::filesystem::exists(dir + "/" + names[0]) && std::filesystem::exists(nested + "/" + names[0])) base = nested;
  Dataset d = empty_cifar(base + (train ? " (train)" : " (test)"));
  for (const std::string& name : names) append_batch(base + "/" + name, d);
  return d;
}

void write_cifar10_batch(const std::string& path, const Dataset& d, int64_t first, int64_t count) {
  if (d.height != kCifarSide || d.width != kCifarSide || d.channels != 3)
    throw std::invalid_argument(path + ": CIFAR-10 batches hold 32x32x3 images, the dataset's are " +
                                std::to_string(d.height) + "x" + std::to_string(d.width) + "x" +
                                std::to_string(d.channels) + " (see pad_to_cifar)");
  check_dataset(d, "write_cifar10_batch(" + path + ")");
  if (count < 0) count = d.count - first;
  if (first < 0 || count < 0 || first + count > d.count)
    throw std::invalid_argument(path + ": slice [" + std::to_string(first) + ", " + std::to_string(first + count) +
                                ") is outside the dataset's " + std::to_string(d.count) + " examples");
  for (int64_t i = first; i < first + count; ++i)
    if (d.labels[i] >= kNumClasses)
      throw std::invalid_argument(path + ": label " + std::to_string(d.labels[i]) + " of example " +
                                  std::to_string(i) + " does not fit CIFAR-10's [0, 10)");
  detail::AtomicFile f(path);
  std::vector<uint8_t> rec(kCifarRecordBytes);
  for (int64_t i = first; i < first + count; ++i) {
    rec[0] = static_cast<uint8_t>(d.labels[i]);
    const uint8_t* img = d.image(i);
    for (int64_t p = 0; p < kPlane; ++p)
      for (int64_t c = 0; c < 3; ++c) rec[1 + c * kPlane + p] = img[p * 3 + c];
    f.write(rec.data(), rec.size());
  }
  f.commit();
}

Dataset pad_to_cifar(const Dataset& in) {
  check_dataset(in, "pad_to_cifar(" + in.source + ")");
  if (in.height > kCifarSide || in.width > kCifarSide || (in.channels != 1 && in.channels != 3))
    throw std::invalid_argument("pad_to_cifar: images are " + std::to_string(in.height) + "x" +
                                std::to_string(in.width) + "x" + std::to_string(in.channels) +
                                ", expected at most 32x32 with 1 or 3 channels");
  Dataset d = empty_cifar(in.source + " padded to 32x32x3");
  d.count = in.count;
  d.num_classes = in.num_classes;
  d.labels = in.labels;
  d.images.assign(static_cast<size_t>(in.count * kPlane * 3), 0);
  const int64_t oy = (kCifarSide - in.height) / 2, ox = (kCifarSide - in.width) / 2;
  for (int64_t i = 0; i < in.count; ++i) {
    const uint8_t* src = in.image(i);
    uint8_t* dst = d.images.data() + i * kPlane * 3;
    for (int64_t y = 0; y < in.height; ++y)
      for (int64_t x = 0; x < in.width; ++x)
        for (int64_t c = 0; c < 3; ++c)
          dst[((y + oy) * kCifarSide + (x + ox)) * 3 + c] =
              src[(y * in.width + x) * in.channels + (in.channels == 1 ? 0 : c)];
  }
  return d;
}

}  // namespace terngrad::train
