// PhiloxStream (philox_batch.h): the x86 vector Philox of the encode kernels
// (x86_philox.h) where the CPU level has one, philox4x32_10() block by block
// elsewhere and for the blocks around a low counter word that wraps.
#include "terngrad/quantize/philox_batch.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "terngrad/quantize/cpu_features.h"
#include "x86_philox.h"

namespace terngrad::quantize {

namespace {

template <int R>
void scalar_words(uint64_t seed, uint32_t step, uint32_t tensor_id, uint64_t k0, size_t blocks, uint32_t* words) {
  const Philox4x32Key key{{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  for (size_t b = 0; b < blocks; ++b) {
    const uint64_t k = k0 + b;
    const Philox4x32Counter r =
        philox4x32<R>({{static_cast<uint32_t>(k), static_cast<uint32_t>(k >> 32), step, tensor_id}}, key);
    for (int j = 0; j < 4; ++j) words[4 * b + j] = r.v[j];
  }
}

#if defined(__x86_64__)
// Blocks [k0, k0 + blocks) that share one high counter word and do not wrap.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,bmi2"))) size_t words_avx512(const PhiloxSetup& s,
                                                                                       uint32_t lo, size_t blocks,
                                                                                       uint32_t* words) {
  size_t b = 0;
  for (; b + 48 <= blocks; b += 48) {  // 6 chains: measured 4-7% faster than 4
    __m512i w[12];
    detail::x86::philox_avx512<6, R>(s, lo + static_cast<uint32_t>(b), w);
    for (int v = 0; v < 12; ++v) _mm512_storeu_si512(words + 4 * b + 16 * v, w[v]);
  }
  for (; b + 32 <= blocks; b += 32) {
    __m512i w[8];
    detail::x86::philox_avx512<4, R>(s, lo + static_cast<uint32_t>(b), w);
    for (int v = 0; v < 8; ++v) _mm512_storeu_si512(words + 4 * b + 16 * v, w[v]);
  }
  // Shorter runs (qsgd's chunks of 24 blocks) still get chains side by side:
  // one chain alone waits on each multiply's latency.
  if (b + 24 <= blocks) {
    __m512i w[6];
    detail::x86::philox_avx512<3, R>(s, lo + static_cast<uint32_t>(b), w);
    for (int v = 0; v < 6; ++v) _mm512_storeu_si512(words + 4 * b + 16 * v, w[v]);
    b += 24;
  }
  if (b + 16 <= blocks) {
    __m512i w[4];
    detail::x86::philox_avx512<2, R>(s, lo + static_cast<uint32_t>(b), w);
    for (int v = 0; v < 4; ++v) _mm512_storeu_si512(words + 4 * b + 16 * v, w[v]);
    b += 16;
  }
  for (; b + 8 <= blocks; b += 8) {
    __m512i w[2];
    detail::x86::philox_avx512<1, R>(s, lo + static_cast<uint32_t>(b), w);
    for (int v = 0; v < 2; ++v) _mm512_storeu_si512(words + 4 * b + 16 * v, w[v]);
  }
  return b;
}

template <int R>
__attribute__((target("avx2,fma,bmi2"))) size_t words_avx2(const PhiloxSetup& s, uint32_t lo, size_t blocks,
                                                           uint32_t* words) {
  size_t b = 0;
  for (; b + 8 <= blocks; b += 8) {
    __m256i w[4];
    detail::x86::philox_avx2<2, R>(s, lo + static_cast<uint32_t>(b), w);
    for (int v = 0; v < 4; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 4 * b + 8 * v), w[v]);
  }
  for (; b + 4 <= blocks; b += 4) {
    __m256i w[2];
    detail::x86::philox_avx2<1, R>(s, lo + static_cast<uint32_t>(b), w);
    for (int v = 0; v < 2; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(words + 4 * b + 8 * v), w[v]);
  }
  return b;
}
#endif

}  // namespace

PhiloxStream::PhiloxStream(uint64_t seed, uint32_t step, uint32_t tensor_id, int rounds)
    : seed_(seed), step_(step), tensor_id_(tensor_id), rounds_(rounds), setup_(seed, step, tensor_id, 0) {
  if (rounds != 10 && rounds != 7)
    throw std::invalid_argument("PhiloxStream: rounds=" + std::to_string(rounds) + " (the streams have 10 or 7)");
}

namespace {

template <int R>
void stream_words(uint64_t seed, uint32_t step, uint32_t tensor_id, PhiloxSetup& setup, uint64_t k0, size_t blocks,
                  uint32_t* words) {
#if defined(__x86_64__)
  const SimdLevel level = cpu_simd_level();
  if (level == SimdLevel::kAvx512 || level == SimdLevel::kAvx2) {
    while (blocks > 0) {
      // The blocks up to the next wrap of the low counter word share a high word.
      const uint64_t to_wrap = (uint64_t{1} << 32) - static_cast<uint32_t>(k0);
      const size_t run = static_cast<size_t>(std::min<uint64_t>(blocks, to_wrap));
      const uint32_t hi = static_cast<uint32_t>(k0 >> 32);
      if (setup.hi_word != hi) setup = PhiloxSetup(seed, step, tensor_id, hi);
      const size_t done = level == SimdLevel::kAvx512 ? words_avx512<R>(setup, static_cast<uint32_t>(k0), run, words)
                                                      : words_avx2<R>(setup, static_cast<uint32_t>(k0), run, words);
      scalar_words<R>(seed, step, tensor_id, k0 + done, run - done, words + 4 * done);
      k0 += run;
      blocks -= run;
      words += 4 * run;
    }
    return;
  }
#else
  (void)setup;
#endif
  scalar_words<R>(seed, step, tensor_id, k0, blocks, words);
}

}  // namespace

void PhiloxStream::words(uint64_t k0, size_t blocks, uint32_t* words) {
  if (rounds_ == 7)
    stream_words<7>(seed_, step_, tensor_id_, setup_, k0, blocks, words);
  else
    stream_words<philox_constants::kRounds>(seed_, step_, tensor_id_, setup_, k0, blocks, words);
}

}  // namespace terngrad::quantize
