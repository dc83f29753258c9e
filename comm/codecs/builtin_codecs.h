// Private: factories of the codecs the registry knows without any
// register_codec() call. The registry names them directly, so the linker
// pulls their object files out of the static library (a self-registering
// static object in an otherwise unreferenced .o would be dropped, and its
// initialization order relative to the registry is unspecified).
#pragma once

#include <memory>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm::detail {

std::unique_ptr<GradientCodec> make_fp32_codec(const CodecSpec& spec);
std::unique_ptr<GradientCodec> make_fp16_codec(const CodecSpec& spec);
std::unique_ptr<GradientCodec> make_terngrad_codec(const CodecSpec& spec);

}  // namespace terngrad::comm::detail
