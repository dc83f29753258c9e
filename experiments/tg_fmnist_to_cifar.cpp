// tg-fmnist-to-cifar: writes Fashion-MNIST (IDX) in CIFAR-10's binary format,
// so the CifarNet experiments run through the real CIFAR-10 loader on data
// that exists on this machine.
//
//   tg-fmnist-to-cifar [--data_dir=/usr/share/datasets/fashion-mnist] --out=DIR
//
// Each 28x28 image sits in the centre of a black 32x32 canvas with its gray
// level copied to R, G and B. The 60000 training images become
// data_batch_1..5.bin (12000 records each; CIFAR-10's own hold 10000) and
// the 10000 test images test_batch.bin. Files are written atomically; an
// existing complete conversion is left as it is.
#include <cstdio>
#include <filesystem>
#include <string>

#include "terngrad/train/datasets.h"

namespace {
const char* kUsage = "usage: tg-fmnist-to-cifar [--data_dir=DIR] --out=DIR\n";
}  // namespace

int main(int argc, char** argv) {
  namespace tt = terngrad::train;
  std::string data_dir = "/usr/share/datasets/fashion-mnist", out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf(
          "%s  --data_dir=DIR  Fashion-MNIST IDX files (default /usr/share/datasets/fashion-mnist)\n"
          "  --out=DIR       where data_batch_1..5.bin and test_batch.bin (CIFAR-10 binary format) go\n",
          kUsage);
      return 0;
    }
    if (a.rfind("--data_dir=", 0) == 0) data_dir = a.substr(11);
    else if (a.rfind("--out=", 0) == 0) out = a.substr(6);
    else {
      std::fprintf(stderr, "tg-fmnist-to-cifar: unknown argument %s\n%s", a.c_str(), kUsage);
      return 2;
    }
  }
  if (out.empty()) {
    std::fprintf(stderr, "tg-fmnist-to-cifar: --out=DIR is required\n%s", kUsage);
    return 2;
  }
  try {
    namespace fs = std::filesystem;
    fs::create_directories(out);
    const tt::Dataset train = tt::pad_to_cifar(tt::load_idx_dir(data_dir, true));
    const int64_t per_batch = (train.count + 4) / 5;
    for (int b = 0; b < 5; ++b) {
      const int64_t first = b * per_batch;
      tt::write_cifar10_batch(out + "/data_batch_" + std::to_string(b + 1) + ".bin", train, first,
                              std::min(per_batch, train.count - first));
    }
    const tt::Dataset test = tt::pad_to_cifar(tt::load_idx_dir(data_dir, false));
    tt::write_cifar10_batch(out + "/test_batch.bin", test);
    std::printf("tg-fmnist-to-cifar: %lld training and %lld test images from %s written to %s\n",
                (long long)train.count, (long long)test.count, data_dir.c_str(), out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-fmnist-to-cifar: %s\n", e.what());
    return 1;
  }
  return 0;
}
