// "topk:ratio=R[,values=fp32|fp16]": the k largest-magnitude elements of
// each slice, as their values and Elias-Fano coded indices (format, selection
// and tie rule: comm/codecs/FORMATS_SPARSE.md). Biased: meant for ef().
//
// Slices. The selection is made per slice: a slice of `count` elements sends
// k = min(count, max(1, ceil(R * count))) elements, so payload_bytes(count)
// is exact. A variable sent whole (the in-process trainer, or a cluster
// variable not sharded across ps) sends its own top k; a variable sharded
// across servers sends each shard's top k, which is not the whole variable's
// top k (unlike the dense codecs, this payload depends on the sharding).
// Indices in a payload are relative to the slice start; the header records
// the slice's count. A slice holds fewer than 2^32 elements.
//
// Selection (sparse_internal.h: topk_select): a threshold t from a sample of
// the slice, one streaming pass collecting the elements with |g| >= t (SIMD
// under AVX2/AVX-512), a radix step (magnitude histogram) and std::nth_element
// within the bucket holding the k-th candidate for exactly k,
// and a lower threshold (at worst t = 0) when fewer than k qualified. The
// chosen set depends on the input alone, never on the sample or the SIMD
// level: the k first in the order (|g| descending, index ascending).
//
// Aggregation: the default float32 dense sum (sums_without_decoding() false).
// An instance keeps scratch buffers, so it is not thread-safe.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TG_TOPK_X86 1
#endif

#include "builtin_codecs.h"
#include "parallel_ranges.h"
#include "slices.h"
#include "sparse_internal.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/fp16.h"

namespace terngrad::comm::detail {

namespace {

constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
constexpr uint32_t kInfBits = 0x7F800000u;

inline uint32_t abs_bits(float x) { return std::bit_cast<uint32_t>(x) & kAbsMask; }
inline uint64_t make_key(uint32_t bits, uint64_t i) {
  return (static_cast<uint64_t>(bits) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
}

// Candidate keys, written through a raw pointer by the pass (no per-element
// capacity checks, no zero-filling).
struct KeyBuffer {
  std::unique_ptr<uint64_t[]> p;
  size_t cap = 0, size = 0;
  void ensure(size_t need) {
    if (need <= cap) return;
    const size_t c = std::max(need, cap * 2);
    std::unique_ptr<uint64_t[]> q(new uint64_t[c]);
    if (size) std::memcpy(q.get(), p.get(), size * sizeof(uint64_t));
    p = std::move(q);
    cap = c;
  }
};

// Scalar pass over x[0, n) (elements base..base+n-1 of the slice).
size_t collect_block_scalar(const float* x, size_t n, uint32_t base, uint32_t t, uint64_t* out, uint32_t& maxbits) {
  size_t m = 0;
  uint32_t mx = maxbits;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t b = abs_bits(x[i]);
    mx = std::max(mx, b);
    if (b >= t) out[m++] = make_key(b, base + i);
  }
  maxbits = mx;
  return m;
}

#ifdef TG_TOPK_X86
// AVX2: 32 elements per iteration; the |bits| compare as signed int32 (they
// are below 2^31), and only groups with a candidate leave the vector path.
__attribute__((target("avx2,bmi"))) size_t collect_block_avx2(const float* x, size_t n, uint32_t base, uint32_t t,
                                                               uint64_t* out, uint32_t& maxbits) {
  const __m256i absmask = _mm256_set1_epi32(static_cast<int>(kAbsMask));
  const __m256i tm1 = _mm256_set1_epi32(static_cast<int>(t) - 1);  // b >= t  <=>  b > t - 1 (t <= 2^31 - 1)
  __m256i mx = _mm256_setzero_si256();
  size_t m = 0, i = 0;
  for (; i + 32 <= n; i += 32) {
    // 2 KiB ahead (see the AVX-512 pass).
    _mm_prefetch(reinterpret_cast<const char*>(x + i + 512), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(x + i + 528), _MM_HINT_T0);
    const __m256i a0 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), absmask);
    const __m256i a1 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 8)), absmask);
    const __m256i a2 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16)), absmask);
    const __m256i a3 = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 24)), absmask);
    mx = _mm256_max_epi32(mx, _mm256_max_epi32(_mm256_max_epi32(a0, a1), _mm256_max_epi32(a2, a3)));
    const __m256i c0 = _mm256_cmpgt_epi32(a0, tm1), c1 = _mm256_cmpgt_epi32(a1, tm1);
    const __m256i c2 = _mm256_cmpgt_epi32(a2, tm1), c3 = _mm256_cmpgt_epi32(a3, tm1);
    const __m256i any = _mm256_or_si256(_mm256_or_si256(c0, c1), _mm256_or_si256(c2, c3));
    if (_mm256_testz_si256(any, any)) continue;
    uint32_t bits = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c0))) |
                    static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c1))) << 8 |
                    static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c2))) << 16 |
                    static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(c3))) << 24;
    while (bits != 0) {
      const uint32_t j = static_cast<uint32_t>(_tzcnt_u32(bits));
      bits &= bits - 1;
      out[m++] = make_key(abs_bits(x[i + j]), base + i + j);
    }
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), mx);
  uint32_t mxs = maxbits;
  for (uint32_t v : lanes) mxs = std::max(mxs, v);
  maxbits = mxs;
  return m + collect_block_scalar(x + i, n - i, base + static_cast<uint32_t>(i), t, out + m, maxbits);
}

