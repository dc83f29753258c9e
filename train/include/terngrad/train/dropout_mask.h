// The dropout mask as a pure function, shared by the CPU Dropout layer
// (train/layers/dropout.cpp) and its GPU twin (train/cuda/dropout.cu), so
// the two draw the same mask bit for bit from the same seed.
//
// Counter-based: whether flat element `index` of a batch tensor is kept is a
// hash of (seed, layer name, index), computable for any element in any order
// (one GPU thread per element, any CPU loop order) with no generator state.
// Changing any of these functions changes every mask of every run: past
// results would no longer be reproducible (tests/train/layers pins values).
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

// The same definition as terngrad/quantize/philox.h's (an identical
// redefinition is allowed, so a file may include both, in either order).
#ifndef TG_HOST_DEVICE
#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TG_HOST_DEVICE inline
#endif
#endif

namespace terngrad::train::dropout_mask {

// SplitMix64's output function: a bijective 64-bit mixer whose outputs for
// consecutive inputs are statistically independent.
TG_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// FNV-1a of the layer name: a stable salt, so fc6 and fc7 draw different
// masks from the same step seed. Host only (computed once per layer).
inline uint64_t name_salt(std::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  return h;
}

// keep_prob in (0, 1] as a bound on the hash's top 32 bits: an element is
// kept with probability threshold / 2^32 = keep_prob (exactly 2^32 for 1).
inline uint64_t keep_threshold(float keep_prob) {
  return static_cast<uint64_t>(std::ldexp(static_cast<double>(keep_prob), 32));
}

// The key of one layer's mask under one seed.
TG_HOST_DEVICE uint64_t stream_key(uint64_t seed, uint64_t salt) { return mix64(seed ^ salt); }

// Element `index` of the stream keyed by `key` is SplitMix64's output at
// position index + 1; kept iff its top 32 bits are below `threshold`.
TG_HOST_DEVICE bool kept_in(uint64_t key, uint64_t index, uint64_t threshold) {
  return (mix64(key + 0x9E3779B97F4A7C15ull * (index + 1)) >> 32) < threshold;
}

}  // namespace terngrad::train::dropout_mask
