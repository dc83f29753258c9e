// The quantize library's self-describing payload reader (quantize/FORMAT.md),
// every packing of a worker's payload (codec 1, base-3 codec 4, entropy-coded
// codec 5): inspect() validates header, length, codes and padding; when it
// accepts, decode(), decode_accumulate(), accumulate_counts(), sum_shared()
// and sum_payloads() (both packings, then decode_sum()) must accept the same
// bytes, agree on the element count and give only the values a ternary
// payload can hold: 0 or +-s per element, a count in [-R, R] per sum.
// repack() into each packing keeps the header fields and the values.
//
// Input: mode byte (bit 0: recompute the header CRC; bit 1: set an
// entropy-coded header's length field to the input's length), payload.
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "fixups.h"
#include "fuzz_input.h"
#include "outcome.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/ternary_sum.h"

namespace {

// An entropy-coded payload of B bytes may legitimately describe up to about
// 374000 * B elements (blocks of 2^20 zero symbols cost 14 bytes each; the
// encoders' 2^14-symbol blocks give ~6000 * B), and every entry point below
// that has no output sized by the caller (inspect) or that is handed one
// here decodes or allocates that many. A caller bounds n by what it
// expects (codec.h); the harness does the same with read_header()'s count,
// so a fuzzed 20-byte claim of 2^30 elements costs no gigabytes per run.
constexpr uint64_t kMaxElements = uint64_t{1} << 22;

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "fuzz: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace tq = terngrad::quantize;
  using namespace terngrad::fuzz;
  Bytes in(data, size);
  const uint8_t mode = take_u8(in);
  std::vector<uint8_t> payload(in.begin(), in.end());
  if (mode & 0x02) fix_entropy_length(payload);
  if (mode & 0x01) fix_tgrd_crc(payload);

  const tq::HeaderFault fault = tq::check_header(payload.data(), payload.size());
  (void)tq::header_fault_name(fault);
  try {
    (void)tq::payload_length(payload);
  } catch (const tq::CodecError&) {
  }
  tq::PayloadHeader quick;
  if (!accepts([&] { quick = tq::read_header(payload); })) {
    // inspect() reads the header the same way: it must refuse too.
    if (accepts([&] { tq::inspect(payload); })) fail("inspect() accepted a payload read_header() refused");
    return 0;
  }
  if (quick.count > kMaxElements) return 0;
  tq::PayloadHeader h;
  if (!accepts([&] { h = tq::inspect(payload); })) return 0;
  // check_header() is codec 1's; it must agree when inspect() read codec 1.
  if (h.codec == tq::kCodecTernary2Bit && fault != tq::HeaderFault::kNone) {
    std::fprintf(stderr, "fuzz: inspect() accepted a header check_header() calls %s\n", tq::header_fault_name(fault));
    std::abort();
  }
  if (h.codec != tq::kCodecTernary2Bit && h.codec != tq::kCodecTernaryBase3 && h.codec != tq::kCodecTernaryEntropy)
    fail("inspect() accepted an unknown codec id");
  if (h.count != quick.count) fail("read_header() and inspect() disagree on the element count");
  if (!tq::known_drawn_version(h.version)) fail("inspect() accepted an unknown format version");
  const float s = h.scale;
  auto ternary = [&](const std::vector<float>& v, const char* what) {
    for (float x : v)
      if (!(x == 0.0f || x == s || x == -s)) {
        std::fprintf(stderr, "fuzz: %s gave %g, not 0 or +-%g\n", what, static_cast<double>(x), static_cast<double>(s));
        std::abort();
      }
  };
  std::vector<float> out(h.count, 7.0f);
  must_accept("decode", [&] { tq::decode(payload, out); });
  ternary(out, "decode");
  std::vector<float> acc(h.count, 0.0f);
  must_accept("decode_accumulate", [&] { tq::decode_accumulate(payload, acc); });
  ternary(acc, "decode_accumulate");
  if (acc != out) fail("decode_accumulate() into zeros differs from decode()");
  std::vector<int16_t> counts(h.count);
  must_accept("accumulate_counts", [&] { tq::accumulate_counts(payload, counts); });
  for (size_t i = 0; i < counts.size(); ++i)
    if (s * static_cast<float>(counts[i]) != out[i] || counts[i] < -1 || counts[i] > 1)
      fail("accumulate_counts() disagrees with decode()");
  // The payload summed with itself: every count doubled, as sum_shared()
  // and both sum packings (codec 2, or codec 6 when smaller) must say.
  const std::span<const uint8_t> two[] = {payload, payload};
  std::vector<int16_t> sum(h.count);
  must_accept("sum_shared", [&] { tq::sum_shared(two, sum); });
  for (size_t i = 0; i < sum.size(); ++i)
    if (sum[i] != 2 * counts[i]) fail("sum_shared() of a payload with itself is not twice its counts");
  for (tq::SumPacking packing : {tq::SumPacking::kBitPacked, tq::SumPacking::kEntropy}) {
    std::vector<uint8_t> packed(tq::sum_payload_bytes(h.count, 2));
    must_accept("sum_payloads", [&] { packed.resize(tq::sum_payloads(two, packed, packing)); });
    std::vector<float> values(h.count);
    must_accept("decode_sum", [&] { tq::decode_sum(packed, values); });
    for (size_t i = 0; i < values.size(); ++i)
      if (values[i] != s * static_cast<float>(sum[i])) fail("decode_sum() of sum_payloads() differs from sum_shared()");
  }
  // Every repack() of an accepted payload is accepted, keeps its header
  // fields and decodes to the same values; a buffer one byte short is
  // refused before anything is written.
  for (tq::Packing to : {tq::Packing::k2Bit, tq::Packing::kBase3, tq::Packing::kEntropy}) {
    std::vector<uint8_t> re(tq::max_encoded_bytes(h.count, to));
    must_accept("repack", [&] { re.resize(tq::repack(payload, to, re)); });
    tq::PayloadHeader rh;
    must_accept("inspect of a repack", [&] { rh = tq::inspect(re); });
    if (rh.count != h.count || rh.version != h.version || rh.flags != h.flags ||
        tq::float_bits(rh.scale) != tq::float_bits(h.scale) || rh.seed != h.seed || rh.step != h.step ||
        rh.tensor_id != h.tensor_id)
      fail("repack() changed a header field");
    std::vector<float> values(h.count);
    must_accept("decode of a repack", [&] { tq::decode(re, values); });
    if (values != out) fail("repack() changed a decoded value");
    std::vector<uint8_t> shorter(tq::max_encoded_bytes(h.count, to) - 1, 0xA5);
    if (accepts([&] { tq::repack(payload, to, shorter); })) fail("repack() took a buffer one byte short");
    for (uint8_t b : shorter)
      if (b != 0xA5) fail("a refused repack() wrote into its buffer");
  }
  // One element too many: the decoders must refuse the size, not write past it.
  std::vector<float> wrong(h.count + 1);
  if (accepts([&] { tq::decode(payload, wrong); })) {
    std::fprintf(stderr, "fuzz: decode() accepted an output of %zu elements for a %llu-element payload\n",
                 wrong.size(), static_cast<unsigned long long>(h.count));
    std::abort();
  }
  return 0;
}
