// 16-bit inputs (half_input.h): the names of the types and the widening,
// each at the SIMD level in use (float16: the fp16 codec's conversion;
// bfloat16: a shift, bf16_widen in the kernel table).
#include <cstring>
#include <string>

#include "cpu_kernels.h"
#include "terngrad/quantize/error.h"
#include "terngrad/quantize/fp16.h"
#include "terngrad/quantize/half_input.h"

namespace terngrad::quantize {

namespace detail {
void bf16_widen_portable(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = static_cast<uint32_t>(in[i]) << 16;
    std::memcpy(out + i, &bits, sizeof bits);
  }
}
}  // namespace detail

const char* half_type_name(HalfType t) {
  switch (t) {
    case HalfType::kFloat16: return "float16";
    case HalfType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

std::optional<HalfType> parse_half_type(std::string_view name) {
  for (HalfType t : {HalfType::kFloat16, HalfType::kBFloat16})
    if (name == half_type_name(t)) return t;
  return std::nullopt;
}

float widen_one(uint16_t bits, HalfType type) {
  if (type == HalfType::kFloat16) return fp16::to_float(bits);
  float out;
  detail::bf16_widen_portable(&bits, 1, &out);
  return out;
}

void widen(HalfTensor x, std::span<float> out) {
  if (out.size() != x.size())
    throw CodecError(Errc::kInvalidArgument, std::string("widen: ") + std::to_string(x.size()) + " " +
                                                 half_type_name(x.type) + " elements into an output of " +
                                                 std::to_string(out.size()));
  switch (x.type) {
    case HalfType::kFloat16:
      detail::kernels().fp16_decode(reinterpret_cast<const uint8_t*>(x.bits.data()), x.size(), out.data());
      return;
    case HalfType::kBFloat16:
      detail::kernels().bf16_widen(x.bits.data(), x.size(), out.data());
      return;
  }
  throw CodecError(Errc::kInvalidArgument,
                   "widen: unknown half type " + std::to_string(static_cast<int>(x.type)) + " (float16 or bfloat16)");
}

}  // namespace terngrad::quantize