// GCC 12's AVX-512 intrinsics start from a self-initialized "undefined"
// vector (avx512fintrin.h), which -W(maybe-)uninitialized reports once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// AVX-512: the AVX2 pass at twice the width, 64 elements per iteration. On
// the Xeon of bench/RESULTS.md one thread reads L3 at 12-13 GB/s with 32-byte
// loads and 16-17 GB/s with 64-byte ones, which is most of why the AVX2 pass
// ran at 1.5-2x the (two-thread, 64-byte-load) read floor even when nothing
// passed; the rest was running on one thread (collect() now uses the team).
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi"))) size_t collect_block_avx512(
    const float* x, size_t n, uint32_t base, uint32_t t, uint64_t* out, uint32_t& maxbits) {
  const __m512i absmask = _mm512_set1_epi32(static_cast<int>(kAbsMask));
  const __m512i tv = _mm512_set1_epi32(static_cast<int>(t));
  __m512i mx = _mm512_setzero_si512();
  size_t m = 0, i = 0;
  for (; i + 64 <= n; i += 64) {
    // 2 KiB ahead: the candidates' branches mispredict (about 1.4% of the
    // elements pass at ratio 1%, so most steps hold one), and each flush
    // drops the loads in flight; prefetches keep the stream coming.
    for (int line = 0; line < 4; ++line) _mm_prefetch(reinterpret_cast<const char*>(x + i + 512 + 16 * line), _MM_HINT_T0);
    const __m512i a0 = _mm512_and_si512(_mm512_loadu_si512(x + i), absmask);
    const __m512i a1 = _mm512_and_si512(_mm512_loadu_si512(x + i + 16), absmask);
    const __m512i a2 = _mm512_and_si512(_mm512_loadu_si512(x + i + 32), absmask);
    const __m512i a3 = _mm512_and_si512(_mm512_loadu_si512(x + i + 48), absmask);
    mx = _mm512_max_epu32(mx, _mm512_max_epu32(_mm512_max_epu32(a0, a1), _mm512_max_epu32(a2, a3)));
    const __mmask16 c0 = _mm512_cmpge_epu32_mask(a0, tv), c1 = _mm512_cmpge_epu32_mask(a1, tv);
    const __mmask16 c2 = _mm512_cmpge_epu32_mask(a2, tv), c3 = _mm512_cmpge_epu32_mask(a3, tv);
    if ((c0 | c1 | c2 | c3) == 0) continue;
    uint64_t bits = static_cast<uint64_t>(c0) | static_cast<uint64_t>(c1) << 16 | static_cast<uint64_t>(c2) << 32 |
                    static_cast<uint64_t>(c3) << 48;
    while (bits != 0) {
      const uint32_t j = static_cast<uint32_t>(_tzcnt_u64(bits));
      bits &= bits - 1;
      out[m++] = make_key(abs_bits(x[i + j]), base + i + j);
    }
  }
  alignas(64) uint32_t lanes[16];
  _mm512_store_si512(lanes, mx);
  uint32_t mxs = maxbits;
  for (uint32_t v : lanes) mxs = std::max(mxs, v);
  maxbits = mxs;
  return m + collect_block_scalar(x + i, n - i, base + static_cast<uint32_t>(i), t, out + m, maxbits);
}
#pragma GCC diagnostic pop
#endif

