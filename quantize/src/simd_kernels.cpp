// The codec's SIMD kernels (stats, encode, decode, decode-accumulate, the
// ps's payload sums and their decode, fp16 conversion, the ps's dense
// float32 / binary16 sums), written once with
// Google Highway and compiled for AVX2, AVX-512 and NEON (foreach_target.h
// includes this file once per target, each copy in its own namespace with
// its own target attributes).
// cpu_features.cpp picks the level at run time; kernel_tables.cpp puts each
// level's kernels in a KernelTable.
//
// Every kernel must give the bytes of its portable twin (ternary_math.h holds
// the element-level rules). What keeps them identical:
//  - stats: the 32 canonical float64 lanes are kept as whole vectors, each
//    lane summing its elements in index order; x*x is exact in float64, so
//    the fused multiply-add gives the portable sum of squares;
//  - encode: the same float32 operations in the same order (fminf, one or
//    two multiplies, a compare against the 24-bit random integer); no
//    contraction (-ffp-contract=off and explicit Mul calls);
//  - decode: a lane permute picks +s, -s or +0, what scale * {1, -1, 0}
//    rounds to; accumulate is one float32 add;
//  - sums: integer arithmetic; their decode is one int->float conversion
//    and one multiply, as the portable code;
//  - fp16: the hardware's round-to-nearest-even conversions, which the
//    scalar code reproduces bit for bit (saturation applied before);
//  - dense sums: one float32 add per element per body, from +0, in body
//    order: the scalar loop's adds, vector by vector.
//
// SVE is not a target: Highway's SVE vectors are sizeless types, which cannot
// live in the arrays these kernels keep their lanes and Philox states in, and
// no SVE hardware was at hand to show that it would pay over NEON.

// Before any Highway header: the targets to compile. SSSE3/SSE4 are below the
// AVX2 level we dispatch to, and SVE is left out (above).
#ifndef HWY_DISABLED_TARGETS
#define HWY_DISABLED_TARGETS \
  (HWY_SSSE3 | HWY_SSE4 | HWY_SVE | HWY_SVE2 | HWY_SVE_256 | HWY_SVE2_128)
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "simd_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
// clang-format: the order above matters
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "cpu_kernels.h"
#include "terngrad/quantize/format.h"

