// TFRecord files: the record framing TensorFlow's TFRecordWriter writes (and
// TensorBoard's event files use), and the sharded file sets TF's converters
// produce (train-00000-of-01024 ... train-01023-of-01024).
//
// A record on disk is
//   uint64 length (little-endian)
//   uint32 masked CRC-32C of those 8 length bytes
//   length bytes of data
//   uint32 masked CRC-32C of the data
// (crc32c.h). Readers trust nothing: every length is checked against what is
// left of the file before anything is allocated for it, and every fault is a
// DataError naming the file, the record number and its byte offset.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "terngrad/train/example_source.h"

namespace terngrad::train {

inline constexpr uint64_t kTfRecordHeaderBytes = 12;  // length + its CRC
inline constexpr uint64_t kTfRecordFooterBytes = 4;   // the data's CRC

// header + data + footer for one record.
std::string frame_tfrecord(std::string_view data);

// Writes a TFRecord file atomically: the records go to a temporary file
// beside `path`, which commit() fsyncs and renames over it (file_io.h), so a
// reader never sees half a shard. Destroyed without commit(): nothing appears.
class TfRecordWriter {
 public:
  explicit TfRecordWriter(const std::string& path);
  ~TfRecordWriter();
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;

  void write(std::string_view record);
  void commit();
  int64_t records() const { return records_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t records_ = 0;
};

// Where one record lies in its file.
struct TfRecordSpan {
  uint64_t offset = 0;  // of the record's header
  uint64_t length = 0;  // data bytes
};

// One TFRecord file opened for random access. Construction scans the headers
// only (12 bytes per record, then a seek over the data): each length CRC is
// checked and each length must fit in what is left of the file. The data and
// its CRC are read by read(i), from any number of threads at once (pread).
//
// skip_corrupt = false: the first fault throws DataError. true: the damaged
// bytes are skipped and counted (damaged_regions(), damaged_bytes(), the
// first fault's message): from the fault the reader searches forward, byte
// by byte, for the next position holding a whole record whose length CRC and
// data CRC both check (a false match needs two 32-bit CRCs to agree by
// chance), and indexing resumes there; with none, the rest of the file is
// the damaged region. Record numbers in messages count indexed records, so
// after a damaged region they are below the writer's own count.
class TfRecordFile {
 public:
  TfRecordFile(std::string path, bool skip_corrupt);
  ~TfRecordFile();
  TfRecordFile(TfRecordFile&& other) noexcept;
  TfRecordFile& operator=(TfRecordFile&& other) noexcept;
  TfRecordFile(const TfRecordFile&) = delete;
  TfRecordFile& operator=(const TfRecordFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t size() const { return static_cast<int64_t>(spans_.size()); }
  const TfRecordSpan& span(int64_t i) const { return spans_.at(static_cast<size_t>(i)); }

  // Record i's data, its CRC checked; DataError naming the file, record and
  // offset when it does not match or the file changed underneath.
  std::string read(int64_t i) const;

  int64_t damaged_regions() const { return damaged_regions_; }
  uint64_t damaged_bytes() const { return damaged_bytes_; }
  const std::string& fault() const { return fault_; }  // the first one

  // "train-00003-of-00008: record 17 (offset 52311)", for messages.
  std::string where(int64_t i) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  std::vector<TfRecordSpan> spans_;
  // The next offset >= from where a whole valid record starts, or file_size_.
  uint64_t resync(uint64_t from) const;
  int64_t damaged_regions_ = 0;
  uint64_t damaged_bytes_ = 0;
  std::string fault_;
};

// The files of one split, in shard order. `pattern` is
//   - a glob in its last path component ("/data/train-*-of-*", "<dir>/*.tfrecord"),
//     matched against the directory's entries (hidden files never match, so
//     a writer's temporary files are not picked up); or
//   - a plain file name ("<dir>/mnist_train.tfrecord", "<dir>/train-00003-of-00008").
// When the matches are named <prefix>-NNNNN-of-MMMMM, the set must be whole:
// one prefix, one MMMMM, every shard 0..MMMMM-1 exactly once; otherwise a
// DataError names the missing shards or the inconsistent counts. A glob that
// matches nothing is a DataError naming it. A single explicitly named shard is
// taken alone (the caller asked for that file).
std::vector<std::string> resolve_tfrecord_files(const std::string& pattern);

// "train-00003-of-00008" -> {3, 8}; {-1, -1} when the name has no such suffix.
struct ShardName {
  std::string prefix;
  int64_t index = -1, count = -1;
};
ShardName parse_shard_name(const std::string& file_name);

}  // namespace terngrad::train
