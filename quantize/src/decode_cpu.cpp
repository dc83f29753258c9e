// Decode side: payload validation, decode, decode-accumulate and exact
// shared-scale summation. Validation runs over the whole body before any
// output is touched, so a bad payload never half-updates an accumulator.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_kernels.h"
#include "messages.h"
#include "packed_cpu.h"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/codec.h"

namespace terngrad::quantize {
namespace detail {

void decode_bytes_portable(const uint8_t* body, uint64_t n, uint64_t k_begin, uint64_t k_end,
                           float scale, bool accumulate, float* out) {
  for (uint64_t k = k_begin; k < k_end; ++k) {
    const uint32_t b = body[k];
    for (uint64_t j = 0; j < 4 && 4 * k + j < n; ++j) {
      const float v = scale * static_cast<float>(code_sign((b >> (2 * j)) & 3u));
      if (accumulate)
        out[4 * k + j] += v;
      else
        out[4 * k + j] = v;
    }
  }
}

// Word-at-a-time scan (cpu_kernels.h); blocks of kDecodeBlockBytes.
uint64_t first_bad_byte(const uint8_t* body, uint64_t n) {
  const uint64_t nbytes = body_bytes(n);
  const uint64_t blocks = (nbytes + kDecodeBlockBytes - 1) / kDecodeBlockBytes;
  // Blocks record their first bad byte; the smallest wins (blocks are few).
  std::atomic<uint64_t> first{kNoBadByte};
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t k0 = b * kDecodeBlockBytes, k1 = std::min(nbytes, k0 + kDecodeBlockBytes);
    uint64_t k = k0, bad = 0;
    for (; k + 8 <= k1; k += 8) {
      uint64_t w;
      std::memcpy(&w, body + k, sizeof w);
      bad |= w & (w >> 1) & 0x5555555555555555ull;
    }
    for (; k < k1; ++k) bad |= invalid_code_mask(body[k]);
    if (bad == 0) return;
    for (uint64_t j = k0; j < k1; ++j) {
      if (invalid_code_mask(body[j]) != 0) {
        uint64_t cur = first.load();
        while (j < cur && !first.compare_exchange_weak(cur, j)) {
        }
        return;
      }
    }
  });
  if (first.load() == kNoBadByte && nbytes > 0 && (body[nbytes - 1] & padding_mask(n)) != 0)
    return nbytes - 1;
  return first.load();
}

}  // namespace detail

namespace {

constexpr uint64_t kBlockBytes = detail::kDecodeBlockBytes;
using detail::first_bad_byte;
using detail::kNoBadByte;

PayloadHeader parse_header(std::span<const uint8_t> payload) {
  const HeaderFault fault = check_header(payload.data(), payload.size());
  if (fault != HeaderFault::kNone) {
    std::string what = std::string("malformed payload (") + std::to_string(payload.size()) +
                       " bytes): " + header_fault_name(fault);
    if (fault == HeaderFault::kLengthMismatch) {
      const uint64_t count = header_count(payload.data());
      what += "; header says " + std::to_string(count) + " elements";
      if (count <= (uint64_t{1} << 62)) what += " = " + std::to_string(max_encoded_bytes(count)) + " bytes";
    }
    throw CodecError(Errc::kMalformedPayload, what);
  }
  return read_header_fields(payload.data());
}

std::span<const uint8_t> checked_body(std::span<const uint8_t> payload, const PayloadHeader& h) {
  const uint8_t* body = payload.data() + kHeaderBytes;
  const uint64_t bad = first_bad_byte(body, h.count);
  if (bad != kNoBadByte) {
    const bool is_padding = bad == body_bytes(h.count) - 1 &&
                            invalid_code_mask(body[bad]) == 0;
    char hex[8];
    std::snprintf(hex, sizeof hex, "0x%02x", body[bad]);
    throw CodecError(Errc::kInvalidCode,
                     "corrupt payload: body byte " + std::to_string(bad) + " (" + hex + ") " +
                         (is_padding ? "has nonzero padding bits beyond element " +
                                           std::to_string(h.count - 1)
                                     : "holds the reserved code 0b11"));
  }
  return {body, body_bytes(h.count)};
}

void require_length(const PayloadHeader& h, size_t out_elements, const char* what) {
  if (out_elements != h.count) {
    throw CodecError(Errc::kInvalidArgument,
                     std::string(what) + " has " + std::to_string(out_elements) +
                         " elements but the payload holds " + std::to_string(h.count));
  }
}

void decode_into(std::span<const uint8_t> payload, std::span<float> out, bool accumulate) {
  if (detail::is_symbol_packed(payload)) {
    const detail::SymbolPayload sp =
        detail::open_symbol_payload(payload, out.size(), accumulate ? "accumulator" : "output");
    detail::expand_symbols(sp, accumulate, out);
    return;
  }
  const PayloadHeader h = parse_header(payload);
  require_length(h, out.size(), accumulate ? "accumulator" : "output");
  const uint8_t* body = checked_body(payload, h).data();
  const uint64_t n = h.count, nbytes = body_bytes(n);
  auto* kernel = detail::kernels().decode_bytes;
  const uint64_t blocks = (nbytes + kBlockBytes - 1) / kBlockBytes;
  float* o = out.data();
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t k0 = b * kBlockBytes;
    kernel(body, n, k0, std::min(nbytes, k0 + kBlockBytes), h.scale, accumulate, o);
  });
}

}  // namespace

PayloadHeader inspect(std::span<const uint8_t> payload) {
  if (detail::is_symbol_packed(payload)) return detail::open_symbol_payload(payload).header;
  const PayloadHeader h = parse_header(payload);
  checked_body(payload, h);
  return h;
}