HWY_BEFORE_NAMESPACE();
namespace terngrad::quantize::detail {
namespace HWY_NAMESPACE {

// The scalar and emulated targets (the static target of a baseline x86-64
// build) get no kernels: the portable ones are the scalar path.
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128

namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using D64 = hn::Repartition<uint64_t, DF>;
using DD = hn::Repartition<double, DF>;
using DU8 = hn::Rebind<uint8_t, DF>;  // one byte per float lane
using VF = hn::Vec<DF>;
using VU = hn::Vec<DU>;
using V64 = hn::Vec<D64>;
using VD = hn::Vec<DD>;

constexpr size_t kLanes = HWY_LANES(float);  // float lanes per vector: 4, 8 or 16
static_assert(kStatsLanes % kLanes == 0, "the canonical lanes split into whole vectors");

// ---------------------------------------------------------------- stats
// Lane e % 32 of the canonical order: float vector f covers elements
// [f*kLanes, (f+1)*kLanes) of each 32; its lower half widens into double
// vector 2f, its upper half into 2f+1, so double vector a holds lanes
// [a*kLanes/2, (a+1)*kLanes/2).
ChunkSums StatsChunk(const float* x, size_t len) {
  const DF df;
  const DD dd;
  const DU du;
  const hn::Half<DF> dh;
  constexpr size_t kFloatVecs = kStatsLanes / kLanes;
  constexpr size_t kDoubleVecs = 2 * kFloatVecs;
  VD sum[kDoubleVecs], sq[kDoubleVecs];
  for (size_t a = 0; a < kDoubleVecs; ++a) sum[a] = sq[a] = hn::Zero(dd);
  VU max_bits = hn::Zero(du);
  const VU abs_mask = hn::Set(du, kAbsMask);
  size_t e = 0;
  for (; e + kStatsLanes <= len; e += kStatsLanes) {
    // 2 KiB ahead: the hardware prefetcher alone leaves memory latency exposed.
    hwy::Prefetch(x + e + 512);
    for (size_t f = 0; f < kFloatVecs; ++f) {
      const VF v = hn::LoadU(df, x + e + f * kLanes);
      const VD lo = hn::PromoteTo(dd, hn::LowerHalf(dh, v));
      const VD hi = hn::PromoteTo(dd, hn::UpperHalf(dh, v));
      sum[2 * f] = hn::Add(sum[2 * f], lo);
      sum[2 * f + 1] = hn::Add(sum[2 * f + 1], hi);
      sq[2 * f] = hn::MulAdd(lo, lo, sq[2 * f]);  // the product is exact: fused == unfused
      sq[2 * f + 1] = hn::MulAdd(hi, hi, sq[2 * f + 1]);
      max_bits = hn::Max(max_bits, hn::And(hn::BitCast(du, v), abs_mask));
    }
  }
  alignas(64) double lane_sum[kStatsLanes];
  alignas(64) double lane_sq[kStatsLanes];
  constexpr size_t kHalf = kLanes / 2;
  for (size_t a = 0; a < kDoubleVecs; ++a) {
    hn::Store(sum[a], dd, lane_sum + a * kHalf);
    hn::Store(sq[a], dd, lane_sq + a * kHalf);
  }
  const uint32_t mx = hn::GetLane(hn::MaxOfLanes(du, max_bits));
  return finish_chunk(x, e, len, lane_sum, lane_sq, mx);  // the tail continues the lanes
}

// ---------------------------------------------------------------- encode
// Philox4x32 (10 rounds, or 7 for version 2) for kLanes/2 blocks: one 32-bit word in the low half of each
// 64-bit lane, so MulEven (32x32 -> 64 on the low halves) yields the whole
// product, and the garbage the upper halves collect is never read.
// (User-provided constructors: GCC gives an implicit one no target
// attributes, and it then cannot inline the vectors' constructors.)
struct PhiloxHalf {
  PhiloxHalf() : c0(hn::Zero(D64())), c1(c0), c2(c0), c3(c0) {}
  PhiloxHalf(V64 a, V64 b, V64 c, V64 d) : c0(a), c1(b), c2(c), c3(d) {}
  V64 c0, c1, c2, c3;
};

HWY_INLINE void PhiloxRound(PhiloxHalf& s, V64 k0, V64 k1, hn::Vec<DU> mul0, hn::Vec<DU> mul1) {
  const DU du;
  const V64 p0 = hn::MulEven(hn::BitCast(du, s.c0), mul0);
  const V64 p1 = hn::MulEven(hn::BitCast(du, s.c2), mul1);
  // c1 ^ k0 does not wait for this round's product: one XOR fewer on the
  // dependency chain from one multiply to the next.
  s.c0 = hn::Xor(hn::ShiftRight<32>(p1), hn::Xor(s.c1, k0));
  s.c2 = hn::Xor(hn::ShiftRight<32>(p0), hn::Xor(s.c3, k1));
  s.c1 = p1;
  s.c3 = p0;
}

// Rounds 1 and 2 with what is constant across blocks folded away. Counter
// words 1-3 (the counter's high word, step, tensor id) are the same for
// every block of an iteration, so in round 1 the product of word 2 is a
// constant, and with it the new words 0 and 1; in round 2 the product of
// that word 0 is constant too. Only block-dependent halves remain: 2
// multiplies, 2 shifts and 3 XORs instead of 4, 4 and 8. The constants for
// one high word, from the scalar Philox's own arithmetic (a user-provided
// constructor, as for PhiloxHalf):
struct PhiloxHead {
  PhiloxHead(uint32_t hi, const RngStream& rng) : hi_word(hi) {
    using namespace philox_constants;
    const D64 d64;
    const uint32_t key0 = static_cast<uint32_t>(rng.seed), key1 = static_cast<uint32_t>(rng.seed >> 32);
    uint32_t prod1_hi, prod1_lo;  // round 1: word 2 (step) times kMul1
    philox_mulhilo(kMul1, rng.step, prod1_hi, prod1_lo);
    const uint32_t w0 = prod1_hi ^ hi ^ key0, w1 = prod1_lo;  // round 1's new words 0, 1
    uint32_t prod0_hi, prod0_lo;  // round 2: that word 0 times kMul0
    philox_mulhilo(kMul0, w0, prod0_hi, prod0_lo);
    x1 = hn::Set(d64, rng.tensor_id ^ key1);
    x2 = hn::Set(d64, w1 ^ (key0 + kWeyl0));
    x3 = hn::Set(d64, prod0_hi ^ (key1 + kWeyl1));
    w3 = hn::Set(d64, prod0_lo);
  }
  uint32_t hi_word;  // the counter's high word they were made for
  V64 x1 = hn::Zero(D64());  // round 1: tensor id ^ key1             (-> word 2 = hi(p0) ^ x1)
  V64 x2 = x1;               // round 2: new word 1 ^ key0            (-> word 0 = hi(p1) ^ x2)
  V64 x3 = x1;               // round 2: hi(round-2 product 0) ^ key1 (-> word 2 = lo(p0) ^ x3)
  V64 w3 = x1;               // round 2: lo(round-2 product 0)        (word 3)
};

// State after rounds 1 and 2 of blocks whose word 0 is c0.
HWY_INLINE PhiloxHalf PhiloxTwoRounds(V64 c0, const PhiloxHead& h, VU mul0, VU mul1) {
  const DU du;
  const V64 p0 = hn::MulEven(hn::BitCast(du, c0), mul0);                // round 1
  const V64 c2 = hn::Xor(hn::ShiftRight<32>(p0), h.x1);                  //   word 2; word 3 = p0
  const V64 p1 = hn::MulEven(hn::BitCast(du, c2), mul1);                // round 2
  return PhiloxHalf(hn::Xor(hn::ShiftRight<32>(p1), h.x2), p1, hn::Xor(p0, h.x3), h.w3);
}

// Word `w` of kLanes blocks as 32-bit lanes, block b in lane b: the even
// half holds the even blocks, the odd half the odd ones, each in the low
// 32 bits of its 64-bit lanes.
HWY_INLINE VU Interleave(V64 even, V64 odd) {
  const DU du;
  return hn::OddEven(hn::BitCast(du, hn::ShiftLeft<32>(odd)), hn::BitCast(du, even));
}

// Blocks per loop iteration: kGroups groups of kLanes blocks (4*kLanes
// elements each). Two Philox chains per group; more chains hide the multiply
// latency where there are registers for them.
#if HWY_TARGET == HWY_AVX2
constexpr size_t kGroups = 1;  // 16 ymm registers: 2 chains (8 state vectors)
#else
constexpr size_t kGroups = 2;  // 32 registers: 4 chains
#endif
constexpr uint64_t kBlocksPerStep = kGroups * kLanes;

// The quantizer's constants as vectors; kUnitPre: pre == 1, whose multiply
// is exact and skipped (the bits stay the portable ones).
template <bool kUnitPre>
class GroupQuantizer {
 public:
  explicit GroupQuantizer(const TernaryQuantizer& q)
      : scale_(hn::Set(DF(), q.scale)), pre_(hn::Set(DF(), q.pre)), inv24_(hn::Set(DF(), q.inv24)) {}

