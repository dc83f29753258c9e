// TFRecord shards as an ExampleSource (tfrecord_source.h).
#include "terngrad/train/tfrecord_source.h"

#include <algorithm>
#include <stdexcept>

#include "terngrad/train/tf_example.h"

namespace terngrad::train {

TfRecordSource::TfRecordSource(const std::vector<std::string>& files, bool skip_corrupt_records) {
  if (files.empty()) throw DataError("TfRecordSource: no files");
  if (files.size() > static_cast<size_t>(INT32_MAX)) throw DataError("TfRecordSource: too many files");
  first_.push_back(0);
  files_.reserve(files.size());
  for (const std::string& f : files) {
    files_.emplace_back(f, skip_corrupt_records);
    first_.push_back(first_.back() + files_.back().size());
  }
}

std::pair<size_t, int64_t> TfRecordSource::locate(int64_t i) const {
  if (i < 0 || i >= size())
    throw std::out_of_range("TfRecordSource: example " + std::to_string(i) + " is outside [0, " +
                            std::to_string(size()) + ")");
  // The last file whose first example is <= i (empty files share a first_ value).
  const size_t f = static_cast<size_t>(std::upper_bound(first_.begin(), first_.end(), i) - first_.begin()) - 1;
  return {f, i - first_[f]};
}

int32_t TfRecordSource::shard_of(int64_t i) const { return static_cast<int32_t>(locate(i).first); }

std::string TfRecordSource::read_record(int64_t i) const {
  const auto [f, r] = locate(i);
  return files_[f].read(r);
}

std::string TfRecordSource::where(int64_t i) const {
  const auto [f, r] = locate(i);
  return files_[f].where(r);
}

EncodedExample TfRecordSource::read(int64_t i) const {
  const auto [f, r] = locate(i);
  return parse_tf_example(files_[f].read(r), files_[f].where(r));
}

int64_t TfRecordSource::damaged_regions() const {
  int64_t n = 0;
  for (const TfRecordFile& f : files_) n += f.damaged_regions();
  return n;
}

uint64_t TfRecordSource::damaged_bytes() const {
  uint64_t n = 0;
  for (const TfRecordFile& f : files_) n += f.damaged_bytes();
  return n;
}

std::string TfRecordSource::describe() const {
  std::string s = std::to_string(files_.size()) + " TFRecord file" + (files_.size() == 1 ? "" : "s") + " (" +
                  files_.front().path() + (files_.size() > 1 ? " ... " + files_.back().path() : "") + "), " +
                  std::to_string(size()) + " records";
  if (damaged_regions() > 0)
    s += "; " + std::to_string(damaged_regions()) + " damaged regions skipped (" + std::to_string(damaged_bytes()) +
         " bytes)";
  return s;
}

}  // namespace terngrad::train