using CollectBlock = size_t (*)(const float*, size_t, uint32_t, uint32_t, uint64_t*, uint32_t&);

// The candidate pass of the SIMD level in use (the scalar one if !simd).
CollectBlock collect_kernel(bool simd) {
#ifdef TG_TOPK_X86
  if (simd) {
    switch (quantize::cpu_simd_level()) {
      case quantize::SimdLevel::kAvx512: return collect_block_avx512;
      case quantize::SimdLevel::kAvx2: return collect_block_avx2;
      default: break;
    }
  }
#endif
  (void)simd;
  return collect_block_scalar;
}

constexpr size_t kBlock = 16384;

// Appends the candidates of x[b, e) to buf; returns the largest |bits|.
uint32_t collect_range(std::span<const float> x, size_t b0, size_t e0, uint32_t t, KeyBuffer& buf, CollectBlock k) {
  uint32_t maxbits = 0;
  for (size_t b = b0; b < e0; b += kBlock) {
    const size_t n = std::min(kBlock, e0 - b);
    buf.ensure(buf.size + n);
    buf.size += k(x.data() + b, n, static_cast<uint32_t>(b), t, buf.p.get() + buf.size, maxbits);
  }
  return maxbits;
}

// Appends the candidates of x (|bits| >= t) to buf, in index order; returns
// the largest |bits|. Large slices are cut over the OpenMP team, each thread
// collecting its range into its own buffer, joined in range order: the same
// keys in the same order as one thread's pass.
uint32_t collect(std::span<const float> x, uint32_t t, KeyBuffer& buf, bool simd) {
  const CollectBlock k = collect_kernel(simd);
  if (!run_parallel(x.size())) return collect_range(x, 0, x.size(), t, buf, k);
  thread_local std::vector<KeyBuffer> parts_of_caller;
  // The caller's buffers, by pointer: inside the region a thread_local name
  // would be each team thread's own (empty) instance.
  KeyBuffer* const parts = (parts_of_caller.resize(static_cast<size_t>(omp_get_max_threads())), parts_of_caller.data());
  std::vector<uint32_t> maxes(parts_of_caller.size(), 0);
  int used = 0;
#pragma omp parallel
  {
    const size_t threads = static_cast<size_t>(omp_get_num_threads()), me = static_cast<size_t>(omp_get_thread_num());
    if (me == 0) used = static_cast<int>(threads);
    const size_t per = ((x.size() + threads - 1) / threads + 63) / 64 * 64;
    const size_t b = std::min(x.size(), me * per), e = std::min(x.size(), b + per);
    parts[me].size = 0;
    maxes[me] = collect_range(x, b, e, t, parts[me], k);
  }
  uint32_t maxbits = 0;
  for (int i = 0; i < used; ++i) {
    KeyBuffer& p = parts[static_cast<size_t>(i)];
    buf.ensure(buf.size + p.size);
    if (p.size) std::memcpy(buf.p.get() + buf.size, p.p.get(), p.size * sizeof(uint64_t));
    buf.size += p.size;
    maxbits = std::max(maxbits, maxes[static_cast<size_t>(i)]);
  }
  return maxbits;
}

struct SelectScratch {
  KeyBuffer cand;
  std::vector<uint64_t> tmp;
  std::vector<uint32_t> sample;
};

SelectScratch& scratch() {
  thread_local SelectScratch s;
  return s;
}