  // 4*kLanes elements from p (element 4b+j: word j of block b) into kLanes bytes.
  HWY_INLINE void operator()(const float* p, const VU (&words)[4], uint8_t* out) const {
    const DF df;
    const DI di;
    hwy::Prefetch(p + 512);  // 2 KiB ahead, as in the stats pass
    VF v[4];
    hn::LoadInterleaved4(df, p, v[0], v[1], v[2], v[3]);  // v[j] lane b = p[4b + j]
    VF u[4];
    for (int j = 0; j < 4; ++j) u[j] = hn::ConvertTo(df, hn::BitCast(di, hn::ShiftRight<8>(words[j])));
    hn::StoreU(hn::DemoteTo(DU8(), Bytes(v, u)), DU8(), out);  // each lane is 0..255: exact
  }

  // Version 2 (RandomStream::kPhilox7Half16): 8*kLanes elements from p
  // (block b: elements 8b .. 8b+7, element 8b + 2j + h taking half h of word
  // j) into 2*kLanes bytes. Two interleaved loads give the quads (byte
  // groups) of the 2*kLanes bytes; the even quads 2b use words 0 and 1 of
  // block b, the odd ones words 2 and 3, so ConcatEven/ConcatOdd put block b
  // in lane b for both. The two byte vectors leave as one u16 per lane.
  HWY_INLINE void Halves(const float* p, const VU (&words)[4], uint8_t* out) const {
    const DF df;
    const DI di;
    hwy::Prefetch(p + 512);
    hwy::Prefetch(p + 512 + 4 * kLanes);
    VF lo[4], hi[4], even[4], odd[4];
    hn::LoadInterleaved4(df, p, lo[0], lo[1], lo[2], lo[3]);
    hn::LoadInterleaved4(df, p + 4 * kLanes, hi[0], hi[1], hi[2], hi[3]);
    for (int j = 0; j < 4; ++j) {
      even[j] = hn::ConcatEven(df, hi[j], lo[j]);
      odd[j] = hn::ConcatOdd(df, hi[j], lo[j]);
    }
    // u = 256 h + 128: the low half shifted up by 8, the high half down by 8.
    const VU mid = hn::Set(DU(), 0x80u), mask = hn::Set(DU(), 0xFFFF00u);
    auto u_low = [&](VU w) { return hn::ConvertTo(df, hn::BitCast(di, hn::Or(hn::And(hn::ShiftLeft<8>(w), mask), mid))); };
    auto u_high = [&](VU w) { return hn::ConvertTo(df, hn::BitCast(di, hn::Or(hn::And(hn::ShiftRight<8>(w), mask), mid))); };
    const VF ue[4] = {u_low(words[0]), u_high(words[0]), u_low(words[1]), u_high(words[1])};
    const VF uo[4] = {u_low(words[2]), u_high(words[2]), u_low(words[3]), u_high(words[3])};
    const hn::Vec<DI> pairs = hn::Or(Bytes(even, ue), hn::ShiftLeft<8>(Bytes(odd, uo)));
    using DU16 = hn::Rebind<uint16_t, DF>;
    alignas(64) uint16_t two[kLanes];
    hn::Store(hn::DemoteTo(DU16(), pairs), DU16(), two);  // lane b: bytes 2b, 2b + 1 (little-endian)
    std::memcpy(out, two, 2 * kLanes);
  }

 private:
  // The code byte of each lane's four elements v[j] with their u[j]:
  // ternary_code()'s arithmetic, code j at bits 2j.
  HWY_INLINE hn::Vec<DI> Bytes(const VF (&v)[4], const VF (&u)[4]) const {
    const DI di;
    hn::Vec<DI> bytes = hn::Zero(di);
    for (int j = 0; j < 4; ++j) {
      // fminf(|x|, s): a NaN |x| gives s, as in ternary_code.
      const VF ax = hn::Abs(v[j]);
      const VF a = hn::IfThenElse(ax < scale_, ax, scale_);
      const VF t = kUnitPre ? hn::Mul(a, inv24_) : hn::Mul(hn::Mul(a, pre_), inv24_);
      // s > 0 here, so a == 0 gives t == 0 and is never kept: no a > 0 test.
      const auto keep = hn::Or(a >= scale_, u[j] < t);
      const hn::Vec<DI> code =
          hn::IfNegativeThenElse(hn::BitCast(di, v[j]), hn::Set(di, int32_t{kCodeMinus} << (2 * j)),
                                 hn::Set(di, int32_t{kCodePlus} << (2 * j)));
      bytes = hn::Or(bytes, hn::IfThenElseZero(hn::RebindMask(di, keep), code));
    }
    return bytes;
  }

