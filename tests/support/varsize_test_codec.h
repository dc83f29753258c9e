// A test-only codec whose payload size depends on the values, registered as
// "varsize_test" by register_varsize_test_codec(): what the generic plumbing
// for variable-size codecs (an entropy-coded payload) is tested with, in the
// codec, ps, trainer and C API tests alike.
//
// "varsize_test:threshold=T" (default 0) sends elements with |g| <= T as
// zeros: a lossy codec, so that error feedback has a residual to keep.
//
// Payload, little-endian:
//   u32 magic "TGVS" | u32 0 | u64 n | u64 used (the payload's bytes, header included) |
//   ceil(n / 8) bytes bitmap (bit i of byte i / 8: element i is nonzero) |
//   float32 of each nonzero element, in order
// so a payload of n elements with k nonzero ones uses
// kHeader + ceil(n / 8) + 4 k bytes, at most payload_bytes(n) (k = n). The
// values sent travel exactly (a -0.0 is a zero: it decodes to +0.0).
#pragma once

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>

#include "terngrad/comm/gradient_codec.h"

namespace varsize_test {

inline constexpr uint32_t kMagic = 0x53564754u;  // "TGVS"
inline constexpr size_t kHeader = 24;
inline constexpr const char* kName = "varsize_test";

inline uint64_t bitmap_bytes(uint64_t n) { return (n + 7) / 8; }
inline uint64_t used_bytes(uint64_t n, uint64_t nonzero) { return kHeader + bitmap_bytes(n) + 4 * nonzero; }

inline void store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }  // the test machines are little-endian
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

class VarSizeCodec final : public terngrad::comm::GradientCodec {
 public:
  // threshold: as given in the spec ("" for none), printed back by spec();
  // name: the name it is registered under; sent, when given, adds up the
  // used bytes of every payload encoded (what a caller should send).
  explicit VarSizeCodec(std::string threshold = "", std::string name = kName, std::atomic<uint64_t>* sent = nullptr)
      : threshold_text_(std::move(threshold)),
        threshold_(threshold_text_.empty() ? 0.0f : std::stof(threshold_text_)),
        name_(std::move(name)),
        sent_(sent) {}

  std::string spec() const override {
    return threshold_text_.empty() ? name_ : name_ + ":threshold=" + threshold_text_;
  }
  size_t payload_bytes(uint64_t n) const override { return used_bytes(n, n); }
  bool variable_size() const override { return true; }

  size_t encoded_size(std::span<const uint8_t> written, uint64_t n) const override {
    const uint64_t used = header(written, n);
    if (used > written.size())
      throw std::invalid_argument(std::string(kName) + " encoded_size: the header says " + std::to_string(used) +
                                  " bytes, the buffer has " + std::to_string(written.size()));
    return used;
  }

