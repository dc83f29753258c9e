// Class-per-subfolder image datasets (image_folder.h).
#include "terngrad/train/image_folder.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

namespace fs = std::filesystem;

namespace terngrad::train {

namespace {

// Sorted names of the subfolders of dir (dotfolders left out: .git, .cache).
std::vector<std::string> subfolders(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError(dir + ": not a directory");
  std::vector<std::string> names;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] != '.' && it->is_directory(ec)) names.push_back(name);
  }
  if (ec) throw DataError(dir + ": cannot list: " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

// Reads up to n bytes from the start of path ("" on failure: a file we cannot
// open is reported when read, here it only is not an image).
std::vector<uint8_t> head_bytes(const std::string& path, size_t n) {
  std::vector<uint8_t> buf(n);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return {};
  buf.resize(std::fread(buf.data(), 1, n, f));
  std::fclose(f);
  return buf;
}

bool sniff(const std::string& path, ImageFormat& format) {
  const std::vector<uint8_t> head = head_bytes(path, 8);
  try {
    format = sniff_image_format(head, path);
    return true;
  } catch (const ImageError&) {
    return false;
  }
}

}  // namespace

ImageFolderSource::ImageFolderSource(const std::string& root, ImageFolderOptions options)
    : root_(root), label_offset_(options.label_offset) {
  if (options.label_offset < 0)
    throw std::invalid_argument(root + ": label_offset " + std::to_string(options.label_offset) + " is negative");
  const std::vector<std::string> found = subfolders(root);
  if (found.empty()) throw DataError(root + ": no class subfolders (expected <root>/<class>/<image files>)");
  classes_ = options.classes.empty() ? found : options.classes;
  for (const std::string& name : found) {
    const auto it = std::find(classes_.begin(), classes_.end(), name);
    if (it == classes_.end())
      throw DataError(root + ": class folder \"" + name + "\" is not one of the " + std::to_string(classes_.size()) +
                      " training classes");
    const int32_t label = label_offset_ + static_cast<int32_t>(it - classes_.begin());
    const std::string dir = (fs::path(root) / name).string();
    std::vector<std::string> names;
    std::error_code ec;
    for (fs::directory_iterator f(dir, ec), end; !ec && f != end; f.increment(ec)) {
      const std::string fname = f->path().filename().string();
      if (fname.empty() || fname[0] == '.' || !f->is_regular_file(ec)) {
        ++skipped_;
        continue;
      }
      names.push_back(fname);
    }
    if (ec) throw DataError(dir + ": cannot list: " + ec.message());
    std::sort(names.begin(), names.end());
    for (const std::string& fname : names) files_.push_back({(fs::path(dir) / fname).string(), label, ImageFormat::kJpeg});
  }
  // The signatures, read by several threads: ImageNet's train/ is 1.28M
  // opens, minutes one after another on a network file system.
  std::vector<uint8_t> is_image(files_.size(), 0);
  auto sniff_range = [&](size_t begin, size_t step) {
    for (size_t i = begin; i < files_.size(); i += step) is_image[i] = sniff(files_[i].path, files_[i].format);
  };
  const size_t threads = std::clamp<size_t>(files_.size() / 256, 1, std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  try {
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(sniff_range, t, threads);
  } catch (...) {  // fewer threads than hoped: their residues are done below, after the join
  }
  sniff_range(0, threads);  // residue 0; thread t took residue t
  for (std::thread& t : pool) t.join();
  const size_t started = pool.size() + 1;
  for (size_t r = started; r < threads; ++r) sniff_range(r, threads);
  size_t kept = 0;
  for (size_t i = 0; i < files_.size(); ++i)
    if (is_image[i]) {
      if (kept != i) files_[kept] = std::move(files_[i]);  // never self-move: it empties the string
      ++kept;
    }
  skipped_ += static_cast<int64_t>(files_.size() - kept);
  files_.resize(kept);
  if (files_.empty())
    throw DataError(root + ": no JPEG or PNG files in its " + std::to_string(found.size()) + " class folders");
  // int32 shard ids (ExampleSource::shard_of): 2^31 files is far beyond ImageNet.
  if (files_.size() > static_cast<size_t>(INT32_MAX))
    throw DataError(root + ": " + std::to_string(files_.size()) + " files (at most 2^31-1)");
}

int32_t ImageFolderSource::shard_of(int64_t i) const {
  if (i < 0 || i >= size())
    throw std::out_of_range(root_ + ": example " + std::to_string(i) + " is outside [0, " + std::to_string(size()) + ")");
  return static_cast<int32_t>(i);
}

EncodedExample ImageFolderSource::read(int64_t i) const {
  if (i < 0 || i >= size())
    throw std::out_of_range(root_ + ": example " + std::to_string(i) + " is outside [0, " + std::to_string(size()) + ")");
  const File& f = files_[static_cast<size_t>(i)];
  EncodedExample e;
  e.format = f.format;
  e.label = f.label;
  e.where = f.path + " (example " + std::to_string(i) + ")";
  std::FILE* fp = std::fopen(f.path.c_str(), "rb");
  if (!fp) throw DataError(e.where + ": cannot open: " + std::strerror(errno));
  char chunk[1 << 16];
  size_t got;
  while ((got = std::fread(chunk, 1, sizeof chunk, fp)) > 0) e.bytes.insert(e.bytes.end(), chunk, chunk + got);
  const bool failed = std::ferror(fp) != 0;
  std::fclose(fp);
  if (failed) throw DataError(e.where + ": read error");
  return e;
}

std::string ImageFolderSource::describe() const {
  std::string s = "image folder " + root_ + ": " + std::to_string(classes_.size()) + " classes (labels " +
                  std::to_string(label_offset_) + ".." + std::to_string(label_offset_ + classes_.size() - 1) + "), " +
                  std::to_string(files_.size()) + " images";
  if (skipped_) s += ", " + std::to_string(skipped_) + " other files skipped";
  return s;
}

std::vector<std::string> image_folder_classes(const std::string& root) { return subfolders(root); }

ImageFolderSplits open_image_folder_splits(const std::string& data_dir, int32_t label_offset, bool need_train) {
  const fs::path root(data_dir);
  const std::string train_dir = (root / "train").string();
  std::string val_dir = (root / "validation").string();
  std::error_code ec;
  if (!fs::is_directory(val_dir, ec) && fs::is_directory(root / "val", ec)) val_dir = (root / "val").string();
  if (!fs::is_directory(train_dir, ec))
    throw DataError(data_dir + ": no train/ folder (expected train/<class>/... and validation/<class>/...)");
  if (!fs::is_directory(val_dir, ec))
    throw DataError(data_dir + ": no validation/ (or val/) folder (expected train/<class>/... and validation/<class>/...)");
  ImageFolderSplits s;
  ImageFolderOptions o;
  o.label_offset = label_offset;
  if (need_train) {
    s.train = std::make_shared<ImageFolderSource>(train_dir, o);
    o.classes = s.train->classes();
  } else {
    o.classes = subfolders(train_dir);
  }
  s.validation = std::make_shared<ImageFolderSource>(val_dir, o);
  return s;
}

}  // namespace terngrad::train