  VF scale_, pre_, inv24_;
};

// kHalves: format version 2 (Philox4x32-7, 8 elements a block, block b of
// byte k is (k + block_offset) / 2, and the caller starts on an even one);
// otherwise version 1 (Philox4x32-10, 4 elements a block, block k + block_offset).
template <bool kUnitPre, bool kHalves>
uint64_t EncodeRange(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                     const TernaryQuantizer& q, const RngStream& rng, uint8_t* body) {
  using namespace philox_constants;
  constexpr int kR = kHalves ? 7 : kRounds;
  constexpr uint64_t kBytesPerBlock = kHalves ? 2 : 1;
  const D64 d64;
  const DU du;
  const GroupQuantizer<kUnitPre> quantize(q);
  // Keys of the rounds, as whole vectors in memory: the XORs take them as
  // load operands (held as vectors, the compiler rebuilds each broadcast in
  // every iteration, 2 instructions per key), the counter words fixed for this
  // tensor, and the lane offsets of the even and odd blocks.
  constexpr size_t kLanes64 = kLanes / 2;
  alignas(64) uint64_t keys[2][kRounds][kLanes64];
  uint32_t k0 = static_cast<uint32_t>(rng.seed), k1 = static_cast<uint32_t>(rng.seed >> 32);
  for (int r = 0; r < kRounds; ++r) {
    if (r > 0) {
      k0 += kWeyl0;
      k1 += kWeyl1;
    }
    for (size_t l = 0; l < kLanes64; ++l) {
      keys[0][r][l] = k0;
      keys[1][r][l] = k1;
    }
  }
  const VU mul0 = hn::Set(du, kMul0), mul1 = hn::Set(du, kMul1);
  const V64 even = hn::ShiftLeft<1>(hn::Iota(d64, 0)), odd = hn::Add(even, hn::Set(d64, 1));
  auto block_of = [&](uint64_t k) { return (k + rng.block_offset) / kBytesPerBlock; };
  PhiloxHead head(static_cast<uint32_t>(block_of(k_begin) >> 32), rng);

  // Bytes k .. k+span-1 are SIMD-able if all their elements exist and the
  // low counter word does not wrap inside their blocks (rare: the portable
  // path crosses). The block of byte k counts from block_offset (a slice).
  constexpr uint64_t kStepBytes = kBlocksPerStep * kBytesPerBlock;
  auto simd_ok = [&](uint64_t k) {
    return k + kStepBytes <= k_end && 4 * (k + kStepBytes) <= n &&
           static_cast<uint32_t>(block_of(k)) <= 0xFFFFFFFFu - static_cast<uint32_t>(kBlocksPerStep - 1);
  };
  uint64_t k = k_begin;
  for (; simd_ok(k); k += kStepBytes) {
    const uint64_t block = block_of(k);
    if (static_cast<uint32_t>(block >> 32) != head.hi_word)  // past 2^32 blocks: rare
      head = PhiloxHead(static_cast<uint32_t>(block >> 32), rng);
    PhiloxHalf s[2 * kGroups];
    for (size_t g = 0; g < kGroups; ++g) {
      const V64 base = hn::Set(d64, static_cast<uint32_t>(block + g * kLanes));
      s[2 * g] = PhiloxTwoRounds(hn::Add(base, even), head, mul0, mul1);
      s[2 * g + 1] = PhiloxTwoRounds(hn::Add(base, odd), head, mul0, mul1);
    }
    for (int r = 2; r < kR; ++r) {
      const V64 key0 = hn::Load(d64, keys[0][r]), key1 = hn::Load(d64, keys[1][r]);
      for (size_t h = 0; h < 2 * kGroups; ++h) PhiloxRound(s[h], key0, key1, mul0, mul1);
    }
    for (size_t g = 0; g < kGroups; ++g) {
      const PhiloxHalf& a = s[2 * g];
      const PhiloxHalf& b = s[2 * g + 1];
      const VU words[4] = {Interleave(a.c0, b.c0), Interleave(a.c1, b.c1), Interleave(a.c2, b.c2),
                           Interleave(a.c3, b.c3)};
      const uint64_t kb = k + g * kLanes * kBytesPerBlock;
      if constexpr (kHalves)
        quantize.Halves(x + 4 * kb, words, body + kb);
      else
        quantize(x + 4 * kb, words, body + kb);
    }
  }
  return k;
}

void EncodeBytes(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                 const TernaryQuantizer& q, const RngStream& rng, uint8_t* body) {
  if (q.scale == 0.0f) {  // all-zero tensor: every code is 0
    std::fill(body + k_begin, body + k_end, uint8_t{0});
    return;
  }
  if (rng.stream == RandomStream::kPhilox7Half16) {
    const uint64_t head = half_stream_head(x, n, k_begin, k_end, q, rng, body);
    const uint64_t k = q.pre == 1.0f ? EncodeRange<true, true>(x, n, head, k_end, q, rng, body)
                                     : EncodeRange<false, true>(x, n, head, k_end, q, rng, body);
    encode_bytes_portable(x, n, k, k_end, q, rng, body);
    return;
  }
  const uint64_t k = q.pre == 1.0f ? EncodeRange<true, false>(x, n, k_begin, k_end, q, rng, body)
                                   : EncodeRange<false, false>(x, n, k_begin, k_end, q, rng, body);
  encode_bytes_portable(x, n, k, k_end, q, rng, body);
}

// ---------------------------------------------------------------- decode
// 16 elements from 4 body bytes: the bytes are broadcast to every lane, lane
// l of vector v shifts out code v*kLanes + l, and a lane permute looks the
// value up in {+0, s, -s, +0}: what scale * {0, 1, -1} rounds to (s >= +0
// is finite).
void DecodeBytes(const uint8_t* body, uint64_t n, uint64_t k_begin, uint64_t k_end, float scale,
                 bool accumulate, float* out) {
  const DF df;
  const DU du;
  const DI di;
  constexpr size_t kVecs = 16 / kLanes;  // vectors per 4-byte word
  VU shifts[kVecs];
  for (size_t v = 0; v < kVecs; ++v)
    shifts[v] = hn::Add(hn::ShiftLeft<1>(hn::Iota(du, 0)), hn::Set(du, static_cast<uint32_t>(2 * kLanes * v)));
  const VU three = hn::Set(du, 3);
  alignas(64) float table_values[kLanes] = {0.0f, scale, -scale, 0.0f};  // the rest: unused
  const VF table = hn::Load(df, table_values);
  uint64_t k = k_begin;
  for (; k + 4 <= k_end && 4 * (k + 4) <= n; k += 4) {
    uint32_t word;
    std::memcpy(&word, body + k, 4);
    const VU bytes = hn::Set(du, word);
    float* o = out + 4 * k;
    for (size_t v = 0; v < kVecs; ++v) {
      const VU codes = hn::And(bytes >> shifts[v], three);
      VF value = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::BitCast(di, codes)));
      if (accumulate) value = hn::Add(hn::LoadU(df, o + v * kLanes), value);
      hn::StoreU(value, df, o + v * kLanes);
    }
  }
  decode_bytes_portable(body, n, k, k_end, scale, accumulate, out);
}

