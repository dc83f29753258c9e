// "fp32": the uncompressed baseline. The payload is the dense header and the
// raw float32 values, so decode(encode(g)) == g bit for bit (NaN included).
#include <algorithm>
#include <stdexcept>

#include "builtin_codecs.h"
#include "dense_header.h"
#include "slices.h"
#include "spec_reader.h"

namespace terngrad::comm::detail {

namespace {

constexpr DenseType kType = DenseType::kFloat32;

class Fp32Codec final : public GradientCodec {
 public:
  std::string spec() const override { return "fp32"; }
  size_t payload_bytes(uint64_t n) const override { return dense_payload_bytes(kType, n); }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    (void)ctx;  // nothing random, nothing shared
    check_slices("fp32", grad.size(), slices, outs, *this);
    for (size_t i = 0; i < slices.size(); ++i)
      write_fp32_payload(grad.subspan(slices[i].begin, slices[i].count), outs[i]);
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    read_fp32_payload(payload, out);
  }

  // The float32 sum, in payload order, accumulated block by block straight
  // into the output payload: no tensor-sized scratch (a parameter server
  // sums hundreds of megabytes per step). Same arithmetic as the default:
  // 0 + p0 + p1 + ... per element.
  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (payloads.empty()) throw std::invalid_argument("fp32 aggregate: no payloads to sum");
    for (const auto& p : payloads) check_dense_payload(kType, p, n);
    out.resize(dense_payload_bytes(kType, n));
    write_dense_header(kType, n, out);
    constexpr size_t kBlock = 2048;
    float acc[kBlock], v[kBlock];
    for (uint64_t b = 0; b < n; b += kBlock) {
      const size_t m = static_cast<size_t>(std::min<uint64_t>(kBlock, n - b));
      std::fill(acc, acc + m, 0.0f);
      for (const auto& p : payloads) {
        load_f32s(p.data() + kDenseHeaderBytes + 4 * b, m, v);
        for (size_t i = 0; i < m; ++i) acc[i] += v[i];
      }
      store_f32s(acc, m, out.data() + kDenseHeaderBytes + 4 * b);
    }
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

std::unique_ptr<GradientCodec> make_fp32_codec(const CodecSpec& spec) {
  SpecReader reader(spec, {});  // rejects any key
  return std::make_unique<Fp32Codec>();
}

}  // namespace terngrad::comm::detail
