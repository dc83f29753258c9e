// Philox4x32-10 or -7 words for runs of consecutive blocks, at the CPU's SIMD level
// (cpu_features.h): the generator behind the TernGrad encode kernels, for
// other codecs that draw from the same kind of stream (comm's qsgd). The words
// equal philox4x32_10() / philox4x32_7() block by block at every level
// (philox_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "terngrad/quantize/philox.h"

namespace terngrad::quantize {

// What a vector Philox needs for one key (seed), one step and tensor id, and
// one high counter word: the round keys as 64-bit words (the kernels
// broadcast them from memory) and the arithmetic of rounds 1 and 2 that does
// not depend on the low counter word, folded into constants (the counter's
// words 1-3 are the same for every block of a run).
struct PhiloxSetup {
  uint64_t key0[philox_constants::kRounds];
  uint64_t key1[philox_constants::kRounds];
  uint32_t hi_word;
  uint64_t x1;  // round 1: tensor id ^ key1                 (word 2 = hi(p0) ^ x1)
  uint64_t x2;  // round 2: round-1 word 1 ^ key0             (word 0 = hi(p1) ^ x2)
  uint64_t x3;  // round 2: hi(constant product) ^ key1       (word 2 = p0 ^ x3)
  uint64_t w3;  // round 2: lo(constant product)              (word 3)

  PhiloxSetup(uint64_t seed, uint32_t step, uint32_t tensor_id, uint32_t hi) : hi_word(hi) {
    using namespace philox_constants;
    uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    for (int r = 0; r < kRounds; ++r) {
      if (r > 0) {
        k0 += kWeyl0;
        k1 += kWeyl1;
      }
      key0[r] = k0;
      key1[r] = k1;
    }
    uint32_t prod1_hi, prod1_lo;  // round 1: word 2 (step) times kMul1
    philox_mulhilo(kMul1, step, prod1_hi, prod1_lo);
    const uint32_t w0 = prod1_hi ^ hi ^ static_cast<uint32_t>(key0[0]), w1 = prod1_lo;
    uint32_t prod0_hi, prod0_lo;  // round 2: that word 0 times kMul0
    philox_mulhilo(kMul0, w0, prod0_hi, prod0_lo);
    x1 = tensor_id ^ static_cast<uint32_t>(key1[0]);
    x2 = w1 ^ static_cast<uint32_t>(key0[1]);
    x3 = prod0_hi ^ static_cast<uint32_t>(key1[1]);
    w3 = prod0_lo;
  }
};

// One stream (seed, step, tensor id) of Philox4x32 with `rounds` rounds (10,
// the default, or 7: philox4x32_10 / philox4x32_7); words() fills
// words[4b + j] with word j of the block whose counter is (k0 + b, step,
// tensor id), b in [0, blocks). Any k0 and length (runs whose low counter
// word wraps are handled). Keeps the constants of the last high counter
// word: one object per thread. Throws std::invalid_argument for other round
// counts.
class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint32_t step, uint32_t tensor_id, int rounds = philox_constants::kRounds);
  void words(uint64_t k0, size_t blocks, uint32_t* words);

 private:
  uint64_t seed_;
  uint32_t step_, tensor_id_;
  int rounds_;
  PhiloxSetup setup_;
};

}  // namespace terngrad::quantize