// ---------------------------------------------------------------- sum
// The ps's sum of R payloads, straight from 2-bit codes to packed b-bit
// fields of count + R. Per input byte vector (4 elements a byte):
//   code c -> c' = 1 + (c & 1) - (c >> 1), the count plus one: 00->01,
//   01->10, 10->00 (new bit 1 = old bit 0, new bit 0 = neither bit), summed
//   over payloads into four byte vectors acc[j], one per code position j:
//   byte 2g of acc[j] holds element 8g+j of group g, byte 2g+1 element 8g+4+j.
// Packing then depends on b = bits per field:
//  - b <= 4 (R <= 7): the fields are summed two to a byte instead
//    (SumCodesFew), and in 16-bit lane g become L = f0 | f1 << b | f2 << 2b
//    | f3 << 3b and H, the same of f4..f7 (4b <= 16 bits each); group g is
//    L | H << 4b in a 32-bit lane, whose b low bytes a byte shuffle gathers
//    per block;
//  - b <= 8: back to element order (StoreInterleaved4), and the 8 fields of
//    each 64-bit lane squeezed to b bits by three shift-or steps.
using D8 = hn::ScalableTag<uint8_t>;
using V8 = hn::Vec<D8>;
constexpr size_t kBytesPerStep = HWY_LANES(uint8_t);  // input bytes per payload per step
constexpr uint64_t kGroupsPerStep = kBytesPerStep / 2;

// acc[j] = the sum over payloads of count + 1 at code position j; returns the
// reserved-code bits seen.
HWY_INLINE V8 SumCodes(const uint8_t* const* bodies, size_t count, uint64_t g, V8 (&acc)[4]) {
  const D8 d8;
  const V8 low_bits = hn::Set(d8, 0x55), three = hn::Set(d8, 3);
  V8 bad = hn::Zero(d8);
  for (int j = 0; j < 4; ++j) acc[j] = hn::Zero(d8);
  for (size_t p = 0; p < count; ++p) {
    const V8 b = hn::LoadU(d8, bodies[p] + 2 * g);
    const V8 b0 = hn::And(b, low_bits);                     // bit 0 of each code
    const V8 b1 = hn::And(hn::ShiftRight<1>(b), low_bits);  // bit 1 of each code
    bad = hn::Or(bad, hn::And(b0, b1));                     // code 0b11
    const V8 plus_one = hn::Or(hn::ShiftLeft<1>(b0), hn::AndNot(hn::Or(b0, b1), low_bits));
    acc[0] = hn::Add(acc[0], hn::And(plus_one, three));
    acc[1] = hn::Add(acc[1], hn::And(hn::ShiftRight<2>(plus_one), three));
    acc[2] = hn::Add(acc[2], hn::And(hn::ShiftRight<4>(plus_one), three));
    acc[3] = hn::Add(acc[3], hn::ShiftRight<6>(plus_one));
  }
  return bad;
}

// SumCodes for at most 7 payloads (b <= 4, the packing below), with fewer
// operations per payload: c' = (bit0 + 1) - bit1 per 2-bit field (01 + 0b01
// - 0 = 10, 00 + 01 - 0 = 01, 00 + 01 - 1 = 00; no carry or borrow leaves a
// field, even for the reserved 11, which is flagged), and the fields summed
// two to a byte, in 4-bit lanes (7 payloads * 2 = 14 < 16, so no lane
// overflows): byte 2g of `even` holds the fields of elements 8g (low nibble)
// and 8g+2, byte 2g+1 those of 8g+4 and 8g+6; `odd` the same for 8g+1, 8g+3,
// 8g+5, 8g+7. Returns the reserved-code bits seen.
HWY_INLINE V8 SumCodesFew(const uint8_t* const* bodies, size_t count, uint64_t g, V8& even, V8& odd) {
  const D8 d8;
  const V8 low_bits = hn::Set(d8, 0x55), pairs = hn::Set(d8, 0x33);
  V8 bad = hn::Zero(d8);
  even = odd = hn::Zero(d8);
  for (size_t p = 0; p < count; ++p) {
    const V8 b = hn::LoadU(d8, bodies[p] + 2 * g);
    const V8 b0 = hn::And(b, low_bits);
    const V8 b1 = hn::And(hn::ShiftRight<1>(b), low_bits);
    bad = hn::Or(bad, hn::And(b0, b1));
    const V8 plus_one = hn::Sub(hn::Add(b0, low_bits), b1);
    even = hn::Add(even, hn::And(plus_one, pairs));
    odd = hn::Add(odd, hn::And(hn::ShiftRight<2>(plus_one), pairs));
  }
  return bad;
}

// Writes n bytes of `from` to `to`; n is `full` (a constant: one store) where
// the caller allows spilling zeros past the n bytes, else `exact`.
HWY_INLINE void CopyOut(uint8_t* to, const uint8_t* from, size_t full, size_t exact, bool spill_ok) {
  if (spill_ok)
    std::memcpy(to, from, full == 16 ? 16 : 8);
  else
    std::memcpy(to, from, exact);
}

