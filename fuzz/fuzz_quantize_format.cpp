// The quantize library's self-describing payload reader (quantize/FORMAT.md):
// inspect() validates header, length, codes and padding; when it accepts,
// decode(), decode_accumulate() and accumulate_counts() must accept the same
// bytes and agree on the element count.
//
// Input: mode byte (bit 0: recompute the header CRC), payload.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fixups.h"
#include "fuzz_input.h"
#include "outcome.h"
#include "terngrad/quantize/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tq = terngrad::quantize;
  using namespace terngrad::fuzz;
  Bytes in(data, size);
  const uint8_t mode = take_u8(in);
  std::vector<uint8_t> payload(in.begin(), in.end());
  if (mode & 0x01) fix_tgrd_crc(payload);

  const tq::HeaderFault fault = tq::check_header(payload.data(), payload.size());
  (void)tq::header_fault_name(fault);
  tq::PayloadHeader h;
  if (!accepts([&] { h = tq::inspect(payload); })) return 0;
  if (fault != tq::HeaderFault::kNone) {
    std::fprintf(stderr, "fuzz: inspect() accepted a header check_header() calls %s\n", tq::header_fault_name(fault));
    std::abort();
  }
  // The length check bounds count by 4 * payload bytes, so this is small.
  std::vector<float> out(h.count);
  must_accept("decode", [&] { tq::decode(payload, out); });
  must_accept("decode_accumulate", [&] { tq::decode_accumulate(payload, out); });
  std::vector<int16_t> counts(h.count);
  must_accept("accumulate_counts", [&] { tq::accumulate_counts(payload, counts); });
  // One element too many: the decoders must refuse the size, not write past it.
  std::vector<float> wrong(h.count + 1);
  if (accepts([&] { tq::decode(payload, wrong); })) {
    std::fprintf(stderr, "fuzz: decode() accepted an output of %zu elements for a %llu-element payload\n",
                 wrong.size(), static_cast<unsigned long long>(h.count));
    std::abort();
  }
  return 0;
}