// The k-th largest of the m distinct keys c[0, m) (1 <= k <= m): a radix
// step on the magnitude bits picks the bucket holding it (a histogram of the
// top 12 significant bits of |g| between the smallest and largest candidate,
// one pass), and std::nth_element finds it among that bucket's keys only
// (about m / 4096 for a smooth distribution; all m at worst, as before). The
// result is the same key the whole nth_element gave: the order is the keys'.
uint64_t kth_largest_key(const uint64_t* c, size_t m, uint64_t k, SelectScratch& s) {
  constexpr uint32_t kBucketBits = 12;
  uint32_t lo = 0xFFFFFFFFu, hi = 0;
  for (size_t i = 0; i < m; ++i) {
    const uint32_t b = static_cast<uint32_t>(c[i] >> 32);
    lo = std::min(lo, b);
    hi = std::max(hi, b);
  }
  const uint32_t span_bits = static_cast<uint32_t>(std::bit_width(hi - lo));
  const uint32_t shift = span_bits > kBucketBits ? span_bits - kBucketBits : 0;
  uint32_t hist[(1u << kBucketBits) + 1] = {};
  for (size_t i = 0; i < m; ++i) ++hist[(static_cast<uint32_t>(c[i] >> 32) - lo) >> shift];
  uint32_t bucket = (hi - lo) >> shift;
  uint64_t above = 0;  // keys in buckets above `bucket`
  while (above + hist[bucket] < k) above += hist[bucket--];
  s.tmp.clear();
  for (size_t i = 0; i < m; ++i)
    if (((static_cast<uint32_t>(c[i] >> 32) - lo) >> shift) == bucket) s.tmp.push_back(c[i]);
  const uint64_t need = k - above;  // 1 <= need <= hist[bucket]
  std::nth_element(s.tmp.begin(), s.tmp.begin() + static_cast<ptrdiff_t>(need - 1), s.tmp.end(), std::greater<>());
  return s.tmp[need - 1];
}

constexpr size_t kSampleLines = 1024, kSampleRun = 16;
constexpr size_t kSampleFrom = 4 * kSampleLines * kSampleRun;  // smaller slices: every element is a candidate

}  // namespace

uint32_t topk_collect(std::span<const float> x, uint32_t t, std::vector<uint64_t>& out, bool simd) {
  if (x.size() > 0xFFFFFFFFu) throw std::invalid_argument("topk: a slice holds fewer than 2^32 elements");
  KeyBuffer buf;
  const uint32_t mx = collect(x, t, buf, simd);
  out.insert(out.end(), buf.p.get(), buf.p.get() + buf.size);
  return mx;
}

void topk_select(std::span<const float> x, uint64_t k, std::vector<uint32_t>& idx, bool simd) {
  const uint64_t n = x.size();
  idx.clear();
  if (n > 0xFFFFFFFFu)
    throw std::invalid_argument("topk encode: a slice of " + std::to_string(n) +
                                " elements; slices hold fewer than 2^32 elements");
  if (k > n || (k == 0 && n > 0))
    throw std::invalid_argument("topk encode: k = " + std::to_string(k) + " for " + std::to_string(n) + " elements");
  if (n == 0) return;
  SelectScratch& s = scratch();

  // Threshold from a sample: kSampleLines runs of kSampleRun consecutive
  // elements (a cache line each), run i starting near i * n / kSampleLines.
  // The sample's rank-r magnitude (descending), r a little above
  // k/n * sample size, leaves somewhat more than k candidates.
  size_t rank = 0;  // a rank >= the sample size means t = 0
  s.sample.clear();
  if (k < n && n >= kSampleFrom) {
    const uint64_t stride = n / kSampleLines;  // >= 4 * kSampleRun
    for (uint64_t i = 0; i < kSampleLines; ++i) {
      const uint64_t jitter = (((i * 0x9E3779B97F4A7C15ull) >> 32) % (stride - kSampleRun)) & ~uint64_t{15};
      const float* run = x.data() + i * stride + jitter;
      for (size_t j = 0; j < kSampleRun; ++j) s.sample.push_back(abs_bits(run[j]));
    }
    const double q = static_cast<double>(k) / static_cast<double>(n) * static_cast<double>(s.sample.size());
    rank = static_cast<size_t>(1.1 * q + 3.0 * std::sqrt(q) + 4.0);
  } else {
    rank = kSampleLines * kSampleRun;
  }
  for (;;) {
    uint32_t t = 0;
    if (rank < s.sample.size()) {
      std::nth_element(s.sample.begin(), s.sample.begin() + static_cast<ptrdiff_t>(rank), s.sample.end(),
                       std::greater<>());
      t = s.sample[rank];
    }
    s.cand.size = 0;
    const uint32_t maxbits = collect(x, t, s.cand, simd);
    if (maxbits >= kInfBits) throw std::invalid_argument("topk encode: the gradient holds a NaN or Inf");
    if (s.cand.size >= k) break;
    if (t == 0) throw std::logic_error("topk encode: fewer than k candidates at threshold 0");  // unreachable
    rank = rank * 4 + 64;
  }

  const uint64_t* c = s.cand.p.get();
  const size_t m = s.cand.size;
  idx.reserve(k);
  if (m == k) {
    for (size_t i = 0; i < m; ++i) idx.push_back(0xFFFFFFFFu - static_cast<uint32_t>(c[i]));
    return;
  }
  // The k-th largest key (keys are distinct: the index is part of them); the
  // candidates are in index order, so filtering keeps the indices ascending.
  const uint64_t kth = kth_largest_key(c, m, k, s);
  for (size_t i = 0; i < m; ++i)
    if (c[i] >= kth) idx.push_back(0xFFFFFFFFu - static_cast<uint32_t>(c[i]));
}