uint32_t SumGroups(const uint8_t* const* bodies, size_t count, uint64_t g0, uint64_t g1,
                   uint32_t bits, uint8_t* out) {
  const D8 d8;
  const hn::Repartition<uint16_t, D8> d16;
  const hn::Repartition<uint32_t, D8> d32;
  const hn::Repartition<uint64_t, D8> d64;
  const uint64_t end_byte = g1 * bits;  // bytes at and past it may be another thread's
  V8 bad = hn::Zero(d8);
  uint64_t g = g0;
  if (bits <= 4) {
    // Byte shuffle gathering bytes [0, b) of each 32-bit lane of a block; 0x80: zero.
    alignas(64) uint8_t gather[kBytesPerStep];
    for (size_t i = 0; i < kBytesPerStep; ++i) {
      const size_t in_block = i % 16, lane = in_block / bits, byte = in_block % bits;
      gather[i] = in_block < 4 * bits ? static_cast<uint8_t>(4 * lane + byte) : 0x80;
    }
    const V8 shuffle = hn::Load(d8, gather);
    const auto low_byte = hn::Set(d16, 0x00FF);
    const auto nibbles = hn::Set(d16, 0x0F0F);  // the low nibble of each byte
    alignas(64) uint8_t packed[2][kBytesPerStep];
    constexpr size_t kBlocks = kBytesPerStep / 16;
    for (; g + kGroupsPerStep <= g1; g += kGroupsPerStep) {
      V8 even, odd;
      bad = hn::Or(bad, SumCodesFew(bodies, count, g, even, odd));  // b <= 4: R <= 7
      // In 16-bit lane g, from the nibble sums: x = f0 | f1 << b (low byte)
      // and f4 | f5 << b (high byte), y = f2 | f3 << b and f6 | f7 << b (each
      // shift stays inside its byte: 2b <= 8), then L and H.
      const auto e16 = hn::BitCast(d16, even), o16 = hn::BitCast(d16, odd);
      const auto x = hn::Or(hn::And(e16, nibbles), hn::ShiftLeftSame(hn::And(o16, nibbles), static_cast<int>(bits)));
      const auto y = hn::Or(hn::And(hn::ShiftRight<4>(e16), nibbles),
                            hn::ShiftLeftSame(hn::And(hn::ShiftRight<4>(o16), nibbles), static_cast<int>(bits)));
      auto lo = hn::Or(hn::And(x, low_byte), hn::ShiftLeftSame(hn::And(y, low_byte), static_cast<int>(2 * bits)));
      auto hi = hn::Or(hn::ShiftRight<8>(x), hn::ShiftLeftSame(hn::ShiftRight<8>(y), static_cast<int>(2 * bits)));
      // Group g is L | H << 4b: split at bit 16 while still in 16-bit lanes
      // (the low 16 - 4b bits of H join L), so that zipping the two gives it
      // whole in a 32-bit lane (groups 8k..8k+3 of block k from ZipLower,
      // 8k+4..8k+7 from ZipUpper). b = 4 splits exactly at the lanes.
      if (bits < 4) {
        lo = hn::Or(lo, hn::ShiftLeftSame(hi, static_cast<int>(4 * bits)));
        hi = hn::ShiftRightSame(hi, static_cast<int>(16 - 4 * bits));
      }
      const hn::Vec<decltype(d32)> zipped[2] = {hn::ZipLower(d32, lo, hi), hn::ZipUpper(d32, lo, hi)};
      for (int h = 0; h < 2; ++h) hn::Store(hn::TableLookupBytes(hn::BitCast(d8, zipped[h]), shuffle), d8, packed[h]);
      // 16-byte stores in address order, each spilling zeros that the next
      // one overwrites. One bound check per step: only a block's last step
      // (its last stores would spill past end_byte) takes the careful path.
      if ((g + kGroupsPerStep) * bits + 16 <= end_byte) {
        for (size_t k = 0; k < kBlocks; ++k)
          for (int h = 0; h < 2; ++h) std::memcpy(out + (g + 8 * k + 4 * h) * bits, packed[h] + 16 * k, 16);
      } else {
        for (size_t k = 0; k < kBlocks; ++k) {
          for (int h = 0; h < 2; ++h) {
            const uint64_t at = (g + 8 * k + 4 * h) * bits;
            CopyOut(out + at, packed[h] + 16 * k, 16, 4 * bits, at + 16 <= end_byte);
          }
        }
      }
    }
  } else {
    alignas(64) uint8_t fields[4 * kBytesPerStep];  // one byte per element, element order
    alignas(64) uint64_t packed[kBytesPerStep / 2];
    for (; g + kGroupsPerStep <= g1; g += kGroupsPerStep) {
      V8 acc[4];
      bad = hn::Or(bad, SumCodes(bodies, count, g, acc));
      hn::StoreInterleaved4(acc[0], acc[1], acc[2], acc[3], d8, fields);
      // 8-bit fields f0..f7 of a group -> f0 | f1 << b | ... | f7 << 7b.
      for (size_t v = 0; v < 4; ++v) {
        auto w16 = hn::BitCast(d16, hn::LoadU(d8, fields + v * kBytesPerStep));
        w16 = hn::Or(hn::And(w16, hn::Set(d16, 0x00FF)), hn::ShiftLeftSame(hn::ShiftRight<8>(w16), bits));
        auto w32 = hn::BitCast(d32, w16);
        w32 = hn::Or(hn::And(w32, hn::Set(d32, 0xFFFFu)),
                     hn::ShiftLeftSame(hn::ShiftRight<16>(w32), 2 * bits));
        auto w64 = hn::BitCast(d64, w32);
        w64 = hn::Or(hn::And(w64, hn::Set(d64, 0xFFFFFFFFull)),
                     hn::ShiftLeftSame(hn::ShiftRight<32>(w64), 4 * bits));
        hn::Store(w64, d64, packed + v * (kBytesPerStep / 8));
      }
      for (uint64_t i = 0; i < kGroupsPerStep; ++i) {
        const uint64_t at = (g + i) * bits;
        CopyOut(out + at, reinterpret_cast<const uint8_t*>(&packed[i]), 8, bits, at + 8 <= end_byte);
      }
    }
  }
  const uint32_t simd_bad = hn::AllTrue(d8, hn::Eq(bad, hn::Zero(d8))) ? 0u : 1u;
  return simd_bad | sum_groups_portable(bodies, count, g, g1, bits, out);
}

