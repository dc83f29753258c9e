// The ternary sum payload (quantize/ternary_sum.h), what the ps sends back,
// bit-packed (codec 2) or entropy-coded (codec 6): is_sum_payload(),
// read_sum_header() (codec 2 only), inspect_sum(), and decode_sum() when
// inspect_sum() accepted (then it must accept too, read_sum_header() must
// agree on a codec-2 header, and every value must be scale * count with an
// integer |count| <= R).
//
// Input: mode byte (bit 0: recompute the header CRC; bit 1: set an
// entropy-coded header's length field to the input's length), payload.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fixups.h"
#include "fuzz_input.h"
#include "outcome.h"
#include "terngrad/quantize/ternary_sum.h"

namespace {

// A codec-6 payload of B bytes may claim up to about 374000 * B elements
// (blocks of 2^20 zero symbols cost 14 bytes), and inspect_sum() decodes them
// into n / g bytes of scratch; a ps's worker sizes its output from the n it
// expects. The harness skips claims above this (codec 2's length bounds its
// own count by 8 * B).
constexpr uint64_t kMaxElements = uint64_t{1} << 22;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tq = terngrad::quantize;
  using namespace terngrad::fuzz;
  Bytes in(data, size);
  const uint8_t mode = take_u8(in);
  std::vector<uint8_t> payload(in.begin(), in.end());
  if (mode & 0x02) fix_entropy_length(payload);
  if (mode & 0x01) fix_tgrd_crc(payload);

  const bool is_sum = tq::is_sum_payload(payload);
  const bool entropy = is_sum && payload[tq::kHeaderCodecOffset] == tq::kCodecTernarySumEntropy;
  if (entropy && tq::header_count(payload.data()) > kMaxElements) return 0;
  tq::SumHeader quick;
  const bool header_ok = accepts([&] { quick = tq::read_sum_header(payload); });
  tq::SumHeader h;
  if (!accepts([&] { h = tq::inspect_sum(payload); })) return 0;
  if (!is_sum) {
    std::fprintf(stderr, "fuzz: inspect_sum() accepted what is_sum_payload() calls no sum\n");
    std::abort();
  }
  if (h.codec == tq::kCodecTernarySum &&
      (!header_ok || quick.count != h.count || quick.contributions != h.contributions || quick.bits != h.bits)) {
    std::fprintf(stderr, "fuzz: read_sum_header() and inspect_sum() disagree\n");
    std::abort();
  }
  if (h.codec == tq::kCodecTernarySumEntropy && header_ok) {
    std::fprintf(stderr, "fuzz: read_sum_header() (codec 2 only) accepted a codec-6 payload\n");
    std::abort();
  }
  // count is bounded by the payload's length (codec 2: at least one bit per
  // element) or by kMaxElements (codec 6).
  std::vector<float> out(h.count);
  must_accept("decode_sum", [&] { tq::decode_sum(payload, out); });
  const int64_t r = h.contributions;
  for (size_t i = 0; i < out.size(); ++i) {
    const float v = out[i];
    bool found = v == 0.0f;  // count 0, or any count when the scale is 0
    if (!found && h.scale > 0.0f) {
      // float32(s * count) may round, or overflow to +-inf for a huge scale:
      // the nearest integer to v / s, clamped to [-R, R], and its neighbours.
      const double ratio = static_cast<double>(v) / static_cast<double>(h.scale);
      const int64_t k = std::isfinite(ratio) ? std::clamp<int64_t>(std::llround(std::clamp(ratio, -1e9, 1e9)), -r, r)
                                             : (ratio > 0 ? r : -r);
      for (int64_t c = k - 1; c <= k + 1 && !found; ++c)
        found = c >= -r && c <= r && h.scale * static_cast<float>(c) == v;
    }
    if (!found) {
      std::fprintf(stderr, "fuzz: decode_sum() gave %g at %zu, not scale %g times a count in [-%lld, %lld]\n",
                   static_cast<double>(v), i, static_cast<double>(h.scale), static_cast<long long>(r),
                   static_cast<long long>(r));
      std::abort();
    }
  }
  // One element too many: refused, nothing written past the end.
  std::vector<float> wrong(h.count + 1);
  if (accepts([&] { tq::decode_sum(payload, wrong); })) {
    std::fprintf(stderr, "fuzz: decode_sum() accepted an output of %zu elements\n", wrong.size());
    std::abort();
  }
  return 0;
}
