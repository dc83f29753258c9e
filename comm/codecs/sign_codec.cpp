// "sign[:scale=none|mean][,vote=counts|sign]": 1 bit per element (signSGD,
// Bernstein et al. 2018; with scale=mean, 1-bit SGD with a scale / under
// ef() EF-signSGD). Payload formats: comm/codecs/FORMATS.md, "## sign".
//
// The bit of element g is 1 when g < 0 (so +0, -0 and positive values send
// +1, as codec_config.h says: the sign of 0 is +1). NaN is refused at encode
// (std::invalid_argument naming the element); with scale=mean so is +-Inf
// (the mean would be infinite).
//
// scale=mean: the scale is mean|g| over the WHOLE variable (float64 sum in a
// fixed lane order, FORMATS.md), so every slice carries the same scale and
// slicing does not change the decoding. Aggregate: the default float32 sum.
//
// scale=none: the server counts votes without decoding (sums_without_decoding):
//   vote=counts  per element the number k of +1 votes among the R payloads,
//                in bit_width(R) bits; decodes to the sum 2k - R.
//   vote=sign    the majority: 1 bit when R is odd (no ties), 2 bits
//                (+1 / -1 / tie 0) when R is even; decodes to R * sign(sum),
//                so the trainer's division by R gives the vote itself.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "builtin_codecs.h"
#include "parallel_ranges.h"
#include "slices.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/format.h"

