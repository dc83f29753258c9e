// The payloads below two bits per element: base-3 packing (codec id 4) and
// the rANS entropy-coded forms of a worker's ternary payload (codec id 5) and
// of the ps's shared-scale sum (codec id 6). quantize/FORMAT.md is the
// normative description; this header holds its constants and the pieces the
// CPU and CUDA coders share (TG_HOST_DEVICE): the header layout, the model
// (element probabilities -> symbol frequencies) and one rANS step each way.
//
// The idea in one paragraph. A ternary element carries at most log2(3) bits,
// and TernGrad's are mostly zero. Elements are grouped g at a time into one
// symbol (a base-a number, a^g <= 255: 5 trits per symbol for the worker's
// payload, 2 counts of a 4-replica sum). Symbols are coded in blocks of
// 2^14; each block carries its own element probabilities (a values in
// 1/2^e units), from which both ends compute the same symbol frequencies
// (the product of the element probabilities, scaled to 2^14), and is coded
// by K interleaved rANS states (32-bit states, 16-bit words), so blocks
// decode independently (threads, CUDA blocks) and lanes in SIMD / warps.
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/quantize/format.h"

namespace terngrad::quantize {

// ---------------------------------------------------------------------------
// Base-3 packing (codec id 4): the codec-1 header with codec id 4, then one
// byte per 5 elements: byte = t0 + 3 t1 + 9 t2 + 27 t3 + 81 t4 with t the
// element's 2-bit code read as a number (0 = zero, 1 = +s, 2 = -s). So a
// byte is <= 242; absent elements of the last byte are 0.

inline constexpr uint32_t kBase3Elements = 5;    // elements per body byte
inline constexpr uint32_t kBase3MaxByte = 242;   // 3^5 - 1

TG_HOST_DEVICE constexpr uint64_t base3_body_bytes(uint64_t n) { return (n + 4) / 5; }
constexpr size_t base3_payload_bytes(uint64_t n) { return kHeaderBytes + base3_body_bytes(n); }

// ---------------------------------------------------------------------------
// Entropy-coded payloads (codec ids 5 and 6): a 52-byte header, a block
// directory, then the blocks' rANS streams.

inline constexpr size_t kEntropyHeaderBytes = 52;
// Bytes 0..35 are laid out as in the 40-byte header (magic, version, codec,
// flags, header size, count, scale, tensor id, seed or R, step); then:
inline constexpr size_t kEntropyLanesOffset = 36;       // u8, K in [1, 32]
inline constexpr size_t kEntropyBlockLog2Offset = 37;   // u8, log2 symbols per block, [4, 20]
inline constexpr size_t kEntropyGroupOffset = 38;       // u8, g: elements per symbol
inline constexpr size_t kEntropyReservedOffset = 39;    // u8, zero
inline constexpr size_t kEntropyLengthOffset = 40;      // u64, the whole payload's length in bytes
inline constexpr size_t kEntropyCrcOffset = 48;         // u32, CRC-32 of bytes [0, 48)
// Codec 6 keeps the contributions R where codec 1 keeps the seed (as codec 2).
inline constexpr size_t kEntropySumContributionsOffset = kHeaderSeedOffset;  // u32; bytes 28..31 zero

namespace rans {

inline constexpr uint32_t kProbBits = 14;                 // symbol frequencies sum to 2^14
inline constexpr uint32_t kProbScale = 1u << kProbBits;
inline constexpr uint32_t kStateLow = 1u << 16;           // L: a state lives in [L, 2^32)
inline constexpr uint32_t kWordBits = 16;                 // renormalization unit
inline constexpr uint32_t kMaxLanes = 32;
inline constexpr uint32_t kMaxSymbols = 255;              // a^g <= 255: a symbol is a byte
inline constexpr uint32_t kMaxAlphabet = 255;             // element values 0..a-1
inline constexpr uint32_t kEncoderBlockLog2 = 14;         // the encoders' block: 16384 symbols
inline constexpr uint32_t kMinBlockLog2 = 4;
inline constexpr uint32_t kMaxBlockLog2 = 20;
// Per-element probability bits e: 14 when a symbol is one element (then the
// element model is the symbol model), else 12 (products of up to 5 of them
// fit 60 bits).
TG_HOST_DEVICE constexpr uint32_t element_prob_bits(uint32_t group) { return group == 1 ? 14u : 12u; }

// The largest g with a^g <= 255 (a >= 2): 5 for a = 3, 3 for 5, 2 for 7..15, 1 above.
TG_HOST_DEVICE constexpr uint32_t group_for_alphabet(uint32_t a) {
  uint32_t g = 0;
  uint64_t p = 1;
  while (p * a <= kMaxSymbols) {
    p *= a;
    ++g;
  }
  return g;
}
TG_HOST_DEVICE constexpr uint32_t pow_u32(uint32_t a, uint32_t g) {
  uint32_t p = 1;
  for (uint32_t i = 0; i < g; ++i) p *= a;
  return p;
}

// The encoders' lane count for a payload of `symbols` symbols: one lane per
// 256 symbols, a power of two, at most 32 (a lane's final state costs 4 bytes).
TG_HOST_DEVICE constexpr uint32_t encoder_lanes(uint64_t symbols) {
  uint64_t per = symbols >> 8;
  uint32_t k = 1;
  while (k < kMaxLanes && uint64_t{k} * 2 <= per) k *= 2;
  return k;
}

// The shape of one payload's symbol stream.
struct Layout {
  uint64_t count = 0;       // n elements
  uint32_t alphabet = 3;    // a: element values 0..a-1
  uint32_t group = 5;       // g: elements per symbol
  uint32_t lanes = 1;       // K
  uint32_t block_log2 = kEncoderBlockLog2;

