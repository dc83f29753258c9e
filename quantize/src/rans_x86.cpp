// rANS block encoders and decoders for AVX-512 and AVX2 (x86-64 only); the
// decoders are at the end. Encoders: 32 lanes as two
// (AVX-512) or four (AVX2) vectors of states, the same stream as
// rans_encode_portable() (tests/quantize/packed_payload_test.cpp checks at
// every SIMD level).
//
// One row of 32 symbols, last row first: the vectors are stepped high lanes
// first (lanes 31..16, then 15..0 in the scalar order), and a vector's words
// are stored as one run in lane-ascending order below the words already
// written, which is where the scalar encoder's back-to-front stores put them.
// Per vector: gather each symbol's (freq, cum) and 1/freq (float64), shed a
// 16-bit word where x >= freq << 18, then x = (q << 14) + (x - q freq) + cum
// with q = floor(x / freq) from the float64 product: x < 2^32, freq <= 2^14
// and 1/freq correctly rounded put the product within 2^-20 of x/freq, so
// its truncation is q or q - 1 (only when x/freq is an integer), and one
// compare fixes it exactly.
#include <immintrin.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "cpu_kernels.h"
#include "rans_block.h"

namespace terngrad::quantize::detail {

using namespace rans;

namespace {

// freq | cum << 16 per symbol: what the vector steps gather, both ways.
struct FreqCum {
  alignas(64) uint32_t v[256] = {};
  explicit FreqCum(const BlockModel& m) {
    for (uint32_t s = 0; s < m.symbols; ++s) v[s] = m.freq[s] | (m.cum[s] << 16);
  }
};

// The per-block tables the encoder's vector steps gather from.
struct VectorTables {
  FreqCum freq_cum;
  alignas(64) double rcp[256];  // 1 / freq (0 for absent symbols, never gathered)
  explicit VectorTables(const BlockModel& m) : freq_cum(m) {
    for (uint32_t s = 0; s < m.symbols; ++s) rcp[s] = m.freq[s] != 0 ? 1.0 / m.freq[s] : 0.0;
  }
};

#define TG_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,popcnt"), always_inline)) inline

TG_AVX512 __m512i step16(__m512i x, const uint8_t* syms, const VectorTables& t, uint8_t*& w) {
  const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(syms)));
  const __m512i fc = _mm512_i32gather_epi32(idx, t.freq_cum.v, 4);
  const __m512i freq = _mm512_and_si512(fc, _mm512_set1_epi32(0xFFFF));
  const __m512i cum = _mm512_srli_epi32(fc, 16);
  const __mmask16 whole = _mm512_cmpeq_epi32_mask(freq, _mm512_set1_epi32(static_cast<int>(kProbScale)));
  const __mmask16 emit = _mm512_cmpge_epu32_mask(x, _mm512_slli_epi32(freq, 18)) & static_cast<__mmask16>(~whole);
  const uint32_t c = static_cast<uint32_t>(std::popcount(static_cast<uint32_t>(emit)));
  const __m256i words = _mm512_cvtepi32_epi16(_mm512_maskz_compress_epi32(emit, x));
  w -= 2 * c;
  _mm256_mask_storeu_epi16(w, static_cast<__mmask16>((1u << c) - 1), words);
  x = _mm512_mask_srli_epi32(x, emit, x, 16);
  const __m512d lo = _mm512_cvtepu32_pd(_mm512_castsi512_si256(x));
  const __m512d hi = _mm512_cvtepu32_pd(_mm512_extracti64x4_epi64(x, 1));
  const __m512d rlo = _mm512_i32gather_pd(_mm512_castsi512_si256(idx), t.rcp, 8);
  const __m512d rhi = _mm512_i32gather_pd(_mm512_extracti64x4_epi64(idx, 1), t.rcp, 8);
  __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvttpd_epu32(_mm512_mul_pd(lo, rlo))),
                                 _mm512_cvttpd_epu32(_mm512_mul_pd(hi, rhi)), 1);
  __m512i r = _mm512_sub_epi32(x, _mm512_mullo_epi32(q, freq));
  const __mmask16 fix = _mm512_cmpge_epu32_mask(r, freq);
  q = _mm512_mask_add_epi32(q, fix, q, _mm512_set1_epi32(1));
  r = _mm512_mask_sub_epi32(r, fix, r, freq);
  return _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(q, kProbBits), r), cum);
}

#define TG_AVX2 __attribute__((target("avx2,popcnt"), always_inline)) inline

