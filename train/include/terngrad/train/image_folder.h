// A dataset stored as a folder of image files, one subfolder per class
// (<root>/<class>/<file>, the layout of ImageNet's train/ after extraction and
// of torchvision's ImageFolder), read file by file as an ExampleSource.
//
// Classes are the subfolder names in byte-wise sorted order, labelled
// label_offset + 0 .. label_offset + C-1 (label_offset 1 gives the 1001-class
// convention of TF's ImageNet converters, where label 0 is "background").
// Files are JPEG or PNG, recognised by their signature, not their name.
// Anything else in a class folder (a README, a .txt of boxes, a stray .DS_Store)
// is skipped and counted in skipped_files(), not refused: real dumps of
// ImageNet carry such files and stopping a 140 GB scan for them helps no one.
// Dotfiles and subfolders inside a class folder are ignored the same way.
// Examples are in sorted (class, file name) order, so the same folder gives
// the same indices on every machine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/train/example_source.h"

namespace terngrad::train {

struct ImageFolderOptions {
  int32_t label_offset = 0;
  // When set, these are the classes (in this label order) instead of the
  // folder's own subfolders; a subfolder that is not among them is an error
  // naming it. The validation split takes the training split's classes this way.
  std::vector<std::string> classes;
};

class ImageFolderSource : public ExampleSource {
 public:
  // Scans root (reading each file's first bytes for its signature). Throws
  // DataError naming the folder when it does not exist, has no class
  // subfolders or holds no image at all.
  explicit ImageFolderSource(const std::string& root, ImageFolderOptions options = {});

  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  // Reads file i whole. A file that cannot be read throws DataError naming
  // it; the bytes are decoded later (decode_example), which names it too.
  EncodedExample read(int64_t i) const override;
  // One example per file: every example is its own "shard".
  int64_t num_shards() const override { return size(); }
  int32_t shard_of(int64_t i) const override;
  std::string describe() const override;

  const std::string& root() const { return root_; }
  const std::vector<std::string>& classes() const { return classes_; }
  int num_classes() const { return static_cast<int>(classes_.size()) + label_offset_; }
  int64_t skipped_files() const { return skipped_; }
  const std::string& path(int64_t i) const { return files_.at(static_cast<size_t>(i)).path; }

 private:
  struct File {
    std::string path;
    int32_t label;
    ImageFormat format;
  };
  std::string root_;
  int32_t label_offset_;
  std::vector<std::string> classes_;
  std::vector<File> files_;
  int64_t skipped_ = 0;
};

// The class folder names of root, sorted (what ImageFolderSource labels
// 0..C-1), without scanning their files. DataError when root is no folder.
std::vector<std::string> image_folder_classes(const std::string& root);

// The two splits of <data_dir>: train/ and validation/ (or val/). The
// validation split is labelled with the training split's classes; a class
// folder in validation that train lacks is an error naming it.
struct ImageFolderSplits {
  std::shared_ptr<const ImageFolderSource> train, validation;
};
// need_train false: only validation is opened (an evaluator), labelled by
// train/'s class folder names, which are listed without scanning their files.
ImageFolderSplits open_image_folder_splits(const std::string& data_dir, int32_t label_offset = 0,
                                           bool need_train = true);

}  // namespace terngrad::train
