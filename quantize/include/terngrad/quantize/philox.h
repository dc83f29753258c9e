// Philox4x32 counter-based random number generator (Salmon et al., SC'11), 10 and 7 rounds.
//
// Why counter-based: the random word for element i is a pure function of
// (seed, step, tensor id, i). Any thread (CPU lane, OpenMP thread, CUDA thread)
// can compute it independently, so the encoded payload does not depend on the
// thread count and is bit-identical between the CPU and CUDA paths.
//
// This is the standard Philox4x32 (Random123's definition) with 10 rounds, the
// variant cuRAND uses, and with 7 rounds, the fewest that Random123 found
// Crush-resistant, for the cheaper stream of format version 2 (FORMAT.md);
// tests/quantize/philox_test.cpp checks both against the published
// known-answer vectors of the Random123 distribution.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TG_HOST_DEVICE inline
#endif

namespace terngrad::quantize {

struct Philox4x32Counter {
  uint32_t v[4];
};
struct Philox4x32Key {
  uint32_t v[2];
};

namespace philox_constants {
inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
inline constexpr int kRounds = 10;
}  // namespace philox_constants

TG_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// One Philox4x32-R block: 128 random bits from a 128-bit counter and a 64-bit key.
template <int R>
TG_HOST_DEVICE Philox4x32Counter philox4x32(Philox4x32Counter c, Philox4x32Key k) {
  using namespace philox_constants;
  static_assert(R >= 1 && R <= kRounds, "the vector kernels' key schedules hold kRounds keys");
  for (int round = 0; round < R; ++round) {
    if (round > 0) {
      k.v[0] += kWeyl0;
      k.v[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, c.v[0], hi0, lo0);
    philox_mulhilo(kMul1, c.v[2], hi1, lo1);
    c = Philox4x32Counter{{hi1 ^ c.v[1] ^ k.v[0], lo1, hi0 ^ c.v[3] ^ k.v[1], lo0}};
  }
  return c;
}

TG_HOST_DEVICE Philox4x32Counter philox4x32_10(Philox4x32Counter c, Philox4x32Key k) { return philox4x32<10>(c, k); }
TG_HOST_DEVICE Philox4x32Counter philox4x32_7(Philox4x32Counter c, Philox4x32Key k) { return philox4x32<7>(c, k); }

}  // namespace terngrad::quantize
