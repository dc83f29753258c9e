// The entropy-coded ternary sum (codec 6, FORMAT.md): a ps's shared-scale
// counts in [-R, R], one digit count + R per element, g digits per symbol
// (g = 5 for R = 1, 3 for R = 2, 2 for R = 3..7, 1 for R = 8..127), coded by
// the blocks of entropy_payload.cpp. R above 127 (a digit would not fit a
// byte) and sums that would not come out smaller stay codec 2.
#include "entropy_sum_cpu.h"

#include <algorithm>
#include <string>

#include "cpu_kernels.h"
#include "entropy_payload.h"
#include "packed_cpu.h"
#include "thread_buffer.h"
#include <cstring>
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/ternary_math.h"

namespace terngrad::quantize::detail {

namespace {

rans::Layout sum_layout(uint64_t n, uint32_t contributions) {
  const uint32_t a = 2 * contributions + 1;
  rans::Layout l{n, a, rans::group_for_alphabet(a), 1, rans::kEncoderBlockLog2};
  l.lanes = rans::encoder_lanes(l.symbols());
  return l;
}

// Codes block j from its count + R digits (count * g of them, padding
// included): g digits per symbol, base a, and the digits' histogram.
void code_digits(EntropyWriter& writer, const rans::Layout& l, uint64_t j, const uint8_t* digits) {
  struct Site;
  uint8_t* syms = detail::thread_buffer<uint8_t, uint64_t{1} << rans::kEncoderBlockLog2, Site>();
  const uint32_t a = l.alphabet, g = l.group;
  const uint64_t count = l.block_symbols(j);
  uint32_t c[rans::kMaxAlphabet] = {};
  for (uint64_t s = 0; s < count; ++s) {
    uint32_t sym = 0, place = 1;
    for (uint32_t k = 0; k < g; ++k, place *= a) {
      const uint32_t digit = digits[s * g + k];
      sym += digit * place;
      ++c[digit];
    }
    syms[s] = static_cast<uint8_t>(sym);
  }
  writer.code_block(j, syms, c);
}

// Lays the coded blocks out behind a codec-6 header; 0 if they do not fit.
size_t finish_sum(EntropyWriter& writer, const rans::Layout& l, float scale, uint32_t contributions, uint32_t tensor_id,
                  uint32_t step, std::span<uint8_t> out) {
  const size_t len = writer.finish(out);
  if (len == 0) return 0;
  EntropyHeader h;
  h.codec = kCodecTernarySumEntropy;
  h.flags = kFlagSharedScale;
  h.count = l.count;
  h.scale_bits = float_bits(scale);
  h.tensor_id = tensor_id;
  h.seed_field = contributions;
  h.step = step;
  h.lanes = l.lanes;
  h.block_log2 = l.block_log2;
  h.group = l.group;
  h.length = len;
  write_entropy_header(out.data(), h);
  return len;
}

// Digits of a block: at most 5 * 2^14 (R = 1), with slack for 4-byte adds.
constexpr uint64_t kMaxBlockDigits = (uint64_t{5} << rans::kEncoderBlockLog2) + 8;

}  // namespace

size_t encode_sum_entropy(std::span<const int16_t> counts, float scale, uint32_t contributions, uint32_t tensor_id,
                          uint32_t step, std::span<uint8_t> out) {
  if (contributions > kMaxEntropySumContributions) return 0;
  const uint64_t n = counts.size();
  const rans::Layout l = sum_layout(n, contributions);
  const int32_t r = static_cast<int32_t>(contributions);
  const uint64_t per_block = uint64_t{l.group} << l.block_log2;
  EntropyWriter writer(l);
  for_each_block(n, l.blocks(), [&](uint64_t j) {
    struct Site;
    uint8_t* digits = detail::thread_buffer<uint8_t, kMaxBlockDigits, Site>();
    const uint64_t e0 = j * per_block, span = l.block_symbols(j) * uint64_t{l.group};
    for (uint64_t i = 0; i < span; ++i)
      digits[i] = static_cast<uint8_t>(e0 + i < n ? counts[e0 + i] + r : r);  // padding: count 0
    code_digits(writer, l, j, digits);
  });
  return finish_sum(writer, l, scale, contributions, tensor_id, step, out);
}

namespace {

// Lane j (bits 8j..8j+7) of kPlusOne[b]: code j of 2-bit byte b plus one (0
// for -1, 1 for 0, 2 for +1); R of them summed give count + R per element.
struct PlusOne {
  uint32_t v[256];
  constexpr PlusOne() : v() {
    for (uint32_t b = 0; b < 256; ++b)
      for (uint32_t j = 0; j < 4; ++j) {
        const uint32_t code = (b >> (2 * j)) & 3u;
        v[b] |= (code == 0 ? 1u : code == 1 ? 2u : 0u) << (8 * j);
      }
  }
};
constexpr PlusOne kPlusOne;

// The five count + 1 digits of a base-3 symbol.
struct PlusOne5 {
  uint8_t v[243][5];
  constexpr PlusOne5() : v() {
    for (uint32_t s = 0; s < 243; ++s)
      for (uint32_t j = 0, r = s; j < 5; ++j, r /= 3) v[s][j] = static_cast<uint8_t>(r % 3 == 0 ? 1 : r % 3 == 1 ? 2 : 0);
  }
};
constexpr PlusOne5 kPlusOne5;

}  // namespace

size_t sum_to_entropy(std::span<const std::span<const uint8_t>> payloads, const PayloadHeader& first,
                      std::span<uint8_t> out) {
  const uint32_t r = static_cast<uint32_t>(payloads.size());
  if (r == 0 || r > kMaxEntropySumContributions) return 0;
  const uint64_t n = first.count;
  // Every body checked (and packed ones decoded to symbols) before any work.
  std::vector<SymbolPayload> opened(r);
  for (uint32_t p = 0; p < r; ++p) {
    if (is_symbol_packed(payloads[p]))
      opened[p] = open_symbol_payload(payloads[p], n, "the sum");
    else
      inspect(payloads[p]);
  }
  const rans::Layout l = sum_layout(n, r);
  const uint64_t per_block = uint64_t{l.group} << l.block_log2;  // elements; a multiple of 4
  EntropyWriter writer(l);
  for_each_block(n, l.blocks(), [&](uint64_t j) {
    struct Site;
    uint8_t* digits = detail::thread_buffer<uint8_t, kMaxBlockDigits, Site>();
    const uint64_t e0 = j * per_block, span = l.block_symbols(j) * uint64_t{l.group};
    const uint64_t e1 = std::min(n, e0 + span);
    std::memset(digits, 0, span + 8);
    for (uint32_t p = 0; p < r; ++p) {
      if (opened[p].symbols == nullptr) {  // 2-bit: four digits per body byte
        const uint8_t* body = payloads[p].data() + kHeaderBytes;
        for (uint64_t k = e0 / 4, i = 0; k < (e1 + 3) / 4; ++k, i += 4) {
          uint32_t d;
          std::memcpy(&d, digits + i, 4);
          d += kPlusOne.v[body[k]];
          std::memcpy(digits + i, &d, 4);
        }
      } else {
        const uint8_t* sy = opened[p].symbols;
        for (uint64_t i = e0; i < e1; ++i) digits[i - e0] += kPlusOne5.v[sy[i / 5]][i % 5];
      }
    }
    for (uint64_t i = e1 - e0; i < span; ++i) digits[i] = static_cast<uint8_t>(r);  // padding: count 0
    code_digits(writer, l, j, digits);
  });
  return finish_sum(writer, l, first.scale, r, first.tensor_id, first.step, out);
}

SumView open_sum_entropy(std::span<const uint8_t> payload, std::optional<uint64_t> expect_count) {
  const uint8_t* p = payload.data();
  auto malformed = [&](const std::string& why) {
    throw CodecError(Errc::kMalformedPayload, "malformed entropy-coded ternary sum (" + std::to_string(payload.size()) +
                                                  " bytes): " + why);
  };
  if (payload.size() < kEntropyHeaderBytes) malformed("shorter than the 52-byte header");
  const uint32_t r = load_le32(p + kEntropySumContributionsOffset);
  if (r == 0 || r > kMaxEntropySumContributions)
    malformed("contributions " + std::to_string(r) + " outside [1, " + std::to_string(kMaxEntropySumContributions) + "]");
  const EntropyView v = check_entropy_header(payload, kCodecTernarySumEntropy, 2 * r + 1, r);
  if (v.header.flags != kFlagSharedScale)
    malformed("flags must be 0x01 (one shared scale), got " + std::to_string(v.header.flags));
  if (load_le32(p + kEntropySumContributionsOffset + 4) != 0) malformed("reserved bytes 28-31 are not zero");
  if (expect_count && *expect_count != v.header.count)
    throw CodecError(Errc::kInvalidArgument, "ternary sum payload holds " + std::to_string(v.header.count) +
                                                 " elements, the output has " + std::to_string(*expect_count));
  SumView sv;
  sv.header.codec = kCodecTernarySumEntropy;
  sv.header.count = v.header.count;
  sv.header.scale = bits_float(v.header.scale_bits);
  sv.header.contributions = r;
  sv.header.bits = sum_bits(r);
  sv.header.tensor_id = v.header.tensor_id;
  sv.header.step = v.header.step;
  sv.layout = v.layout;
  sv.symbols.resize(v.layout.symbols());
  read_entropy_symbols(payload, v, sv.symbols.data());
  return sv;
}

void decode_sum_symbols(const SumView& sv, std::span<float> out) {
  const rans::Layout& l = sv.layout;
  const uint32_t a = l.alphabet, g = l.group, nsym = rans::pow_u32(a, g);
  const int32_t r = static_cast<int32_t>(sv.header.contributions);
  // The g values of every symbol, float32(s * count) each as codec 2 decodes.
  std::vector<float> table(uint64_t{nsym} * g);
  for (uint32_t sym = 0; sym < nsym; ++sym)
    for (uint32_t k = 0, rest = sym; k < g; ++k, rest /= a)
      table[uint64_t{sym} * g + k] = sv.header.scale * static_cast<float>(static_cast<int32_t>(rest % a) - r);
  const uint64_t n = l.count, full = n / g;  // symbols whose g elements all exist
  float* o = out.data();
  for_each_block(n, l.blocks(), [&](uint64_t j) {
    const uint64_t s0 = j << l.block_log2, s1 = std::min(full, s0 + l.block_symbols(j));
    for (uint64_t s = s0; s < s1; ++s) std::memcpy(o + s * g, &table[uint64_t{sv.symbols[s]} * g], sizeof(float) * g);
  });
  for (uint64_t i = full * g; i < n; ++i) o[i] = table[uint64_t{sv.symbols[full]} * g + (i - full * g)];
}

}  // namespace terngrad::quantize::detail