// ---------------------------------------------------------------- sum decode
// The fields of a sum body (b <= 8 bits each), 16 elements (2b <= 16 bytes)
// a step: the step's bytes are loaded once into every 128-bit block, a byte
// shuffle gives each 32-bit lane the two bytes its field lies in, and a
// per-lane shift and mask leave the field. Calls f(fields, first element)
// per vector; returns where it stopped (the caller finishes the rest).
template <class F>
HWY_INLINE uint64_t ForEachFieldVector(const uint8_t* body, uint64_t body_bytes, uint64_t e0, uint64_t e1,
                                       uint32_t bits, F&& f) {
  const D8 d8;
  const DU du;
  constexpr size_t kVecs = 16 / kLanes;
  alignas(64) uint8_t gather[kVecs][4 * kLanes];
  alignas(64) uint32_t shift[kVecs][kLanes];
  for (size_t v = 0; v < kVecs; ++v) {
    for (size_t j = 0; j < kLanes; ++j) {
      const uint32_t bit = static_cast<uint32_t>(v * kLanes + j) * bits, byte = bit / 8;
      gather[v][4 * j] = static_cast<uint8_t>(byte);
      gather[v][4 * j + 1] = byte + 1 < 16 ? static_cast<uint8_t>(byte + 1) : 0x80;  // 0x80: zero
      gather[v][4 * j + 2] = gather[v][4 * j + 3] = 0x80;
      shift[v][j] = bit % 8;
    }
  }
  const VU mask = hn::Set(du, (1u << bits) - 1);
  uint64_t e = e0;
  for (; e + 16 <= e1 && e * bits / 8 + 16 <= body_bytes; e += 16) {
    const V8 bytes = hn::LoadDup128(d8, body + e * bits / 8);
    for (size_t v = 0; v < kVecs; ++v) {
      const VU two = hn::BitCast(du, hn::TableLookupBytesOr0(bytes, hn::Load(d8, gather[v])));
      f(hn::And(two >> hn::Load(du, shift[v]), mask), e + v * kLanes);
    }
  }
  return e;
}

uint32_t SumFieldsMax(const uint8_t* body, uint64_t body_bytes, uint64_t e0, uint64_t e1, uint32_t bits) {
  if (bits > 8) return sum_fields_max_portable(body, body_bytes, e0, e1, bits);
  const DU du;
  VU most = hn::Zero(du);
  const uint64_t e = ForEachFieldVector(body, body_bytes, e0, e1, bits,
                                        [&](VU fields, uint64_t) { most = hn::Max(most, fields); });
  return std::max(hn::GetLane(hn::MaxOfLanes(du, most)), sum_fields_max_portable(body, body_bytes, e, e1, bits));
}

// out[i] = scale * (field_i - R): one int->float conversion and one multiply, as the portable code.
void DecodeSumFields(const uint8_t* body, uint64_t body_bytes, uint64_t e0, uint64_t e1, uint32_t bits,
                     uint32_t contributions, float scale, float* out) {
  if (bits > 8) return decode_sum_fields_portable(body, body_bytes, e0, e1, bits, contributions, scale, out);
  const DF df;
  const DI di;
  const VF s = hn::Set(df, scale);
  const hn::Vec<DI> r = hn::Set(di, static_cast<int32_t>(contributions));
  const uint64_t e = ForEachFieldVector(body, body_bytes, e0, e1, bits, [&](VU fields, uint64_t at) {
    hn::StoreU(hn::Mul(s, hn::ConvertTo(df, hn::Sub(hn::BitCast(di, fields), r))), df, out + at);
  });
  decode_sum_fields_portable(body, body_bytes, e, e1, bits, contributions, scale, out);
}

// ---------------------------------------------------------------- fp16
// float32 -> binary16 rounds to nearest even in hardware (F16C, NEON); the
// one departure from IEEE, saturating finite values beyond 65504 instead of
// rounding them to Inf, is applied first (fp16.h). NaN fails both compares
// and converts as the hardware does: quiet, with its top payload bits.
using DH = hn::Rebind<hwy::float16_t, DF>;

void Fp16Encode(const float* x, size_t n, uint8_t* out) {
  const DF df;
  const DH dh;
  const VF max_half = hn::Set(df, 65504.0f), inf = hn::Set(df, std::numeric_limits<float>::infinity());
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    VF v = hn::LoadU(df, x + i);
    const VF a = hn::Abs(v);
    v = hn::IfThenElse(hn::And(a > max_half, a < inf), hn::CopySign(max_half, v), v);
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(out + 2 * i));
  }
  fp16::encode_portable(x + i, n - i, out + 2 * i);
}

template <bool kAccumulate>
void Fp16DecodeInto(const uint8_t* in, size_t n, float* out) {
  const DF df;
  const DH dh;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    VF v = hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(in + 2 * i)));
    if (kAccumulate) v = hn::Add(hn::LoadU(df, out + i), v);
    hn::StoreU(v, df, out + i);
  }
  if (kAccumulate)
    fp16::decode_accumulate_portable(in + 2 * i, n - i, out + i);
  else
    fp16::decode_portable(in + 2 * i, n - i, out + i);
}

// bfloat16 -> float32: each u16 promoted to u32 and shifted to the top half.
void Bf16Widen(const uint16_t* in, size_t n, float* out) {
  const DF df;
  const DU du;
  const hn::Rebind<uint16_t, DF> d16;
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, in + i)))), df, out + i);
  bf16_widen_portable(in + i, n - i, out + i);
}

void Fp16Decode(const uint8_t* in, size_t n, float* out) { Fp16DecodeInto<false>(in, n, out); }
void Fp16DecodeAccumulate(const uint8_t* in, size_t n, float* out) { Fp16DecodeInto<true>(in, n, out); }

