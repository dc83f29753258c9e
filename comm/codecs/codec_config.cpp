// Spec text <-> typed parameters (terngrad/comm/codec_config.h): each
// built-in codec's keys, their ranges and defaults, and its canonical spec.
#include "terngrad/comm/codec_config.h"

#include <stdexcept>
#include <string>

#include "builtin_codecs.h"
#include "spec_reader.h"

namespace terngrad::comm {

namespace {

using detail::format_float;
using detail::SpecReader;

const std::vector<std::string> kSparseValues = {"fp32", "fp16"};

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// "stream=philox7x16|philox10": which random stream (payload version) a
// stochastic codec draws from; the newer one by default.
quantize::RandomStream random_stream(const SpecReader& r) {
  return r.choice("stream", 0, {"philox7x16", "philox10"}) == 0 ? quantize::RandomStream::kPhilox7Half16
                                                                : quantize::RandomStream::kPhilox10Word32;
}

CodecParams parse_terngrad(const CodecSpec& spec) {
  const SpecReader r(spec, {"clip", "share_scale", "bucket", "round", "pack", "stream"});
  TernGradParams p;
  p.clip = r.number("clip", p.clip, 0.0f);
  p.bucket = r.integer("bucket", 0, 4, 1u << 30, 4, /*allow_zero=*/true);
  p.round = r.choice("round", 0, {"stochastic", "nearest"}) == 0 ? TernaryRounding::kStochastic
                                                                   : TernaryRounding::kNearest;
  p.pack = static_cast<TernaryPacking>(r.choice("pack", 0, {"2bit", "base3", "entropy"}));
  p.stream = random_stream(r);
  if (p.bucket != 0 && p.pack != TernaryPacking::k2Bit)
    throw std::invalid_argument("codec \"terngrad\": pack=" + std::string(p.pack == TernaryPacking::kBase3 ? "base3" : "entropy") +
                                " is implemented for one scale per variable, not with bucket=" + std::to_string(p.bucket));
  if (p.bucket != 0 && p.round == TernaryRounding::kNearest)
    throw std::invalid_argument("codec \"terngrad\": round=nearest is implemented for one scale per variable, not with "
                                "bucket=" + std::to_string(p.bucket));
  // One scale per bucket cannot be max-reduced as one number: bucketed
  // TernGrad encodes with its own scales (and sums in float32).
  const bool share_given = spec.params.count("share_scale") != 0;
  p.share_scale = r.flag("share_scale", p.bucket == 0);
  if (p.bucket != 0 && p.share_scale)
    throw std::invalid_argument("codec \"terngrad\": bucket=" + std::to_string(p.bucket) +
                                " gives every bucket its own scale, which workers cannot share; drop share_scale=1" +
                                std::string(share_given ? "" : " (it is 0 by default with buckets)"));
  return p;
}

CodecParams parse_qsgd(const CodecSpec& spec) {
  const SpecReader r(spec, {"levels", "bucket", "stream"});
  QsgdParams p;
  p.levels = r.integer("levels", p.levels, 1, 32767);
  p.bucket = r.integer("bucket", p.bucket, 4, 1u << 30, 4);
  p.stream = random_stream(r);
  return p;
}

CodecParams parse_sign(const CodecSpec& spec) {
  const SpecReader r(spec, {"scale", "vote"});
  SignParams p;
  p.scale = static_cast<SignScale>(r.choice("scale", 0, {"none", "mean"}));
  p.vote = static_cast<SignVote>(r.choice("vote", 0, {"counts", "sign"}));
  if (p.scale == SignScale::kMean && spec.params.count("vote"))
    throw std::invalid_argument(
        "codec \"sign\": key \"vote\" applies to scale=none only (scaled signs are summed in float32)");
  return p;
}

CodecParams parse_topk(const CodecSpec& spec) {
  const SpecReader r(spec, {"ratio", "values"});
  TopKParams p;
  p.ratio = r.number_in("ratio", p.ratio, 0.0f, true, 1.0f, false);
  p.values = static_cast<SparseValues>(r.choice("values", 0, kSparseValues));
  return p;
}

CodecParams parse_randomk(const CodecSpec& spec) {
  const SpecReader r(spec, {"ratio", "values", "rescale"});
  RandomKParams p;
  p.ratio = r.number_in("ratio", p.ratio, 0.0f, true, 1.0f, false);
  p.values = static_cast<SparseValues>(r.choice("values", 0, kSparseValues));
  p.rescale = r.flag("rescale", p.rescale);
  return p;
}

CodecParams parse_powersgd(const CodecSpec& spec) {
  const SpecReader r(spec, {"rank", "rows"});
  PowerSgdParams p;
  p.rank = r.integer("rank", p.rank, 1, 1024);
  p.rows = r.integer("rows", 0, 1, 0xFFFFFFFFu, 1, /*allow_zero=*/true);
  return p;
}

CodecParams parse_keyless(const CodecSpec& spec, CodecParams p) {
  const SpecReader r(spec, {});  // rejects any key
  return p;
}

CodecParams parse_params(std::string_view text) {
  const CodecSpec spec = parse_codec_spec(text);
  if (spec.name == "fp32") return parse_keyless(spec, Fp32Params{});
  if (spec.name == "fp16") return parse_keyless(spec, Fp16Params{});
  if (spec.name == "terngrad") return parse_terngrad(spec);
  if (spec.name == "qsgd") return parse_qsgd(spec);
  if (spec.name == "sign") return parse_sign(spec);
  if (spec.name == "topk") return parse_topk(spec);
  if (spec.name == "randomk") return parse_randomk(spec);
  if (spec.name == "powersgd") return parse_powersgd(spec);
  if (spec.name == "ef")
    throw std::invalid_argument("codec spec \"" + std::string(text) + "\": error feedback is written ef(<codec>)");
  if (!detail::is_registered_custom_codec(spec.name))
    throw std::invalid_argument("unknown codec \"" + spec.name + "\" in spec \"" + std::string(text) +
                                "\"; registered codecs: " + detail::registered_codec_list());
  return CustomParams{spec};
}

const char* values_name(SparseValues v) { return v == SparseValues::kFloat16 ? "fp16" : "fp32"; }

std::string params_spec(const CodecParams& params) {
  return std::visit(
      Overloaded{
          [](const Fp32Params&) -> std::string { return "fp32"; },
          [](const Fp16Params&) -> std::string { return "fp16"; },
          [](const TernGradParams& p) {
            std::string s = "terngrad:clip=" + format_float(p.clip) + ",share_scale=" + (p.share_scale ? "1" : "0");
            if (p.bucket != 0) s += ",bucket=" + std::to_string(p.bucket);
            // Printed only when not the default, so the specs of existing runs stay as they were.
            if (p.round == TernaryRounding::kNearest) s += ",round=nearest";
            if (p.pack == TernaryPacking::kBase3) s += ",pack=base3";
            if (p.pack == TernaryPacking::kEntropy) s += ",pack=entropy";
            if (p.stream == quantize::RandomStream::kPhilox10Word32) s += ",stream=philox10";
            return s;
          },
          [](const QsgdParams& p) {
            std::string s = "qsgd:levels=" + std::to_string(p.levels) + ",bucket=" + std::to_string(p.bucket);
            if (p.stream == quantize::RandomStream::kPhilox10Word32) s += ",stream=philox10";
            return s;
          },
          [](const SignParams& p) -> std::string {
            if (p.scale == SignScale::kMean) return "sign:scale=mean";
            return std::string("sign:scale=none,vote=") + (p.vote == SignVote::kSign ? "sign" : "counts");
          },
          [](const TopKParams& p) {
            return "topk:ratio=" + format_float(p.ratio) + ",values=" + values_name(p.values);
          },
          [](const RandomKParams& p) {
            return "randomk:ratio=" + format_float(p.ratio) + ",values=" + values_name(p.values) +
                   ",rescale=" + (p.rescale ? "1" : "0");
          },
          [](const PowerSgdParams& p) {
            std::string s = "powersgd:rank=" + std::to_string(p.rank);
            if (p.rows != 0) s += ",rows=" + std::to_string(p.rows);
            return s;
          },
          [](const CustomParams& p) {
            std::string s = p.spec.name;
            for (const auto& [key, value] : p.spec.params) s += (s.size() == p.spec.name.size() ? ":" : ",") + key + "=" + value;
            return s;
          },
      },
      params);
}

}  // namespace

std::string codec_name(const CodecParams& params) {
  if (const auto* c = std::get_if<CustomParams>(&params)) return c->spec.name;
  const std::string s = params_spec(params);
  return s.substr(0, s.find(':'));
}

namespace {

// "server_ef(<inner>)" or "<inner>", into config (ctx names the whole spec).
void parse_server_part(std::string_view spec, const std::string& ctx, CodecConfig& config) {
  if (spec.starts_with("ef("))
    throw std::invalid_argument(ctx + ": ef() goes outside: ef(server_ef(...)), or it is one error feedback too many");
  if (!spec.starts_with("server_ef(")) {
    config.params = parse_params(spec);
    return;
  }
  constexpr size_t kOpen = sizeof("server_ef(") - 1;
  if (!spec.ends_with(")"))
    throw std::invalid_argument(ctx + ": server_ef(...) takes no keys and ends with ')'; found \"" + std::string(spec) + "\"");
  const std::string_view inner = spec.substr(kOpen, spec.size() - kOpen - 1);
  if (inner.empty()) throw std::invalid_argument(ctx + ": server_ef() needs a codec inside, e.g. server_ef(terngrad)");
  if (inner.starts_with("server_ef(")) throw std::invalid_argument(ctx + ": server_ef(server_ef(...)) is one too many");
  if (inner.starts_with("ef("))
    throw std::invalid_argument(ctx + ": ef() goes outside server_ef(): ef(server_ef(...)) (the workers' residual is theirs)");
  config.params = parse_params(inner);
  // A PowerSGD sum decodes only with the step's summed P, which the ps does
  // not hold, and its re-encoding would need a pre-round of its own.
  if (std::holds_alternative<PowerSgdParams>(config.params))
    throw std::invalid_argument(ctx + ": server_ef(powersgd) is not supported: the ps cannot decode or re-encode a "
                                "PowerSGD sum (it needs the step's summed P, a pre-round the ps does not take part in); "
                                "its pull is already as small as its push: use powersgd or ef(powersgd)");
  // The server encodes the sum: a codec that sends only signs would turn
  // every sum into +-1 and its residual would grow without bound.
  if (const auto* sign = std::get_if<SignParams>(&config.params); sign && sign->scale == SignScale::kNone)
    throw std::invalid_argument(ctx + ": server_ef(sign:scale=none) would send +-1 for every sum; use sign:scale=mean");
  config.server_error_feedback = ServerErrorFeedbackParams{};
}

}  // namespace

CodecConfig parse_codec_config(std::string_view spec) {
  CodecConfig config;
  const std::string ctx = "codec spec \"" + std::string(spec) + "\"";
  if (!spec.starts_with("ef(")) {
    parse_server_part(spec, ctx, config);
    return config;
  }
  const size_t close = spec.rfind(')');
  if (close == std::string_view::npos) throw std::invalid_argument(ctx + ": \"ef(\" has no closing ')'");
  const std::string_view inner = spec.substr(3, close - 3), after = spec.substr(close + 1);
  if (inner.starts_with("ef("))
    throw std::invalid_argument(ctx + ": ef(ef(...)) is one error feedback too many");
  if (inner.empty()) throw std::invalid_argument(ctx + ": ef() needs a codec inside, e.g. ef(terngrad)");
  parse_server_part(inner, ctx, config);
  ErrorFeedbackParams ef;
  if (!after.empty()) {
    if (after[0] != ':')
      throw std::invalid_argument(ctx + ": after ef(...) comes ':' and its keys, or nothing; found \"" +
                                  std::string(after) + "\"");
    const CodecSpec ef_spec = parse_codec_spec("ef" + std::string(after));
    const SpecReader r(ef_spec, {"momentum"});
    ef.momentum = r.number_in("momentum", 0.0f, 0.0f, false, 1.0f, true);
  }
  config.error_feedback = ef;
  return config;
}

std::string to_spec(const CodecConfig& config) {
  std::string inner = params_spec(config.params);
  if (config.server_error_feedback) inner = "server_ef(" + inner + ")";
  if (!config.error_feedback) return inner;
  std::string s = "ef(" + inner + ")";
  if (config.error_feedback->momentum != 0.0f) s += ":momentum=" + format_float(config.error_feedback->momentum);
  return s;
}

}  // namespace terngrad::comm
