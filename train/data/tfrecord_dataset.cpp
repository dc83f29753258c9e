// Small TFRecord datasets decoded into memory (datasets.h: load_tfrecord_dataset).
#include <fnmatch.h>

#include <filesystem>

#include "terngrad/train/datasets.h"
#include "terngrad/train/tf_example.h"
#include "terngrad/train/tfrecord.h"

namespace terngrad::train {

Dataset load_tfrecord_dataset(const std::vector<std::string>& files, const TfRecordLoadOptions& options,
                              TfRecordLoadStats* stats) {
  if (files.empty()) throw DataError("load_tfrecord_dataset: no files");
  if (options.num_classes <= 0)
    throw std::invalid_argument("load_tfrecord_dataset: num_classes " + std::to_string(options.num_classes));
  TfRecordLoadStats local;
  TfRecordLoadStats& st = stats ? *stats : local;
  st = {};
  auto skip = [&](const DataError& e) {
    if (!options.skip_corrupt_records) throw;
    if (st.first_fault.empty()) st.first_fault = e.what();
    ++st.skipped_records;
  };

  Dataset d;
  d.num_classes = options.num_classes;
  d.source = files.front() + (files.size() > 1 ? " ... " + files.back() + " (" + std::to_string(files.size()) + " files)" : "");
  std::string first_where;
  for (size_t f = 0; f < files.size(); ++f) {
    const TfRecordFile file(files[f], options.skip_corrupt_records);
    if (file.damaged_regions() > 0) {
      st.damaged_regions += file.damaged_regions();
      st.damaged_bytes += file.damaged_bytes();
      if (st.first_fault.empty()) st.first_fault = file.fault();
    }
    d.shard_files.push_back(files[f]);
    for (int64_t r = 0; r < file.size(); ++r) {
      Image img;
      EncodedExample e;
      try {
        e = parse_tf_example(file.read(r), file.where(r));
        img = decode_example(e, 0, options.limits);
      } catch (const DataError& err) {
        skip(err);
        continue;
      }
      if (e.label < 0 || e.label >= options.num_classes)
        throw DataError(e.where + ": image/class/label " + std::to_string(e.label) + " is outside [0, " +
                        std::to_string(options.num_classes) + ") for " + std::to_string(options.num_classes) +
                        " classes");
      if (d.count == 0) {
        d.height = img.height;
        d.width = img.width;
        d.channels = img.channels;
        first_where = e.where;
      } else if (img.height != d.height || img.width != d.width || img.channels != d.channels) {
        throw DataError(e.where + ": image is " + std::to_string(img.height) + "x" + std::to_string(img.width) + "x" +
                        std::to_string(img.channels) + ", the dataset's first (" + first_where + ") is " +
                        std::to_string(d.height) + "x" + std::to_string(d.width) + "x" + std::to_string(d.channels) +
                        " (images of one size are held in memory; larger sets stream, tfrecord_source.h)");
      }
      d.images.insert(d.images.end(), img.pixels.begin(), img.pixels.end());
      d.labels.push_back(e.label);
      d.shard.push_back(static_cast<int32_t>(f));
      ++d.count;
    }
  }
  if (d.count == 0)
    throw DataError(d.source + ": no usable records" +
                    (st.first_fault.empty() ? std::string() : " (first fault: " + st.first_fault + ")"));
  check_dataset(d, d.source);
  return d;
}

std::vector<std::string> tfrecord_split_files(const std::string& dir, const std::string& name, bool train) {
  const std::string split = train ? "train" : "test";
  const std::vector<std::string> singles = {dir + "/" + name + "_" + split + ".tfrecord",
                                            dir + "/" + split + "-" + name + ".tfrecord"};
  const std::vector<std::string> globs =
      train ? std::vector<std::string>{dir + "/train-*-of-*"}
            : std::vector<std::string>{dir + "/validation-*-of-*", dir + "/test-*-of-*"};
  std::error_code ec;
  for (const std::string& f : singles)
    if (std::filesystem::is_regular_file(f, ec)) return {f};
  std::string tried;
  for (const std::string& g : globs) {
    // A glob that matches nothing falls through to the next name; a set that
    // matches but is incomplete is an error (resolve_tfrecord_files names it).
    const std::string base = std::filesystem::path(g).filename().string();
    bool any = false;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (::fnmatch(base.c_str(), e.path().filename().c_str(), FNM_PERIOD) == 0) any = true;
    if (any) return resolve_tfrecord_files(g);
  }
  for (const std::string& f : singles) tried += std::filesystem::path(f).filename().string() + ", ";
  for (const std::string& g : globs) tried += std::filesystem::path(g).filename().string() + ", ";
  tried.resize(tried.size() - 2);
  throw DataError(dir + ": no TFRecord " + (train ? "training" : "test") + " files for " + name + " (looked for " +
                  tried + ")");
}

}  // namespace terngrad::train
