// tg-codec's .npy reader (quantize/tools/npy_io.h: read_tensor), on a file
// holding the input. Accepted tensors must hold as many elements as their
// shape says.
#include <cstdio>
#include <cstdlib>

#include "fuzz_input.h"
#include "memory_file.h"
#include "npy_io.h"
#include "outcome.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tt = terngrad::tools;
  using namespace terngrad::fuzz;
  static MemoryFile file("fuzz.npy");
  file.write(Bytes(data, size));
  tt::Tensor t;
  if (!accepts([&] { t = tt::read_tensor(file.path(), tt::TensorFormat::kNpy); })) return 0;
  const auto count = tt::element_count(t.shape);
  if (!count || *count != t.data.size()) {
    std::fprintf(stderr, "fuzz: shape %s but %zu elements\n", tt::shape_string(t.shape).c_str(), t.data.size());
    std::abort();
  }
  return 0;
}