namespace terngrad::comm::detail {

namespace {

namespace tq = terngrad::quantize;

constexpr uint32_t kSignMagicLe32 = 0x47534754u;  // "TGSG"
constexpr uint8_t kSignVersion = 1;
constexpr size_t kHdr = 28;
constexpr size_t kOffMagic = 0, kOffVersion = 4, kOffKind = 5, kOffBits = 6, kOffReserved = 7, kOffCount = 8,
                 kOffScale = 16, kOffVoters = 20, kOffCrc = 24;
constexpr uint32_t kMaxVoters = 32767;

enum Kind : uint8_t { kSigns = 1, kScaledSigns = 2, kCounts = 3, kVote1 = 4, kVote2 = 5 };

const char* kind_name(uint8_t k) {
  switch (k) {
    case kSigns: return "signs";
    case kScaledSigns: return "scaled signs";
    case kCounts: return "vote counts";
    case kVote1: return "1-bit vote";
    case kVote2: return "2-bit vote";
    default: return "unknown";
  }
}

uint32_t kind_bits(uint8_t kind, uint32_t voters) {
  switch (kind) {
    case kCounts: return static_cast<uint32_t>(std::bit_width(voters));
    case kVote2: return 2;
    default: return 1;
  }
}

size_t sign_payload_bytes(uint64_t n, uint32_t bits) {
  if (n > std::numeric_limits<uint64_t>::max() / 32)
    throw std::invalid_argument("sign payload_bytes: element count " + std::to_string(n) + " is too large");
  return kHdr + static_cast<size_t>((n * bits + 7) / 8);
}

void write_header(uint8_t* h, uint8_t kind, uint64_t n, float scale, uint32_t voters) {
  tq::store_le32(h + kOffMagic, kSignMagicLe32);
  h[kOffVersion] = kSignVersion;
  h[kOffKind] = kind;
  h[kOffBits] = static_cast<uint8_t>(kind_bits(kind, voters));
  h[kOffReserved] = 0;
  tq::store_le64(h + kOffCount, n);
  tq::store_le32(h + kOffScale, std::bit_cast<uint32_t>(scale));
  tq::store_le32(h + kOffVoters, voters);
  tq::store_le32(h + kOffCrc, tq::crc32_ieee(h, kOffCrc));
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

struct Header {
  uint8_t kind;
  uint32_t bits, voters;
  uint64_t n;
  float scale;
  const uint8_t* body;
};

uint32_t read_field(const uint8_t* body, uint64_t e, uint32_t w) {
  const uint64_t bit = e * w;
  const uint8_t* p = body + (bit >> 3);
  const uint32_t s = static_cast<uint32_t>(bit & 7), need = (s + w + 7) / 8;
  uint32_t v = p[0];
  if (need > 1) v |= static_cast<uint32_t>(p[1]) << 8;
  if (need > 2) v |= static_cast<uint32_t>(p[2]) << 16;
  return (v >> s) & ((1u << w) - 1);
}

// Every check of FORMATS.md "A decoder rejects" for a payload whose kind is
// one of `kinds`, before anything is written. Returns the parsed header.
Header check(std::span<const uint8_t> payload, std::initializer_list<uint8_t> kinds, uint64_t expect_n,
             const std::string& pre) {
  if (payload.size() < kHdr)
    throw std::runtime_error(pre + "payload has " + std::to_string(payload.size()) + " bytes, less than the " +
                             std::to_string(kHdr) + "-byte header");
  const uint8_t* h = payload.data();
  if (const uint32_t m = tq::load_le32(h + kOffMagic); m != kSignMagicLe32)
    throw std::runtime_error(pre + "bad magic " + hex32(m) + " (expected " + hex32(kSignMagicLe32) + ", \"TGSG\")");
  if (h[kOffVersion] != kSignVersion)
    throw std::runtime_error(pre + "unsupported version " + std::to_string(h[kOffVersion]));
  if (const uint32_t crc = tq::crc32_ieee(h, kOffCrc), got = tq::load_le32(h + kOffCrc); crc != got)
    throw std::runtime_error(pre + "header CRC " + hex32(got) + " does not match the header (" + hex32(crc) + ")");
  Header r{h[kOffKind], h[kOffBits], tq::load_le32(h + kOffVoters), tq::load_le64(h + kOffCount),
           std::bit_cast<float>(tq::load_le32(h + kOffScale)), h + kHdr};
  if (std::find(kinds.begin(), kinds.end(), r.kind) == kinds.end()) {
    std::string want;
    for (uint8_t k : kinds) want += (want.empty() ? "" : ", ") + std::string(kind_name(k));
    throw std::runtime_error(pre + "payload kind " + std::to_string(r.kind) + " (" + kind_name(r.kind) +
                             "), expected " + want);
  }
  if (h[kOffReserved] != 0) throw std::runtime_error(pre + "reserved header byte 7 is nonzero");
  const bool agg = r.kind >= kCounts;
  if (agg ? (r.voters < 1 || r.voters > kMaxVoters) : r.voters != 0)
    throw std::runtime_error(pre + "contributions field " + std::to_string(r.voters) +
                             (agg ? " is outside 1.." + std::to_string(kMaxVoters) : " must be 0 in a worker payload"));
  if (r.kind == kVote1 && r.voters % 2 == 0)
    throw std::runtime_error(pre + "1-bit vote of an even number of payloads (" + std::to_string(r.voters) +
                             "): ties need the 2-bit vote");
  if (r.kind == kVote2 && r.voters % 2 != 0)
    throw std::runtime_error(pre + "2-bit vote of an odd number of payloads (" + std::to_string(r.voters) + ")");
  if (r.bits != kind_bits(r.kind, r.voters))
    throw std::runtime_error(pre + "bits per element " + std::to_string(r.bits) + ", a " + kind_name(r.kind) +
                             " payload has " + std::to_string(kind_bits(r.kind, r.voters)));
  const uint32_t sbits = tq::load_le32(h + kOffScale);
  if (r.kind == kScaledSigns ? (!std::isfinite(r.scale) || (sbits >> 31) != 0) : sbits != 0)
    throw std::runtime_error(pre + "scale " + hex32(sbits) +
                             (r.kind == kScaledSigns ? " is not a finite nonnegative float32" : " must be 0"));
  if (r.n > (uint64_t{1} << 56) || payload.size() != sign_payload_bytes(r.n, r.bits))
    throw std::runtime_error(pre + "payload has " + std::to_string(payload.size()) + " bytes, " +
                             std::to_string(r.n) + " elements of " + std::to_string(r.bits) + " bits take exactly " +
                             (r.n > (uint64_t{1} << 56) ? std::string("more") : std::to_string(sign_payload_bytes(r.n, r.bits))));
  if (r.n != expect_n)
    throw std::invalid_argument(pre + "output has " + std::to_string(expect_n) + " elements, payload has " +
                                std::to_string(r.n));
  const uint64_t used = r.n * r.bits;
  if (used % 8 != 0 && (r.body[used / 8] >> (used % 8)) != 0)
    throw std::runtime_error(pre + "nonzero padding bits in the last body byte");
  if (r.kind == kCounts || r.kind == kVote2) {
    const uint32_t limit = r.kind == kCounts ? r.voters : 2;
    for (uint64_t e = 0; e < r.n; ++e)
      if (const uint32_t f = read_field(r.body, e, r.bits); f > limit)
        throw std::runtime_error(pre + "element " + std::to_string(e) + " holds " + std::to_string(f) +
                                 (r.kind == kCounts ? ", more votes than the " + std::to_string(r.voters) + " payloads"
                                                    : " (the reserved code 11)"));
  }
  return r;
}

inline void store_le16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline uint16_t load_le16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// ---------------------------------------------------------------- kernels
// Each pass has a portable loop (the reference) and AVX2 / AVX-512 copies
// picked by quantize::cpu_simd_level() (TG_CPU_SIMD forces a level), as in
// qsgd_codec.cpp. tests/comm/sign_codec_test.cpp checks every level's bytes
// and decodes against a scalar reference written from FORMATS.md, with one
// thread and several (tests/comm/threaded_encode_test.cpp).

// FORMATS.md's scale=mean sum: |g| in float64, element i into lane i % 16
// (absolute index), in index order. The lanes are 16 sequential folds, so
// the sum cannot be split over threads without changing its rounding; the
// SIMD copies keep each lane's order (one float64 lane per lane) and give
// the same bits.
struct AbsLanes {
  double lane[16] = {};
};

void abs_lanes_portable(const float* g, size_t n, AbsLanes& a) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; ++l) a.lane[l] += std::fabs(static_cast<double>(g[i + l]));
  for (int l = 0; i + l < n; ++l) a.lane[l] += std::fabs(static_cast<double>(g[i + l]));
}

// Bits g < 0 of n elements, 8 per byte, first element in the least
// significant bit; the last byte's unused bits are 0.
void pack_signs_portable(const float* g, uint64_t n, uint8_t* body) {
  const uint64_t full = n / 8;
  for (uint64_t b = 0; b < full; ++b) {
    uint32_t v = 0;
    for (int j = 0; j < 8; ++j) v |= static_cast<uint32_t>(g[8 * b + j] < 0.0f) << j;
    body[b] = static_cast<uint8_t>(v);
  }
  if (n % 8 != 0) {
    uint32_t v = 0;
    for (uint64_t j = 0; j < n % 8; ++j) v |= static_cast<uint32_t>(g[8 * full + j] < 0.0f) << j;
    body[full] = static_cast<uint8_t>(v);
  }
}

// Elements [0, n) of a body whose element 0 is bit 0 of body[0]:
// out = (bit ? -s : s), or out += that.
void decode_signs_portable(const uint8_t* body, uint64_t n, float s, bool accumulate, float* out) {
  for (uint64_t e = 0; e < n; ++e) {
    const float v = (body[e / 8] >> (e % 8)) & 1 ? -s : s;
    if (accumulate)
      out[e] += v;
    else
      out[e] = v;
  }
}

// The largest |bits| of g (a NaN is any value above +Inf's 0x7F800000).
uint32_t max_abs_bits_portable(const float* g, size_t n) {
  uint32_t m = 0;  // an unsigned max reduction vectorizes
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::bit_cast<uint32_t>(g[i]) & 0x7FFFFFFFu);
  return m;
}

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics start from a self-initialized "undefined"
// vector (avx512fintrin.h), which -Wuninitialized reports once inlined.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define TG_SIGN_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl")))
#define TG_SIGN_AVX2 __attribute__((target("avx2,fma,bmi2")))

