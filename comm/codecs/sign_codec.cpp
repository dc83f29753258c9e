#include "builtin_codecs.h"
namespace terngrad::comm::detail {
std::unique_ptr<GradientCodec> make_sign_codec(const SignParams&) { throw std::invalid_argument("sign: pending"); }
}
