// tg-fmnist-to-tfrecord: writes Fashion-MNIST (IDX) as sharded TFRecord files
// of tf.train.Example, the way TF's dataset converters do, so the TFRecord
// input path (tg-train --data_format=tfrecord) runs on data that exists on
// this machine and can be checked against the IDX path image for image.
//
//   tg-fmnist-to-tfrecord [--data_dir=/usr/share/datasets/fashion-mnist] --out=DIR
//                         [--train_shards=8] [--validation_shards=2]
//
// Each example: image/encoded (the 28x28 gray image as PNG, lossless, so the
// decoded pixels equal the IDX ones), image/format "png", image/class/label,
// image/height, image/width, image/channels. Training images go to
// train-NNNNN-of-MMMMM, test images to validation-NNNNN-of-MMMMM, split into
// contiguous runs of nearly equal size, in the IDX files' order. Every shard
// is written atomically (a crash leaves whole shards or none).
#include <cstdio>
#include <filesystem>
#include <string>

#include "terngrad/train/datasets.h"
#include "terngrad/train/image_codec.h"
#include "terngrad/train/tf_example.h"
#include "terngrad/train/tfrecord.h"

namespace {

namespace tt = terngrad::train;

const char* kUsage =
    "usage: tg-fmnist-to-tfrecord [--data_dir=DIR] --out=DIR [--train_shards=N] [--validation_shards=N]\n";

std::string shard_name(const std::string& split, int64_t k, int64_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%05lld-of-%05lld", split.c_str(), static_cast<long long>(k),
                static_cast<long long>(n));
  return buf;
}

void write_split(const tt::Dataset& d, const std::string& out, const std::string& split, int64_t shards) {
  for (int64_t k = 0; k < shards; ++k) {
    const int64_t first = d.count * k / shards, last = d.count * (k + 1) / shards;
    const std::string path = out + "/" + shard_name(split, k, shards);
    tt::TfRecordWriter w(path);
    for (int64_t i = first; i < last; ++i) {
      tt::Image img;
      img.height = d.height;
      img.width = d.width;
      img.channels = d.channels;
      img.pixels.assign(d.image(i), d.image(i) + d.image_bytes());
      const std::vector<uint8_t> png = tt::encode_png(img);
      w.write(tt::make_tf_example({reinterpret_cast<const char*>(png.data()), png.size()}, "png", d.labels[i],
                                  d.height, d.width, d.channels));
    }
    w.commit();
    std::printf("\r%s: shard %lld/%lld (%lld images)", split.c_str(), static_cast<long long>(k + 1),
                static_cast<long long>(shards), static_cast<long long>(last));
    std::fflush(stdout);
  }
  std::printf("\n");
}

int64_t parse_count(const std::string& flag, const std::string& v) {
  size_t used = 0;
  long long n = -1;
  try {
    n = std::stoll(v, &used);
  } catch (const std::exception&) {
  }
  if (used != v.size() || n < 1 || n > 99999)
    throw std::invalid_argument("--" + flag + "=" + v + ": expected a shard count in [1, 99999]");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = "/usr/share/datasets/fashion-mnist", out;
  std::string train_shards = "8", validation_shards = "2";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "%s  --data_dir=DIR           Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)\n"
          "  --out=DIR                where train-*-of-* and validation-*-of-* go\n"
          "  --train_shards=N         training shards (default 8)\n"
          "  --validation_shards=N    test-set shards (default 2)\n",
          kUsage);
      return 0;
    }
    if (a.rfind("--data_dir=", 0) == 0) data_dir = a.substr(11);
    else if (a.rfind("--out=", 0) == 0) out = a.substr(6);
    else if (a.rfind("--train_shards=", 0) == 0) train_shards = a.substr(15);
    else if (a.rfind("--validation_shards=", 0) == 0) validation_shards = a.substr(20);
    else {
      std::fprintf(stderr, "tg-fmnist-to-tfrecord: unknown argument %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "tg-fmnist-to-tfrecord: --out=DIR is required\n%s", kUsage);
    return 2;
  }
  try {
    const int64_t nt = parse_count("train_shards", train_shards);
    const int64_t nv = parse_count("validation_shards", validation_shards);
    std::filesystem::create_directories(out);
    const tt::Dataset train = tt::load_idx_dir(data_dir, true);
    const tt::Dataset test = tt::load_idx_dir(data_dir, false);
    write_split(train, out, "train", nt);
    write_split(test, out, "validation", nv);
    std::printf("tg-fmnist-to-tfrecord: %lld training and %lld test images from %s written to %s\n",
                static_cast<long long>(train.count), static_cast<long long>(test.count), data_dir.c_str(), out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-fmnist-to-tfrecord: %s\n", e.what());
    return 1;
  }
  return 0;
}
