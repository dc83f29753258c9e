// The parts of GradientCodec every codec shares: whole-variable encode, slice
// checks, and the default (float32) aggregate.
#include <stdexcept>
#include <string>

#include "dense_header.h"
#include "slices.h"
#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm {

size_t GradientCodec::encode(std::span<const float> grad, const EncodeContext& ctx, std::span<uint8_t> out) {
  const ElementRange whole{0, grad.size()};
  const std::span<uint8_t> outs[1] = {out};
  encode_slices(grad, ctx, std::span<const ElementRange>(&whole, 1), outs);
  return encoded_size(out, grad.size());
}

size_t GradientCodec::encoded_size(std::span<const uint8_t> written, uint64_t n) const {
  const size_t bytes = payload_bytes(n);
  if (written.size() < bytes)
    throw std::invalid_argument(spec() + " encoded_size: a payload of " + std::to_string(n) + " elements has " +
                                std::to_string(bytes) + " bytes, the buffer only " + std::to_string(written.size()));
  return bytes;
}

std::optional<size_t> GradientCodec::aggregate_bytes(uint64_t n, size_t count) const {
  (void)n;
  (void)count;
  return std::nullopt;
}

void GradientCodec::aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                              std::vector<uint8_t>& out) const {
  if (payloads.empty()) throw std::invalid_argument(spec() + " aggregate: no payloads to sum");
  std::vector<float> sum(n, 0.0f);
  for (const auto& p : payloads) decode_accumulate(p, sum);
  out.resize(detail::dense_payload_bytes(detail::DenseType::kFloat32, n));
  detail::write_fp32_payload(sum, out);
}

void GradientCodec::aggregate_step(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                                   const AggregateContext& ctx, std::vector<uint8_t>& state,
                                   std::vector<uint8_t>& out) const {
  (void)ctx;
  (void)state;
  aggregate(payloads, n, out);
}

void GradientCodec::validate_aggregate_state(std::span<const uint8_t> state, uint64_t n) const {
  (void)n;
  if (!state.empty())
    throw std::invalid_argument(spec() + ": a server state of " + std::to_string(state.size()) +
                                " bytes, but this codec keeps none on the server");
}

void GradientCodec::validate(std::span<const uint8_t> payload, uint64_t n) const {
  std::vector<float> scratch(n);
  decode(payload, scratch);
}

std::vector<uint8_t> GradientCodec::validate_for_server(std::span<const uint8_t> payload, uint64_t n) const {
  validate(payload, n);
  return {};
}

void GradientCodec::decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const {
  detail::read_fp32_payload(aggregate, out);
}

uint64_t GradientCodec::presum_floats(uint32_t round, uint64_t n) const {
  (void)n;
  throw std::invalid_argument(spec() + ": presum round " + std::to_string(round) + " of a codec with " +
                              std::to_string(presum_rounds()) + " pre-rounds");
}

std::span<const float> GradientCodec::widened(quantize::HalfTensor grad, bool starts_pair) {
  const bool same = grad.bits.data() == widened_from_ && grad.size() == widened_size_;
  std::vector<float>& copy = widened_[starts_pair || same ? 0 : 1];
  widened_from_ = starts_pair ? grad.bits.data() : nullptr;
  widened_size_ = starts_pair ? grad.size() : 0;
  copy.resize(grad.size());
  quantize::widen(grad, copy);
  return copy;
}

float GradientCodec::local_scale_half(quantize::HalfTensor grad) { return local_scale(widened(grad, true)); }

void GradientCodec::encode_slices_half(quantize::HalfTensor grad, const EncodeContext& ctx,
                                       std::span<const ElementRange> slices, std::span<const std::span<uint8_t>> outs) {
  encode_slices(widened(grad, false), ctx, slices, outs);
}

float GradientCodec::prepare_error_feedback_half(quantize::HalfTensor grad, std::span<const float> residual) {
  return prepare_error_feedback(widened(grad, true), residual);
}

void GradientCodec::encode_slices_error_feedback_half(quantize::HalfTensor grad, const EncodeContext& ctx,
                                                      std::span<const ElementRange> slices,
                                                      std::span<const std::span<uint8_t>> outs,
                                                      std::span<float> residual) {
  encode_slices_error_feedback(widened(grad, false), ctx, slices, outs, residual);
}

float GradientCodec::prepare_error_feedback(std::span<const float>, std::span<const float>) {
  throw std::logic_error(spec() + ": no fused error feedback (ask fuses_error_feedback() first)");
}

void GradientCodec::encode_slices_error_feedback(std::span<const float>, const EncodeContext&,
                                                 std::span<const ElementRange>, std::span<const std::span<uint8_t>>,
                                                 std::span<float>) {
  throw std::logic_error(spec() + ": no fused error feedback (ask fuses_error_feedback() first)");
}

void GradientCodec::presum(uint32_t round, std::span<const float> grad, const EncodeContext& ctx, std::span<float> out) {
  (void)grad;
  (void)ctx;
  (void)out;
  throw std::invalid_argument(spec() + ": presum round " + std::to_string(round) + " of a codec with " +
                              std::to_string(presum_rounds()) + " pre-rounds");
}

void GradientCodec::decode_with(std::span<const uint8_t> payload, const DecodeContext& ctx, std::span<float> out) const {
  (void)ctx;
  decode(payload, out);
}

void GradientCodec::decode_accumulate_with(std::span<const uint8_t> payload, const DecodeContext& ctx,
                                           std::span<float> out) const {
  (void)ctx;
  decode_accumulate(payload, out);
}

void GradientCodec::decode_aggregate_with(std::span<const uint8_t> aggregate, const DecodeContext& ctx,
                                          std::span<float> out) const {
  (void)ctx;
  decode_aggregate(aggregate, out);
}

void GradientCodec::observe_aggregate(std::span<const uint8_t> aggregate, uint64_t n, const DecodeContext& ctx) {
  (void)aggregate;
  (void)n;
  (void)ctx;
}

namespace detail {

void check_slices(const std::string& codec, uint64_t n, std::span<const ElementRange> slices,
                  std::span<const std::span<uint8_t>> outs, const GradientCodec& c) {
  if (slices.size() != outs.size())
    throw std::invalid_argument(codec + " encode_slices: " + std::to_string(slices.size()) + " slices but " +
                                std::to_string(outs.size()) + " output buffers");
  for (size_t i = 0; i < slices.size(); ++i) {
    const ElementRange& r = slices[i];
    if (r.begin % kSliceAlignment != 0 || r.begin > n || r.count > n - r.begin)
      throw std::invalid_argument(codec + " encode_slices: slice " + std::to_string(i) + " [" +
                                  std::to_string(r.begin) + ", +" + std::to_string(r.count) +
                                  ") must start at a multiple of " + std::to_string(kSliceAlignment) +
                                  " and lie inside the " + std::to_string(n) + " elements");
    if (outs[i].size() < c.payload_bytes(r.count))
      throw std::invalid_argument(codec + " encode_slices: output " + std::to_string(i) + " has " +
                                  std::to_string(outs[i].size()) + " bytes, slice needs " +
                                  std::to_string(c.payload_bytes(r.count)));
  }
}

}  // namespace detail

}  // namespace terngrad::comm
