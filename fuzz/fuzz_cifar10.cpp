// One CIFAR-10 binary batch (train/datasets.h: load_cifar10_batch) on a file
// holding the input. An accepted dataset must pass check_dataset().
#include "fuzz_input.h"
#include "memory_file.h"
#include "outcome.h"
#include "terngrad/train/datasets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tr = terngrad::train;
  using namespace terngrad::fuzz;
  static MemoryFile file("fuzz_batch.bin");
  file.write(Bytes(data, size));
  tr::Dataset d;
  if (!accepts([&] { d = tr::load_cifar10_batch(file.path()); })) return 0;
  must_accept("check_dataset", [&] { tr::check_dataset(d, "fuzzed CIFAR-10 batch"); });
  return 0;
}
