// "terngrad:clip=C,share_scale=S": TernGrad's stochastic ternarization
// through terngrad::quantize (payload format: quantize/FORMAT.md), one scale
// per variable. "terngrad:...,bucket=B" (one scale per bucket) is
// terngrad_bucketed_codec.cpp; make_terngrad_codec() picks the class.
//
//   clip         c in s = min(max|g|, c * sigma); 0 disables clipping. Default 2.5.
//   round        stochastic (the paper, unbiased) or nearest (deterministic,
//                contractive: for error feedback). Default stochastic.
//   share_scale  1: take part in scale sharing (every worker encodes with the
//                max of all workers' scales, so payloads sum exactly); 0: each
//                worker uses its own scale. Default 1.
//   pack         2bit (codec 1), base3 (codec 4) or entropy (codec 5, whose
//                size depends on the values: payload_bytes() is then a
//                capacity and encoded_size() reads the length from the
//                header). The codes are the same; decoders take any packing.
//   stream       philox7x16 (format version 2: a 16-bit half of a 7-round
//                Philox block per element; default) or philox10 (version 1:
//                a 32-bit word of a 10-round block, the earlier payloads' bytes).
//
// Slices (a variable sharded across servers) are encoded with the whole
// variable's statistics and element positions (quantize::EncodeParams::
// element_offset), so any sharding gives the whole variable's bytes.
//
// Aggregation: payloads that share one scale sum to integer counts, returned
// as a ternary sum payload (bit_width(2R) bits per element; with
// pack=entropy rANS-coded when that is smaller); a single payload is
// returned as it is; anything else falls back to the float32 sum.
//
// Statistics cache. Scale sharing needs the statistics twice: local_scale()
// reports the scale, then encode_slices() quantizes with the shared one.
// Rather than a second statistics pass over the gradient, local_scale() keeps
// the stats it computed and the very next encode_slices() uses them if it is
// given the same span (same data pointer and length). The cache is consumed
// by that call (used or not, and also when it throws), so it never outlives
// one local_scale -> encode_slices pair: every local_scale() call recomputes,
// and an encode_slices() not directly preceded by local_scale() of the same
// span computes its own. The contract is that the caller does not modify the
// gradient between the two calls (the trainer's flow: gradient, local_scale,
// all-reduce of the scale, encode).
//
// An instance holds this cache, so it is not thread-safe; the trainer keeps
// one codec per (worker, variable).
#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "builtin_codecs.h"
#include "slices.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/error_feedback.h"
#include "terngrad/quantize/ternary_sum.h"

namespace terngrad::comm::detail {

namespace {

quantize::Rounding rounding_of(TernaryRounding r) {
  return r == TernaryRounding::kNearest ? quantize::Rounding::kNearest : quantize::Rounding::kStochastic;
}

quantize::Packing packing_of(TernaryPacking p) {
  return p == TernaryPacking::kBase3 ? quantize::Packing::kBase3
         : p == TernaryPacking::kEntropy ? quantize::Packing::kEntropy
                                         : quantize::Packing::k2Bit;
}

class TernGradCodec final : public GradientCodec {
 public:
  explicit TernGradCodec(const TernGradParams& params)
      : params_(params), clip_(params.clip), share_scale_(params.share_scale) {}

  std::string spec() const override { return to_spec(config()); }
  CodecConfig config() const override { return {params_, std::nullopt}; }
  bool sums_without_decoding() const override { return share_scale_; }

  size_t payload_bytes(uint64_t n) const override { return quantize::max_encoded_bytes(n, packing_); }
  bool variable_size() const override { return packing_ == quantize::Packing::kEntropy; }
  size_t encoded_size(std::span<const uint8_t> written, uint64_t n) const override {
    if (!variable_size()) return GradientCodec::encoded_size(written, n);
    return quantize::payload_length(written);  // the header's own length (an entropy or a base-3 payload)
  }

  bool wants_shared_scale() const override { return share_scale_; }

  float local_scale(std::span<const float> grad) override { return own_scale(grad); }
  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    encode(grad, ctx, slices, outs, {});
  }

  // 16-bit gradients: the same calls on the halves, read block by block
  // (quantize/half_input.h), with the float32 calls' bits.
  float local_scale_half(quantize::HalfTensor grad) override { return own_scale(grad); }
  void encode_slices_half(quantize::HalfTensor grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                          std::span<const std::span<uint8_t>> outs) override {
    encode(grad, ctx, slices, outs, {});
  }

  // Error feedback: p = g + e's statistics in one pass (the cache, as
  // local_scale() keeps it, keyed by both spans), then each slice's payload
  // and residual in one; p is never stored.
  bool fuses_error_feedback() const override { return true; }

