// 16-bit gradients read directly: float16 and bfloat16 tensors, as
// mixed-precision training keeps them (AMP's fp16, bf16 training).
//
// Every half value is exactly a float32 value, so each call below is defined
// as the float32 call on the widened tensor, and returns or writes the same
// bits: the same statistics, scale, payload bytes and residual. What differs
// is the traffic. Nothing widens the whole tensor: each statistics chunk
// (4096 elements) and each encode block (64 Ki elements) is widened into a
// buffer of the thread's, in cache, and the float32 SIMD kernels run on it
// unchanged. So an encode reads 2 bytes per element twice, where a float32
// working copy would read 2, write 4 and read 4 twice.
//
// The conversions (float16 by F16C / NEON, bfloat16 by a shift) run at the
// SIMD level in use; tests/quantize/half_input_test.cpp checks every call at
// every level against the float32 call on a widened copy. As the float32
// calls, each throws CodecError on bad input and writes nothing then.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "terngrad/quantize/codec.h"

namespace terngrad::quantize {

enum class HalfType : uint8_t {
  kFloat16 = 1,   // IEEE binary16
  kBFloat16 = 2,  // the top 16 bits of a float32
};

// "float16", "bfloat16"; parse_half_type() takes the same names and returns
// nullopt for anything else.
const char* half_type_name(HalfType t);
std::optional<HalfType> parse_half_type(std::string_view name);

// A tensor of halves: the element bits (host order, so little-endian u16 on
// every supported machine) and their type.
struct HalfTensor {
  std::span<const uint16_t> bits;
  HalfType type = HalfType::kFloat16;

  uint64_t size() const { return bits.size(); }
  HalfTensor subspan(uint64_t begin, uint64_t count) const { return {bits.subspan(begin, count), type}; }
};

// out[i] = the float32 value of x[i] (exact; NaN stays NaN, Inf stays Inf).
// out.size() must equal x.size() (kInvalidArgument).
void widen(HalfTensor x, std::span<float> out);

// float32 value of one half.
float widen_one(uint16_t bits, HalfType type);

// compute_stats(widen(x)), bit for bit; kNonFinite names the first NaN/Inf.
TensorStats compute_stats(HalfTensor x);

// stats_of_sum(widen(g), residual), bit for bit.
TensorStats stats_of_sum(HalfTensor g, std::span<const float> residual);

// encode(widen(x), ...), encode_with_stats(widen(x), ...) and
// encode_error_feedback(widen(g), ...), bit for bit (codec.h and
// error_feedback.h state their contracts; slices as there).
size_t encode(HalfTensor x, const EncodeParams& params, std::span<uint8_t> out);
size_t encode_with_stats(HalfTensor x, const TensorStats& stats, const EncodeParams& params, std::span<uint8_t> out);
size_t encode_error_feedback(HalfTensor g, std::span<float> residual, const TensorStats& stats,
                             const EncodeParams& params, std::span<uint8_t> out);

}  // namespace terngrad::quantize