TG_SIGN_AVX512 void abs_lanes_avx512(const float* g, size_t n, AbsLanes& a) {
  const __m512d signbit = _mm512_set1_pd(-0.0);
  __m512d lo = _mm512_loadu_pd(a.lane), hi = _mm512_loadu_pd(a.lane + 8);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(g + i);
    lo = _mm512_add_pd(lo, _mm512_andnot_pd(signbit, _mm512_cvtps_pd(_mm512_castps512_ps256(v))));
    hi = _mm512_add_pd(hi, _mm512_andnot_pd(signbit, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)))));
  }
  _mm512_storeu_pd(a.lane, lo);
  _mm512_storeu_pd(a.lane + 8, hi);
  abs_lanes_portable(g + i, n - i, a);  // i is a multiple of 16: the tail's lanes start at 0
}

TG_SIGN_AVX2 void abs_lanes_avx2(const float* g, size_t n, AbsLanes& a) {
  const __m256d signbit = _mm256_set1_pd(-0.0);
  __m256d l0 = _mm256_loadu_pd(a.lane), l1 = _mm256_loadu_pd(a.lane + 4), l2 = _mm256_loadu_pd(a.lane + 8),
          l3 = _mm256_loadu_pd(a.lane + 12);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    l0 = _mm256_add_pd(l0, _mm256_andnot_pd(signbit, _mm256_cvtps_pd(_mm_loadu_ps(g + i))));
    l1 = _mm256_add_pd(l1, _mm256_andnot_pd(signbit, _mm256_cvtps_pd(_mm_loadu_ps(g + i + 4))));
    l2 = _mm256_add_pd(l2, _mm256_andnot_pd(signbit, _mm256_cvtps_pd(_mm_loadu_ps(g + i + 8))));
    l3 = _mm256_add_pd(l3, _mm256_andnot_pd(signbit, _mm256_cvtps_pd(_mm_loadu_ps(g + i + 12))));
  }
  _mm256_storeu_pd(a.lane, l0);
  _mm256_storeu_pd(a.lane + 4, l1);
  _mm256_storeu_pd(a.lane + 8, l2);
  _mm256_storeu_pd(a.lane + 12, l3);
  abs_lanes_portable(g + i, n - i, a);
}