// Lane indices that move the lanes set in an 8-bit mask, in ascending order,
// to the top of the vector (positions 8 - c .. 7): the words then end right
// below the ones already written.
struct RightPack {
  alignas(32) int32_t idx[256][8];
  constexpr RightPack() : idx() {
    for (uint32_t m = 0; m < 256; ++m) {
      const uint32_t c = static_cast<uint32_t>(std::popcount(m));
      uint32_t pos = 8 - c;
      for (uint32_t l = 0; l < 8; ++l)
        if (m & (1u << l)) idx[m][pos++] = static_cast<int32_t>(l);
    }
  }
};
constexpr RightPack kRightPack;

TG_AVX2 __m256i step8(__m256i x, const uint8_t* syms, const VectorTables& t, uint8_t*& w) {
  uint64_t eight;
  std::memcpy(&eight, syms, sizeof eight);
  const __m256i id = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(eight)));
  const __m256i fc = _mm256_i32gather_epi32(reinterpret_cast<const int*>(t.freq_cum.v), id, 4);
  const __m256i freq = _mm256_and_si256(fc, _mm256_set1_epi32(0xFFFF));
  const __m256i cum = _mm256_srli_epi32(fc, 16);
  const __m256i xmax = _mm256_slli_epi32(freq, 18);
  const __m256i ge = _mm256_cmpeq_epi32(_mm256_max_epu32(x, xmax), x);  // x >= xmax, unsigned
  const __m256i whole = _mm256_cmpeq_epi32(freq, _mm256_set1_epi32(static_cast<int>(kProbScale)));
  const __m256i emit = _mm256_andnot_si256(whole, ge);
  const uint32_t m = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(emit)));
  const uint32_t c = static_cast<uint32_t>(std::popcount(m));
  // The emitting lanes' low halves, right-aligned, as 8 words: store all 16
  // bytes ending at w (the bytes below the c real words are overwritten later).
  const __m256i packed = _mm256_permutevar8x32_epi32(
      x, _mm256_load_si256(reinterpret_cast<const __m256i*>(kRightPack.idx[m])));
  const __m256i halves = _mm256_shuffle_epi8(
      packed, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13,
                               -1, -1, -1, -1, -1, -1, -1, -1));
  const __m128i words = _mm256_castsi256_si128(_mm256_permute4x64_epi64(halves, 0x08));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(w - 16), words);
  w -= 2 * c;
  x = _mm256_blendv_epi8(x, _mm256_srli_epi32(x, 16), emit);
  // x as float64: the signed conversion of x - 2^31, plus 2^31 (exact).
  const __m256i biased = _mm256_xor_si256(x, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  const __m256d two31 = _mm256_set1_pd(2147483648.0);
  const __m256d lo = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(biased)), two31);
  const __m256d hi = _mm256_add_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(biased, 1)), two31);
  const __m256d rlo = _mm256_i32gather_pd(t.rcp, _mm256_castsi256_si128(id), 8);
  const __m256d rhi = _mm256_i32gather_pd(t.rcp, _mm256_extracti128_si256(id, 1), 8);
  // q < 2^18: the signed truncation is exact.
  __m256i q = _mm256_set_m128i(_mm256_cvttpd_epi32(_mm256_mul_pd(hi, rhi)), _mm256_cvttpd_epi32(_mm256_mul_pd(lo, rlo)));
  __m256i r = _mm256_sub_epi32(x, _mm256_mullo_epi32(q, freq));
  // r < 2 freq <= 2^15: a signed compare is exact.
  const __m256i fix = _mm256_cmpgt_epi32(r, _mm256_sub_epi32(freq, _mm256_set1_epi32(1)));
  q = _mm256_sub_epi32(q, fix);  // fix is -1 where q was one short
  r = _mm256_sub_epi32(r, _mm256_and_si256(fix, freq));
  return _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(q, kProbBits), r), cum);
}

// The partial last row (processed first) through the scalar steps; returns
// the rows the vectors take.
uint32_t begin_block(const uint8_t* syms, uint32_t count, const BlockModel& model, uint32_t* x, uint8_t*& w) {
  for (uint32_t l = 0; l < kMaxLanes; ++l) x[l] = kStateLow;
  const uint32_t full = count / kMaxLanes, rem = count % kMaxLanes;
  if (rem != 0) w = rans_encode_row(syms, full * kMaxLanes, rem, model, x, w);
  return full;
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,popcnt"))) size_t rans_encode_avx512(
    const uint8_t* syms, uint32_t count, uint32_t lanes, const BlockModel& model, uint8_t* stream_end) {
  if (lanes != kMaxLanes || count < kMaxLanes) return rans_encode_portable(syms, count, lanes, model, stream_end);
  const VectorTables t(model);
  alignas(64) uint32_t x[kMaxLanes];
  uint8_t* w = stream_end;
  const uint32_t rows = begin_block(syms, count, model, x, w);
  __m512i x0 = _mm512_load_si512(x), x1 = _mm512_load_si512(x + 16);
  for (uint32_t r = rows; r-- > 0;) {
    const uint8_t* s = syms + r * kMaxLanes;
    x1 = step16(x1, s + 16, t, w);
    x0 = step16(x0, s, t, w);
  }
  _mm512_store_si512(x, x0);
  _mm512_store_si512(x + 16, x1);
  return static_cast<size_t>(stream_end - rans_write_states(x, kMaxLanes, w));
}

