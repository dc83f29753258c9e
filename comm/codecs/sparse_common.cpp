// The parts of the sparse codecs that do not depend on the codec: k per
// slice, Elias-Fano index coding and random-k positions (sparse_internal.h;
// layouts in FORMATS_SPARSE.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "parallel_ranges.h"
#include "sparse_internal.h"
#include "terngrad/quantize/philox.h"

namespace terngrad::comm::detail {

uint64_t sparse_k(uint64_t count, float ratio) {
  if (count == 0) return 0;
  const double want = std::ceil(static_cast<double>(ratio) * static_cast<double>(count));
  if (!(want >= 1.0)) return 1;  // also a NaN ratio (the parsers reject it)
  if (want >= static_cast<double>(count)) return count;
  return static_cast<uint64_t>(want);
}

// ---- Elias-Fano --------------------------------------------------------------

uint32_t elias_fano_low_bits(uint64_t count, uint64_t k) {
  if (k == 0 || count <= k) return 0;
  return static_cast<uint32_t>(std::bit_width(count / k) - 1);  // floor(log2(count / k))
}

uint64_t elias_fano_high_bits(uint64_t count, uint64_t k) {
  if (k == 0) return 0;
  return k + ((count - 1) >> elias_fano_low_bits(count, k));
}

uint64_t elias_fano_bytes(uint64_t count, uint64_t k) {
  const uint64_t low = k * elias_fano_low_bits(count, k);  // k * L <= k * 63: callers keep k < 2^57
  return (low + 7) / 8 + (elias_fano_high_bits(count, k) + 7) / 8;
}

namespace {

// Little-endian u64 from up to 8 bytes at p (fewer at the end: zero-filled).
inline uint64_t load_partial(const uint8_t* p, size_t avail) {
  uint8_t b[8] = {};
  std::memcpy(b, p, std::min<size_t>(avail, 8));
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[i];
  return v;
}

inline void store_partial(uint8_t* p, uint64_t v, size_t nbytes) {
  for (size_t i = 0; i < nbytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// Bits [pos, pos + nbits) of a little-endian bit stream of `size` bytes (nbits <= 63).
inline uint64_t read_bits(const uint8_t* in, size_t size, uint64_t pos, uint32_t nbits) {
  if (nbits == 0) return 0;
  const size_t byte = pos / 8;
  const uint32_t shift = pos % 8;
  uint64_t v = load_partial(in + byte, size - byte) >> shift;
  if (shift + nbits > 64) v |= load_partial(in + byte + 8, size - byte - 8) << (64 - shift);
  return v & ((uint64_t{1} << nbits) - 1);
}

}  // namespace

void elias_fano_encode(std::span<const uint32_t> idx, uint64_t count, uint8_t* out) {
  const uint64_t k = idx.size();
  const uint32_t L = elias_fano_low_bits(count, k);
  const size_t low_bytes = (k * L + 7) / 8;
  // Low parts: index i's low L bits at bit i * L (L <= 31 for 32-bit indices).
  uint64_t acc = 0;
  uint32_t fill = 0;
  uint8_t* w = out;
  const uint64_t mask = L == 0 ? 0 : (uint64_t{1} << L) - 1;
  if (L > 0) {
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t v = idx[i] & mask;
      acc |= v << fill;
      if (fill + L >= 64) {
        store_partial(w, acc, 8);
        w += 8;
        acc = fill == 0 ? 0 : v >> (64 - fill);
        fill = fill + L - 64;
      } else {
        fill += L;
      }
    }
  }
  store_partial(w, acc, (fill + 7) / 8);
  // High parts: index i sets bit (idx[i] >> L) + i; every other bit is 0.
  uint8_t* high = out + low_bytes;
  const uint64_t high_bytes = (elias_fano_high_bits(count, k) + 7) / 8;
  std::memset(high, 0, high_bytes);
  for (uint64_t i = 0; i < k; ++i) {
    const uint64_t p = (static_cast<uint64_t>(idx[i]) >> L) + i;
    high[p / 8] |= static_cast<uint8_t>(1u << (p % 8));
  }
}

std::string elias_fano_decode(const uint8_t* in, uint64_t count, uint64_t k, std::vector<uint64_t>& idx) {
  const uint32_t L = elias_fano_low_bits(count, k);
  const uint64_t low_bits = k * L, low_bytes = (low_bits + 7) / 8;
  const uint64_t H = elias_fano_high_bits(count, k), high_bytes = (H + 7) / 8;
  if (low_bits % 8 != 0 && (in[low_bytes - 1] >> (low_bits % 8)) != 0)
    return "nonzero padding bits after the " + std::to_string(low_bits) + " low bits";
  idx.resize(k);
  const uint8_t* high = in + low_bytes;
  uint64_t ones = 0;
  for (uint64_t word = 0; word * 8 < high_bytes; ++word) {
    uint64_t bits = load_partial(high + word * 8, high_bytes - word * 8);
    while (bits != 0) {
      const uint64_t p = word * 64 + static_cast<uint64_t>(std::countr_zero(bits));
      bits &= bits - 1;
      if (p >= H)
        return "nonzero padding bit " + std::to_string(p) + " after the " + std::to_string(H) + "-bit high part";
      if (ones == k) return "more than k = " + std::to_string(k) + " ones in the high part";
      const uint64_t hi = p - ones;
      // hi <= (count - 1) >> L <= 2^(64 - L) - 1, so the shift cannot overflow.
      const uint64_t x = (hi << L) | read_bits(in, low_bytes, ones * L, L);
      if (x >= count)
        return "index " + std::to_string(ones) + " is " + std::to_string(x) + ", not below the count " +
               std::to_string(count);
      if (ones > 0 && x <= idx[ones - 1])
        return "indices not strictly increasing: index " + std::to_string(ones) + " is " + std::to_string(x) +
               " after " + std::to_string(idx[ones - 1]);
      idx[ones++] = x;
    }
  }
  if (ones != k)
    return "the high part has " + std::to_string(ones) + " ones, k = " + std::to_string(k) + " expected";
  return {};
}

// ---- random-k positions ------------------------------------------------------

void randomk_positions(uint32_t step, uint32_t tensor_id, uint64_t begin, uint64_t count, uint64_t k,
                       std::vector<uint64_t>& pos) {
  using quantize::philox4x32_10;
  pos.clear();
  if (k == 0) return;
  if (k > count) throw std::invalid_argument("randomk: k = " + std::to_string(k) + " > count " + std::to_string(count));
  // The stream's key and counter tail: one Philox block of (begin, count) under key (tensor id, step).
  const quantize::Philox4x32Counter h = philox4x32_10(
      {{static_cast<uint32_t>(begin), static_cast<uint32_t>(begin >> 32), static_cast<uint32_t>(count),
        static_cast<uint32_t>(count >> 32)}},
      {{tensor_id, step}});
  const quantize::Philox4x32Key key{{h.v[0], h.v[1]}};
  // The draws first: draw d is the 64-bit word d % 2 of Philox block d / 2.
  // They depend on d alone, so they are computed apart from (and in
  // parallel to) the sequential algorithm below, which only consumes them.
  // Scratch kept per thread: at 16M elements and 1% the draws are 1.3 MB and
  // the bitmap 2 MB, which a fresh vector would fault in and zero every call.
  // The bitmap is all zero between calls (the scan below clears what it reads).
  thread_local std::vector<uint64_t> draws, bitmap;
  if (draws.size() < k + 1) draws.resize(k + 1);
  if (bitmap.size() < (count + 63) / 64) bitmap.resize((count + 63) / 64, 0);
  uint64_t* const dr = draws.data();
  // A block costs about as much as a few elements of a codec's pass: the
  // team's threshold is counted in those.
  for_each_range((k + 1) / 2 * 8, 8, [&](uint64_t lo, uint64_t hi) {
    for (uint64_t b = lo / 8; b < hi / 8; ++b) {
      const quantize::Philox4x32Counter words =
          philox4x32_10({{static_cast<uint32_t>(b), static_cast<uint32_t>(b >> 32), h.v[2], h.v[3]}}, key);
      dr[2 * b] = (static_cast<uint64_t>(words.v[1]) << 32) | words.v[0];
      dr[2 * b + 1] = (static_cast<uint64_t>(words.v[3]) << 32) | words.v[2];
    }
  });
  // Floyd's algorithm: draw d (0 <= d < k) adds j = count - k + d or a uniform t in [0, j].
  // The t of a later draw depends on that draw alone, so its bitmap word is
  // prefetched 16 draws ahead (the bitmap is larger than L2 at 16M elements).
  uint64_t* const bm = bitmap.data();
  pos.reserve(k);  // before the bitmap is touched: nothing below throws, so it is left all zero
  constexpr uint64_t kAhead = 16;
  auto t_of = [&](uint64_t d) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(dr[d]) * (count - k + d + 1)) >> 64);
  };
  for (uint64_t d = 0; d < k; ++d) {
    if (d + kAhead < k) __builtin_prefetch(bm + t_of(d + kAhead) / 64, 1);
    const uint64_t j = count - k + d;
    const uint64_t t = t_of(d);
    const uint64_t chosen = (bm[t / 64] >> (t % 64)) & 1 ? j : t;
    bm[chosen / 64] |= uint64_t{1} << (chosen % 64);
  }
  for (uint64_t w = 0, words = (count + 63) / 64; w < words; ++w) {
    uint64_t b = bm[w];
    if (b == 0) continue;
    bm[w] = 0;
    for (; b != 0; b &= b - 1) pos.push_back(w * 64 + static_cast<uint64_t>(std::countr_zero(b)));
  }
}

}  // namespace terngrad::comm::detail