// A less-than compare gives the bits directly: 16 (AVX-512) or 8 (AVX2) per
// vector, element order = bit order. _CMP_LT_OQ is false for NaN, -0 and +0,
// as g < 0.0f is.
TG_SIGN_AVX512 void pack_signs_avx512(const float* g, uint64_t n, uint8_t* body) {
  const __m512 zero = _mm512_setzero_ps();
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint16_t m = static_cast<uint16_t>(_mm512_cmp_ps_mask(_mm512_loadu_ps(g + i), zero, _CMP_LT_OQ));
    store_le16(body + i / 8, m);
  }
  pack_signs_portable(g + i, n - i, body + i / 8);
}

TG_SIGN_AVX2 void pack_signs_avx2(const float* g, uint64_t n, uint8_t* body) {
  const __m256 zero = _mm256_setzero_ps();
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8)
    body[i / 8] = static_cast<uint8_t>(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(g + i), zero, _CMP_LT_OQ)));
  pack_signs_portable(g + i, n - i, body + i / 8);
}

TG_SIGN_AVX512 void decode_signs_avx512(const uint8_t* body, uint64_t n, float s, bool accumulate, float* out) {
  const __m512 pos = _mm512_set1_ps(s), neg = _mm512_set1_ps(-s);
  uint64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_mask_blend_ps(static_cast<__mmask16>(load_le16(body + i / 8)), pos, neg);
    _mm512_storeu_ps(out + i, accumulate ? _mm512_add_ps(_mm512_loadu_ps(out + i), v) : v);
  }
  decode_signs_portable(body + i / 8, n - i, s, accumulate, out + i);
}

