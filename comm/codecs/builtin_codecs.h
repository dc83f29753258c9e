// Private: factories of the built-in codecs, from their typed parameters
// (codec_config.h), and what the typed parser needs of the registry. The
// registry names the factories directly, so the linker pulls their object
// files out of the static library (a self-registering static object in an
// otherwise unreferenced .o would be dropped).
#pragma once

#include <memory>
#include <string>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm::detail {

std::unique_ptr<GradientCodec> make_fp32_codec();
std::unique_ptr<GradientCodec> make_fp16_codec();
std::unique_ptr<GradientCodec> make_terngrad_codec(const TernGradParams& params);
// bucket != 0 (make_terngrad_codec calls it).
std::unique_ptr<GradientCodec> make_terngrad_bucketed_codec(const TernGradParams& params);
std::unique_ptr<GradientCodec> make_qsgd_codec(const QsgdParams& params);
std::unique_ptr<GradientCodec> make_sign_codec(const SignParams& params);
std::unique_ptr<GradientCodec> make_topk_codec(const TopKParams& params);
std::unique_ptr<GradientCodec> make_randomk_codec(const RandomKParams& params);
std::unique_ptr<GradientCodec> make_powersgd_codec(const PowerSgdParams& params);
// server_ef(<inner>): inner encodes on the workers; the server re-encodes
// the sum with a codec of inner's config.
std::unique_ptr<GradientCodec> make_server_error_feedback_codec(std::unique_ptr<GradientCodec> inner);
std::unique_ptr<GradientCodec> make_error_feedback_codec(std::unique_ptr<GradientCodec> inner,
                                                         const ErrorFeedbackParams& params);

// Names of the built-in codecs (as specs spell them), sorted.
const std::vector<std::string>& builtin_codec_names();
// Whether register_codec() registered this name.
bool is_registered_custom_codec(const std::string& name);
// Every registered name, built-in and custom, sorted and comma-separated.
std::string registered_codec_list();

}  // namespace terngrad::comm::detail
