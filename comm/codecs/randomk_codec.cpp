// "randomk:ratio=R[,values=fp32|fp16][,rescale=0|1]": k elements of each
// slice at positions drawn from (step, tensor id, slice begin, slice count)
// alone (never the worker's seed), so every worker sends the same positions,
// no indices travel, and the server sums payloads as they are (format:
// comm/codecs/FORMATS_SPARSE.md).
//
// Slices. The draw is made per slice: a slice of `count` elements sends
// k = min(count, max(1, ceil(R * count))) values, so payload_bytes(count) is
// exact; positions are relative to the slice start, and the header records
// the slice's begin and count (the positions' inputs) with step and tensor id.
//
// rescale=1 sends float32(g * float32(count / k)): each element is sent with
// probability k / count, so the decoded value is unbiased. rescale=0 sends g
// (for ef()).
//
// Aggregation (sums_without_decoding() true): payloads of one slice (same
// count, k, step, tensor id, begin) sum their values elementwise in float32,
// in payload order (0 + v0 + v1 + ...), into a "sum" payload of the same
// positions with float32 values and the number of contributions;
// decode_aggregate() expands it (or a single worker payload).
//
// An instance keeps scratch buffers for encoding, so it is not thread-safe;
// decode, validate and aggregate use none.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "builtin_codecs.h"
#include "slices.h"
#include "sparse_internal.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/fp16.h"

namespace terngrad::comm::detail {

namespace {

constexpr uint32_t kRandomKMagicLe32 = 0x4B524754u;  // "TGRK"
constexpr uint8_t kRandomKVersion = 1;
constexpr size_t kHeaderBytes = 48;
constexpr size_t kMagicOffset = 0, kVersionOffset = 4, kTypeOffset = 5, kKindOffset = 6, kReservedOffset = 7,
                 kCountOffset = 8, kKOffset = 16, kBeginOffset = 24, kStepOffset = 32, kTensorOffset = 36,
                 kContribOffset = 40, kCrcOffset = 44;
constexpr uint8_t kKindWorker = 1, kKindSum = 2;
constexpr uint8_t kType32 = 32, kType16 = 16;

struct Header {
  uint8_t type, kind;
  uint64_t count, k, begin;
  uint32_t step, tensor_id, contributions;
  bool same_slice(const Header& o) const {
    return count == o.count && k == o.k && begin == o.begin && step == o.step && tensor_id == o.tensor_id;
  }
};

void write_header(const Header& h, uint8_t* p) {
  quantize::store_le32(p + kMagicOffset, kRandomKMagicLe32);
  p[kVersionOffset] = kRandomKVersion;
  p[kTypeOffset] = h.type;
  p[kKindOffset] = h.kind;
  p[kReservedOffset] = 0;
  quantize::store_le64(p + kCountOffset, h.count);
  quantize::store_le64(p + kKOffset, h.k);
  quantize::store_le64(p + kBeginOffset, h.begin);
  quantize::store_le32(p + kStepOffset, h.step);
  quantize::store_le32(p + kTensorOffset, h.tensor_id);
  quantize::store_le32(p + kContribOffset, h.contributions);
  quantize::store_le32(p + kCrcOffset, quantize::crc32_ieee(p, kCrcOffset));
}

size_t type_bytes(uint8_t type) { return type == kType32 ? 4 : 2; }

class RandomKCodec final : public GradientCodec {
 public:
  explicit RandomKCodec(const RandomKParams& params) : params_(params) {
    if (!(params.ratio > 0.0f && params.ratio <= 1.0f))
      throw std::invalid_argument("codec \"randomk\": ratio must be in (0, 1], got " + std::to_string(params.ratio));
    if (params.values != SparseValues::kFloat32 && params.values != SparseValues::kFloat16)
      throw std::invalid_argument("codec \"randomk\": unknown value type");
  }

  std::string spec() const override { return to_spec(config()); }
  CodecConfig config() const override { return {params_, std::nullopt}; }
  bool sums_without_decoding() const override { return true; }

