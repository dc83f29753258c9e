// The examples of a set of TFRecord shards, read one at a time: the
// ExampleSource for datasets too large to hold decoded (ImageNet), and the
// reader under load_tfrecord_dataset (datasets.h) for the small ones.
//
//   auto files = resolve_tfrecord_files(dir + "/train-*-of-*");
//   TfRecordSource src(files, /*skip_corrupt_records=*/false);
//   EncodedExample e = src.read(i);            // any thread
//   Image img = decode_example(e, 3);          // example_source.h
//
// Construction indexes every record of every file (headers only, see
// TfRecordFile in tfrecord.h); examples are numbered file by file in the
// order of `files`, and shard_of(i) is the position of i's file there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "terngrad/train/example_source.h"
#include "terngrad/train/tfrecord.h"

namespace terngrad::train {

class TfRecordSource : public ExampleSource {
 public:
  // skip_corrupt_records: damaged framing is stepped over at indexing
  // (TfRecordFile; damaged_regions() counts it) instead of throwing. read() still
  // throws DataError for a record whose data CRC or Example is bad: the
  // caller skips and counts those (it knows whether it was asked to).
  TfRecordSource(const std::vector<std::string>& files, bool skip_corrupt_records);

  int64_t size() const override { return first_.back(); }
  // Data CRC checked and parsed (tf_example.h); where = file, record, offset.
  EncodedExample read(int64_t i) const override;
  int64_t num_shards() const override { return static_cast<int64_t>(files_.size()); }
  int32_t shard_of(int64_t i) const override;
  std::string describe() const override;

  // The record's bytes (data CRC checked), unparsed.
  std::string read_record(int64_t i) const;
  // "<file>: record <r> (offset <o>)" for example i.
  std::string where(int64_t i) const;

  const TfRecordFile& file(int64_t shard) const { return files_.at(static_cast<size_t>(shard)); }
  int64_t damaged_regions() const;   // skip mode: damaged stretches stepped over, all files
  uint64_t damaged_bytes() const;    // their bytes

 private:
  // Example i lives in file f with first_[f] <= i < first_[f + 1], as record i - first_[f].
  std::pair<size_t, int64_t> locate(int64_t i) const;
  std::vector<TfRecordFile> files_;
  std::vector<int64_t> first_;
};

}  // namespace terngrad::train
