// The rANS block decoder for NEON (AArch64 only), beside the scalar
// reference rans_decode_block() and the x86 decoders (rans_x86.cpp): the
// same symbols, words consumed and faults (tests/quantize/entropy_* run at
// every level; scripts/arm64_check.sh runs them under qemu-aarch64 forced to
// NEON).
//
// 32 lanes as eight vectors of 4 states. NEON has no gather: each lane's
// slot -> symbol and symbol -> (freq, cum) lookups are scalar loads, while
// the state update, the renormalization test and the refill are vector
// steps. Per vector: s = freq * (x >> 14) + slot - cum; the lanes with
// s < 2^16 take the next words in lane order, spread by a byte shuffle from
// a 16-entry table (the AVX2 decoder's permutation, NEON's TBL), and become
// s << 16 | word.
#if defined(__aarch64__)
#include <arm_neon.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "cpu_kernels.h"
#include "rans_block.h"

namespace terngrad::quantize::detail {

using namespace rans;

namespace {

// For each 4-bit mask of lanes needing a word: the TBL indices that put the
// k-th next 16-bit word into the low half of the k-th needing lane (index
// 0xFF reads as zero).
struct ExpandShuffles {
  alignas(16) uint8_t idx[16][16];
  ExpandShuffles() {
    for (uint32_t m = 0; m < 16; ++m) {
      uint32_t k = 0;
      for (uint32_t l = 0; l < 4; ++l) {
        const bool takes = (m >> l) & 1u;
        idx[m][4 * l] = takes ? static_cast<uint8_t>(2 * k) : 0xFF;
        idx[m][4 * l + 1] = takes ? static_cast<uint8_t>(2 * k + 1) : 0xFF;
        idx[m][4 * l + 2] = idx[m][4 * l + 3] = 0xFF;
        k += takes;
      }
    }
  }
};

const ExpandShuffles& expand_shuffles() {
  static const ExpandShuffles t;
  return t;
}

inline uint32x4_t decode4(uint32x4_t x, const uint8_t* slot_symbol, const uint32_t* freq_cum, const uint8_t* words,
                          uint64_t& wi, const ExpandShuffles& es, uint8_t* syms) {
  const uint32x4_t slot = vandq_u32(x, vdupq_n_u32(kProbScale - 1));
  const uint8_t s0 = slot_symbol[vgetq_lane_u32(slot, 0)], s1 = slot_symbol[vgetq_lane_u32(slot, 1)];
  const uint8_t s2 = slot_symbol[vgetq_lane_u32(slot, 2)], s3 = slot_symbol[vgetq_lane_u32(slot, 3)];
  const uint32_t fc_lanes[4] = {freq_cum[s0], freq_cum[s1], freq_cum[s2], freq_cum[s3]};
  const uint32x4_t fc = vld1q_u32(fc_lanes);
  const uint32x4_t freq = vandq_u32(fc, vdupq_n_u32(0xFFFF));
  const uint32x4_t cum = vshrq_n_u32(fc, 16);
  uint32x4_t s = vmlaq_u32(vsubq_u32(slot, cum), freq, vshrq_n_u32(x, kProbBits));
  const uint32x4_t need = vcltq_u32(s, vdupq_n_u32(kStateLow));
  static const uint32_t kLaneBits[4] = {1, 2, 4, 8};
  const uint32_t m = vaddvq_u32(vandq_u32(need, vld1q_u32(kLaneBits)));
  const uint8x16_t next = vld1q_u8(words + 2 * wi);  // the next 8 words; at most 4 are taken
  const uint32x4_t w = vreinterpretq_u32_u8(vqtbl1q_u8(next, vld1q_u8(es.idx[m])));
  s = vbslq_u32(need, vorrq_u32(vshlq_n_u32(s, kWordBits), w), s);
  wi += static_cast<uint64_t>(std::popcount(m));
  const uint8_t out[4] = {s0, s1, s2, s3};
  std::memcpy(syms, out, 4);
  return s;
}

}  // namespace

BlockFault rans_decode_neon(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                            const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms) {
  if (lanes != kMaxLanes || count < kMaxLanes)
    return rans_decode_block(stream, bytes, count, lanes, model, slot_symbol, syms);
  alignas(16) uint32_t x[kMaxLanes];
  const BlockFault f = rans_decode_start(stream, bytes, count, lanes, x);
  if (f != BlockFault::kNone) return f;
  uint32_t freq_cum[kMaxSymbols + 1] = {};
  for (uint32_t s = 0; s < model.symbols; ++s) freq_cum[s] = model.freq[s] | (model.cum[s] << 16);
  const ExpandShuffles& es = expand_shuffles();
  const uint8_t* words = stream + 4ull * kMaxLanes;
  const uint64_t nwords = (bytes - 4ull * kMaxLanes) / 2;
  const uint32_t full_rows = count / kMaxLanes;
  uint32x4_t v[8];
  for (int i = 0; i < 8; ++i) v[i] = vld1q_u32(x + 4 * i);
  uint64_t wi = 0;
  uint32_t r = 0;
  // A row takes at most 32 words: with 32 left, every 16-byte load above
  // stays inside the stream.
  for (; r < full_rows && wi + kMaxLanes <= nwords; ++r) {
    uint8_t* out = syms + uint64_t{r} * kMaxLanes;
    for (int i = 0; i < 8; ++i) v[i] = decode4(v[i], slot_symbol, freq_cum, words, wi, es, out + 4 * i);
  }
  for (int i = 0; i < 8; ++i) vst1q_u32(x + 4 * i, v[i]);
  return rans_decode_rows(stream, bytes, count, lanes, model, slot_symbol, r, wi, x, syms);
}

}  // namespace terngrad::quantize::detail
#endif  // __aarch64__
