// ImageFolderSource: labels from sorted class folder names, sorted files,
// JPEG/PNG by signature with other files skipped and counted, the
// train/validation split rules and errors that name the folder.
#include <gtest/gtest.h>

#include "image_folder_util.h"
#include "terngrad/train/image_folder.h"
#include "test_util.h"

namespace tt = terngrad::train;

namespace {

TEST(ImageFolder, LabelsComeFromSortedFolderNames) {
  tg_test::TempDir dir;
  tg_test::make_image_folder(dir / "train", {"zebra", "ant", "moth"}, 4);
  tg_test::write_file(dir / "train/ant/README.txt", {'h', 'i'});
  tg_test::write_file(dir / "train/moth/.DS_Store", {0, 1, 2});
  tt::ImageFolderSource src(dir / "train");
  ASSERT_EQ(src.classes(), (std::vector<std::string>{"ant", "moth", "zebra"}));
  EXPECT_EQ(src.size(), 12);
  EXPECT_EQ(src.skipped_files(), 2);
  EXPECT_EQ(src.num_classes(), 3);
  for (int64_t i = 0; i < src.size(); ++i) {
    const tt::EncodedExample e = src.read(i);
    EXPECT_EQ(e.label, i / 4) << e.where;
    EXPECT_NE(e.where.find(src.classes()[i / 4]), std::string::npos);
    EXPECT_EQ(e.format, i % 4 == 2 ? tt::ImageFormat::kPng : tt::ImageFormat::kJpeg) << e.where;
    const tt::Image img = tt::decode_example(e, 3);
    EXPECT_EQ(img.channels, 3);
  }
  EXPECT_NE(src.path(1).find("ant/001.jpg"), std::string::npos);
  EXPECT_NE(src.describe().find("3 classes"), std::string::npos) << src.describe();
  EXPECT_NE(src.describe().find("2 other files skipped"), std::string::npos) << src.describe();
  EXPECT_THROW(src.read(12), std::out_of_range);
  EXPECT_EQ(src.num_shards(), 12);
  EXPECT_EQ(src.shard_of(5), 5);
}

// Enough files that the signatures are read by several threads: the same
// sorted examples and the same skipped count as one thread would give.
TEST(ImageFolder, ManyFilesAreSniffedInParallelInTheSameOrder) {
  tg_test::TempDir dir;
  const auto png = tt::encode_png(tg_test::gradient_image(4, 4, 3, 1));
  const auto jpg = tt::encode_jpeg(tg_test::gradient_image(8, 8, 1, 2));
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 700; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "f%04d", i);
      const std::string path = dir / ("d/c" + std::to_string(c) + "/" + name);
      if (i % 7 == 3)
        tg_test::write_file(path, {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'});
      else
        tg_test::write_file(path, i % 2 ? png : jpg);
    }
  tt::ImageFolderSource src(dir / "d");
  EXPECT_EQ(src.skipped_files(), 2 * 100);
  ASSERT_EQ(src.size(), 2 * 600);
  std::string last;
  for (int64_t i = 0; i < src.size(); ++i) {
    ASSERT_LT(last, src.path(i));  // sorted, no duplicates, no gaps of moved-from names
    last = src.path(i);
    const int n = std::stoi(last.substr(last.size() - 4));
    ASSERT_NE(n % 7, 3) << last;
    ASSERT_EQ(src.read(i).format, n % 2 ? tt::ImageFormat::kPng : tt::ImageFormat::kJpeg) << last;
  }
}

TEST(ImageFolder, LabelOffsetForThe1001ClassConvention) {
  tg_test::TempDir dir;
  tg_test::make_image_folder(dir / "d", {"a", "b"}, 2);
  tt::ImageFolderOptions o;
  o.label_offset = 1;
  tt::ImageFolderSource src(dir / "d", o);
  EXPECT_EQ(src.num_classes(), 3);
  EXPECT_EQ(src.read(0).label, 1);
  EXPECT_EQ(src.read(3).label, 2);
}

TEST(ImageFolder, SplitsShareTheTrainingClasses) {
  tg_test::TempDir dir;
  tg_test::make_image_folder(dir / "train", {"a", "b", "c"}, 2);
  tg_test::make_image_folder(dir / "val", {"b", "c"}, 1);  // "val" is accepted for "validation"
  const tt::ImageFolderSplits s = tt::open_image_folder_splits(dir.path());
  EXPECT_EQ(s.train->size(), 6);
  ASSERT_EQ(s.validation->size(), 2);
  EXPECT_EQ(s.validation->read(0).label, 1);  // "b" is training class 1, not validation's 0
  EXPECT_EQ(s.validation->read(1).label, 2);
  const tt::ImageFolderSplits eval_only = tt::open_image_folder_splits(dir.path(), 0, false);
  EXPECT_FALSE(eval_only.train);
  EXPECT_EQ(eval_only.validation->read(1).label, 2);
}

TEST(ImageFolder, AValidationClassMissingFromTrainIsNamed) {
  tg_test::TempDir dir;
  tg_test::make_image_folder(dir / "train", {"a", "b"}, 1);
  tg_test::make_image_folder(dir / "validation", {"a", "zz_new"}, 1);
  {
    const std::string msg = tg_test::error_of<tt::DataError>([&] { tt::open_image_folder_splits(dir.path()); });
    EXPECT_CONTAINS(msg, "zz_new");
    EXPECT_CONTAINS(msg, "validation");
  }
}

TEST(ImageFolder, EmptyOrMissingFoldersAreClearErrors) {
  tg_test::TempDir dir;
  {
    const std::string msg = tg_test::error_of<tt::DataError>([&] { tt::ImageFolderSource src(dir / "nope"); });
    EXPECT_CONTAINS(msg, "nope");
    EXPECT_CONTAINS(msg, "not a directory");
  }
  std::filesystem::create_directories(dir / "empty/cls");
  tg_test::write_file(dir / "empty/cls/notes.txt", {'x'});
  {
    const std::string msg = tg_test::error_of<tt::DataError>([&] { tt::ImageFolderSource src(dir / "empty"); });
    EXPECT_CONTAINS(msg, "empty");
    EXPECT_CONTAINS(msg, "no JPEG or PNG");
  }
  {
    const std::string msg = tg_test::error_of<tt::DataError>([&] { tt::open_image_folder_splits(dir / "empty"); });
    EXPECT_CONTAINS(msg, "no train/");
  }
}

}  // namespace
