// "fp32": the uncompressed baseline. The payload is the dense header and the
// raw float32 values, so decode(encode(g)) == g bit for bit (NaN included).
#include <bit>
#include <cstring>

#include "builtin_codecs.h"
#include "dense_header.h"
#include "spec_reader.h"
#include "terngrad/quantize/format.h"  // load_le32/store_le32

namespace terngrad::comm::detail {

namespace {

constexpr DenseType kType = DenseType::kFloat32;

void load_floats(const uint8_t* in, size_t n, float* out) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, in, n * sizeof(float));
  } else {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t u = quantize::load_le32(in + 4 * i);
      std::memcpy(out + i, &u, sizeof u);
    }
  }
}

class Fp32Codec final : public GradientCodec {
 public:
  std::string spec() const override { return "fp32"; }
  size_t payload_bytes(uint64_t n) const override { return dense_payload_bytes(kType, n); }

  size_t encode(std::span<const float> grad, const EncodeContext& ctx, std::span<uint8_t> out) override {
    (void)ctx;  // nothing random, nothing shared
    write_dense_header(kType, grad.size(), out);
    uint8_t* body = out.data() + kDenseHeaderBytes;
    if constexpr (std::endian::native == std::endian::little) {
      if (!grad.empty()) std::memcpy(body, grad.data(), grad.size_bytes());
    } else {
      for (size_t i = 0; i < grad.size(); ++i) {
        uint32_t u;
        std::memcpy(&u, &grad[i], sizeof u);
        quantize::store_le32(body + 4 * i, u);
      }
    }
    return payload_bytes(grad.size());
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    const uint64_t n = check_dense_payload(kType, payload, out.size());
    if (n) load_floats(payload.data() + kDenseHeaderBytes, n, out.data());
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    const uint64_t n = check_dense_payload(kType, payload, out.size());
    const uint8_t* body = payload.data() + kDenseHeaderBytes;
    for (size_t i = 0; i < n; ++i) {
      float v;
      load_floats(body + 4 * i, 1, &v);  // memcpy per element: the body need not be 4-byte aligned
      out[i] += v;
    }
  }
};

}  // namespace

std::unique_ptr<GradientCodec> make_fp32_codec(const CodecSpec& spec) {
  SpecReader reader(spec, {});  // rejects any key
  return std::make_unique<Fp32Codec>();
}

}  // namespace terngrad::comm::detail