__attribute__((target("avx2,popcnt"))) size_t rans_encode_avx2(const uint8_t* syms, uint32_t count, uint32_t lanes,
                                                               const BlockModel& model, uint8_t* stream_end) {
  if (lanes != kMaxLanes || count < kMaxLanes) return rans_encode_portable(syms, count, lanes, model, stream_end);
  const VectorTables t(model);
  alignas(32) uint32_t x[kMaxLanes];
  uint8_t* w = stream_end;
  const uint32_t rows = begin_block(syms, count, model, x, w);
  __m256i v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 8 * i));
  for (uint32_t r = rows; r-- > 0;) {
    const uint8_t* s = syms + r * kMaxLanes;
    v[3] = step8(v[3], s + 24, t, w);
    v[2] = step8(v[2], s + 16, t, w);
    v[1] = step8(v[1], s + 8, t, w);
    v[0] = step8(v[0], s, t, w);
  }
  for (int i = 0; i < 4; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(x + 8 * i), v[i]);
  return static_cast<size_t>(stream_end - rans_write_states(x, kMaxLanes, w));
}

// The decoder, AVX-512, 32 lanes as two vectors: per vector a gather of
// each lane's slot symbol (4 bytes at the slot: the table's padding) and of
// its freq | cum << 16, x = freq (x >> 14) + slot - cum, and the lanes below
// 2^16 take the next 16-bit words in lane order (a compress-expand of the
// words, lanes 0..15 before 16..31: the scalar order). Rows run here while
// whole and while 32 words remain (every load in bounds); the rest, and the
// faults' checks, are the portable decoder's (rans_decode_rows).
namespace {

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,popcnt"), always_inline)) inline __m512i decode16(
    __m512i x, const uint8_t* slot_symbol, const uint32_t* freq_cum, const uint8_t* words, uint64_t& wi,
    uint8_t* syms) {
  const __m512i slot = _mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(kProbScale - 1)));
  const __m512i sym = _mm512_and_si512(_mm512_i32gather_epi32(slot, slot_symbol, 1), _mm512_set1_epi32(0xFF));
  const __m512i fc = _mm512_i32gather_epi32(sym, freq_cum, 4);
  const __m512i freq = _mm512_and_si512(fc, _mm512_set1_epi32(0xFFFF));
  const __m512i cum = _mm512_srli_epi32(fc, 16);
  __m512i s = _mm512_add_epi32(_mm512_mullo_epi32(freq, _mm512_srli_epi32(x, kProbBits)), _mm512_sub_epi32(slot, cum));
  const __mmask16 need = _mm512_cmplt_epu32_mask(s, _mm512_set1_epi32(static_cast<int>(kStateLow)));
  const __m512i w16 = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + 2 * wi)));
  const __m512i w = _mm512_maskz_expand_epi32(need, w16);
  s = _mm512_mask_or_epi32(s, need, _mm512_slli_epi32(s, kWordBits), w);
  wi += static_cast<uint64_t>(std::popcount(static_cast<uint32_t>(need)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(syms), _mm512_cvtepi32_epi8(sym));
  return s;
}

}  // namespace

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,popcnt"))) BlockFault rans_decode_avx512(
    const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes, const BlockModel& model,
    const uint8_t* slot_symbol, uint8_t* syms) {
  if (lanes != kMaxLanes || count < kMaxLanes)
    return rans_decode_block(stream, bytes, count, lanes, model, slot_symbol, syms);
  alignas(64) uint32_t x[kMaxLanes];
  const BlockFault f = rans_decode_start(stream, bytes, count, lanes, x);
  if (f != BlockFault::kNone) return f;
  const FreqCum fc(model);
  const uint8_t* words = stream + 4ull * kMaxLanes;
  const uint64_t nwords = (bytes - 4ull * kMaxLanes) / 2;
  const uint32_t full_rows = count / kMaxLanes;
  __m512i x0 = _mm512_load_si512(x), x1 = _mm512_load_si512(x + 16);
  uint64_t wi = 0;
  uint32_t r = 0;
  for (; r < full_rows && wi + kMaxLanes <= nwords; ++r) {
    uint8_t* out = syms + uint64_t{r} * kMaxLanes;
    x0 = decode16(x0, slot_symbol, fc.v, words, wi, out);
    x1 = decode16(x1, slot_symbol, fc.v, words, wi, out + 16);
  }
  _mm512_store_si512(x, x0);
  _mm512_store_si512(x + 16, x1);
  return rans_decode_rows(stream, bytes, count, lanes, model, slot_symbol, r, wi, x, syms);
}

