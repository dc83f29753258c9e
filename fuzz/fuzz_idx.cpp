// The MNIST / Fashion-MNIST IDX loader (train/datasets.h: load_idx), gzip
// or plain, on an images file and a labels file cut from the input
// (fuzz_input.h: two pieces). An accepted dataset must pass check_dataset().
#include "fuzz_input.h"
#include "memory_file.h"
#include "outcome.h"
#include "terngrad/train/datasets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tr = terngrad::train;
  using namespace terngrad::fuzz;
  static MemoryFile images("fuzz-images-idx3-ubyte");
  static MemoryFile labels("fuzz-labels-idx1-ubyte");
  const std::vector<Bytes> pieces = split_pieces(Bytes(data, size), 2);
  images.write(pieces[0]);
  labels.write(pieces[1]);
  tr::Dataset d;
  if (!accepts([&] { d = tr::load_idx(images.path(), labels.path()); })) return 0;
  must_accept("check_dataset", [&] { tr::check_dataset(d, "fuzzed IDX"); });
  return 0;
}
