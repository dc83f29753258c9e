// The ternary sum payload: packing, validation and decoding of b-bit counts.
//
// Groups of 8 elements take exactly b bytes, so each group starts on a byte
// boundary and large payloads split into independent blocks of groups.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "entropy_sum_cpu.h"
#include "packed_cpu.h"
#include "messages.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/ternary_math.h"
#include "terngrad/quantize/ternary_sum.h"

namespace terngrad::quantize {

namespace {

constexpr uint64_t kGroupsPerBlock = 8192;  // 64 Ki elements per parallel block

uint64_t sum_body_bytes(uint64_t n, uint32_t bits) { return (n * bits + 7) / 8; }

void check_contributions(uint32_t contributions) {
  if (contributions == 0 || contributions > kMaxSumContributions) {
    throw CodecError(Errc::kInvalidArgument, "a ternary sum needs 1 to " +
                                                 std::to_string(kMaxSumContributions) +
                                                 " contributions, got " + std::to_string(contributions));
  }
}

// Writes elements [e0, e1) (whole groups, except possibly the last) to body.
// Fields of elements [e0, e1) (e0 a multiple of 8) from counts[0..e1-e0).
void pack_range(const int16_t* counts, uint64_t n, uint64_t e0, uint64_t e1, uint32_t bits,
                uint32_t offset, uint8_t* body) {
  uint8_t* out = body + e0 / 8 * bits;
  uint32_t acc = 0, held = 0;
  for (uint64_t i = e0; i < e1; ++i) {
    acc |= static_cast<uint32_t>(counts[i - e0] + static_cast<int32_t>(offset)) << held;
    held += bits;
    while (held >= 8) {
      *out++ = static_cast<uint8_t>(acc);
      acc >>= 8;
      held -= 8;
    }
  }
  if (e1 == n && held > 0) *out = static_cast<uint8_t>(acc);  // last byte, zero padding
}

// Calls f(i, field) for elements [e0, e1); returns false at the first field
// above max_field (its index in *bad).
template <class F>
bool unpack_range(const uint8_t* body, uint64_t e0, uint64_t e1, uint32_t bits, uint32_t max_field,
                  uint64_t* bad, F&& f) {
  const uint8_t* in = body + e0 / 8 * bits;
  const uint32_t mask = (1u << bits) - 1;
  uint32_t acc = 0, held = 0;
  for (uint64_t i = e0; i < e1; ++i) {
    while (held < bits) {
      acc |= static_cast<uint32_t>(*in++) << held;
      held += 8;
    }
    const uint32_t field = acc & mask;
    acc >>= bits;
    held -= bits;
    if (field > max_field) {
      *bad = i;
      return false;
    }
    f(i, field);
  }
  return true;
}

// The header at p (at least min(payload_bytes, kHeaderBytes) bytes readable)
// of a payload of payload_bytes bytes.
SumHeader parse_sum_header(const uint8_t* p, size_t payload_bytes) {
  auto fail = [&](const std::string& what) {
    throw CodecError(Errc::kMalformedPayload,
                     "malformed ternary sum payload (" + std::to_string(payload_bytes) + " bytes): " + what);
  };
  if (payload_bytes < kHeaderBytes) fail(header_fault_name(HeaderFault::kTooShort));
  if (load_le32(p + kHeaderMagicOffset) != kMagicLe32) fail(header_fault_name(HeaderFault::kBadMagic));
  if (p[kHeaderVersionOffset] != kFormatVersion)  // sums draw nothing: always version 1
    fail("unsupported format version " + std::to_string(p[kHeaderVersionOffset]) + " (expected 1)");
  if (header_codec(p) != kCodecTernarySum)
    fail("codec id " + std::to_string(header_codec(p)) + " is not 2 (ternary sum)");
  if (header_flags(p) != kFlagSharedScale)
    fail("flags must be 0x01 (one shared scale), got " + std::to_string(header_flags(p)));
  if (p[kHeaderSizeOffset] != kHeaderBytes) fail(header_fault_name(HeaderFault::kBadHeaderSize));
  if (load_le32(p + kHeaderCrcOffset) != crc32_ieee(p, kHeaderCrcOffset)) fail(header_fault_name(HeaderFault::kBadCrc));
  SumHeader h;
  h.count = header_count(p);
  const uint32_t scale_bits = header_scale_bits(p);
  if ((scale_bits >> 31) != 0 || (scale_bits & kExpAllOnes) == kExpAllOnes) fail(header_fault_name(HeaderFault::kBadScale));
  h.scale = bits_float(scale_bits);
  h.tensor_id = load_le32(p + kHeaderTensorIdOffset);
  h.contributions = load_le32(p + kSumContributionsOffset);
  h.bits = p[kSumBitsOffset];
  h.step = load_le32(p + kHeaderStepOffset);
  if (h.contributions == 0 || h.contributions > kMaxSumContributions)
    fail("contributions " + std::to_string(h.contributions) + " outside [1, " + std::to_string(kMaxSumContributions) + "]");
  if (h.bits != static_cast<uint32_t>(std::bit_width(2 * h.contributions)))
    fail(std::to_string(h.bits) + " bits per element, " + std::to_string(h.contributions) + " contributions need " +
         std::to_string(std::bit_width(2 * h.contributions)));
  if (std::any_of(p + kSumReservedOffset, p + kSumReservedOffset + kSumReservedBytes, [](uint8_t b) { return b != 0; }))
    fail("reserved bytes 29-31 are not zero");
  if (h.count > (uint64_t{1} << 58) || payload_bytes - kHeaderBytes != sum_body_bytes(h.count, h.bits))
    fail("payload length disagrees with " + std::to_string(h.count) + " elements of " + std::to_string(h.bits) + " bits");
  return h;
}
SumHeader parse_sum_header(std::span<const uint8_t> payload) {
  return parse_sum_header(payload.data(), payload.size());
}

// Checks every field and the padding bits before anything is written.
void check_sum_body(std::span<const uint8_t> payload, const SumHeader& h) {
  const uint8_t* body = payload.data() + kHeaderBytes;
  const uint64_t body_bytes = payload.size() - kHeaderBytes;
  const uint64_t groups = (h.count + 7) / 8;
  const uint64_t blocks = (groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
  const uint32_t max_field = 2 * h.contributions;
  auto* kernel = detail::kernels().sum_fields_max;
  uint64_t first_bad = UINT64_MAX;
  detail::for_each_block(h.count, blocks, [&](uint64_t b) {
    const uint64_t e0 = b * kGroupsPerBlock * 8, e1 = std::min(h.count, e0 + kGroupsPerBlock * 8);
    if (kernel(body, body_bytes, e0, e1, h.bits) <= max_field) return;
    uint64_t bad = 0;  // rare: find the first bad element of the block for the message
    unpack_range(body, e0, e1, h.bits, max_field, &bad, [](uint64_t, uint32_t) {});
#pragma omp critical(tg_sum_bad)
    first_bad = std::min(first_bad, bad);
  });
  if (first_bad != UINT64_MAX) {
    throw CodecError(Errc::kInvalidCode, "ternary sum payload: element " + std::to_string(first_bad) +
                                             " holds a field above 2R = " + std::to_string(max_field));
  }
  const uint64_t used_bits = h.count * h.bits;
  if (used_bits % 8 != 0) {
    const uint8_t last = body[used_bits / 8];
    if ((last >> (used_bits % 8)) != 0)
      throw CodecError(Errc::kInvalidCode, "ternary sum payload: nonzero padding bits in the last byte");
  }
}

}  // namespace

uint32_t sum_bits(uint32_t contributions) {
  check_contributions(contributions);
  return static_cast<uint32_t>(std::bit_width(2 * contributions));
}

size_t sum_payload_bytes(uint64_t n, uint32_t contributions) {
  return kHeaderBytes + sum_body_bytes(n, sum_bits(contributions));
}

namespace {

// What both packings of encode_sum() refuse: an output below the codec-2
// size (which bounds codec 6), a bad scale, a count outside [-R, R].
// Returns that size.
size_t check_sum_inputs(std::span<const int16_t> counts, float scale, uint32_t contributions, std::span<uint8_t> out) {
  const uint64_t n = counts.size();
  const size_t bytes = kHeaderBytes + sum_body_bytes(n, sum_bits(contributions));
  if (out.size() < bytes)
    throw CodecError(Errc::kBufferTooSmall, "output buffer has " + std::to_string(out.size()) +
                                                " bytes, the sum of " + std::to_string(n) + " elements needs " +
                                                std::to_string(bytes));
  if (!(scale >= 0.0f) || std::isinf(scale) || std::signbit(scale))
    throw CodecError(Errc::kInvalidArgument, "sum scale must be finite and >= 0 (not -0), got " + detail::fmt_num(scale));
  const int32_t r = static_cast<int32_t>(contributions);
  for (uint64_t i = 0; i < n; ++i) {
    if (counts[i] < -r || counts[i] > r)
      throw CodecError(Errc::kInvalidArgument, "count " + std::to_string(counts[i]) + " at element " +
                                                   std::to_string(i) + " is outside [-" + std::to_string(r) +
                                                   ", " + std::to_string(r) + "]");
  }
  return bytes;
}

// Codec 2 from checked counts.
size_t pack_sum(std::span<const int16_t> counts, float scale, uint32_t contributions, uint32_t tensor_id,
                uint32_t step, size_t bytes, std::span<uint8_t> out) {
  const uint64_t n = counts.size();
  const uint32_t bits = sum_bits(contributions);
  write_sum_header_bits(out.data(), n, float_bits(scale), contributions, static_cast<uint8_t>(bits), tensor_id, step);
  uint8_t* body = out.data() + kHeaderBytes;
  const uint64_t groups = (n + 7) / 8;
  const uint64_t blocks = (groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t e0 = b * kGroupsPerBlock * 8;
    pack_range(counts.data() + e0, n, e0, std::min(n, e0 + kGroupsPerBlock * 8), bits, contributions, body);
  });
  return bytes;
}

// sum_payloads() of inputs among which some are packed (codec 4 or 5); out
// has room for the codec-2 sum (require_sum_room).
size_t sum_packed_inputs(std::span<const std::span<const uint8_t>> payloads, const PayloadHeader& first, uint32_t r,
                         std::span<uint8_t> out) {
  const uint64_t n = first.count;
  const detail::OpenedSum opened = detail::open_for_sum(payloads, n, "sum_payloads");  // throws before any write
  const uint32_t bits = sum_bits(r);
  write_sum_header_bits(out.data(), n, float_bits(opened.headers[0].scale), r, static_cast<uint8_t>(bits),
                        first.tensor_id, first.step);
  uint8_t* body = out.data() + kHeaderBytes;
  // Blocks of whole symbols (5 elements) and whole output bytes (8 fields).
  constexpr uint64_t kBlock = 40 * 1638;
  const uint64_t blocks = (n + kBlock - 1) / kBlock;
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t e0 = b * kBlock, e1 = std::min(n, e0 + kBlock);
    thread_local std::vector<int16_t> counts;
    counts.assign(e1 - e0, 0);
    for (size_t p = 0; p < payloads.size(); ++p) {
      if (opened.symbols[p].symbols != nullptr)
        detail::add_symbol_codes_range(opened.symbols[p], e0, e1, counts.data());
      else
        detail::add_codes_range(payloads[p].data() + kHeaderBytes, e0, e1, counts.data());
    }
    pack_range(counts.data(), n, e0, e1, bits, r, body);
  });
  return kHeaderBytes + sum_body_bytes(n, bits);
}

}  // namespace