  size_t payload_bytes(uint64_t n) const override {
    if (n > (uint64_t{1} << 60))
      throw std::invalid_argument("randomk payload_bytes: element count " + std::to_string(n) +
                                  " is too large for one payload");
    return kHeaderBytes + static_cast<size_t>(sparse_k(n, params_.ratio) * type_bytes(own_type()));
  }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    check_slices("randomk", grad.size(), slices, outs, *this);
    for (size_t s = 0; s < slices.size(); ++s) {
      const Header h{own_type(), kKindWorker, slices[s].count, sparse_k(slices[s].count, params_.ratio),
                     slices[s].begin, ctx.step, ctx.tensor_id, 1};
      randomk_positions(h.step, h.tensor_id, h.begin, h.count, h.k, pos_);
      const float scale =
          params_.rescale && h.k > 0 ? static_cast<float>(static_cast<double>(h.count) / static_cast<double>(h.k))
                                     : 1.0f;
      const float* x = grad.data() + h.begin;
      values_.resize(h.k);
      for (uint64_t i = 0; i < h.k; ++i) {
        if (i + 32 < h.k) __builtin_prefetch(x + pos_[i + 32]);  // a gather over the slice: overlap the misses
        const float v = x[pos_[i]] * scale;
        if (!std::isfinite(v))
          throw std::invalid_argument("randomk encode: element " + std::to_string(h.begin + pos_[i]) +
                                      (std::isfinite(x[pos_[i]]) ? " overflows when rescaled" : " is NaN or Inf"));
        values_[i] = v;
      }
      uint8_t* p = outs[s].data();
      write_header(h, p);
      if (h.type == kType32) {
        for (uint64_t i = 0; i < h.k; ++i)
          quantize::store_le32(p + kHeaderBytes + 4 * i, std::bit_cast<uint32_t>(values_[i]));
      } else {
        quantize::fp16::encode(values_.data(), h.k, p + kHeaderBytes);
      }
    }
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    std::vector<float> vals;
    const Header h = parse(payload, out.size(), "decode", false, vals);
    std::vector<uint64_t> pos;
    randomk_positions(h.step, h.tensor_id, h.begin, h.count, h.k, pos);
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t i = 0; i < pos.size(); ++i) out[pos[i]] = vals[i];
  }

  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    std::vector<float> vals;
    const Header h = parse(payload, out.size(), "decode", false, vals);
    std::vector<uint64_t> pos;
    randomk_positions(h.step, h.tensor_id, h.begin, h.count, h.k, pos);
    for (size_t i = 0; i < pos.size(); ++i) out[pos[i]] += vals[i];
  }

  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    std::vector<float> vals;
    parse(payload, n, "validate", false, vals);
  }

  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (payloads.empty()) throw std::invalid_argument("randomk aggregate: no payloads to sum");
    std::vector<float> sum, vals;
    Header first{};
    uint64_t contributions = 0;
    for (size_t j = 0; j < payloads.size(); ++j) {
      const Header h = parse(payloads[j], n, "aggregate", true, vals);
      if (j == 0) {
        first = h;
        sum.assign(h.k, 0.0f);
      } else if (!h.same_slice(first)) {
        throw std::runtime_error("randomk aggregate: payload " + std::to_string(j) +
                                 " is of another slice or step (count, k, begin, step, tensor id differ from payload 0)");
      }
      contributions += h.contributions;
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += vals[i];
    }
    if (contributions > std::numeric_limits<uint32_t>::max())
      throw std::runtime_error("randomk aggregate: more than 2^32 - 1 contributions");
    for (size_t i = 0; i < sum.size(); ++i)
      if (!std::isfinite(sum[i])) throw std::runtime_error("randomk aggregate: the float32 sum overflows");
    Header h = first;
    h.type = kType32;
    h.kind = kKindSum;
    h.contributions = static_cast<uint32_t>(contributions);
    out.resize(kHeaderBytes + 4 * sum.size());
    write_header(h, out.data());
    for (size_t i = 0; i < sum.size(); ++i)
      quantize::store_le32(out.data() + kHeaderBytes + 4 * i, std::bit_cast<uint32_t>(sum[i]));
  }

  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    std::vector<float> vals;
    const Header h = parse(aggregate, out.size(), "decode_aggregate", true, vals);
    std::vector<uint64_t> pos;
    randomk_positions(h.step, h.tensor_id, h.begin, h.count, h.k, pos);
    std::fill(out.begin(), out.end(), 0.0f);
    for (size_t i = 0; i < pos.size(); ++i) out[pos[i]] = vals[i];
  }

 private:
  uint8_t own_type() const { return params_.values == SparseValues::kFloat32 ? kType32 : kType16; }

  // Checks a payload of n elements: a worker payload of this codec's value
  // type, or (allow_sum) a float32 sum payload. Leaves its values in vals;
  // throws naming the problem before the caller writes anything.
  Header parse(std::span<const uint8_t> payload, uint64_t n, const char* op, bool allow_sum,
               std::vector<float>& vals) const {
    const std::string pre = std::string("randomk ") + op + ": ";
    auto bad = [&](const std::string& what) { throw std::runtime_error(pre + what); };
    if (payload.size() < kHeaderBytes)
      bad("payload has " + std::to_string(payload.size()) + " bytes, less than the 48-byte header");
    const uint8_t* p = payload.data();
    if (quantize::load_le32(p + kMagicOffset) != kRandomKMagicLe32) bad("bad magic (expected \"TGRK\")");
    if (p[kVersionOffset] != kRandomKVersion)
      bad("unsupported version " + std::to_string(p[kVersionOffset]) + " (expected 1)");
    if (p[kReservedOffset] != 0) bad("reserved header byte 7 is not zero");
    if (quantize::load_le32(p + kCrcOffset) != quantize::crc32_ieee(p, kCrcOffset)) bad("header CRC mismatch");
    Header h{p[kTypeOffset],
             p[kKindOffset],
             quantize::load_le64(p + kCountOffset),
             quantize::load_le64(p + kKOffset),
             quantize::load_le64(p + kBeginOffset),
             quantize::load_le32(p + kStepOffset),
             quantize::load_le32(p + kTensorOffset),
             quantize::load_le32(p + kContribOffset)};
    if (h.kind == kKindWorker) {
      if (h.type != own_type())
        bad("value type " + std::to_string(h.type) + ", this codec's payloads have type " +
            std::to_string(own_type()));
      if (h.contributions != 1) bad("a worker payload with " + std::to_string(h.contributions) + " contributions");
    } else if (h.kind == kKindSum) {
      if (!allow_sum) bad("a sum payload (decode it with decode_aggregate)");
      if (h.type != kType32) bad("a sum payload of value type " + std::to_string(h.type) + " (must be 32)");
      if (h.contributions == 0) bad("a sum payload of 0 contributions");
    } else {
      bad("unknown payload kind " + std::to_string(h.kind));
    }
    if (h.count != n)
      throw std::invalid_argument(pre + "payload holds " + std::to_string(h.count) + " elements, expected " +
                                  std::to_string(n));
    if (h.k != sparse_k(h.count, params_.ratio))
      bad("k = " + std::to_string(h.k) + ", but ratio " + std::to_string(params_.ratio) + " gives k = " +
          std::to_string(sparse_k(h.count, params_.ratio)) + " for " + std::to_string(h.count) + " elements");
    if (h.begin % kSliceAlignment != 0)
      bad("slice begin " + std::to_string(h.begin) + " is not a multiple of " + std::to_string(kSliceAlignment));
    const size_t w = type_bytes(h.type);
    if ((payload.size() - kHeaderBytes) % w != 0 || (payload.size() - kHeaderBytes) / w != h.k)
      bad("payload has " + std::to_string(payload.size()) + " bytes, k = " + std::to_string(h.k) + " values of " +
          std::to_string(w) + " bytes take " + std::to_string(kHeaderBytes + h.k * w));
    vals.resize(h.k);
    const uint8_t* body = p + kHeaderBytes;
    if (h.type == kType32) {
      for (uint64_t i = 0; i < h.k; ++i) vals[i] = std::bit_cast<float>(quantize::load_le32(body + 4 * i));
    } else {
      quantize::fp16::decode(body, h.k, vals.data());
    }
    for (uint64_t i = 0; i < h.k; ++i)
      if (!std::isfinite(vals[i])) bad("value " + std::to_string(i) + " is NaN or Inf");
    return h;
  }

  RandomKParams params_;
  std::vector<uint64_t> pos_;
  std::vector<float> values_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_randomk_codec(const RandomKParams& params) {
  return std::make_unique<RandomKCodec>(params);
}

}  // namespace terngrad::comm::detail
