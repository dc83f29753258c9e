// Encode pass: stochastic ternarization fused with 2-bit packing.
#include <immintrin.h>

#include <algorithm>
#include <string>

#include "cpu_kernels.h"
#include "messages.h"
#include "terngrad/quantize/codec.h"

namespace terngrad::quantize {
namespace detail {

void encode_bytes_portable(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                           const TernaryQuantizer& q, const RngStream& rng, uint8_t* body) {
  for (uint64_t k = k_begin; k < k_end; ++k) {
    const uint64_t e = 4 * k;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // absent elements encode as zero padding
    for (uint64_t j = 0; j < 4 && e + j < n; ++j) v[j] = x[e + j];
    body[k] = encode_byte(v[0], v[1], v[2], v[3], q, rng, k);
  }
}

namespace {

// 16 Philox4x32-10 blocks at once, lane l = block k0 + l. Requires the low
// counter words k0 .. k0+15 not to wrap (the caller checks).
struct Philox16 {
  __m512i w[4];
};

__attribute__((target("avx512f"))) inline void mulhilo16(__m512i a, __m512i m, __m512i& hi,
                                                         __m512i& lo) {
  // vpmuludq multiplies the even 32-bit lanes; the odd lanes go through a shift.
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
  hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
  lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

__attribute__((target("avx512f"))) inline Philox16 philox16(uint64_t k0, const RngStream& rng) {
  using namespace philox_constants;
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(k0))), iota);
  __m512i c1 = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(k0 >> 32)));
  __m512i c2 = _mm512_set1_epi32(static_cast<int>(rng.step));
  __m512i c3 = _mm512_set1_epi32(static_cast<int>(rng.tensor_id));
  uint32_t key0 = static_cast<uint32_t>(rng.seed);
  uint32_t key1 = static_cast<uint32_t>(rng.seed >> 32);
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kMul0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kMul1));
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    __m512i hi0, lo0, hi1, lo1;
    mulhilo16(c0, m0, hi0, lo0);
    mulhilo16(c2, m1, hi1, lo1);
    const __m512i n0 = _mm512_xor_si512(_mm512_xor_si512(hi1, c1),
                                        _mm512_set1_epi32(static_cast<int>(key0)));
    const __m512i n2 = _mm512_xor_si512(_mm512_xor_si512(hi0, c3),
                                        _mm512_set1_epi32(static_cast<int>(key1)));
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return Philox16{{c0, c1, c2, c3}};
}

}  // namespace