// ---------------------------------------------------------------- dense sum
// The ps's sum of R float32 / binary16 bodies into float32 (dense_sum.h):
// per vector of elements acc = +0, then acc = acc + v_r for r = 0..R-1, the
// portable kernel's operations in its order (acc the first operand, as its
// `acc += v`). Four vectors a step give four independent add chains; the
// bodies are read in lockstep, R+1 sequential streams that the hardware
// prefetchers follow (software prefetch measured no better). Halves widen
// exactly (PromoteTo), as fp16::to_float.
//
// With `stream` (large sums, whose output would not stay in cache anyway)
// the output is written with non-temporal stores from the first 64-byte
// boundary on: a regular store first reads the line it writes (one more
// stream of traffic), and at 16M elements skipping that read measured 10-20%
// faster on Zen 4 (bench/RESULTS.md, "ps sums").
HWY_INLINE VF LoadBodyF32(const uint8_t* p) { return hn::LoadU(DF(), reinterpret_cast<const float*>(p)); }
HWY_INLINE VF LoadBodyF16(const uint8_t* p) {
  return hn::PromoteTo(DF(), hn::LoadU(DH(), reinterpret_cast<const hwy::float16_t*>(p)));
}

template <size_t kInBytes, bool kStream, class Load>
HWY_INLINE uint64_t DenseSumVectors(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1,
                                    uint8_t* out, Load load) {
  const DF df;
  constexpr size_t kVecs = 4;
  constexpr size_t kVecBytes = kInBytes * kLanes;  // input bytes per vector of elements
  uint64_t e = e0;
  for (; e + kVecs * kLanes <= e1; e += kVecs * kLanes) {
    VF acc[kVecs];
    for (size_t v = 0; v < kVecs; ++v) acc[v] = hn::Zero(df);
    for (size_t r = 0; r < count; ++r) {
      const uint8_t* p = bodies[r] + kInBytes * e;
      for (size_t v = 0; v < kVecs; ++v) acc[v] = hn::Add(acc[v], load(p + v * kVecBytes));
    }
    float* o = reinterpret_cast<float*>(out + 4 * e);
    for (size_t v = 0; v < kVecs; ++v) {
      if (kStream)
        hn::Stream(acc[v], df, o + v * kLanes);  // o is 64-byte aligned here
      else
        hn::StoreU(acc[v], df, o + v * kLanes);
    }
  }
  if (kStream) hwy::FlushStream();  // before the caller's stores and OpenMP's barrier
  for (; e + kLanes <= e1; e += kLanes) {
    VF acc = hn::Zero(df);
    for (size_t r = 0; r < count; ++r) acc = hn::Add(acc, load(bodies[r] + kInBytes * e));
    hn::StoreU(acc, df, reinterpret_cast<float*>(out + 4 * e));
  }
  return e;  // the caller's portable kernel sums the last < kLanes elements
}

using DensePortable = void (*)(const uint8_t* const*, size_t, uint64_t, uint64_t, uint8_t*, bool);

template <size_t kInBytes, class Load>
HWY_INLINE void DenseSum(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out,
                         bool stream, Load load, DensePortable portable) {
  uint64_t e = e0;
  if (stream) {
    // The elements before the output's first 64-byte boundary, then aligned streaming stores.
    const uint64_t misaligned = (64 - reinterpret_cast<uintptr_t>(out + 4 * e0) % 64) % 64;
    const uint64_t head = std::min<uint64_t>(e1, e0 + misaligned / 4);  // out + 4*e is 4-byte aligned in practice
    if (misaligned % 4 == 0) {
      portable(bodies, count, e0, head, out, false);
      e = DenseSumVectors<kInBytes, true>(bodies, count, head, e1, out, load);
    } else {
      e = DenseSumVectors<kInBytes, false>(bodies, count, e0, e1, out, load);
    }
  } else {
    e = DenseSumVectors<kInBytes, false>(bodies, count, e0, e1, out, load);
  }
  portable(bodies, count, e, e1, out, false);
}

void DenseSumF32(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out, bool stream) {
  DenseSum<4>(bodies, count, e0, e1, out, stream, [](const uint8_t* p) { return LoadBodyF32(p); },
              dense_sum_f32_portable);
}

void DenseSumF16(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out, bool stream) {
  DenseSum<2>(bodies, count, e0, e1, out, stream, [](const uint8_t* p) { return LoadBodyF16(p); },
              dense_sum_f16_portable);
}

#endif  // HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128

}  // namespace HWY_NAMESPACE
}  // namespace terngrad::quantize::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace terngrad::quantize::detail {

namespace {
// The table of one compiled target.
#define TG_KERNEL_TABLE(NS) \
  KernelTable {                                                                           \
    &NS::StatsChunk, &NS::EncodeBytes, &NS::DecodeBytes, &NS::SumGroups, &NS::SumFieldsMax, \
        &NS::DecodeSumFields, &NS::Fp16Encode, &NS::Fp16Decode, &NS::Fp16DecodeAccumulate,   \
        &NS::DenseSumF32, &NS::DenseSumF16, &rans_encode_portable, &encode_bytes_nearest,   \
        &add_f32_portable, &ef_residual_portable, &rans_decode_block, &NS::Bf16Widen         \
  }
}  // namespace

const KernelTable* highway_kernels(SimdLevel level) {
  switch (level) {
#if HWY_TARGETS & HWY_AVX2
    case SimdLevel::kAvx2: {
      static const KernelTable table = TG_KERNEL_TABLE(N_AVX2);
      return &table;
    }
#endif
#if HWY_TARGETS & HWY_AVX3
    case SimdLevel::kAvx512: {
      static const KernelTable table = TG_KERNEL_TABLE(N_AVX3);
      return &table;
    }
#endif
#if HWY_TARGETS & HWY_NEON
    case SimdLevel::kNeon: {
      static const KernelTable table = TG_KERNEL_TABLE(N_NEON);
      return &table;
    }
#endif
    default:
      return nullptr;
  }
}

}  // namespace terngrad::quantize::detail
#endif  // HWY_ONCE
