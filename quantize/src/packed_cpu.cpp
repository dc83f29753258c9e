// Base-3 (codec 4) and entropy-coded (codec 5) worker payloads (packed_cpu.h).
//
// Encode, one block of 5 * 2^14 elements per task: the 2-bit encode kernel of
// the SIMD level in use writes the block's codes to a small buffer (so the
// codes, and so the symbols, are exactly codec 1's), 5 codes become one
// base-3 byte through a 1024-entry table (10 bits of codes at a time), and
// the codes' popcounts give the block's counts of +, - and 0. Base-3 stops
// there (the symbols are its body); entropy coding runs the blocks' rANS
// streams next (entropy_payload.cpp) and writes the base-3 payload instead
// when that would not be smaller (tiny tensors: its header is 12 bytes
// shorter, and a block directory costs 10 bytes a block).
#include "packed_cpu.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string>

#include "cpu_kernels.h"
#include "entropy_payload.h"
#include "messages.h"
#include "thread_buffer.h"
#include "terngrad/quantize/entropy_format.h"

namespace terngrad::quantize::detail {

namespace {

constexpr uint64_t kBlockSymbols = uint64_t{1} << rans::kEncoderBlockLog2;
constexpr uint64_t kBlockElements = kBase3Elements * kBlockSymbols;  // a multiple of 20

// Base-3 value of five 2-bit codes (code j at bits 2j). Entries holding the
// reserved code 0b11 are never looked up (encoders do not write it).
constexpr std::array<uint8_t, 1024> make_code_lut() {
  std::array<uint8_t, 1024> t{};
  for (uint32_t v = 0; v < 1024; ++v) {
    uint32_t s = 0, p = 1;
    for (uint32_t j = 0; j < 5; ++j, p *= 3) s += ((v >> (2 * j)) & 3u) * p;
    t[v] = static_cast<uint8_t>(s > 255 ? 255 : s);
  }
  return t;
}
constexpr std::array<uint8_t, 1024> kCodeLut = make_code_lut();

// The five codes' signs of every symbol: digit 0 -> 0, 1 -> +1, 2 -> -1.
struct SymbolSigns {
  int8_t v[243][kBase3Elements];
  constexpr SymbolSigns() : v() {
    for (uint32_t s = 0; s < 243; ++s)
      for (uint32_t j = 0, r = s; j < kBase3Elements; ++j, r /= 3) v[s][j] = static_cast<int8_t>(r % 3 == 1 ? 1 : r % 3 == 2 ? -1 : 0);
  }
};
constexpr SymbolSigns kSigns;

// The five 2-bit codes of every symbol (code j at bits 2j): kCodeLut's inverse.
constexpr std::array<uint16_t, 243> make_symbol_codes() {
  std::array<uint16_t, 243> t{};
  for (uint32_t s = 0; s < 243; ++s)
    for (uint32_t j = 0, r = s; j < kBase3Elements; ++j, r /= 3) t[s] = static_cast<uint16_t>(t[s] | (r % 3) << (2 * j));
  return t;
}
constexpr std::array<uint16_t, 243> kSymbolCodes = make_symbol_codes();

// Symbols of one block's codes (ceil(len/4) bytes, zero beyond them for at
// least 8 bytes): 4 symbols from each 5 code bytes.
void codes_to_symbols(const uint8_t* codes, uint64_t nsym, uint8_t* syms) {
  uint64_t s = 0;
  const uint8_t* c = codes;
  for (; s + 4 <= nsym; s += 4, c += 5) {
    uint64_t w;
    std::memcpy(&w, c, sizeof w);  // 8 readable bytes: the buffer has slack
    syms[s] = kCodeLut[w & 1023u];
    syms[s + 1] = kCodeLut[(w >> 10) & 1023u];
    syms[s + 2] = kCodeLut[(w >> 20) & 1023u];
    syms[s + 3] = kCodeLut[(w >> 30) & 1023u];
  }
  for (uint32_t k = 0; s < nsym; ++s, ++k) {
    uint64_t w;
    std::memcpy(&w, c, sizeof w);
    syms[s] = kCodeLut[(w >> (10 * k)) & 1023u];
  }
}

// The 2-bit codes of nsym symbols: 5 bytes from each 4 symbols, written as
// 8 (codes needs 8 bytes of slack past ceil(10 nsym / 8)). Padding digits
// are zero, so the bits past the last element are too.
void symbols_to_codes(const uint8_t* syms, uint64_t nsym, uint8_t* codes) {
  uint64_t s = 0;
  uint8_t* c = codes;
  for (; s + 4 <= nsym; s += 4, c += 5) {
    const uint64_t w = uint64_t{kSymbolCodes[syms[s]]} | uint64_t{kSymbolCodes[syms[s + 1]]} << 10 |
                       uint64_t{kSymbolCodes[syms[s + 2]]} << 20 | uint64_t{kSymbolCodes[syms[s + 3]]} << 30;
    std::memcpy(c, &w, sizeof w);
  }
  uint64_t w = 0;
  for (uint32_t k = 0; s < nsym; ++s, ++k) w |= uint64_t{kSymbolCodes[syms[s]]} << (10 * k);
  std::memcpy(c, &w, sizeof w);
}

// Set bits of a word, without a popcnt instruction (the library targets
// baseline x86-64, where std::popcount is a libgcc call).
inline uint64_t bits_set(uint64_t v) {
  v = v - ((v >> 1) & 0x5555555555555555ull);
  v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
  v = (v + (v >> 4)) & 0x0F0F0F0F0F0F0F0Full;
  return (v * 0x0101010101010101ull) >> 56;
}

// Counts of +s and -s codes in nbytes of 2-bit codes (zero bytes beyond
// them up to a multiple of 8).
void count_codes(const uint8_t* codes, uint64_t nbytes, uint32_t* plus, uint32_t* minus) {
  uint64_t p = 0, m = 0;
  for (uint64_t k = 0; k < nbytes; k += 8) {
    uint64_t w;
    std::memcpy(&w, codes + k, sizeof w);
    p += bits_set(w & 0x5555555555555555ull);
    m += bits_set(w & 0xAAAAAAAAAAAAAAAAull);
  }
  *plus = static_cast<uint32_t>(p);
  *minus = static_cast<uint32_t>(m);
}

[[noreturn]] void malformed_base3(size_t size, const std::string& what) {
  throw CodecError(Errc::kMalformedPayload, "malformed base-3 payload (" + std::to_string(size) + " bytes): " + what);
}

PayloadHeader check_base3_header(std::span<const uint8_t> payload) {
  const uint8_t* p = payload.data();
  const size_t size = payload.size();
  if (size < kHeaderBytes) malformed_base3(size, "shorter than the 40-byte header");
  if (load_le32(p) != kMagicLe32) malformed_base3(size, "bad magic (expected \"TGRD\")");
  if (!known_drawn_version(p[kHeaderVersionOffset]))
    malformed_base3(size, "unsupported format version " + std::to_string(p[kHeaderVersionOffset]) + " (expected 1 or 2)");
  if (p[kHeaderSizeOffset] != kHeaderBytes) malformed_base3(size, "header size field is not 40");
  if ((header_flags(p) & ~kKnownFlags) != 0) malformed_base3(size, "reserved flag bits are set");
  if (load_le32(p + kHeaderCrcOffset) != crc32_ieee(p, kHeaderCrcOffset))
    malformed_base3(size, "header CRC-32 mismatch (corrupt header)");
  const uint32_t sb = header_scale_bits(p);
  if ((sb >> 31) != 0 || (sb & 0x7F800000u) == 0x7F800000u) malformed_base3(size, "scale is negative, NaN or Inf");
  const uint64_t n = header_count(p);
  if (n > (uint64_t{1} << 62) || size - kHeaderBytes != base3_body_bytes(n))
    malformed_base3(size, "payload length disagrees with the element count " + std::to_string(n) + " (expected " +
                              (n > (uint64_t{1} << 62) ? std::string("at most 2^62 elements")
                                                       : std::to_string(base3_payload_bytes(n)) + " bytes") +
                              ")");
  return read_header_fields(p);
}

// The first body byte above 242, or the last one if its padding digits are
// not zero; nsym if the body is clean.
uint64_t first_bad_symbol(const uint8_t* syms, uint64_t n) {
  const uint64_t nsym = base3_body_bytes(n);
  uint32_t worst = 0;
  for (uint64_t k = 0; k < nsym; ++k) worst = std::max<uint32_t>(worst, syms[k]);  // vectorizes
  if (worst > kBase3MaxByte)
    for (uint64_t k = 0; k < nsym; ++k)
      if (syms[k] > kBase3MaxByte) return k;
  const uint32_t used = static_cast<uint32_t>(n % kBase3Elements);
  if (used != 0) {
    uint32_t limit = 1;
    for (uint32_t j = 0; j < used; ++j) limit *= 3;
    if (syms[nsym - 1] >= limit) return nsym - 1;
  }
  return nsym;
}

}  // namespace

namespace {

// The header fields a payload keeps whatever its packing.
struct PackedFields {
  uint64_t count;
  uint8_t flags;
  uint32_t scale_bits;
  uint32_t tensor_id;
  uint64_t seed_field;  // 0 for nearest rounding
  uint32_t step;
  uint8_t version;
};

// The payload of the codes block_codes(b, len, codes) gives (block b's len
// elements, the last block shorter, as body_bytes(len) bytes of codec 1's
// 2-bit codes), packed as `packing`, into
// out (max_encoded_bytes(count, packing) bytes): per block, the codes become
// 2-bit body bytes, or base-3 symbols (5 codes to a byte, through a
// 1024-entry table) and, for entropy coding, the block's counts of 0, + and
// - (popcounts) and its rANS stream, while the block is in cache. Entropy
// coding writes the base-3 payload instead when it would not be smaller
// (tiny tensors: its header is 12 bytes shorter, a block directory costs 10
// bytes a block). Returns the bytes written.
template <class Codes>
size_t write_packed(const PackedFields& f, Packing packing, std::span<uint8_t> out, const Codes& block_codes) {
  const uint64_t n = f.count;
  const uint64_t blocks = (n + kBlockElements - 1) / kBlockElements;
  // Block b's codes in this thread's buffer, zeroed past them (the symbol
  // and count loops read whole words).
  const auto codes_of = [&](uint64_t b, uint64_t& len) -> const uint8_t* {
    struct Site;
    uint8_t* codes = detail::thread_buffer<uint8_t, kBlockElements / 4 + 16, Site>();
    len = std::min(kBlockElements, n - b * kBlockElements);
    block_codes(b, len, codes);
    std::memset(codes + body_bytes(len), 0, 16);
    return codes;
  };
  if (packing == Packing::k2Bit) {
    uint8_t* body = out.data() + kHeaderBytes;
    for_each_block(n, blocks, [&](uint64_t b) {
      uint64_t len;
      const uint8_t* codes = codes_of(b, len);
      std::memcpy(body + b * (kBlockElements / 4), codes, body_bytes(len));
    });
    write_header_layout(out.data(), kCodecTernary2Bit, f.flags, n, f.scale_bits, f.tensor_id, f.seed_field, f.step,
                        f.version);
    return kHeaderBytes + body_bytes(n);
  }
  const uint64_t nsym = base3_body_bytes(n);
  const size_t base3 = base3_payload_bytes(n);
  if (packing == Packing::kEntropy && base3 > kEntropyHeaderBytes) {
    const rans::Layout layout{n, 3, kBase3Elements, rans::encoder_lanes(nsym), rans::kEncoderBlockLog2};
    EntropyWriter writer(layout);
    for_each_block(n, blocks, [&](uint64_t b) {
      struct Site;
      uint8_t* syms = detail::thread_buffer<uint8_t, kBlockSymbols, Site>();
      uint64_t len;
      const uint8_t* codes = codes_of(b, len);
      const uint64_t bsym = base3_body_bytes(len);
      codes_to_symbols(codes, bsym, syms);
      uint32_t counts[3];
      count_codes(codes, body_bytes(len), &counts[1], &counts[2]);
      counts[0] = static_cast<uint32_t>(kBase3Elements * bsym) - counts[1] - counts[2];  // padding digits are zeros
      writer.code_block(b, syms, counts);
    });
    const size_t len = writer.finish(out.first(std::min(out.size(), base3 - 1)));  // strictly smaller than base-3
    if (len != 0) {
      EntropyHeader h;
      h.codec = kCodecTernaryEntropy;
      h.flags = f.flags;
      h.count = n;
      h.scale_bits = f.scale_bits;
      h.tensor_id = f.tensor_id;
      h.seed_field = f.seed_field;
      h.step = f.step;
      h.lanes = layout.lanes;
      h.block_log2 = layout.block_log2;
      h.group = layout.group;
      h.length = len;
      h.version = f.version;
      write_entropy_header(out.data(), h);
      return len;
    }
    // Not smaller (small or nearly incompressible tensors): the base-3
    // payload, its codes taken again (the same: a pure function of the source).
  }
  uint8_t* body = out.data() + kHeaderBytes;
  for_each_block(n, blocks, [&](uint64_t b) {
    uint64_t len;
    const uint8_t* codes = codes_of(b, len);
    codes_to_symbols(codes, base3_body_bytes(len), body + b * kBlockSymbols);
  });
  write_header_layout(out.data(), kCodecTernaryBase3, f.flags, n, f.scale_bits, f.tensor_id, f.seed_field, f.step,
                      f.version);
  return base3;
}

}  // namespace

size_t encode_packed(std::span<const float> x, float scale, uint8_t flags, const EncodeParams& params,
                     std::span<uint8_t> out) {
  const bool nearest = (flags & kFlagNearest) != 0;
  const PackedFields f{x.size(),         flags,       float_bits(scale), params.tensor_id,
                       nearest ? 0 : params.seed, params.step, payload_version(params.stream, nearest)};
  const TernaryQuantizer q = make_quantizer(scale);
  const RngStream rng{params.seed, params.step, params.tensor_id, params.element_offset / 4, params.stream};
  // Block b's codes from the 2-bit kernel of the SIMD level in use, so the
  // codes, and so the symbols, are exactly codec 1's.
  return write_packed(f, params.packing, out, [&](uint64_t b, uint64_t len, uint8_t* codes) {
    const uint64_t e0 = b * kBlockElements;
    if (nearest)
      kernels().encode_bytes_nearest(x.data() + e0, len, 0, body_bytes(len), q, codes);
    else
      kernels().encode_bytes(x.data() + e0, len, 0, body_bytes(len), q, rng.advanced(e0 / 4), codes);
  });
}

bool is_symbol_packed(std::span<const uint8_t> payload) {
  if (payload.size() <= kHeaderCodecOffset || load_le32(payload.data()) != kMagicLe32) return false;
  const uint8_t c = payload[kHeaderCodecOffset];
  return c == kCodecTernaryBase3 || c == kCodecTernaryEntropy;
}

namespace {

// Codec 5's checked header and layout (flags included).
EntropyView checked_entropy_view(std::span<const uint8_t> payload) {
  const EntropyView v = check_entropy_header(payload, kCodecTernaryEntropy, 3, 0);
  if ((v.header.flags & ~kKnownFlags) != 0)
    throw CodecError(Errc::kMalformedPayload, "malformed entropy-coded payload: reserved flag bits are set");
  return v;
}

PayloadHeader header_of(const EntropyView& v) {
  PayloadHeader h;
  h.version = v.header.version;
  h.codec = v.header.codec;
  h.flags = v.header.flags;
  h.count = v.header.count;
  h.scale = bits_float(v.header.scale_bits);
  h.tensor_id = v.header.tensor_id;
  h.seed = v.header.seed_field;
  h.step = v.header.step;
  return h;
}

void require_count(const PayloadHeader& h, std::optional<uint64_t> expect_count, const char* what) {
  if (expect_count && *expect_count != h.count)
    throw CodecError(Errc::kInvalidArgument, std::string(what) + " has " + std::to_string(*expect_count) +
                                                 " elements but the payload holds " + std::to_string(h.count));
}

}  // namespace

PayloadHeader check_symbol_header(std::span<const uint8_t> payload) {
  if (payload[kHeaderCodecOffset] == kCodecTernaryBase3) return check_base3_header(payload);
  return header_of(checked_entropy_view(payload));
}

SymbolPayload open_symbol_payload(std::span<const uint8_t> payload, std::optional<uint64_t> expect_count,
                                  const char* what) {
  SymbolPayload sp;
  if (payload[kHeaderCodecOffset] == kCodecTernaryBase3) {
    sp.header = check_base3_header(payload);
    require_count(sp.header, expect_count, what);
    sp.symbols = payload.data() + kHeaderBytes;
    const uint64_t bad = first_bad_symbol(sp.symbols, sp.header.count);
    if (bad != base3_body_bytes(sp.header.count))
      throw CodecError(Errc::kInvalidCode,
                       "corrupt base-3 payload: body byte " + std::to_string(bad) + " is " +
                           std::to_string(sp.symbols[bad]) +
                           (sp.symbols[bad] > kBase3MaxByte ? " (above 242 = 3^5 - 1)"
                                                            : ": its digits beyond element " +
                                                                  std::to_string(sp.header.count - 1) + " are not 0"));
    return sp;
  }
  const EntropyView v = checked_entropy_view(payload);
  sp.header = header_of(v);
  require_count(sp.header, expect_count, what);
  sp.decoded.resize(v.layout.symbols());
  read_entropy_symbols(payload, v, sp.decoded.data());
  sp.symbols = sp.decoded.data();
  return sp;
}

void expand_symbols(const SymbolPayload& sp, bool accumulate, std::span<float> out) {
  const uint64_t n = sp.header.count, nsym = base3_body_bytes(n);
  const float s = sp.header.scale;
  const float values[3] = {0.0f, s, -s};  // by code: the products s * {0, +1, -1}
  float table[243][kBase3Elements];
  for (uint32_t k = 0; k < 243; ++k)
    for (uint32_t j = 0, r = k; j < kBase3Elements; ++j, r /= 3) table[k][j] = values[r % 3];
  const uint8_t* syms = sp.symbols;
  float* o = out.data();
  const uint64_t full = n / kBase3Elements, blocks = (nsym + kBlockSymbols - 1) / kBlockSymbols;
  for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t k0 = b * kBlockSymbols, k1 = std::min(full, k0 + kBlockSymbols);
    for (uint64_t k = k0; k < k1; ++k) {
      const float* v = table[syms[k]];
      float* d = o + kBase3Elements * k;
      if (accumulate)
        for (uint32_t j = 0; j < kBase3Elements; ++j) d[j] += v[j];
      else
        std::memcpy(d, v, sizeof(float) * kBase3Elements);
    }
  });
  for (uint64_t i = full * kBase3Elements; i < n; ++i) {  // the last, partial symbol
    const float v = table[syms[full]][i - full * kBase3Elements];
    o[i] = accumulate ? o[i] + v : v;
  }
}

