// The checkpoint reader (train/checkpoint.h: load_checkpoint) on a file
// holding the input. Every accepted tensor's data must match its shape.
//
// Input: mode byte (bit 0: recompute the total length field; bit 1:
// recompute the CRC trailer), the file.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fixups.h"
#include "fuzz_input.h"
#include "memory_file.h"
#include "outcome.h"
#include "terngrad/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tr = terngrad::train;
  using namespace terngrad::fuzz;
  static MemoryFile file("fuzz.tgck");
  Bytes in(data, size);
  const uint8_t mode = take_u8(in);
  std::vector<uint8_t> bytes(in.begin(), in.end());
  if (mode & 0x01) fix_checkpoint_length(bytes);
  if (mode & 0x02) fix_checkpoint_crc(bytes);
  file.write(bytes);
  tr::Checkpoint ck;
  if (!accepts([&] { ck = tr::load_checkpoint(file.path()); })) return 0;
  for (const auto& [name, t] : ck.tensors) {
    uint64_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    if (n != t.data.size()) {
      std::fprintf(stderr, "fuzz: tensor '%s' holds %zu elements, its shape %llu\n", name.c_str(), t.data.size(),
                   static_cast<unsigned long long>(n));
      std::abort();
    }
  }
  return 0;
}