  float prepare_error_feedback(std::span<const float> grad, std::span<const float> residual) override {
    return sum_scale(grad, residual);
  }
  void encode_slices_error_feedback(std::span<const float> grad, const EncodeContext& ctx,
                                    std::span<const ElementRange> slices, std::span<const std::span<uint8_t>> outs,
                                    std::span<float> residual) override {
    encode_with_residual(grad, ctx, slices, outs, residual);
  }
  float prepare_error_feedback_half(quantize::HalfTensor grad, std::span<const float> residual) override {
    return sum_scale(grad, residual);
  }
  void encode_slices_error_feedback_half(quantize::HalfTensor grad, const EncodeContext& ctx,
                                         std::span<const ElementRange> slices, std::span<const std::span<uint8_t>> outs,
                                         std::span<float> residual) override {
    encode_with_residual(grad, ctx, slices, outs, residual);
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    quantize::decode(payload, out);
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    quantize::decode_accumulate(payload, out);
  }

  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    read_counted_header(payload, n);
    quantize::inspect(payload);
  }

  std::vector<uint8_t> validate_for_server(std::span<const uint8_t> payload, uint64_t n) const override {
    const quantize::PayloadHeader h = read_counted_header(payload, n);  // before a body sizes anything
    if (h.codec == quantize::kCodecTernary2Bit) {
      quantize::inspect(payload);
      return {};
    }
    // Base-3 or entropy-coded: repack() validates it whole (decoding it once)
    // and writes the 2-bit payload of its codes.
    std::vector<uint8_t> kept(quantize::max_encoded_bytes(n, quantize::Packing::k2Bit));
    kept.resize(quantize::repack(payload, quantize::Packing::k2Bit, kept));
    return kept;
  }