TG_SIGN_AVX2 void decode_signs_avx2(const uint8_t* body, uint64_t n, float s, bool accumulate, float* out) {
  const __m256 pos = _mm256_set1_ps(s), neg = _mm256_set1_ps(-s);
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i b = _mm256_and_si256(_mm256_set1_epi32(body[i / 8]), bit);
    const __m256 m = _mm256_castsi256_ps(_mm256_cmpeq_epi32(b, bit));
    const __m256 v = _mm256_blendv_ps(pos, neg, m);
    _mm256_storeu_ps(out + i, accumulate ? _mm256_add_ps(_mm256_loadu_ps(out + i), v) : v);
  }
  decode_signs_portable(body + i / 8, n - i, s, accumulate, out + i);
}

TG_SIGN_AVX512 uint32_t max_abs_bits_avx512(const float* g, size_t n) { return max_abs_bits_portable(g, n); }
TG_SIGN_AVX2 uint32_t max_abs_bits_avx2(const float* g, size_t n) { return max_abs_bits_portable(g, n); }
#pragma GCC diagnostic pop
#endif

struct Kernels {
  void (*abs_lanes)(const float*, size_t, AbsLanes&);
  void (*pack_signs)(const float*, uint64_t, uint8_t*);
  void (*decode_signs)(const uint8_t*, uint64_t, float, bool, float*);
  uint32_t (*max_abs_bits)(const float*, size_t);
};

const Kernels& kernels() {
  static constexpr Kernels kPortable{abs_lanes_portable, pack_signs_portable, decode_signs_portable,
                                     max_abs_bits_portable};
#if defined(__x86_64__)
  static constexpr Kernels kAvx512{abs_lanes_avx512, pack_signs_avx512, decode_signs_avx512, max_abs_bits_avx512};
  static constexpr Kernels kAvx2{abs_lanes_avx2, pack_signs_avx2, decode_signs_avx2, max_abs_bits_avx2};
  switch (tq::cpu_simd_level()) {
    case tq::SimdLevel::kAvx512: return kAvx512;
    case tq::SimdLevel::kAvx2: return kAvx2;
    default: break;
  }
#endif
  return kPortable;
}

// ---------------------------------------------------------------- passes

// mean|g| as FORMATS.md defines it, from the folded lanes; nullopt when the
// sum is not finite (a NaN or Inf in g: the caller names the element).
std::optional<float> mean_abs(const Kernels& k, std::span<const float> g) {
  if (g.empty()) return 0.0f;
  AbsLanes a;
  k.abs_lanes(g.data(), g.size(), a);
  for (int o = 8; o >= 1; o /= 2)
    for (int l = 0; l < o; ++l) a.lane[l] += a.lane[l + o];
  if (!std::isfinite(a.lane[0])) return std::nullopt;
  return static_cast<float>(a.lane[0] / static_cast<double>(g.size()));
}

[[noreturn]] void throw_non_finite(std::span<const float> g) {
  for (size_t j = 0; j < g.size(); ++j)
    if (!std::isfinite(g[j]))
      throw std::invalid_argument("sign encode: element " + std::to_string(j) + " is " +
                                  (std::isnan(g[j]) ? "NaN" : "infinite") + " (scale=mean needs finite values)");
  throw std::logic_error("sign encode: non-finite mean without a non-finite element");
}