  void encode_slices(std::span<const float> grad, const terngrad::comm::EncodeContext& ctx,
                     std::span<const terngrad::comm::ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    (void)ctx;
    if (slices.size() != outs.size()) throw std::invalid_argument(std::string(kName) + ": slices and outputs differ");
    for (size_t s = 0; s < slices.size(); ++s) {
      const terngrad::comm::ElementRange r = slices[s];
      if (r.begin % terngrad::comm::kSliceAlignment != 0 || r.begin > grad.size() || r.count > grad.size() - r.begin)
        throw std::invalid_argument(std::string(kName) + ": slice " + std::to_string(s) + " is outside the gradient");
      if (outs[s].size() < payload_bytes(r.count))
        throw std::invalid_argument(std::string(kName) + ": output " + std::to_string(s) + " holds " +
                                    std::to_string(outs[s].size()) + " bytes, the capacity is " +
                                    std::to_string(payload_bytes(r.count)));
      for (uint64_t i = 0; i < r.count; ++i)
        if (!std::isfinite(grad[r.begin + i]))
          throw std::invalid_argument(std::string(kName) + ": element " + std::to_string(r.begin + i) +
                                      " is not finite");
    }
    for (size_t s = 0; s < slices.size(); ++s) {
      const std::span<const float> g = grad.subspan(slices[s].begin, slices[s].count);
      uint8_t* p = outs[s].data();
      std::memset(p, 0, kHeader + bitmap_bytes(g.size()));
      std::memcpy(p, &kMagic, 4);
      store64(p + 8, g.size());
      uint8_t* values = p + kHeader + bitmap_bytes(g.size());
      uint64_t k = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (!(std::fabs(g[i]) > threshold_)) continue;
        p[kHeader + i / 8] |= static_cast<uint8_t>(1u << (i % 8));
        std::memcpy(values + 4 * k++, &g[i], 4);
      }
      store64(p + 16, used_bytes(g.size(), k));
      if (sent_) *sent_ += used_bytes(g.size(), k);
    }
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    check(payload, out.size());
    for (float& x : out) x = 0.0f;
    add(payload, out);
  }
  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    check(payload, out.size());
    add(payload, out);
  }

 private:
  // The header of a payload of n elements; returns its used length (checked
  // against the capacity, not against the buffer).
  uint64_t header(std::span<const uint8_t> p, uint64_t n) const {
    const std::string what = std::string(kName) + " payload";
    if (p.size() < kHeader)
      throw std::invalid_argument(what + ": " + std::to_string(p.size()) + " bytes, the header alone is " +
                                  std::to_string(kHeader));
    uint32_t magic = 0, zero = 0;
    std::memcpy(&magic, p.data(), 4);
    std::memcpy(&zero, p.data() + 4, 4);
    if (magic != kMagic || zero != 0) throw std::invalid_argument(what + ": bad magic");
    if (load64(p.data() + 8) != n)
      throw std::invalid_argument(what + ": holds " + std::to_string(load64(p.data() + 8)) + " elements, expected " +
                                  std::to_string(n));
    const uint64_t used = load64(p.data() + 16);
    if (used < used_bytes(n, 0) || used > used_bytes(n, n) || (used - used_bytes(n, 0)) % 4 != 0)
      throw std::invalid_argument(what + ": used length " + std::to_string(used) + " is not one of " +
                                  std::to_string(n) + " elements");
    return used;
  }

  // Everything decode() relies on: length, bitmap and value count agree.
  void check(std::span<const uint8_t> p, uint64_t n) const {
    const uint64_t used = header(p, n);
    if (used != p.size())
      throw std::invalid_argument(std::string(kName) + " payload: the header says " + std::to_string(used) +
                                  " bytes, the payload has " + std::to_string(p.size()));
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; ++i) k += (p[kHeader + i / 8] >> (i % 8)) & 1u;
    if (used != used_bytes(n, k))
      throw std::invalid_argument(std::string(kName) + " payload: the bitmap marks " + std::to_string(k) +
                                  " values, the length holds " + std::to_string((used - used_bytes(n, 0)) / 4));
    if (n % 8 != 0 && (p[kHeader + n / 8] >> (n % 8)) != 0)
      throw std::invalid_argument(std::string(kName) + " payload: bitmap bits past the last element are set");
  }

  std::string threshold_text_;
  float threshold_;
  std::string name_;
  std::atomic<uint64_t>* sent_;

  static void add(std::span<const uint8_t> p, std::span<float> out) {
    const uint8_t* values = p.data() + kHeader + bitmap_bytes(out.size());
    uint64_t k = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      if (((p[kHeader + i / 8] >> (i % 8)) & 1u) == 0) continue;
      float v;
      std::memcpy(&v, values + 4 * k++, 4);
      out[i] += v;
    }
  }
};

// The threshold of a spec's parameters ("" for none); other keys throw.
inline std::string threshold_of(const terngrad::comm::CodecSpec& s) {
  std::string threshold;
  for (const auto& [key, value] : s.params) {
    if (key != "threshold") throw std::invalid_argument(s.name + ": unknown key " + key + " (it takes threshold=T)");
    threshold = value;
  }
  return threshold;
}

// Registers "varsize_test" once per process (register_codec refuses a name twice).
inline void register_varsize_test_codec() {
  static const bool registered = [] {
    terngrad::comm::register_codec(kName, [](const terngrad::comm::CodecSpec& s) {
      return std::make_unique<VarSizeCodec>(threshold_of(s));
    });
    return true;
  }();
  (void)registered;
}

}  // namespace varsize_test
