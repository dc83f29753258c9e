// The ternary sum payload (quantize/ternary_sum.h), what the ps sends back:
// is_sum_payload(), read_sum_header(), inspect_sum(), and decode_sum() when
// inspect_sum() accepted (then it must accept too, and read_sum_header()
// must agree on the header).
//
// Input: mode byte (bit 0: recompute the header CRC), payload.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fixups.h"
#include "fuzz_input.h"
#include "outcome.h"
#include "terngrad/quantize/ternary_sum.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tq = terngrad::quantize;
  using namespace terngrad::fuzz;
  Bytes in(data, size);
  const uint8_t mode = take_u8(in);
  std::vector<uint8_t> payload(in.begin(), in.end());
  if (mode & 0x01) fix_tgrd_crc(payload);

  (void)tq::is_sum_payload(payload);
  tq::SumHeader quick;
  const bool header_ok = accepts([&] { quick = tq::read_sum_header(payload); });
  tq::SumHeader h;
  if (!accepts([&] { h = tq::inspect_sum(payload); })) return 0;
  if (!header_ok || quick.count != h.count || quick.contributions != h.contributions || quick.bits != h.bits) {
    std::fprintf(stderr, "fuzz: read_sum_header() and inspect_sum() disagree\n");
    std::abort();
  }
  // count is bounded by the payload's length (at least one bit per element).
  std::vector<float> out(h.count);
  must_accept("decode_sum", [&] { tq::decode_sum(payload, out); });
  return 0;
}