// The decoder, AVX2: the same steps on four vectors of 8 lanes; the words
// of the lanes that need one are spread by a permutation from a 256-entry
// table (AVX2 has no expand), and the unsigned test x < 2^16 is x >> 16 == 0.
namespace {

struct ExpandTable {
  alignas(32) uint32_t idx[256][8];
  ExpandTable() {
    for (uint32_t m = 0; m < 256; ++m) {
      uint32_t k = 0;
      for (uint32_t l = 0; l < 8; ++l) idx[m][l] = (m >> l) & 1u ? k++ : 0u;
    }
  }
};
const ExpandTable& expand_table() {
  static const ExpandTable t;
  return t;
}

__attribute__((target("avx2,popcnt"), always_inline)) inline __m256i decode8(__m256i x, const uint8_t* slot_symbol,
                                                                             const uint32_t* freq_cum,
                                                                             const uint8_t* words, uint64_t& wi,
                                                                             const ExpandTable& et, uint8_t* syms) {
  const __m256i slot = _mm256_and_si256(x, _mm256_set1_epi32(static_cast<int>(kProbScale - 1)));
  const __m256i sym = _mm256_and_si256(
      _mm256_i32gather_epi32(reinterpret_cast<const int*>(slot_symbol), slot, 1), _mm256_set1_epi32(0xFF));
  const __m256i fc = _mm256_i32gather_epi32(reinterpret_cast<const int*>(freq_cum), sym, 4);
  const __m256i freq = _mm256_and_si256(fc, _mm256_set1_epi32(0xFFFF));
  const __m256i cum = _mm256_srli_epi32(fc, 16);
  __m256i s = _mm256_add_epi32(_mm256_mullo_epi32(freq, _mm256_srli_epi32(x, kProbBits)), _mm256_sub_epi32(slot, cum));
  const __m256i need = _mm256_cmpeq_epi32(_mm256_srli_epi32(s, kWordBits), _mm256_setzero_si256());
  const uint32_t m = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(need)));
  const __m256i w16 = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(words + 2 * wi)));
  const __m256i w = _mm256_permutevar8x32_epi32(w16, _mm256_load_si256(reinterpret_cast<const __m256i*>(et.idx[m])));
  s = _mm256_blendv_epi8(s, _mm256_or_si256(_mm256_slli_epi32(s, kWordBits), w), need);
  wi += static_cast<uint64_t>(std::popcount(m));
  // The 8 symbols (one byte of each lane) to 8 bytes.
  const __m256i bytes = _mm256_shuffle_epi8(sym, _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                                                  -1, -1, 0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1,
                                                                  -1, -1, -1, -1));
  const uint32_t lo = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 0));
  const uint32_t hi = static_cast<uint32_t>(_mm256_extract_epi32(bytes, 4));
  std::memcpy(syms, &lo, 4);
  std::memcpy(syms + 4, &hi, 4);
  return s;
}

}  // namespace

__attribute__((target("avx2,popcnt"))) BlockFault rans_decode_avx2(const uint8_t* stream, uint64_t bytes,
                                                                   uint32_t count, uint32_t lanes,
                                                                   const BlockModel& model,
                                                                   const uint8_t* slot_symbol, uint8_t* syms) {
  if (lanes != kMaxLanes || count < kMaxLanes)
    return rans_decode_block(stream, bytes, count, lanes, model, slot_symbol, syms);
  alignas(32) uint32_t x[kMaxLanes];
  const BlockFault f = rans_decode_start(stream, bytes, count, lanes, x);
  if (f != BlockFault::kNone) return f;
  const FreqCum fc(model);
  const ExpandTable& et = expand_table();
  const uint8_t* words = stream + 4ull * kMaxLanes;
  const uint64_t nwords = (bytes - 4ull * kMaxLanes) / 2;
  const uint32_t full_rows = count / kMaxLanes;
  __m256i v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(x + 8 * i));
  uint64_t wi = 0;
  uint32_t r = 0;
  for (; r < full_rows && wi + kMaxLanes <= nwords; ++r) {
    uint8_t* out = syms + uint64_t{r} * kMaxLanes;
    for (int i = 0; i < 4; ++i) v[i] = decode8(v[i], slot_symbol, fc.v, words, wi, et, out + 8 * i);
  }
  for (int i = 0; i < 4; ++i) _mm256_store_si256(reinterpret_cast<__m256i*>(x + 8 * i), v[i]);
  return rans_decode_rows(stream, bytes, count, lanes, model, slot_symbol, r, wi, x, syms);
}

}  // namespace terngrad::quantize::detail
