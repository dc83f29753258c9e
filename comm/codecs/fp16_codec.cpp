// "fp16": gradients sent as IEEE binary16, half the bytes of fp32. Rounding
// and the saturating overflow rule are described in terngrad/quantize/fp16.h.
#include <stdexcept>
#include <vector>

#include "builtin_codecs.h"
#include "dense_header.h"
#include "parallel_ranges.h"
#include "terngrad/quantize/dense_sum.h"
#include "terngrad/quantize/fp16.h"
#include "slices.h"

namespace terngrad::comm::detail {

namespace {

namespace fp16 = quantize::fp16;

constexpr DenseType kType = DenseType::kFloat16;

class Fp16Codec final : public GradientCodec {
 public:
  std::string spec() const override { return "fp16"; }
  CodecConfig config() const override { return {Fp16Params{}, std::nullopt}; }
  size_t payload_bytes(uint64_t n) const override { return dense_payload_bytes(kType, n); }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    (void)ctx;  // deterministic rounding: nothing random, nothing shared
    check_slices("fp16", grad.size(), slices, outs, *this);
    for (size_t i = 0; i < slices.size(); ++i) {
      write_dense_header(kType, slices[i].count, outs[i]);
      // Element by element, so any cut gives the same halves: large slices
      // convert on the OpenMP team.
      const float* src = grad.data() + slices[i].begin;
      uint8_t* body = outs[i].data() + kDenseHeaderBytes;
      for_each_range(slices[i].count, 16, [&](uint64_t b, uint64_t e) { fp16::encode(src + b, e - b, body + 2 * b); });
    }
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    const uint64_t n = check_dense_payload(kType, payload, out.size());
    fp16::decode(payload.data() + kDenseHeaderBytes, n, out.data());
  }

  // The float32 sum of the halves, in payload order, into an "fp32" payload:
  // the default aggregate's arithmetic (0 + p0 + p1 + ... per element, each
  // half widened exactly) and its checks (every payload before any output),
  // in one pass straight into the output instead of R decode_accumulate
  // passes over a tensor-sized scratch (terngrad/quantize/dense_sum.h).
  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (payloads.empty()) throw std::invalid_argument("fp16 aggregate: no payloads to sum");
    std::vector<const uint8_t*> bodies;
    bodies.reserve(payloads.size());
    for (const auto& p : payloads) {
      check_dense_payload(kType, p, n);
      bodies.push_back(p.data() + kDenseHeaderBytes);
    }
    out.resize(dense_payload_bytes(DenseType::kFloat32, n));
    write_dense_header(DenseType::kFloat32, n, out);
    quantize::dense_sum_f16(bodies, n, out.data() + kDenseHeaderBytes);
  }

  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    check_dense_payload(kType, payload, n);
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    const uint64_t n = check_dense_payload(kType, payload, out.size());
    fp16::decode_accumulate(payload.data() + kDenseHeaderBytes, n, out.data());
  }
};

}  // namespace

std::unique_ptr<GradientCodec> make_fp16_codec() {
  return std::make_unique<Fp16Codec>();
}

}  // namespace terngrad::comm::detail
