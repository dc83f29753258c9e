// "terngrad:clip=C,share_scale=0,bucket=B": TernGrad with one scale per
// bucket of B elements, through terngrad::quantize's bucketed encoder
// (quantize/bucketed.h; payload format: quantize/FORMAT.md, codec id 3).
//
//   clip    c: bucket b's scale is s_b = min(max|g| over the bucket, c * sigma),
//           sigma the standard deviation of the WHOLE variable (as plain
//           terngrad clips), so a slice's scales never depend on the cut.
//           0 disables clipping. Default 2.5.
//   bucket  B, a multiple of 4 in [4, 2^30]; buckets at absolute positions.
//
// No scale sharing (the spec parser forces share_scale=0): per-bucket scales
// are many numbers per worker, and the sum of payloads with different scales
// is no integer count times one scale. Aggregation is therefore the float32
// sum of the decoded payloads (sums_without_decoding() is false), except that
// a single payload is returned as it is: it is its own exact sum and 16x
// smaller than the float32 one.
#include <string>

#include "builtin_codecs.h"
#include "slices.h"
#include "terngrad/quantize/bucketed.h"
#include "terngrad/quantize/codec.h"

namespace terngrad::comm::detail {

namespace {

namespace tq = terngrad::quantize;

class TernGradBucketedCodec final : public GradientCodec {
 public:
  explicit TernGradBucketedCodec(const TernGradParams& params) : params_(params) {
    if (params.share_scale)
      throw std::invalid_argument("codec \"" + to_spec(config()) + "\": bucket=" + std::to_string(params.bucket) +
                                  " cannot share scales (share_scale must be 0)");
    if (params.bucket < tq::kMinBucket || params.bucket > tq::kMaxBucket || params.bucket % 4 != 0)
      throw std::invalid_argument("codec \"terngrad\": bucket=" + std::to_string(params.bucket) +
                                  " must be a multiple of 4 in [4, 2^30]");
  }

  std::string spec() const override { return to_spec(config()); }
  CodecConfig config() const override { return {params_, std::nullopt}; }
  bool sums_without_decoding() const override { return false; }

  size_t payload_bytes(uint64_t n) const override { return tq::bucketed_payload_bytes(n, params_.bucket); }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    check_slices("terngrad", grad.size(), slices, outs, *this);
    tq::BucketedEncodeParams p;
    p.bucket = params_.bucket;
    p.clip_factor = params_.clip;
    p.seed = ctx.seed;
    p.step = ctx.step;
    p.tensor_id = ctx.tensor_id;
    p.stream = params_.stream;
    // One statistics pass over the whole variable: sigma for clipping, and
    // NaN/Inf refused before any output byte is written.
    const tq::TensorStats stats = tq::compute_stats(grad);
    for (size_t i = 0; i < slices.size(); ++i)
      tq::encode_bucketed_slice(grad, stats, p, slices[i].begin, slices[i].count, outs[i]);
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    tq::decode_bucketed(payload, params_.bucket, out);
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    tq::decode_bucketed_accumulate(payload, params_.bucket, out);
  }

  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    const tq::BucketedHeader h = tq::inspect_bucketed(payload, params_.bucket);
    if (h.count != n)
      throw tq::CodecError(tq::Errc::kInvalidArgument, "terngrad bucketed payload holds " + std::to_string(h.count) +
                                                           " elements, expected " + std::to_string(n));
  }

  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (payloads.size() == 1) {
      validate(payloads[0], n);
      out.assign(payloads[0].begin(), payloads[0].end());
      return;
    }
    GradientCodec::aggregate(payloads, n, out);
  }

  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    // A TGRD payload here is a single worker's (aggregate() above); the
    // float32 sum carries the fp32 payload's own magic.
    if (aggregate.size() >= 4 && tq::load_le32(aggregate.data()) == tq::kMagicLe32)
      tq::decode_bucketed(aggregate, params_.bucket, out);
    else
      GradientCodec::decode_aggregate(aggregate, out);
  }

 private:
  TernGradParams params_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_terngrad_bucketed_codec(const TernGradParams& params) {
  return std::make_unique<TernGradBucketedCodec>(params);
}

}  // namespace terngrad::comm::detail