void check_no_nan(const Kernels& k, std::span<const float> g, uint64_t offset) {
  const float* x = g.data();
  uint32_t max_bits = 0;
  if (!run_parallel(g.size())) {
    max_bits = k.max_abs_bits(x, g.size());
  } else {
#pragma omp parallel for reduction(max : max_bits) schedule(static)
    for (int64_t c = 0; c < 64; ++c) {
      const uint64_t b = g.size() * static_cast<uint64_t>(c) / 64, e = g.size() * static_cast<uint64_t>(c + 1) / 64;
      max_bits = std::max(max_bits, k.max_abs_bits(x + b, e - b));
    }
  }
  if (max_bits <= 0x7F800000u) return;
  for (size_t j = 0; j < g.size(); ++j)
    if (std::isnan(g[j])) throw std::invalid_argument("sign encode: element " + std::to_string(offset + j) + " is NaN");
}

// Packs the signs of every slice on `workers` threads, this one being worker
// w: each slice cut at multiples of 8 elements (whole bytes), so the bytes do
// not depend on the cut.
void pack_share(const Kernels& k, std::span<const float> grad, std::span<const ElementRange> slices,
                std::span<const std::span<uint8_t>> outs, uint64_t workers, uint64_t w) {
  for (size_t i = 0; i < slices.size(); ++i) {
    const uint64_t n = slices[i].count, per = ((n + workers - 1) / workers + 7) / 8 * 8;
    const uint64_t b = std::min(n, w * per), e = std::min(n, b + per);
    if (b < e) k.pack_signs(grad.data() + slices[i].begin + b, e - b, outs[i].data() + kHdr + b / 8);
  }
}

class SignCodec final : public GradientCodec {
 public:
  explicit SignCodec(const SignParams& p) : params_(p), mean_(p.scale == SignScale::kMean) {}

