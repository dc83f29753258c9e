// Typed codec parameters: what a spec string such as
// "ef(terngrad:clip=2.5,share_scale=1)" means, as structs.
//
// A spec is parsed once (parse_codec_config) into a CodecConfig; codecs are
// built from it (make_codec) and report it back (GradientCodec::config()).
// Every program that needs a codec's parameters (the GPU trainer, the C API,
// the trainer's codec plan) reads these structs rather than parsing text, and
// to_spec() prints the one canonical spec of a config, which parses back to
// an equal config.
//
// Spec grammar:
//   spec   := "ef(" server ")" [":" params]   error feedback around server
//           | server
//   server := "server_ef(" inner ")"          the ps re-encodes the sum, with its own residual
//           | inner
//   inner  := name [":" params]
//   params := key "=" value ("," key "=" value)*
// Names, keys and values follow parse_codec_spec() (gradient_codec.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "terngrad/comm/codec_spec.h"
#include "terngrad/quantize/ternary_math.h"  // quantize::RandomStream

namespace terngrad::comm {

// "fp32": float32, 4 bytes per element.
struct Fp32Params {
  bool operator==(const Fp32Params&) const = default;
};

// "fp16": IEEE binary16, 2 bytes per element.
struct Fp16Params {
  bool operator==(const Fp16Params&) const = default;
};

// "terngrad:clip=C,share_scale=S[,bucket=B][,round=stochastic|nearest]
//  [,pack=2bit|base3|entropy][,stream=philox7x16|philox10]":
// stochastic ternarization (Wen et al. 2017), 2 bits per element.
// round=nearest replaces the random draw by deterministic rounding (+-s iff
// |g| > s/2): biased but contractive, the form error feedback needs
// (ef(terngrad:round=nearest); quantize/ternary_math.h says why).
// pack= chooses how the codes travel (quantize/FORMAT.md), not which codes:
// 2bit (the paper's 4 per byte), base3 (5 per byte, 1.6 bits) or entropy
// (rANS-coded, ~1.2 bits on Gaussian gradients, the payload's size then
// depends on the values); with entropy the ps's shared-scale sum is
// entropy-coded as well. Training is bit-identical across packings.
enum class TernaryRounding { kStochastic, kNearest };
enum class TernaryPacking { k2Bit, kBase3, kEntropy };
struct TernGradParams {
  float clip = 2.5f;        // c in s = min(max|g|, c * sigma); 0 disables clipping
  bool share_scale = true;  // workers encode with the max of their scales, so payloads sum as counts
  uint32_t bucket = 0;      // elements per scale (a multiple of 4); 0: one scale per variable (the paper)
  TernaryRounding round = TernaryRounding::kStochastic;
  TernaryPacking pack = TernaryPacking::k2Bit;
  // stream=philox7x16 (format version 2, the default) or philox10 (version
  // 1: the bytes of payloads from before version 2); FORMAT.md.
  quantize::RandomStream stream = quantize::RandomStream::kPhilox7Half16;
  bool operator==(const TernGradParams&) const = default;
};

// "qsgd:levels=S,bucket=B[,stream=philox7x16|philox10]": QSGD (Alistarh et
// al. 2017). Each bucket of B elements is sent as its L2 norm and, per
// element, a sign and a level in 0..S drawn so that E[decode] = g (unbiased
// up to 2^-17 of a level step with the default stream), packed in
// 1 + ceil(log2(S+1)) bits.
struct QsgdParams {
  uint32_t levels = 127;   // S, 1..32767
  uint32_t bucket = 512;   // B, a multiple of 4, >= 4
  // stream=philox7x16 (format version 2, the default: a 16-bit half of a
  // Philox4x32-7 block per element) or philox10 (version 1: the top 24 bits
  // of a Philox4x32-10 word, the bytes of payloads from before version 2);
  // comm/codecs/FORMATS.md.
  quantize::RandomStream stream = quantize::RandomStream::kPhilox7Half16;
  bool operator==(const QsgdParams&) const = default;
};

// "sign[:scale=none|mean][,vote=counts|sign]": 1 bit per element.
//   scale=none  signSGD (Bernstein et al. 2018): each element is +1 or -1
//               (sign of 0 is +1); the server returns the majority vote.
//   scale=mean  1-bit SGD with scale: +-mean|g| of the variable; under ef()
//               this is EF-signSGD (Karimireddy et al. 2019).
// vote (scale=none only) is what the server sends back:
//   counts      the sum of the votes (decodes to the sum, the trainer averages)
//   sign        the majority itself, 1 bit per element (2 when ties can
//               happen), decoding to R * sign(sum) so the averaged update is
//               the vote.
enum class SignScale { kNone, kMean };
enum class SignVote { kCounts, kSign };
struct SignParams {
  SignScale scale = SignScale::kNone;
  SignVote vote = SignVote::kCounts;
  bool operator==(const SignParams&) const = default;
};

// Value type of sparse payloads.
enum class SparseValues { kFloat32, kFloat16 };

// "topk:ratio=R[,values=fp32|fp16]": the k = max(1, ceil(R * n)) elements of
// largest magnitude, values and Elias-Fano coded (delta) indices. Biased:
// meant for use under ef().
struct TopKParams {
  float ratio = 0.01f;  // (0, 1]
  SparseValues values = SparseValues::kFloat32;
  bool operator==(const TopKParams&) const = default;
};

// "randomk:ratio=R[,values=fp32|fp16][,rescale=0|1]": k = max(1, ceil(R * n))
// elements at positions drawn from (step, variable) alone, the same on every
// worker, so no indices travel and payloads sum as they are. rescale=1 sends
// g * n / k (unbiased); 0 sends g (for ef()).
struct RandomKParams {
  float ratio = 0.01f;
  SparseValues values = SparseValues::kFloat32;
  bool rescale = false;
  bool operator==(const RandomKParams&) const = default;
};

// "powersgd:rank=R[,rows=ROWS]": PowerSGD (Vogels et al. 2019), rank-R power
// iteration with warm start: the variable is the row-major matrix rows x
// (n / rows); workers sum P = M Q in a pre-round, send Q = M^T P^ (P^: P
// orthonormalized) and decode P^ Q^T. rows=0 (the default) leaves the shape to
// the trainer's codec plan, which sets each variable's rows from its shape;
// a codec whose rows is 0 encodes nothing. Biased (a projection): meant for
// use under ef().
struct PowerSgdParams {
  uint32_t rank = 4;  // 1..1024, at most min(rows, cols)
  uint32_t rows = 0;  // 0: unknown (set per variable by the codec plan)
  bool operator==(const PowerSgdParams&) const = default;
};

// A codec registered by a user (register_codec): its parsed spec, which only
// its own factory interprets.
struct CustomParams {
  CodecSpec spec;
  bool operator==(const CustomParams&) const = default;
};

using CodecParams =
    std::variant<Fp32Params, Fp16Params, TernGradParams, QsgdParams, SignParams, TopKParams, RandomKParams,
                 PowerSgdParams, CustomParams>;

// "ef(<codec>)[:momentum=M]": error feedback (Seide et al. 2014; Karimireddy
// et al. 2019) around any codec. Each (worker, variable) keeps a residual e:
// the codec encodes p = g + e, and e becomes p - decode(sent). momentum > 0
// adds DGC's momentum correction (Lin et al. 2018): u = M * u + g, p = u + e,
// and u is zeroed where anything was sent (run the optimizer without momentum).
struct ErrorFeedbackParams {
  float momentum = 0.0f;  // [0, 1)
  bool operator==(const ErrorFeedbackParams&) const = default;
};

// "server_ef(<codec>)": the server re-encodes the sum it would send back with
// the same codec, with error feedback of its own (DoubleSqueeze, Tang et al.
// 2019; TernGrad's "both directions at 2 bits"). Each server slice keeps a
// residual e_s: the server sends encode(S + e_s) for the workers' sum S and
// keeps e_s = S + e_s - decode(sent), so the pull is as small as a push.
// Workers encode as the codec alone does; ef() goes outside:
// "ef(server_ef(terngrad))" is error feedback in both directions.
struct ServerErrorFeedbackParams {
  bool operator==(const ServerErrorFeedbackParams&) const = default;
};

struct CodecConfig {
  CodecConfig() = default;
  CodecConfig(CodecParams p, std::optional<ErrorFeedbackParams> ef = std::nullopt,  // NOLINT: implicit on purpose
              std::optional<ServerErrorFeedbackParams> server_ef = std::nullopt)
      : params(std::move(p)), error_feedback(ef), server_error_feedback(server_ef) {}
  CodecParams params;
  std::optional<ErrorFeedbackParams> error_feedback;  // set: ef(...)
  std::optional<ServerErrorFeedbackParams> server_error_feedback;  // set: server_ef(...)
  bool operator==(const CodecConfig&) const = default;
};

// The codec's name as it appears in specs ("terngrad", "qsgd", ...; a custom
// codec's registered name). Without ef() or server_ef().
std::string codec_name(const CodecParams& params);

// Parses and checks a spec: unknown names, unknown keys and bad values throw
// std::invalid_argument naming them and what is accepted.
CodecConfig parse_codec_config(std::string_view spec);

// The canonical spec: every parameter of a built-in codec, shortest exact
// numbers ("terngrad:clip=2.5,share_scale=1"); parse_codec_config(to_spec(c)) == c.
std::string to_spec(const CodecConfig& config);

}  // namespace terngrad::comm
