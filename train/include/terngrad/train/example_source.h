// Datasets that stay encoded on disk (ImageNet: 140 GB of JPEGs) and are
// read example by example: TFRecord shards (tfrecord.h) and folders of image
// files (image_folder.h) both present themselves as an ExampleSource, so the
// streaming input pipeline and the per-worker sharding do not care which.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "terngrad/train/image_codec.h"

namespace terngrad::train {

// Bad data on disk: a damaged record, a truncated file, an undecodable image,
// a label outside the classes. what() names the file and the record
// ("train-00003-of-00008: record 17 (offset 52311): bad data CRC ...").
class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One example as stored, before decoding.
struct EncodedExample {
  std::vector<uint8_t> bytes;  // the image file's bytes (JPEG, PNG) or raw pixels
  ImageFormat format = ImageFormat::kJpeg;
  int64_t raw_height = 0, raw_width = 0, raw_channels = 0;  // kRaw only
  int32_t label = -1;
  std::string where;  // file and record, for error messages
};

// Decodes e to uint8 HWC with `channels` (0 = as stored, 1, 3); an
// undecodable image throws DataError naming e.where.
Image decode_example(const EncodedExample& e, int channels = 0, const DecodeLimits& limits = {});

// Random access to the examples of a dataset. Implementations index their
// files once at construction and are safe to read from many threads at once.
class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  virtual int64_t size() const = 0;
  // Example i in [0, size()); throws DataError naming the file and record
  // when what is stored there is damaged, std::out_of_range for a bad i.
  virtual EncodedExample read(int64_t i) const = 0;

  // The files the examples live in ("shards"): example i is in file
  // shard_of(i) of num_shards(). Workers take disjoint sets of files.
  virtual int64_t num_shards() const = 0;
  virtual int32_t shard_of(int64_t i) const = 0;

  // "4 TFRecord shards in /data/imagenet (train-*-of-00004), 5000 records".
  virtual std::string describe() const = 0;
};

}  // namespace terngrad::train