  TG_HOST_DEVICE uint64_t symbols() const { return (count + group - 1) / group; }
  TG_HOST_DEVICE uint64_t block_symbols_max() const { return uint64_t{1} << block_log2; }
  TG_HOST_DEVICE uint64_t blocks() const { return (symbols() + block_symbols_max() - 1) >> block_log2; }
  // Symbols of block j (the last may be short).
  TG_HOST_DEVICE uint32_t block_symbols(uint64_t j) const {
    const uint64_t first = j << block_log2, s = symbols();
    const uint64_t left = s - first;
    return static_cast<uint32_t>(left < block_symbols_max() ? left : block_symbols_max());
  }
  TG_HOST_DEVICE uint32_t block_lanes(uint64_t j) const {
    const uint32_t s = block_symbols(j);
    return s < lanes ? s : lanes;
  }
  // Directory entry: u32 stream bytes, then a u16 element probabilities.
  TG_HOST_DEVICE uint64_t entry_bytes() const { return 4 + 2 * uint64_t{alphabet}; }
  TG_HOST_DEVICE uint64_t directory_bytes() const { return blocks() * entry_bytes(); }
  // The most stream bytes block j can take: its lanes' states and one word per symbol.
  TG_HOST_DEVICE uint64_t max_stream_bytes(uint64_t j) const {
    return 4 * uint64_t{block_lanes(j)} + 2 * uint64_t{block_symbols(j)};
  }
};

// ---------------------------------------------------------------------------
// The model. Encoders quantize a block's element counts into probabilities q
// (sum 2^e, q_v > 0 iff the value occurs); both ends turn q into symbol
// frequencies f (sum 2^14, f_s > 0 iff every digit of s has q > 0).

// q_v = 0 if c_v = 0, else max(1, floor(c_v * 2^e / total)); the remainder
// 2^e - sum goes to the most frequent value (lowest index on ties). total is
// the block's element slots g * symbols (padding counts as the zero value);
// it is < 2^21 * 5, so the products fit 64 bits. Returns false only if the
// result would break the invariants (impossible for a <= 255: FORMAT.md).
TG_HOST_DEVICE bool quantize_element_probs(const uint32_t* counts, uint32_t a, uint32_t e, uint16_t* q) {
  uint64_t total = 0;
  uint32_t top = 0;
  for (uint32_t v = 0; v < a; ++v) {
    total += counts[v];
    if (counts[v] > counts[top]) top = v;
  }
  if (total == 0) return false;
  int64_t sum = 0;
  for (uint32_t v = 0; v < a; ++v) {
    uint64_t qv = 0;
    if (counts[v] != 0) {
      qv = (uint64_t{counts[v]} << e) / total;
      if (qv == 0) qv = 1;
    }
    q[v] = static_cast<uint16_t>(qv);
    sum += static_cast<int64_t>(qv);
  }
  const int64_t adjusted = static_cast<int64_t>(q[top]) + ((int64_t{1} << e) - sum);
  if (adjusted < 1 || adjusted > (int64_t{1} << e)) return false;
  q[top] = static_cast<uint16_t>(adjusted);
  return true;
}

// Checks a block's stored probabilities: a values, each <= 2^e, summing to 2^e.
TG_HOST_DEVICE bool element_probs_valid(const uint16_t* q, uint32_t a, uint32_t e) {
  uint32_t sum = 0;
  for (uint32_t v = 0; v < a; ++v) {
    if (q[v] > (1u << e)) return false;
    sum += q[v];
  }
  return sum == (1u << e);
}

// f_s = max(1, floor(w_s * 2^14 / 2^(e g))) for w_s = prod_j q[digit_j(s)] > 0,
// else 0; then the remainder 2^14 - sum goes to the largest f (lowest s on
// ties). Symbols are base-a numbers, digit j = (s / a^j) % a. Returns false
// if the remainder would leave the largest f below 1 (impossible for
// a^g <= 255 at 14 bits, FORMAT.md "Why the model always works").
TG_HOST_DEVICE bool symbol_frequencies(const uint16_t* q, uint32_t a, uint32_t g, uint16_t* f) {
  const uint32_t e = element_prob_bits(g);
  const uint32_t shift = e * g - kProbBits;  // e*g >= 14 for every g
  const uint32_t nsym = pow_u32(a, g);
  int64_t sum = 0;
  uint32_t top = 0;
  uint32_t digit[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // s in base a, least significant first (g <= 7)
  for (uint32_t s = 0; s < nsym; ++s) {
    uint64_t w = 1;
    for (uint32_t j = 0; j < g; ++j) w *= q[digit[j]];
    uint64_t fs = w >> shift;
    if (w != 0 && fs == 0) fs = 1;
    f[s] = static_cast<uint16_t>(fs);
    sum += static_cast<int64_t>(fs);
    if (f[s] > f[top]) top = s;
    for (uint32_t j = 0; j < g && ++digit[j] == a; ++j) digit[j] = 0;  // s + 1, no divisions
  }
  const int64_t adjusted = static_cast<int64_t>(f[top]) + (int64_t{kProbScale} - sum);
  if (adjusted < 1 || adjusted > int64_t{kProbScale}) return false;
  f[top] = static_cast<uint16_t>(adjusted);
  return true;
}

// ---------------------------------------------------------------------------
// One rANS step each way (FORMAT.md, "rANS").

// Division by f (1 <= f <= 2^14) of a state x < 2^32 as a multiplication:
// q = floor(x * m / 2^46) with m = ceil(2^46 / f) is exact for every such x
// (Granlund-Montgomery: m f - 2^46 < f <= 2^14).
struct EncSymbol {
  uint32_t x_max = 0;  // renormalize (emit a word) while x >= f << 18
  uint32_t freq = 0;
  uint32_t cum = 0;
  uint64_t magic = 0;
};

TG_HOST_DEVICE EncSymbol make_enc_symbol(uint32_t freq, uint32_t cum) {
  EncSymbol e;
  e.freq = freq;
  e.cum = cum;
  // x_max = ((L >> 14) << 16) * f; f = 2^14 gives 2^32, which does not fit:
  // such a symbol never renormalizes (x < 2^32 always), so saturate.
  const uint64_t x_max = uint64_t{freq} << 18;
  e.x_max = x_max > 0xFFFFFFFFull ? 0xFFFFFFFFu : static_cast<uint32_t>(x_max);
  e.magic = freq == 0 ? 0 : ((uint64_t{1} << 46) + freq - 1) / freq;
  return e;
}

TG_HOST_DEVICE uint32_t div_by_magic(uint32_t x, uint64_t magic) {
#if defined(__CUDA_ARCH__)
  const uint64_t lo = uint64_t{x} * magic, hi = __umul64hi(uint64_t{x}, magic);
  return static_cast<uint32_t>((hi << 18) | (lo >> 46));
#else
  return static_cast<uint32_t>((static_cast<unsigned __int128>(x) * magic) >> 46);
#endif
}

// Encodes one symbol into state x. If the state must shed a word first,
// returns true and sets *word (the caller stores it in front of the words
// written so far); the stream is written back to front.
TG_HOST_DEVICE bool rans_encode_step(uint32_t& x, const EncSymbol& s, uint16_t* word) {
  bool emit = false;
  // x_max saturates at 2^32 - 1 for f = 2^14, where x < 2^32 never needs a word.
  if (x >= s.x_max && s.freq != kProbScale) {
    *word = static_cast<uint16_t>(x & 0xFFFFu);
    x >>= kWordBits;
    emit = true;
  }
  const uint32_t q = div_by_magic(x, s.magic);
  x = (q << kProbBits) + (x - q * s.freq) + s.cum;
  return emit;
}

// The decoder's state update once slot -> symbol is known (f, c of that
// symbol): returns the new state, < L when a word must be read next.
TG_HOST_DEVICE uint32_t rans_decode_advance(uint32_t x, uint32_t freq, uint32_t cum) {
  return freq * (x >> kProbBits) + (x & (kProbScale - 1)) - cum;
}

}  // namespace rans

// ---------------------------------------------------------------------------
// The entropy header (codec 5: a worker's payload, flags and seed as codec 1;
// codec 6: a shared-scale sum, flags 0x01, R where the seed is).

struct EntropyHeader {
  uint8_t codec = 0;
  uint8_t flags = 0;
  uint64_t count = 0;
  uint32_t scale_bits = 0;
  uint32_t tensor_id = 0;
  uint64_t seed_field = 0;  // codec 5: the seed; codec 6: R (bytes 28..31 zero)
  uint32_t step = 0;
  uint32_t lanes = 0;
  uint32_t block_log2 = 0;
  uint32_t group = 0;
  uint64_t length = 0;  // whole payload bytes
  uint8_t version = kFormatVersion;  // codec 5: payload_version(); codec 6: 1
};

TG_HOST_DEVICE void write_entropy_header(uint8_t* out, const EntropyHeader& h) {
  store_le32(out + kHeaderMagicOffset, kMagicLe32);
  out[kHeaderVersionOffset] = h.version;
  out[kHeaderCodecOffset] = h.codec;
  out[kHeaderFlagsOffset] = h.flags;
  out[kHeaderSizeOffset] = static_cast<uint8_t>(kEntropyHeaderBytes);
  store_le64(out + kHeaderCountOffset, h.count);
  store_le32(out + kHeaderScaleOffset, h.scale_bits);
  store_le32(out + kHeaderTensorIdOffset, h.tensor_id);
  store_le64(out + kHeaderSeedOffset, h.seed_field);
  store_le32(out + kHeaderStepOffset, h.step);
  out[kEntropyLanesOffset] = static_cast<uint8_t>(h.lanes);
  out[kEntropyBlockLog2Offset] = static_cast<uint8_t>(h.block_log2);
  out[kEntropyGroupOffset] = static_cast<uint8_t>(h.group);
  out[kEntropyReservedOffset] = 0;
  store_le64(out + kEntropyLengthOffset, h.length);
  store_le32(out + kEntropyCrcOffset, crc32_ieee(out, kEntropyCrcOffset));
}

TG_HOST_DEVICE EntropyHeader read_entropy_header(const uint8_t* p) {
  EntropyHeader h;
  h.codec = p[kHeaderCodecOffset];
  h.flags = p[kHeaderFlagsOffset];
  h.count = load_le64(p + kHeaderCountOffset);
  h.scale_bits = load_le32(p + kHeaderScaleOffset);
  h.tensor_id = load_le32(p + kHeaderTensorIdOffset);
  h.seed_field = load_le64(p + kHeaderSeedOffset);
  h.step = load_le32(p + kHeaderStepOffset);
  h.lanes = p[kEntropyLanesOffset];
  h.block_log2 = p[kEntropyBlockLog2Offset];
  h.group = p[kEntropyGroupOffset];
  h.length = load_le64(p + kEntropyLengthOffset);
  h.version = p[kHeaderVersionOffset];
  return h;
}

}  // namespace terngrad::quantize