void decode(std::span<const uint8_t> payload, std::span<float> out) {
  decode_into(payload, out, false);
}

void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) {
  decode_into(payload, out, true);
}

namespace {
// counts += codes of an already validated body.
void add_codes(const uint8_t* body, uint64_t n, int16_t* counts) {
  const uint64_t nbytes = body_bytes(n), blocks = (nbytes + kBlockBytes - 1) / kBlockBytes;
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t begin = 4 * b * kBlockBytes, end = std::min(n, 4 * std::min(nbytes, (b + 1) * kBlockBytes));
    detail::add_codes_range(body, begin, end, counts + begin);
  });
}
}  // namespace

float accumulate_counts(std::span<const uint8_t> payload, std::span<int16_t> counts) {
  if (detail::is_symbol_packed(payload)) {
    const detail::SymbolPayload sp = detail::open_symbol_payload(payload, counts.size(), "counts");
    detail::add_symbol_codes(sp, counts.data());
    return sp.header.scale;
  }
  const PayloadHeader h = parse_header(payload);
  require_length(h, counts.size(), "counts");
  add_codes(checked_body(payload, h).data(), h.count, counts.data());
  return h.scale;
}

namespace detail {

void add_codes_range(const uint8_t* body, uint64_t i0, uint64_t i1, int16_t* counts) {
  for (uint64_t i = i0; i < i1; ++i)
    counts[i - i0] = static_cast<int16_t>(counts[i - i0] + code_sign((body[i / 4] >> (2 * (i % 4))) & 3u));
}

OpenedSum open_for_sum(std::span<const std::span<const uint8_t>> payloads, uint64_t n, const char* what) {
  // Packed payloads (codec 4, 5) are opened once and kept as their symbols.
  OpenedSum o;
  o.symbols.resize(payloads.size());
  o.headers.resize(payloads.size());
  for (size_t p = 0; p < payloads.size(); ++p) {
    if (is_symbol_packed(payloads[p])) {
      o.symbols[p] = open_symbol_payload(payloads[p], n, "counts");
      o.headers[p] = o.symbols[p].header;
    } else {
      o.headers[p] = parse_header(payloads[p]);
    }
    const PayloadHeader& h = o.headers[p];
    require_same_scale(p, h, o.headers[0], what);
    if (o.symbols[p].symbols == nullptr) checked_body(payloads[p], h);
  }
  require_length(o.headers[0], n, "counts");
  return o;
}

}  // namespace detail

float sum_shared(std::span<const std::span<const uint8_t>> payloads, std::span<int16_t> counts) {
  if (payloads.empty()) throw CodecError(Errc::kInvalidArgument, "sum_shared needs at least one payload");
  if (payloads.size() > 32767) {
    throw CodecError(Errc::kInvalidArgument, "sum_shared sums at most 32767 payloads into int16 counts, got " +
                                                 std::to_string(payloads.size()));
  }
  // Check every payload first, whole: a bad one must leave counts untouched.
  const detail::OpenedSum o = detail::open_for_sum(payloads, counts.size(), "sum_shared");
  std::fill(counts.begin(), counts.end(), int16_t{0});
  for (size_t p = 0; p < payloads.size(); ++p) {
    if (o.symbols[p].symbols != nullptr)
      detail::add_symbol_codes(o.symbols[p], counts.data());
    else
      add_codes(payloads[p].data() + kHeaderBytes, o.headers[0].count, counts.data());
  }
  return o.headers[0].scale;
}

PayloadHeader read_header(std::span<const uint8_t> payload) {
  if (detail::is_symbol_packed(payload)) return detail::check_symbol_header(payload);
  return parse_header(payload);
}

size_t payload_length(std::span<const uint8_t> buffer) {
  auto bad = [&](const std::string& why) -> size_t {
    throw CodecError(Errc::kMalformedPayload, "buffer of " + std::to_string(buffer.size()) +
                                                  " bytes does not start with a ternary payload: " + why);
  };
  if (buffer.size() < kHeaderBytes) return bad("shorter than a header");
  const uint8_t* p = buffer.data();
  if (load_le32(p) != kMagicLe32) return bad("bad magic");
  const uint8_t codec = header_codec(p);
  size_t length = 0;
  if (codec == kCodecTernaryEntropy) {
    if (buffer.size() < kEntropyHeaderBytes || p[kHeaderSizeOffset] != kEntropyHeaderBytes ||
        load_le32(p + kEntropyCrcOffset) != crc32_ieee(p, kEntropyCrcOffset))
      return bad("entropy-coded header is truncated or fails its CRC");
    const uint64_t len = load_le64(p + kEntropyLengthOffset);
    if (len > buffer.size()) return bad("its length field says " + std::to_string(len) + " bytes");
    length = static_cast<size_t>(len);
  } else if (codec == kCodecTernary2Bit || codec == kCodecTernaryBase3) {
    if (p[kHeaderSizeOffset] != kHeaderBytes || load_le32(p + kHeaderCrcOffset) != crc32_ieee(p, kHeaderCrcOffset))
      return bad("header size or CRC is wrong");
    const uint64_t n = header_count(p);
    if (n > (uint64_t{1} << 62)) return bad("element count above 2^62");
    const uint64_t len = codec == kCodecTernary2Bit ? max_encoded_bytes(n) : base3_payload_bytes(n);
    if (len > buffer.size()) return bad(std::to_string(n) + " elements need " + std::to_string(len) + " bytes");
    length = static_cast<size_t>(len);
  } else {
    return bad("codec id " + std::to_string(codec) + " (expected 1, 4 or 5)");
  }
  return length;
}

}  // namespace terngrad::quantize