size_t encode_sum(std::span<const int16_t> counts, float scale, uint32_t contributions,
                  uint32_t tensor_id, uint32_t step, std::span<uint8_t> out) {
  const size_t bytes = check_sum_inputs(counts, scale, contributions, out);
  return pack_sum(counts, scale, contributions, tensor_id, step, bytes, out);
}

SumHeader read_sum_header(std::span<const uint8_t> payload) { return parse_sum_header(payload); }  // codec 2 only
SumHeader read_sum_header(std::span<const uint8_t, kHeaderBytes> header, size_t payload_bytes) {
  return parse_sum_header(header.data(), payload_bytes);
}

SumHeader inspect_sum(std::span<const uint8_t> payload) {
  if (is_sum_payload(payload) && header_codec(payload.data()) == kCodecTernarySumEntropy)
    return detail::open_sum_entropy(payload).header;
  const SumHeader h = parse_sum_header(payload);
  check_sum_body(payload, h);
  return h;
}

void decode_sum(std::span<const uint8_t> payload, std::span<float> out) {
  auto require_count = [&](uint64_t count) {
    if (out.size() != count)
      throw CodecError(Errc::kInvalidArgument, "ternary sum payload holds " + std::to_string(count) +
                                                   " elements, the output has " + std::to_string(out.size()));
  };
  if (is_sum_payload(payload) && header_codec(payload.data()) == kCodecTernarySumEntropy) {
    const detail::SumView sv = detail::open_sum_entropy(payload, out.size());
    detail::decode_sum_symbols(sv, out);
    return;
  }
  const SumHeader h = inspect_sum(payload);
  require_count(h.count);
  const uint8_t* body = payload.data() + kHeaderBytes;
  const uint64_t body_bytes = payload.size() - kHeaderBytes;
  const uint64_t groups = (h.count + 7) / 8;
  const uint64_t blocks = (groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
  auto* kernel = detail::kernels().decode_sum_fields;
  float* o = out.data();
  detail::for_each_block(h.count, blocks, [&](uint64_t b) {
    const uint64_t e0 = b * kGroupsPerBlock * 8, e1 = std::min(h.count, e0 + kGroupsPerBlock * 8);
    kernel(body, body_bytes, e0, e1, h.bits, h.contributions, h.scale, o);
  });
}

namespace {

// Lane j (bits 8j..8j+7) of kCodePlusOne[b] is code j of byte b plus one:
// 0 for -1, 1 for 0, 2 for +1 (and 0 for the invalid code, caught apart).
// Summing R of them gives count + R per element, the sum payload's field.
struct PlusOneTable {
  uint32_t v[256];
  constexpr PlusOneTable() : v() {
    for (uint32_t b = 0; b < 256; ++b)
      for (uint32_t j = 0; j < 4; ++j) {
        const uint32_t code = (b >> (2 * j)) & 3u;
        const uint32_t plus_one = code == kCodeZero ? 1u : code == kCodePlus ? 2u : 0u;
        v[b] |= plus_one << (8 * j);
      }
  }
};
constexpr PlusOneTable kCodePlusOne;

// Fields fit 8-bit lanes while 2R <= 255.
constexpr uint32_t kMaxLaneContributions = 127;

// Group g (its first `present` elements, 1 to 8) of the sum: the fields of
// count + R for each element, packed `bits` bits each at byte g*bits. Returns
// the reserved-code bits seen (nonzero: a corrupt body).
uint32_t sum_group(const uint8_t* const* bodies, size_t count, uint64_t g, uint64_t present,
                   uint32_t bits, uint8_t* out) {
  const uint64_t k = 2 * g;
  const bool two = present > 4;  // the second input byte exists
  uint32_t lo = 0, hi = 0, bad = 0;
  for (size_t p = 0; p < count; ++p) {
    const uint32_t b0 = bodies[p][k], b1 = two ? bodies[p][k + 1] : 0u;
    bad |= invalid_code_mask(b0) | invalid_code_mask(b1);
    lo += kCodePlusOne.v[b0];
    hi += kCodePlusOne.v[b1];
  }
  uint64_t word = 0;
  for (uint32_t j = 0; j < present; ++j) {
    const uint64_t field = j < 4 ? (lo >> (8 * j)) & 0xFFu : (hi >> (8 * (j - 4))) & 0xFFu;
    word |= field << (bits * j);
  }
  const uint64_t out_bytes = (present * bits + 7) / 8;  // whole groups: exactly `bits`
  for (uint64_t i = 0; i < out_bytes; ++i) out[g * bits + i] = static_cast<uint8_t>(word >> (8 * i));
  return bad;
}

// Header of a codec-1 payload without validating its body; fails like sum_shared.
PayloadHeader header_only(std::span<const uint8_t> p, size_t index) {
  const HeaderFault f = check_header(p.data(), p.size());
  if (f != HeaderFault::kNone)
    throw CodecError(Errc::kMalformedPayload, "payload " + std::to_string(index) + " (" + std::to_string(p.size()) +
                                                  " bytes): " + header_fault_name(f));
  return read_header_fields(p.data());
}

// The output must hold the codec-2 sum of n elements (sum_payload_bytes(),
// the most either packing writes). Checked before the int16 counts are sized
// from a header's n: a codec-5 payload of B bytes can claim ~374000 * B
// elements (blocks of 2^20 zeros cost 14 bytes), and a caller's output is
// sized from the n it expects.
void require_sum_room(uint64_t n, uint32_t contributions, std::span<uint8_t> out) {
  if (n > (uint64_t{1} << 58) || out.size() < sum_payload_bytes(n, contributions))  // 2^58: n * 16 bits fits
    throw CodecError(Errc::kBufferTooSmall, "output buffer has " + std::to_string(out.size()) +
                                                " bytes, the sum of " + std::to_string(n) + " elements from " +
                                                std::to_string(contributions) + " payloads needs " +
                                                (n > (uint64_t{1} << 58) ? std::string("more")
                                                                         : std::to_string(sum_payload_bytes(n, contributions))));
}

}  // namespace

size_t encode_sum(std::span<const int16_t> counts, float scale, uint32_t contributions, uint32_t tensor_id,
                  uint32_t step, SumPacking packing, std::span<uint8_t> out) {
  const size_t bytes = check_sum_inputs(counts, scale, contributions, out);
  if (packing == SumPacking::kEntropy) {
    // Codec 6 only when strictly smaller than codec 2; it writes nothing when it is not.
    const size_t len = detail::encode_sum_entropy(counts, scale, contributions, tensor_id, step, out.first(bytes - 1));
    if (len != 0) return len;
  }
  return pack_sum(counts, scale, contributions, tensor_id, step, bytes, out);
}

size_t sum_payloads(std::span<const std::span<const uint8_t>> payloads, std::span<uint8_t> out, SumPacking packing) {
  if (packing == SumPacking::kBitPacked || payloads.empty() || payloads.size() > kMaxEntropySumContributions)
    return sum_payloads(payloads, out);
  // Headers first: one count and one scale, and room for the codec-2 size
  // (which bounds codec 6) before anything is decoded.
  std::vector<PayloadHeader> h(payloads.size());
  for (size_t p = 0; p < payloads.size(); ++p) {
    h[p] = read_header(payloads[p]);
    detail::require_same_scale(p, h[p], h[0], "a sum");
  }
  const uint32_t r = static_cast<uint32_t>(payloads.size());
  require_sum_room(h[0].count, r, out);
  const size_t fixed = sum_payload_bytes(h[0].count, r);
  const size_t len = detail::sum_to_entropy(payloads, h[0], out.first(fixed - 1));  // strictly smaller than codec 2
  return len != 0 ? len : sum_payloads(payloads, out);
}

size_t sum_payloads(std::span<const std::span<const uint8_t>> payloads, std::span<uint8_t> out) {
  if (payloads.empty()) throw CodecError(Errc::kInvalidArgument, "sum_payloads needs at least one payload");
  const uint32_t r = static_cast<uint32_t>(std::min<size_t>(payloads.size(), UINT32_MAX));
  // Packed inputs (codec 4, 5) have no 2-bit body to sum from: their
  // symbols (and any 2-bit bodies) are counted block by block into a
  // cache-resident int16 buffer and packed from there, every payload
  // validated first.
  if (std::any_of(payloads.begin(), payloads.end(), [](auto p) { return detail::is_symbol_packed(p); })) {
    if (payloads.size() > kMaxSumContributions)
      throw CodecError(Errc::kInvalidArgument, "a ternary sum takes at most " + std::to_string(kMaxSumContributions) +
                                                   " payloads, got " + std::to_string(payloads.size()));
    const PayloadHeader first = read_header(payloads[0]);
    require_sum_room(first.count, r, out);
    return sum_packed_inputs(payloads, first, r, out);
  }
  const PayloadHeader first = header_only(payloads[0], 0);
  for (size_t p = 1; p < payloads.size(); ++p) {
    detail::require_same_scale(p, header_only(payloads[p], p), first, "a sum");
  }
  if (r > kMaxLaneContributions) {  // wide counts: the int16 route
    std::vector<int16_t> counts(first.count);
    const float scale = sum_shared(payloads, counts);
    return encode_sum(counts, scale, r, first.tensor_id, first.step, out);
  }
  const uint64_t n = first.count;
  const uint32_t bits = sum_bits(r);
  const size_t bytes = kHeaderBytes + sum_body_bytes(n, bits);
  if (out.size() < bytes)
    throw CodecError(Errc::kBufferTooSmall, "output buffer has " + std::to_string(out.size()) +
                                                " bytes, the sum of " + std::to_string(n) + " elements needs " +
                                                std::to_string(bytes));
  // Padding codes after element n-1 must be zero in every payload.
  const uint32_t pad = padding_mask(n);
  const uint64_t in_bytes = body_bytes(n);
  for (size_t p = 0; p < payloads.size(); ++p)
    if (pad != 0 && (payloads[p][kHeaderBytes + in_bytes - 1] & pad) != 0)
      throw CodecError(Errc::kInvalidCode, "payload " + std::to_string(p) + ": nonzero padding bits in the last byte");

  std::vector<const uint8_t*> bodies(payloads.size());
  for (size_t p = 0; p < payloads.size(); ++p) bodies[p] = payloads[p].data() + kHeaderBytes;
  uint8_t* body = out.data() + kHeaderBytes;
  const uint64_t groups = (n + 7) / 8;  // 8 elements: 2 input bytes per payload, `bits` output bytes
  const uint64_t full_groups = n / 8;
  const uint64_t blocks = (groups + kGroupsPerBlock - 1) / kGroupsPerBlock;
  auto* kernel = detail::kernels().sum_groups;
  std::atomic<bool> invalid{false};
  detail::for_each_block(n, blocks, [&](uint64_t blk) {
    const uint64_t g0 = blk * kGroupsPerBlock, g1 = std::min(groups, g0 + kGroupsPerBlock);
    uint32_t bad = kernel(bodies.data(), bodies.size(), g0, std::min(g1, full_groups), bits, body);
    if (g1 > full_groups)  // the last group holds fewer than 8 elements
      bad |= sum_group(bodies.data(), bodies.size(), full_groups, n - 8 * full_groups, bits, body);
    if (bad != 0) invalid.store(true, std::memory_order_relaxed);
  });
  if (invalid.load())
    throw CodecError(Errc::kInvalidCode, "a payload holds the reserved code 0b11 (corrupt body)");
  write_sum_header_bits(out.data(), n, float_bits(first.scale), r, static_cast<uint8_t>(bits), first.tensor_id,
                        first.step);
  return bytes;
}

namespace detail {

uint32_t sum_fields_max_portable(const uint8_t* body, uint64_t, uint64_t e0, uint64_t e1, uint32_t bits) {
  uint32_t most = 0;
  uint64_t unused = 0;
  unpack_range(body, e0, e1, bits, UINT32_MAX, &unused, [&](uint64_t, uint32_t field) { most = std::max(most, field); });
  return most;
}

void decode_sum_fields_portable(const uint8_t* body, uint64_t, uint64_t e0, uint64_t e1, uint32_t bits,
                                uint32_t contributions, float scale, float* out) {
  const int32_t r = static_cast<int32_t>(contributions);
  uint64_t unused = 0;
  unpack_range(body, e0, e1, bits, UINT32_MAX, &unused, [&](uint64_t i, uint32_t field) {
    out[i] = scale * static_cast<float>(static_cast<int32_t>(field) - r);
  });
}

uint32_t sum_groups_portable(const uint8_t* const* bodies, size_t count, uint64_t g0, uint64_t g1,
                             uint32_t bits, uint8_t* out) {
  uint32_t bad = 0;
  for (uint64_t g = g0; g < g1; ++g) bad |= sum_group(bodies, count, g, 8, bits, out);
  return bad;
}
}  // namespace detail

bool is_sum_payload(std::span<const uint8_t> payload) {
  return payload.size() >= kHeaderBytes && load_le32(payload.data() + kHeaderMagicOffset) == kMagicLe32 &&
         (header_codec(payload.data()) == kCodecTernarySum || header_codec(payload.data()) == kCodecTernarySumEntropy);
}

}  // namespace terngrad::quantize
