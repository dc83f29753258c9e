// Image classification datasets for the CPU trainer, held in memory as
// uint8 NHWC (what the files store; preprocessing to float happens per batch
// in input_pipeline.h, so a 60000-image set costs 47 MB, not 188 MB).
//
// Loaders validate everything they read and throw std::runtime_error naming
// the file, the field and the value found against the value expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/train/image_codec.h"

namespace terngrad::train {

struct Dataset {
  int64_t count = 0;
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> images;  // count * height * width * channels bytes, NHWC
  std::vector<int32_t> labels;  // count labels in [0, num_classes)
  int num_classes = 0;
  std::string source;           // where it came from, for logs
  // Which file each example came from (TFRecord shards): shard[i] indexes
  // shard_files. Empty for single-file formats. Samplers give each worker
  // whole files when there are enough of them (input_pipeline.h).
  std::vector<int32_t> shard;
  std::vector<std::string> shard_files;

  int64_t image_bytes() const { return height * width * channels; }
  const uint8_t* image(int64_t i) const { return images.data() + i * image_bytes(); }
};

// Throws std::invalid_argument (prefixed by `what`) when sizes, label count
// or label range disagree with the header fields.
void check_dataset(const Dataset& d, const std::string& what);

// ---- MNIST / Fashion-MNIST (IDX) ------------------------------------------

// IDX files as published by LeCun et al. and Zalando: big-endian magic
// 0x00000803 + count, rows, cols for images; 0x00000801 + count for labels.
// Gzip-compressed (.gz) and uncompressed files are both accepted (zlib
// detects which). The file length must be exactly what the header implies
// (truncated or trailing bytes are errors); labels must be < 10.
Dataset load_idx(const std::string& images_path, const std::string& labels_path);

// The standard names in `dir`: {train,t10k}-images-idx3-ubyte and
// {train,t10k}-labels-idx1-ubyte, each with or without ".gz" (".gz" first).
Dataset load_idx_dir(const std::string& dir, bool train);

// ---- CIFAR-10 (binary version) --------------------------------------------

inline constexpr int64_t kCifarSide = 32;
inline constexpr int64_t kCifarRecordBytes = 1 + 3 * kCifarSide * kCifarSide;  // 3073

// data_batch_1.bin .. data_batch_5.bin (train) or test_batch.bin (test) in
// `dir`, or in dir/cifar-10-batches-bin (the tarball's folder). Each record
// is one label byte and 3072 bytes of planar R, G, B (32x32 row-major);
// they are converted to HWC. A missing batch, a file size that is not a
// multiple of 3073 and a label >= 10 are errors naming the file.
Dataset load_cifar10(const std::string& dir, bool train);

// Reads one CIFAR-10 binary batch file (same checks as load_cifar10).
Dataset load_cifar10_batch(const std::string& path);

// Writes examples [first, first + count) of a 32x32x3 dataset as one CIFAR-10
// binary batch (count = -1: to the end), atomically. Labels must be < 10.
void write_cifar10_batch(const std::string& path, const Dataset& d, int64_t first = 0, int64_t count = -1);

// A grayscale (or RGB) dataset of images at most 32x32 placed in the centre
// of a black 32x32 canvas, gray replicated to 3 channels: Fashion-MNIST in
// CIFAR-10's geometry (28x28 at offset 2,2).
Dataset pad_to_cifar(const Dataset& d);

// ---- TFRecord (tf.train.Example) -----------------------------------------

struct TfRecordLoadOptions {
  int num_classes = 10;               // labels must be in [0, num_classes)
  // Damaged framing (bad CRCs, a truncated tail), an Example that does not
  // parse or lacks a feature, an undecodable image: false throws DataError
  // naming the file and record; true skips the record and counts it.
  // A label out of range and a size different from the first image's are
  // errors either way (they mean the wrong data or the wrong flags, not
  // damage).
  bool skip_corrupt_records = false;
  // Bounds on each decoded image (image_codec.h); a record claiming more is
  // a DataError (skipped in skip mode) before its pixels are allocated.
  DecodeLimits limits;
};

struct TfRecordLoadStats {
  int64_t skipped_records = 0;   // records read but skipped (skip mode)
  int64_t damaged_regions = 0;   // stretches of damaged framing stepped over (skip mode; TfRecordFile)
  uint64_t damaged_bytes = 0;    // their bytes
  std::string first_fault;       // the first skipped fault's message, for the log
};

// A small TFRecord dataset (MNIST, CIFAR-10 as TF's slim converters write
// them: PNG-encoded or raw image/encoded), decoded into memory as uint8 NHWC.
// `files` in order (resolve_tfrecord_files in tfrecord.h); every image must
// have the first one's height, width and channels (else DataError naming the
// record). d.shard / d.shard_files record each example's file.
Dataset load_tfrecord_dataset(const std::vector<std::string>& files, const TfRecordLoadOptions& options = {},
                              TfRecordLoadStats* stats = nullptr);

// The files of one split of `name` (mnist, cifar10) in `dir`, under the
// names TF's converters give them, the first that exists:
//   <name>_train.tfrecord / <name>_test.tfrecord        (slim's download_and_convert_*.py)
//   train-<name>.tfrecord / test-<name>.tfrecord        (the TernGrad fork's converters)
//   train-*-of-*  /  validation-*-of-* or test-*-of-*   (sharded: inception's
//                  build_*_data.py, download_convert_and_shard_cifar10.py, tg-fmnist-to-tfrecord)
// None of them: DataError listing the names tried.
std::vector<std::string> tfrecord_split_files(const std::string& dir, const std::string& name, bool train);

// ---- Synthetic ------------------------------------------------------------

// `count` random images with a learnable class structure, for AlexNet-size
// runs without ImageNet. Each class has a smooth prototype per channel
// (bilinear interpolation of a 4x4 grid of levels); an example is its class's
// prototype plus per-pixel noise and a per-image brightness offset (which
// per-image standardization removes). The prototypes depend only on
// (height, width, channels, classes), not on `seed`: sets made with different
// seeds (train with seed, test with seed + 1) share them. Fully
// deterministic for given arguments.
Dataset make_synthetic(int64_t count, int64_t height, int64_t width, int64_t channels, int classes, uint64_t seed);

}  // namespace terngrad::train