// 64 elements (16 body bytes) per iteration. The input is transposed so that
// register j holds element 4l+j in lane l, matching Philox word j of block l;
// each lane then assembles its byte with masked ORs and vpmovdb packs 16 bytes.
__attribute__((target("avx512f,avx512bw,avx512dq"))) void encode_bytes_avx512(
    const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q,
    const RngStream& rng, uint8_t* body) {
  const __m512i col01 = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29);
  const __m512i col23 = _mm512_setr_epi32(2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31);
  const __m512i lo_halves = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
  const __m512i hi_halves = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const __m512 scale = _mm512_set1_ps(q.scale);
  const __m512 pre = _mm512_set1_ps(q.pre);
  const __m512 inv24 = _mm512_set1_ps(q.inv24);
  const __m512 zero = _mm512_setzero_ps();

  uint64_t k = k_begin;
  // Full groups only: all 64 elements < n and no wrap of the low counter word.
  while (k + 16 <= k_end && 4 * (k + 16) <= n) {
    if (static_cast<uint32_t>(k) > 0xFFFFFFFFu - 15u) {  // rare: let the portable path cross
      encode_bytes_portable(x, n, k, k + 16, q, rng, body);
      k += 16;
      continue;
    }
    const Philox16 r = philox16(k, rng);
    const float* p = x + 4 * k;
    const __m512 x0 = _mm512_loadu_ps(p), x1 = _mm512_loadu_ps(p + 16);
    const __m512 x2 = _mm512_loadu_ps(p + 32), x3 = _mm512_loadu_ps(p + 48);
    const __m512 p01 = _mm512_permutex2var_ps(x0, col01, x1);  // cols 0,1 of rows 0-7
    const __m512 p23 = _mm512_permutex2var_ps(x0, col23, x1);  // cols 2,3 of rows 0-7
    const __m512 q01 = _mm512_permutex2var_ps(x2, col01, x3);  // rows 8-15
    const __m512 q23 = _mm512_permutex2var_ps(x2, col23, x3);
    const __m512 col[4] = {_mm512_permutex2var_ps(p01, lo_halves, q01),
                           _mm512_permutex2var_ps(p01, hi_halves, q01),
                           _mm512_permutex2var_ps(p23, lo_halves, q23),
                           _mm512_permutex2var_ps(p23, hi_halves, q23)};
    __m512i bytes = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      const __m512 a = _mm512_min_ps(_mm512_abs_ps(col[j]), scale);
      const __m512 t = _mm512_mul_ps(_mm512_mul_ps(a, pre), inv24);
      const __m512 u = _mm512_cvtepi32_ps(_mm512_srli_epi32(r.w[j], 8));
      const __mmask16 keep = _mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ) &
                             (_mm512_cmp_ps_mask(a, scale, _CMP_GE_OQ) |
                              _mm512_cmp_ps_mask(u, t, _CMP_LT_OQ));
      const __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(col[j]));
      bytes = _mm512_mask_or_epi32(bytes, keep & ~neg, bytes, _mm512_set1_epi32(kCodePlus << (2 * j)));
      bytes = _mm512_mask_or_epi32(bytes, keep & neg, bytes, _mm512_set1_epi32(kCodeMinus << (2 * j)));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(body + k), _mm512_cvtepi32_epi8(bytes));
    k += 16;
  }
  encode_bytes_portable(x, n, k, k_end, q, rng, body);
}

}  // namespace detail

namespace {

void require_capacity(uint64_t n, size_t capacity) {
  if (capacity < max_encoded_bytes(n)) {
    throw CodecError(Errc::kBufferTooSmall,
                     "output buffer has " + std::to_string(capacity) + " bytes, encoding " +
                         std::to_string(n) + " elements needs max_encoded_bytes(n) = " +
                         std::to_string(max_encoded_bytes(n)));
  }
}

}  // namespace

size_t encode_with_stats(std::span<const float> x, const TensorStats& stats,
                         const EncodeParams& params, std::span<uint8_t> out) {
  const uint64_t n = x.size();
  require_capacity(n, out.size());
  if (stats.count != n) {
    throw CodecError(Errc::kInvalidArgument, "stats describe " + std::to_string(stats.count) +
                                                 " elements but the tensor has " +
                                                 std::to_string(n));
  }
  const float scale = resolve_scale(stats, params);
  const uint8_t flags = params.shared_scale ? kFlagSharedScale : 0;
  write_header_bits(out.data(), flags, n, float_bits(scale), params.tensor_id, params.seed,
                    params.step);

  const TernaryQuantizer q = make_quantizer(scale);
  const RngStream rng{params.seed, params.step, params.tensor_id};
  uint8_t* body = out.data() + kHeaderBytes;
  const uint64_t nbytes = body_bytes(n);
  auto* kernel = detail::use_avx512() ? detail::encode_bytes_avx512 : detail::encode_bytes_portable;
  // Blocks of 16 KiB of output (64 Ki elements): a multiple of the 16-byte SIMD group.
  constexpr uint64_t kBlockBytes = 16384;
  const uint64_t blocks = (nbytes + kBlockBytes - 1) / kBlockBytes;
  const float* data = x.data();
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMinElements)
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t k0 = b * kBlockBytes;
    kernel(data, n, k0, std::min(nbytes, k0 + kBlockBytes), q, rng, body);
  }
  return max_encoded_bytes(n);
}

size_t encode(std::span<const float> x, const EncodeParams& params, std::span<uint8_t> out) {
  require_capacity(x.size(), out.size());  // before the stats pass: fail fast
  return encode_with_stats(x, compute_stats(x), params, out);
}

}  // namespace terngrad::quantize