void add_symbol_codes_range(const SymbolPayload& sp, uint64_t i0, uint64_t i1, int16_t* counts) {
  // Whole symbols by a fixed five-lane loop (no division per element); the
  // partial ones at the ends element by element.
  uint64_t i = i0;
  for (; i < i1 && i % 5 != 0; ++i) counts[i - i0] = static_cast<int16_t>(counts[i - i0] + kSigns.v[sp.symbols[i / 5]][i % 5]);
  for (; i + 5 <= i1; i += 5) {
    const int8_t* sign = kSigns.v[sp.symbols[i / 5]];
    int16_t* c = counts + (i - i0);
    for (int j = 0; j < 5; ++j) c[j] = static_cast<int16_t>(c[j] + sign[j]);
  }
  for (; i < i1; ++i) counts[i - i0] = static_cast<int16_t>(counts[i - i0] + kSigns.v[sp.symbols[i / 5]][i % 5]);
}

size_t repack_payload(std::span<const uint8_t> payload, Packing to, std::span<uint8_t> out) {
  // The whole payload is validated before anything is written.
  SymbolPayload sp;
  const uint8_t* two_bit = nullptr;  // codec 1's body
  if (is_symbol_packed(payload)) {
    sp = open_symbol_payload(payload);
  } else {
    sp.header = inspect(payload);
    two_bit = payload.data() + kHeaderBytes;
  }
  const PayloadHeader& h = sp.header;
  const size_t need = max_encoded_bytes(h.count, to);
  if (out.size() < need)
    throw CodecError(Errc::kInvalidArgument, "repack: output buffer has " + std::to_string(out.size()) + " bytes, " +
                                                 std::to_string(h.count) + " elements as " + packing_name(to) +
                                                 " need up to " + std::to_string(need));
  const PackedFields f{h.count, h.flags, float_bits(h.scale), h.tensor_id, h.seed, h.step, h.version};
  return write_packed(f, to, out, [&](uint64_t b, uint64_t len, uint8_t* codes) {
    if (two_bit != nullptr)
      std::memcpy(codes, two_bit + b * (kBlockElements / 4), body_bytes(len));
    else
      symbols_to_codes(sp.symbols + b * kBlockSymbols, base3_body_bytes(len), codes);
  });
}

void add_symbol_codes(const SymbolPayload& sp, int16_t* counts) {
  const uint64_t n = sp.header.count, nsym = base3_body_bytes(n);
  const uint64_t blocks = (nsym + kBlockSymbols - 1) / kBlockSymbols;
  for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t i0 = b * kBlockElements, i1 = std::min(n, i0 + kBlockElements);
    add_symbol_codes_range(sp, i0, i1, counts + i0);
  });
}

}  // namespace terngrad::quantize::detail

namespace terngrad::quantize {

size_t repack(std::span<const uint8_t> payload, Packing to, std::span<uint8_t> out) {
  return detail::repack_payload(payload, to, out);
}

}  // namespace terngrad::quantize
