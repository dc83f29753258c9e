// "terngrad:clip=C,share_scale=S": TernGrad's stochastic ternarization
// through terngrad::quantize (payload format: quantize/FORMAT.md).
//
//   clip         c in s = min(max|g|, c * sigma); 0 disables clipping. Default 2.5.
//   share_scale  1: take part in scale sharing (every worker encodes with the
//                max of all workers' scales, so payloads sum exactly); 0: each
//                worker uses its own scale. Default 1.
//
// Statistics cache. Scale sharing needs the statistics twice: local_scale()
// reports the scale, then encode() quantizes with the shared one. Rather than
// a second statistics pass over the gradient, local_scale() keeps the stats
// it computed and the very next encode() uses them if it is given the same
// span (same data pointer and length). The cache is consumed by that encode()
// (used or not, and also when encode() throws), so it never outlives one
// local_scale -> encode pair: every local_scale() call recomputes, and an
// encode() not directly preceded by local_scale() of the same span computes
// its own. The contract is that the caller does not modify the gradient
// between the two calls (the trainer's flow: gradient, local_scale,
// all-reduce of the scale, encode).
//
// An instance holds this cache, so it is not thread-safe; the trainer keeps
// one codec per (worker, variable).
#include <optional>
#include <utility>

#include "builtin_codecs.h"
#include "spec_reader.h"
#include "terngrad/quantize/codec.h"

namespace terngrad::comm::detail {

namespace {

class TernGradCodec final : public GradientCodec {
 public:
  TernGradCodec(float clip, bool share_scale) : clip_(clip), share_scale_(share_scale) {}

  std::string spec() const override {
    return "terngrad:clip=" + format_float(clip_) + ",share_scale=" + (share_scale_ ? "1" : "0");
  }

  size_t payload_bytes(uint64_t n) const override { return quantize::max_encoded_bytes(n); }

  bool wants_shared_scale() const override { return share_scale_; }

  float local_scale(std::span<const float> grad) override {
    cached_.reset();  // a throwing compute_stats (NaN/Inf) must not leave older stats behind
    const quantize::TensorStats stats = quantize::compute_stats(grad);
    cached_ = Cached{grad.data(), grad.size(), stats};
    return quantize::local_scale(stats, clip_);
  }

  size_t encode(std::span<const float> grad, const EncodeContext& ctx, std::span<uint8_t> out) override {
    const std::optional<Cached> cached = std::exchange(cached_, std::nullopt);
    quantize::EncodeParams p;
    p.clip_factor = clip_;
    p.seed = ctx.seed;
    p.step = ctx.step;
    p.tensor_id = ctx.tensor_id;
    // A codec configured with share_scale=0 ignores a shared scale, as the
    // codecs that do not want one (fp32, fp16) do.
    if (share_scale_) p.shared_scale = ctx.shared_scale;
    if (cached && cached->data == grad.data() && cached->size == grad.size())
      return quantize::encode_with_stats(grad, cached->stats, p, out);
    return quantize::encode(grad, p, out);
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    quantize::decode(payload, out);
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    quantize::decode_accumulate(payload, out);
  }

 private:
  struct Cached {
    const float* data;
    size_t size;
    quantize::TensorStats stats;
  };

  float clip_;
  bool share_scale_;
  std::optional<Cached> cached_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_terngrad_codec(const CodecSpec& spec) {
  SpecReader reader(spec, {"clip", "share_scale"});
  const float clip = reader.number("clip", 2.5f, 0.0f);
  const bool share = reader.flag("share_scale", true);
  return std::make_unique<TernGradCodec>(clip, share);
}

}  // namespace terngrad::comm::detail