namespace {

// ---- payload -------------------------------------------------------------------

constexpr uint32_t kTopKMagicLe32 = 0x4B544754u;  // "TGTK"
constexpr uint8_t kTopKVersion = 1;
constexpr size_t kHeaderBytes = 32;
constexpr size_t kMagicOffset = 0, kVersionOffset = 4, kTypeOffset = 5, kLowBitsOffset = 6, kReserved1Offset = 7,
                 kCountOffset = 8, kKOffset = 16, kReserved4Offset = 24, kCrcOffset = 28;

uint8_t type_code(SparseValues v) { return v == SparseValues::kFloat32 ? 32 : 16; }
size_t value_bytes(SparseValues v) { return v == SparseValues::kFloat32 ? 4 : 2; }

class TopKCodec final : public GradientCodec {
 public:
  explicit TopKCodec(const TopKParams& params) : params_(params) {
    if (!(params.ratio > 0.0f && params.ratio <= 1.0f))
      throw std::invalid_argument("codec \"topk\": ratio must be in (0, 1], got " + std::to_string(params.ratio));
    if (params.values != SparseValues::kFloat32 && params.values != SparseValues::kFloat16)
      throw std::invalid_argument("codec \"topk\": unknown value type");
  }

  std::string spec() const override { return to_spec(config()); }
  CodecConfig config() const override { return {params_, std::nullopt}; }