  // 2-bit payloads with scale sharing only: one payload comes back as it
  // is, several shared-scale ones sum to bit-packed counts. Entropy-coded
  // and base-3 sums, and sums of payloads with scales of their own (a
  // float32 sum, or counts when the scales happen to agree), depend on the
  // payloads.
  std::optional<size_t> aggregate_bytes(uint64_t n, size_t count) const override {
    if (packing_ != quantize::Packing::k2Bit || !share_scale_ || count == 0 || count > quantize::kMaxSumContributions)
      return std::nullopt;
    if (count == 1) return payload_bytes(n);
    return quantize::sum_payload_bytes(n, static_cast<uint32_t>(count));
  }

  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (payloads.size() == 1) {  // nothing to sum: the payload itself, in this codec's packing
      const quantize::PayloadHeader h = quantize::read_header(payloads[0]);
      if (h.count == n) {
        if (h.codec == quantize::kCodecTernary2Bit && packing_ != quantize::Packing::k2Bit) {
          // A push the server kept as 2-bit codes (validate_for_server) goes
          // back packed as its sender packed it; repack() validates it whole,
          // and out changes only once it has succeeded.
          std::vector<uint8_t> packed(quantize::max_encoded_bytes(n, packing_));
          packed.resize(quantize::repack(payloads[0], packing_, packed));
          out.swap(packed);
        } else {
          quantize::inspect(payloads[0]);
          out.assign(payloads[0].begin(), payloads[0].end());
        }
        return;
      }
    }
    if (!payloads.empty() && payloads.size() <= quantize::kMaxSumContributions && shares_one_scale(payloads, n)) {
      out.resize(quantize::sum_payload_bytes(n, static_cast<uint32_t>(payloads.size())));
      out.resize(quantize::sum_payloads(payloads, out, packing_ == quantize::Packing::kEntropy
                                                           ? quantize::SumPacking::kEntropy
                                                           : quantize::SumPacking::kBitPacked));
      return;
    }
    GradientCodec::aggregate(payloads, n, out);
  }

  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    if (quantize::is_sum_payload(aggregate))
      quantize::decode_sum(aggregate, out);
    else if (aggregate.size() >= 4 && quantize::load_le32(aggregate.data()) == quantize::kMagicLe32)
      quantize::decode(aggregate, out);  // a single worker's payload, any packing
    else
      GradientCodec::decode_aggregate(aggregate, out);
  }

 private:
  // A gradient's first element and its i-th value: a float32 span or halves.
  static const void* data_of(std::span<const float> g) { return g.data(); }
  static const void* data_of(quantize::HalfTensor g) { return g.bits.data(); }
  static float value_at(std::span<const float> g, uint64_t i) { return g[i]; }
  static float value_at(quantize::HalfTensor g, uint64_t i) { return quantize::widen_one(g.bits[i], g.type); }

  // local_scale(): the statistics, kept for the encode that follows.
  template <class Gradient>
  float own_scale(Gradient grad) {
    cached_.reset();  // a throwing compute_stats (NaN/Inf) must not leave older stats behind
    const quantize::TensorStats stats = quantize::compute_stats(grad);
    cached_ = Cached{data_of(grad), grad.size(), stats};
    return quantize::local_scale(stats, clip_);
  }

  // prepare_error_feedback(): p = g + e's statistics in one pass.
  template <class Gradient>
  float sum_scale(Gradient grad, std::span<const float> residual) {
    cached_.reset();
    const quantize::TensorStats stats = quantize::stats_of_sum(grad, residual);
    cached_ = Cached{data_of(grad), grad.size(), stats, residual.data()};
    return quantize::local_scale(stats, clip_);  // as local_scale(p)
  }

  // encode_slices_error_feedback(): the payloads and e' in one pass, then
  // the elements no slice covers, which sent nothing: their residual is p.
  template <class Gradient>
  void encode_with_residual(Gradient grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                            std::span<const std::span<uint8_t>> outs, std::span<float> residual) {
    if (residual.size() != grad.size()) {
      cached_.reset();
      throw std::invalid_argument("terngrad: a residual of " + std::to_string(residual.size()) +
                                  " elements for a gradient of " + std::to_string(grad.size()));
    }
    encode(grad, ctx, slices, outs, residual);
    std::vector<ElementRange> sorted(slices.begin(), slices.end());
    std::sort(sorted.begin(), sorted.end(), [](const ElementRange& a, const ElementRange& b) { return a.begin < b.begin; });
    uint64_t next = 0;
    auto keep_p = [&](uint64_t from, uint64_t to) {
      for (uint64_t i = from; i < to; ++i) residual[i] = value_at(grad, i) + residual[i];
    };
    for (const ElementRange& r : sorted) {
      if (r.begin > next) keep_p(next, r.begin);
      next = std::max(next, r.begin + r.count);
    }
    keep_p(next, grad.size());
  }

  // encode_slices(), and with a residual (not empty) error feedback's too.
  template <class Gradient>
  void encode(Gradient grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
              std::span<const std::span<uint8_t>> outs, std::span<float> residual) {
    const std::optional<Cached> cached = std::exchange(cached_, std::nullopt);
    check_slices("terngrad", grad.size(), slices, outs, *this);
    quantize::EncodeParams p;
    p.clip_factor = clip_;
    p.seed = ctx.seed;
    p.step = ctx.step;
    p.tensor_id = ctx.tensor_id;
    p.rounding = rounding_of(params_.round);
    p.stream = params_.stream;
    p.packing = packing_;
    // A codec configured with share_scale=0 ignores a shared scale, as the
    // codecs that do not want one (fp32, fp16) do.
    if (share_scale_) p.shared_scale = ctx.shared_scale;
    // The cache holds the statistics of grad, or of grad + residual for
    // error feedback: it serves only the same spans.
    const bool hit = cached && cached->data == data_of(grad) && cached->size == grad.size() &&
                     cached->residual == (residual.empty() ? nullptr : residual.data());
    const quantize::TensorStats stats = hit ? cached->stats
                                        : residual.empty() ? quantize::compute_stats(grad)
                                                           : quantize::stats_of_sum(grad, residual);
    for (size_t i = 0; i < slices.size(); ++i) {
      p.element_offset = slices[i].begin;
      const Gradient x = grad.subspan(slices[i].begin, slices[i].count);
      if (residual.empty())
        quantize::encode_with_stats(x, stats, p, outs[i]);
      else
        quantize::encode_error_feedback(x, residual.subspan(slices[i].begin, slices[i].count), stats, p, outs[i]);
    }
  }


  // The header's count first: an entropy-coded payload's body is decoded to
  // validate it, and its count must not size anything before it is checked.
  static quantize::PayloadHeader read_counted_header(std::span<const uint8_t> payload, uint64_t n) {
    const quantize::PayloadHeader h = quantize::read_header(payload);
    if (h.count != n)
      throw quantize::CodecError(quantize::Errc::kInvalidArgument, "terngrad payload holds " + std::to_string(h.count) +
                                                                       " elements, expected " + std::to_string(n));
    return h;
  }

  // Every header is well formed, flagged shared, with the same scale and
  // count n (bodies are validated by sum_shared itself, once).
  static bool shares_one_scale(std::span<const std::span<const uint8_t>> payloads, uint64_t n) {
    uint32_t scale_bits = 0;
    for (size_t i = 0; i < payloads.size(); ++i) {
      quantize::PayloadHeader h;
      try {
        h = quantize::read_header(payloads[i]);  // any packing; bodies are validated by the sum itself
      } catch (const quantize::CodecError&) {
        return false;
      }
      const uint32_t bits = quantize::float_bits(h.scale);
      if (!h.shared_scale() || h.count != n) return false;
      if (i == 0) scale_bits = bits;
      if (bits != scale_bits) return false;
    }
    return true;
  }

  struct Cached {
    const void* data;  // float32 or halves
    size_t size;
    quantize::TensorStats stats;
    const float* residual = nullptr;  // error feedback: the stats are of data + residual
  };

  TernGradParams params_;
  quantize::Packing packing_ = packing_of(params_.pack);
  float clip_;
  bool share_scale_;
  std::optional<Cached> cached_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_terngrad_codec(const TernGradParams& params) {
  // bucket=B is a different payload (one scale per bucket): its own class.
  if (params.bucket != 0) return make_terngrad_bucketed_codec(params);
  return std::make_unique<TernGradCodec>(params);
}

}  // namespace terngrad::comm::detail
