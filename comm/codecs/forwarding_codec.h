// Private: a codec that wraps another and, unless it overrides a call,
// passes it through: what ef() and server_ef() change is then all that
// their files hold.
#pragma once

#include <memory>
#include <utility>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm::detail {

class ForwardingCodec : public GradientCodec {
 public:
  explicit ForwardingCodec(std::unique_ptr<GradientCodec> inner) : inner_(std::move(inner)) {}

  size_t payload_bytes(uint64_t n) const override { return inner_->payload_bytes(n); }
  bool variable_size() const override { return inner_->variable_size(); }
  size_t encoded_size(std::span<const uint8_t> written, uint64_t n) const override {
    return inner_->encoded_size(written, n);
  }
  bool sums_without_decoding() const override { return inner_->sums_without_decoding(); }
  bool wants_shared_scale() const override { return inner_->wants_shared_scale(); }
  float local_scale(std::span<const float> grad) override { return inner_->local_scale(grad); }
  float local_scale_half(quantize::HalfTensor grad) override { return inner_->local_scale_half(grad); }
  void encode_slices_half(quantize::HalfTensor grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                          std::span<const std::span<uint8_t>> outs) override {
    inner_->encode_slices_half(grad, ctx, slices, outs);
  }
  bool fuses_error_feedback() const override { return inner_->fuses_error_feedback(); }
  float prepare_error_feedback(std::span<const float> grad, std::span<const float> residual) override {
    return inner_->prepare_error_feedback(grad, residual);
  }
  void encode_slices_error_feedback(std::span<const float> grad, const EncodeContext& ctx,
                                    std::span<const ElementRange> slices, std::span<const std::span<uint8_t>> outs,
                                    std::span<float> residual) override {
    inner_->encode_slices_error_feedback(grad, ctx, slices, outs, residual);
  }
  float prepare_error_feedback_half(quantize::HalfTensor grad, std::span<const float> residual) override {
    return inner_->prepare_error_feedback_half(grad, residual);
  }
  void encode_slices_error_feedback_half(quantize::HalfTensor grad, const EncodeContext& ctx,
                                         std::span<const ElementRange> slices, std::span<const std::span<uint8_t>> outs,
                                         std::span<float> residual) override {
    inner_->encode_slices_error_feedback_half(grad, ctx, slices, outs, residual);
  }
  uint32_t presum_rounds() const override { return inner_->presum_rounds(); }
  uint64_t presum_floats(uint32_t round, uint64_t n) const override { return inner_->presum_floats(round, n); }
  void presum(uint32_t round, std::span<const float> grad, const EncodeContext& ctx, std::span<float> out) override {
    inner_->presum(round, grad, ctx, out);
  }
  bool slices_whole_variable_only() const override { return inner_->slices_whole_variable_only(); }
  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    inner_->encode_slices(grad, ctx, slices, outs);
  }
  void decode(std::span<const uint8_t> payload, std::span<float> out) const override { inner_->decode(payload, out); }
  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    inner_->decode_accumulate(payload, out);
  }
  void decode_with(std::span<const uint8_t> payload, const DecodeContext& ctx, std::span<float> out) const override {
    inner_->decode_with(payload, ctx, out);
  }
  void decode_accumulate_with(std::span<const uint8_t> payload, const DecodeContext& ctx,
                              std::span<float> out) const override {
    inner_->decode_accumulate_with(payload, ctx, out);
  }
  void validate(std::span<const uint8_t> payload, uint64_t n) const override { inner_->validate(payload, n); }
  std::vector<uint8_t> validate_for_server(std::span<const uint8_t> payload, uint64_t n) const override {
    return inner_->validate_for_server(payload, n);
  }
  std::optional<size_t> aggregate_bytes(uint64_t n, size_t count) const override {
    return inner_->aggregate_bytes(n, count);
  }
  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    inner_->aggregate(payloads, n, out);
  }
  bool aggregate_keeps_state() const override { return inner_->aggregate_keeps_state(); }
  void aggregate_step(std::span<const std::span<const uint8_t>> payloads, uint64_t n, const AggregateContext& ctx,
                      std::vector<uint8_t>& state, std::vector<uint8_t>& out) const override {
    inner_->aggregate_step(payloads, n, ctx, state, out);
  }
  void validate_aggregate_state(std::span<const uint8_t> state, uint64_t n) const override {
    inner_->validate_aggregate_state(state, n);
  }
  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    inner_->decode_aggregate(aggregate, out);
  }
  void decode_aggregate_with(std::span<const uint8_t> aggregate, const DecodeContext& ctx,
                             std::span<float> out) const override {
    inner_->decode_aggregate_with(aggregate, ctx, out);
  }
  bool observes_aggregate() const override { return inner_->observes_aggregate(); }
  void observe_aggregate(std::span<const uint8_t> aggregate, uint64_t n, const DecodeContext& ctx) override {
    inner_->observe_aggregate(aggregate, n, ctx);
  }
  std::vector<uint8_t> save_state() const override { return inner_->save_state(); }
  void load_state(std::span<const uint8_t> state) override { inner_->load_state(state); }

 protected:
  std::unique_ptr<GradientCodec> inner_;
};

}  // namespace terngrad::comm::detail