  size_t payload_bytes(uint64_t n) const override {
    if (n > (uint64_t{1} << 60))  // keeps every size below computable without overflow
      throw std::invalid_argument("topk payload_bytes: element count " + std::to_string(n) +
                                  " is too large for one payload");
    const uint64_t k = sparse_k(n, params_.ratio);
    return kHeaderBytes + static_cast<size_t>(k * value_bytes(params_.values) + elias_fano_bytes(n, k));
  }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    (void)ctx;  // deterministic: a pure function of the values
    check_slices("topk", grad.size(), slices, outs, *this);
    for (size_t s = 0; s < slices.size(); ++s) {
      const uint64_t count = slices[s].count, k = sparse_k(count, params_.ratio);
      const std::span<const float> x = grad.subspan(slices[s].begin, count);
      topk_select(x, k, idx_);
      uint8_t* p = outs[s].data();
      quantize::store_le32(p + kMagicOffset, kTopKMagicLe32);
      p[kVersionOffset] = kTopKVersion;
      p[kTypeOffset] = type_code(params_.values);
      p[kLowBitsOffset] = static_cast<uint8_t>(elias_fano_low_bits(count, k));
      p[kReserved1Offset] = 0;
      quantize::store_le64(p + kCountOffset, count);
      quantize::store_le64(p + kKOffset, k);
      quantize::store_le32(p + kReserved4Offset, 0);
      quantize::store_le32(p + kCrcOffset, quantize::crc32_ieee(p, kCrcOffset));
      values_.resize(k);
      // The values, in index order: a gather over the slice (one cache line
      // each at 1%), prefetched 32 ahead so the misses overlap.
      for (uint64_t i = 0; i < k; ++i) {
        if (i + 32 < k) __builtin_prefetch(x.data() + idx_[i + 32]);
        values_[i] = x[idx_[i]];
      }
      uint8_t* body = p + kHeaderBytes;
      if (params_.values == SparseValues::kFloat32) {
        for (uint64_t i = 0; i < k; ++i) quantize::store_le32(body + 4 * i, std::bit_cast<uint32_t>(values_[i]));
      } else {
        quantize::fp16::encode(values_.data(), k, body);
      }
      elias_fano_encode(idx_, count, body + k * value_bytes(params_.values));
    }
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    std::vector<uint64_t> pos;
    std::vector<float> vals;
    parse(payload, out.size(), "decode", pos, vals);
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t i = 0; i < pos.size(); ++i) out[pos[i]] = vals[i];
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    std::vector<uint64_t> pos;
    std::vector<float> vals;
    parse(payload, out.size(), "decode", pos, vals);
    for (size_t i = 0; i < pos.size(); ++i) out[pos[i]] += vals[i];
  }

  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    std::vector<uint64_t> pos;
    std::vector<float> vals;
    parse(payload, n, "validate", pos, vals);
  }

 private:
  // Checks everything about a payload of n elements and leaves its indices in
  // pos and its values in vals; throws naming the problem (before the caller
  // writes anything). Const and free of shared state: servers validate
  // concurrently.
  void parse(std::span<const uint8_t> payload, uint64_t n, const char* op, std::vector<uint64_t>& pos,
             std::vector<float>& vals) const {
    const std::string pre = std::string("topk ") + op + ": ";
    auto bad = [&](const std::string& what) { throw std::runtime_error(pre + what); };
    if (payload.size() < kHeaderBytes)
      bad("payload has " + std::to_string(payload.size()) + " bytes, less than the 32-byte header");
    const uint8_t* p = payload.data();
    if (quantize::load_le32(p + kMagicOffset) != kTopKMagicLe32) bad("bad magic (expected \"TGTK\")");
    if (p[kVersionOffset] != kTopKVersion)
      bad("unsupported version " + std::to_string(p[kVersionOffset]) + " (expected 1)");
    if (p[kTypeOffset] != type_code(params_.values))
      bad("value type " + std::to_string(p[kTypeOffset]) + ", this codec decodes type " +
          std::to_string(type_code(params_.values)));
    if (p[kReserved1Offset] != 0 || quantize::load_le32(p + kReserved4Offset) != 0)
      bad("reserved header bytes are not zero");
    if (quantize::load_le32(p + kCrcOffset) != quantize::crc32_ieee(p, kCrcOffset)) bad("header CRC mismatch");
    const uint64_t count = quantize::load_le64(p + kCountOffset), k = quantize::load_le64(p + kKOffset);
    if (count != n)
      throw std::invalid_argument(pre + "payload holds " + std::to_string(count) + " elements, expected " +
                                  std::to_string(n));
    if (k != sparse_k(count, params_.ratio))
      bad("k = " + std::to_string(k) + ", but ratio " + std::to_string(params_.ratio) + " gives k = " +
          std::to_string(sparse_k(count, params_.ratio)) + " for " + std::to_string(count) + " elements");
    if (p[kLowBitsOffset] != elias_fano_low_bits(count, k))
      bad("low bit width " + std::to_string(p[kLowBitsOffset]) + ", expected " +
          std::to_string(elias_fano_low_bits(count, k)));
    const size_t need = payload_bytes(count);
    if (payload.size() != need)
      bad("payload has " + std::to_string(payload.size()) + " bytes, " + std::to_string(count) + " elements with k = " +
          std::to_string(k) + " take " + std::to_string(need));
    const uint8_t* body = p + kHeaderBytes;
    vals.resize(k);
    if (params_.values == SparseValues::kFloat32) {
      for (uint64_t i = 0; i < k; ++i) vals[i] = std::bit_cast<float>(quantize::load_le32(body + 4 * i));
    } else {
      quantize::fp16::decode(body, k, vals.data());
    }
    for (uint64_t i = 0; i < k; ++i)
      if (!std::isfinite(vals[i])) bad("value " + std::to_string(i) + " is NaN or Inf");
    const std::string err = elias_fano_decode(body + k * value_bytes(params_.values), count, k, pos);
    if (!err.empty()) bad("indices: " + err);
  }

  TopKParams params_;
  std::vector<uint32_t> idx_;
  std::vector<float> values_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_topk_codec(const TopKParams& params) {
  return std::make_unique<TopKCodec>(params);
}

}  // namespace terngrad::comm::detail
