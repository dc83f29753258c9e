// "fp32": the uncompressed baseline. The payload is the dense header and the
// raw float32 values, so decode(encode(g)) == g bit for bit (NaN included).
#include <algorithm>
#include <stdexcept>

#include "builtin_codecs.h"
#include "dense_header.h"
#include "parallel_ranges.h"
#include "slices.h"
#include "terngrad/quantize/dense_sum.h"

namespace terngrad::comm::detail {

namespace {

constexpr DenseType kType = DenseType::kFloat32;

class Fp32Codec final : public GradientCodec {
 public:
  std::string spec() const override { return "fp32"; }
  CodecConfig config() const override { return {Fp32Params{}, std::nullopt}; }
  size_t payload_bytes(uint64_t n) const override { return dense_payload_bytes(kType, n); }
  bool encodes_slices_separately() const override { return true; }  // a copy of each slice

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    (void)ctx;  // nothing random, nothing shared
    check_slices("fp32", grad.size(), slices, outs, *this);
    // The copy runs on the OpenMP team for large slices: one thread's copy
    // reaches about half the machine's memory bandwidth (bench/RESULTS.md).
    for (size_t i = 0; i < slices.size(); ++i) {
      write_dense_header(kType, slices[i].count, outs[i]);
      const float* src = grad.data() + slices[i].begin;
      uint8_t* body = outs[i].data() + kDenseHeaderBytes;
      for_each_range(slices[i].count, 16, [&](uint64_t b, uint64_t e) { store_f32s(src + b, e - b, body + 4 * b); });
    }
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    read_fp32_payload(payload, out);
  }

  // The float32 sum, in payload order, straight into the output payload: no
  // tensor-sized scratch (a parameter server sums hundreds of megabytes per
  // step). Same arithmetic as the default: 0 + p0 + p1 + ... per element;
  // the SIMD level's kernel (terngrad/quantize/dense_sum.h) gives the bits of
  // the scalar loop.
  std::optional<size_t> aggregate_bytes(uint64_t n, size_t count) const override {
    if (count == 0) return std::nullopt;
    return dense_payload_bytes(kType, n);
  }

  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (payloads.empty()) throw std::invalid_argument("fp32 aggregate: no payloads to sum");
    std::vector<const uint8_t*> bodies;
    bodies.reserve(payloads.size());
    for (const auto& p : payloads) {
      check_dense_payload(kType, p, n);
      bodies.push_back(p.data() + kDenseHeaderBytes);
    }
    out.resize(dense_payload_bytes(kType, n));
    write_dense_header(kType, n, out);
    quantize::dense_sum_f32(bodies, n, out.data() + kDenseHeaderBytes);
  }

  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    check_dense_payload(kType, payload, n);
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    const uint64_t n = check_dense_payload(kType, payload, out.size());
    const uint8_t* body = payload.data() + kDenseHeaderBytes;
    constexpr size_t kBlock = 2048;
    float v[kBlock];
    for (uint64_t b = 0; b < n; b += kBlock) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlock, n - b));
      load_f32s(body + 4 * b, m, v);
      for (size_t i = 0; i < m; ++i) out[b + i] += v[i];
    }
  }
};

}  // namespace

std::unique_ptr<GradientCodec> make_fp32_codec() {
  return std::make_unique<Fp32Codec>();
}

}  // namespace terngrad::comm::detail