  std::string spec() const override { return to_spec(config()); }
  CodecConfig config() const override { return {params_, std::nullopt}; }
  bool sums_without_decoding() const override { return !mean_; }
  size_t payload_bytes(uint64_t n) const override { return sign_payload_bytes(n, 1); }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    (void)ctx;  // deterministic
    check_slices("sign", grad.size(), slices, outs, *this);
    const Kernels& k = kernels();
    float scale = 0.0f;
    if (!mean_) {
      for (const ElementRange& r : slices) check_no_nan(k, grad.subspan(r.begin, r.count), r.begin);
      pack_all(k, grad, slices, outs);
    } else if (!run_parallel(grad.size())) {
      const std::optional<float> m = mean_abs(k, grad);
      if (!m) throw_non_finite(grad);
      scale = *m;
      for (size_t i = 0; i < slices.size(); ++i)
        k.pack_signs(grad.data() + slices[i].begin, slices[i].count, outs[i].data() + kHdr);
    } else {
      // The mean is one sequential fold (see AbsLanes): one thread folds
      // while the others pack the signs, which do not depend on it.
      std::optional<float> m;
#pragma omp parallel
      {
        const uint64_t threads = static_cast<uint64_t>(omp_get_num_threads());
        const uint64_t t = static_cast<uint64_t>(omp_get_thread_num());
        if (t == 0) m = mean_abs(k, grad);
        if (threads == 1) pack_share(k, grad, slices, outs, 1, 0);
        else if (t > 0) pack_share(k, grad, slices, outs, threads - 1, t - 1);
      }
      if (!m) throw_non_finite(grad);
      scale = *m;
    }
    for (size_t i = 0; i < slices.size(); ++i)
      write_header(outs[i].data(), mean_ ? kScaledSigns : kSigns, slices[i].count, scale, 0);
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override { decode_impl(payload, out, false); }
  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    decode_impl(payload, out, true);
  }
  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    check(payload, {own_kind()}, n, "sign validate: ");
  }

  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (mean_) return GradientCodec::aggregate(payloads, n, out);
    if (payloads.empty()) throw std::invalid_argument("sign aggregate: no payloads to sum");
    if (payloads.size() > kMaxVoters)
      throw std::invalid_argument("sign aggregate: " + std::to_string(payloads.size()) + " payloads, at most " +
                                  std::to_string(kMaxVoters));
    std::vector<const uint8_t*> bodies;
    for (const auto& p : payloads) bodies.push_back(check(p, {kSigns}, n, "sign aggregate: ").body);
    const uint32_t R = static_cast<uint32_t>(payloads.size());
    const uint8_t kind = params_.vote == SignVote::kCounts ? kCounts : R % 2 ? kVote1 : kVote2;
    const uint32_t w = kind_bits(kind, R);
    out.assign(sign_payload_bytes(n, w), 0);
    write_header(out.data(), kind, n, 0.0f, R);
    uint8_t* body = out.data() + kHdr;
    // Positive votes per element, a block of 4096 elements at a time.
    constexpr uint64_t kBlock = 4096;
    std::vector<uint16_t> k(kBlock);
    uint64_t acc = 0;
    uint32_t nbits = 0;
    uint8_t* wp = body;
    for (uint64_t e0 = 0; e0 < n; e0 += kBlock) {
      const uint64_t len = std::min(kBlock, n - e0);
      std::fill(k.begin(), k.end(), static_cast<uint16_t>(R));
      for (const uint8_t* b : bodies)
        for (uint64_t e = 0; e < len; ++e) k[e] -= (b[(e0 + e) / 8] >> ((e0 + e) % 8)) & 1;  // e0 is a multiple of 8
      for (uint64_t e = 0; e < len; ++e) {
        uint32_t f;
        if (kind == kCounts)
          f = k[e];
        else if (kind == kVote1)
          f = 2u * k[e] < R ? 1u : 0u;  // 1: the majority is negative
        else
          f = 2u * k[e] > R ? 1u : 2u * k[e] < R ? 2u : 0u;
        acc |= static_cast<uint64_t>(f) << nbits;
        nbits += w;
        if (nbits >= 32) {
          tq::store_le32(wp, static_cast<uint32_t>(acc));
          wp += 4;
          acc >>= 32;
          nbits -= 32;
        }
      }
    }
    for (; nbits > 0; nbits = nbits >= 8 ? nbits - 8 : 0, acc >>= 8) *wp++ = static_cast<uint8_t>(acc);
  }

  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    if (mean_) return GradientCodec::decode_aggregate(aggregate, out);
    const Header h = check(aggregate, {kCounts, kVote1, kVote2}, out.size(), "sign decode_aggregate: ");
    const float R = static_cast<float>(h.voters);
    for (uint64_t e = 0; e < h.n; ++e) {
      const uint32_t f = read_field(h.body, e, h.bits);
      if (h.kind == kCounts)
        out[e] = static_cast<float>(2 * static_cast<int32_t>(f) - static_cast<int32_t>(h.voters));
      else if (h.kind == kVote1)
        out[e] = f ? -R : R;
      else
        out[e] = f == 1 ? R : f == 2 ? -R : 0.0f;
    }
  }

 private:
  uint8_t own_kind() const { return mean_ ? kScaledSigns : kSigns; }

  void decode_impl(std::span<const uint8_t> payload, std::span<float> out, bool accumulate) const {
    const Header h = check(payload, {own_kind()}, out.size(),
                           std::string("sign ") + (accumulate ? "decode_accumulate: " : "decode: "));
    const float s = mean_ ? h.scale : 1.0f;
    const Kernels& k = kernels();
    float* o = out.data();
    for_each_range(h.n, 16, [&](uint64_t b, uint64_t e) { k.decode_signs(h.body + b / 8, e - b, s, accumulate, o + b); });
  }

  static void pack_all(const Kernels& k, std::span<const float> grad, std::span<const ElementRange> slices,
                       std::span<const std::span<uint8_t>> outs) {
    for (size_t i = 0; i < slices.size(); ++i) {
      const float* g = grad.data() + slices[i].begin;
      uint8_t* body = outs[i].data() + kHdr;
      for_each_range(slices[i].count, 8, [&](uint64_t b, uint64_t e) { k.pack_signs(g + b, e - b, body + b / 8); });
    }
  }

  SignParams params_;
  bool mean_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_sign_codec(const SignParams& params) {
  return std::make_unique<SignCodec>(params);
}

}  // namespace terngrad::comm::detail
