// "powersgd:rank=R,rows=ROWS": PowerSGD (Vogels et al., NeurIPS 2019), rank-R
// power-iteration compression with warm start, the first multi-round codec
// (gradient_codec.h, presum_rounds()).
//
// A variable of n elements is the row-major matrix M (rows x cols, cols =
// n / rows; the trainer's codec plan sets rows from the variable's shape).
// One step, per worker w, with Q the codec's warm-start state (cols x R):
//   pre-round 0:  P_w = M_w Q                       (rows x R floats, summed over
//                                                    the workers in worker order: P)
//   payload:      P^ = GramSchmidt(P)               (orthonormal columns; the same
//                                                    on every worker, from the same P)
//                 Q_w = M_w^T P^                    (cols x R floats, the payload)
//   server:       Q_sum = sum of the Q_w            (float32, in payload order)
//   decode:       P^ Q_sum^T                        (the sum of the workers' rank-R
//                                                    approximations P^ Q_w^T)
//   after:        Q = Q_sum                         (observe_aggregate: warm start,
//                                                    on every worker's codec)
// so every codec of a variable holds the same Q at every step. A column of
// Q_sum that is exactly zero (a zero gradient) restarts from the initial
// draw, so a column once zero does not stay zero for the rest of the run.
//
// Arithmetic: products are accumulated in float64 and rounded once to float32
// (P_w, Q_w, P^ Q^T); Gram-Schmidt runs in float64 on the float32 sum P
// (modified Gram-Schmidt, columns in order; a column whose remainder is
// exactly zero stays zero). Every loop has a fixed order, so results are
// bit-reproducible on one build.
//
// The initial Q (cols x R, element e = j * R + k) is uniform in (-1, 1): the
// Philox4x32-10 draw of counter (e low, e high, tensor id, "PSGD") under the
// fixed key kInitialSeed, the first word's top 24 bits u giving
// (u + 0.5) / 2^23 - 1. It depends on nothing but the variable, so every
// worker (and every process of a cluster) starts from the same Q.
//
// Payload (comm/codecs/FORMATS.md, "powersgd"): a 48-byte header and cols x R
// float32 values of Q_w (worker payload) or of Q_sum (sum payload).
//
// State (save_state): the warm-start Q, "TGPQ" | u32 version 1 | u64 elements
// (cols * R) | u64 rows | u32 rank | u32 0 | floats; empty before the first
// observed step (the initial draw).
//
// An instance keeps scratch buffers and its Q, so it is not thread-safe;
// decoders and aggregate use only their arguments.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "builtin_codecs.h"
#include "state_blob.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/philox.h"

namespace terngrad::comm::detail {

namespace {

constexpr uint32_t kMagicLe32 = 0x53504754u;  // "TGPS"
constexpr uint8_t kVersion = 1;
constexpr size_t kHeaderBytes = 48;
constexpr size_t kMagicOffset = 0, kVersionOffset = 4, kKindOffset = 5, kReservedOffset = 6, kCountOffset = 8,
                 kRowsOffset = 16, kRankOffset = 24, kContribOffset = 28, kStepOffset = 32, kTensorOffset = 36,
                 kReserved2Offset = 40, kCrcOffset = 44;
constexpr uint8_t kKindWorker = 1, kKindSum = 2;
// The initial Q's Philox key and the counter's last word ("PSGD").
constexpr uint64_t kInitialSeed = 0x706f7765725347ull;
constexpr uint32_t kCounterTag = 0x44475350u;
// "TGPQ" read as little-endian u32; the header also holds rows and rank.
constexpr StateFrame kState{0x51504754u, 1, 32, "a PowerSGD warm-start state"};

struct Header {
  uint8_t kind;
  uint64_t n, rows;
  uint32_t rank, contributions, step, tensor_id;
};

void write_header(const Header& h, uint8_t* p) {
  quantize::store_le32(p + kMagicOffset, kMagicLe32);
  p[kVersionOffset] = kVersion;
  p[kKindOffset] = h.kind;
  p[kReservedOffset] = 0;
  p[kReservedOffset + 1] = 0;
  quantize::store_le64(p + kCountOffset, h.n);
  quantize::store_le64(p + kRowsOffset, h.rows);
  quantize::store_le32(p + kRankOffset, h.rank);
  quantize::store_le32(p + kContribOffset, h.contributions);
  quantize::store_le32(p + kStepOffset, h.step);
  quantize::store_le32(p + kTensorOffset, h.tensor_id);
  quantize::store_le32(p + kReserved2Offset, 0);
  quantize::store_le32(p + kCrcOffset, quantize::crc32_ieee(p, kCrcOffset));
}

float initial_q(uint32_t tensor_id, uint64_t e) {
  const quantize::Philox4x32Counter c{{static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32), tensor_id, kCounterTag}};
  const quantize::Philox4x32Key k{{static_cast<uint32_t>(kInitialSeed), static_cast<uint32_t>(kInitialSeed >> 32)}};
  const uint32_t u = quantize::philox4x32_10(c, k).v[0] >> 8;
  return static_cast<float>((static_cast<double>(u) + 0.5) * 0x1p-23 - 1.0);
}

class PowerSgdCodec final : public GradientCodec {
 public:
  explicit PowerSgdCodec(const PowerSgdParams& params) : params_(params), spec_(to_spec(config())) {
    if (params.rank == 0) throw std::invalid_argument("codec \"powersgd\": rank must be >= 1, got 0");
  }

  std::string spec() const override { return spec_; }
  CodecConfig config() const override { return {params_, std::nullopt}; }
  // Q payloads sum as float32 vectors of the same size.
  bool sums_without_decoding() const override { return true; }
  bool slices_whole_variable_only() const override { return true; }
  uint32_t presum_rounds() const override { return 1; }
  bool observes_aggregate() const override { return true; }

  size_t payload_bytes(uint64_t n) const override { return kHeaderBytes + 4 * cols_of(n, "payload_bytes") * params_.rank; }

  uint64_t presum_floats(uint32_t round, uint64_t n) const override {
    check_round(round, "presum_floats");
    cols_of(n, "presum_floats");
    return uint64_t{params_.rows} * params_.rank;
  }

  // P_w = M_w Q.
  void presum(uint32_t round, std::span<const float> grad, const EncodeContext& ctx, std::span<float> out) override {
    check_round(round, "presum");
    const uint64_t n = grad.size(), cols = cols_of(n, "presum"), rows = params_.rows, r = params_.rank;
    if (out.size() != rows * r)
      throw std::invalid_argument(spec_ + " presum: output has " + std::to_string(out.size()) + " floats, round 0 makes " +
                                  std::to_string(rows * r));
    check_finite(grad, "presum");
    const std::vector<float>& q = warm_q(ctx.tensor_id, cols);
    std::vector<double>& acc = acc_;
    for (uint64_t i = 0; i < rows; ++i) {
      acc.assign(r, 0.0);
      const float* m = grad.data() + i * cols;
      for (uint64_t j = 0; j < cols; ++j) {
        const double mij = m[j];
        const float* qj = q.data() + j * r;
        for (uint64_t k = 0; k < r; ++k) acc[k] += mij * qj[k];
      }
      for (uint64_t k = 0; k < r; ++k) out[i * r + k] = static_cast<float>(acc[k]);
    }
  }

  // Q_w = M_w^T P^, P^ from the summed P of ctx.presums[0].
  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    const uint64_t n = grad.size(), cols = cols_of(n, "encode"), rows = params_.rows, r = params_.rank;
    if (slices.size() != 1 || outs.size() != 1 || slices[0].begin != 0 || slices[0].count != n)
      throw std::invalid_argument(spec_ + " encode_slices: a PowerSGD payload holds factors of the whole matrix, not an "
                                  "element range: pass one slice [0, " + std::to_string(n) + ") (got " +
                                  std::to_string(slices.size()) + " slices)");
    if (outs[0].size() < payload_bytes(n))
      throw std::invalid_argument(spec_ + " encode_slices: output has " + std::to_string(outs[0].size()) +
                                  " bytes, the payload needs " + std::to_string(payload_bytes(n)));
    check_finite(grad, "encode");
    orthonormal_p(ctx.presums, "encode", p_hat_);
    std::vector<double>& acc = acc_;
    acc.assign(cols * r, 0.0);
    for (uint64_t i = 0; i < rows; ++i) {
      const float* m = grad.data() + i * cols;
      const double* p = p_hat_.data() + i * r;
      for (uint64_t j = 0; j < cols; ++j) {
        const double mij = m[j];
        double* a = acc.data() + j * r;
        for (uint64_t k = 0; k < r; ++k) a[k] += mij * p[k];
      }
    }
    uint8_t* out = outs[0].data();
    write_header({kKindWorker, n, rows, static_cast<uint32_t>(r), 1, ctx.step, ctx.tensor_id}, out);
    for (uint64_t e = 0; e < cols * r; ++e) {
      const float v = static_cast<float>(acc[e]);
      if (!std::isfinite(v)) throw std::invalid_argument(spec_ + " encode: Q overflows float32 (value " + std::to_string(e) + " is not finite)");
      store_float_le(out + kHeaderBytes + 4 * e, v);
    }
  }

  void decode(std::span<const uint8_t> payload, std::span<float> out) const override {
    (void)payload;
    (void)out;
    throw std::logic_error(needs_context("decode"));
  }
  void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const override {
    (void)payload;
    (void)out;
    throw std::logic_error(needs_context("decode_accumulate"));
  }
  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    (void)aggregate;
    (void)out;
    throw std::logic_error(needs_context("decode_aggregate"));
  }

  void decode_with(std::span<const uint8_t> payload, const DecodeContext& ctx, std::span<float> out) const override {
    expand(payload, ctx, out, "decode", false, false);
  }
  void decode_accumulate_with(std::span<const uint8_t> payload, const DecodeContext& ctx,
                              std::span<float> out) const override {
    expand(payload, ctx, out, "decode_accumulate", false, true);
  }
  void decode_aggregate_with(std::span<const uint8_t> aggregate, const DecodeContext& ctx,
                             std::span<float> out) const override {
    expand(aggregate, ctx, out, "decode_aggregate", true, false);
  }

  // What a server checks on receipt: Q alone, no round sums needed.
  void validate(std::span<const uint8_t> payload, uint64_t n) const override {
    std::vector<float> q;
    parse(payload, n, "validate", false, q);
  }

  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    if (payloads.empty()) throw std::invalid_argument(spec_ + " aggregate: no payloads to sum");
    std::vector<float> sum, q;
    Header first{};
    uint64_t contributions = 0;
    for (size_t w = 0; w < payloads.size(); ++w) {
      const Header h = parse(payloads[w], n, "aggregate", true, q);
      if (w == 0) {
        first = h;
        sum.assign(q.size(), 0.0f);
      } else if (h.step != first.step || h.tensor_id != first.tensor_id) {
        throw std::runtime_error(spec_ + " aggregate: payload " + std::to_string(w) + " is of step " +
                                 std::to_string(h.step) + ", tensor " + std::to_string(h.tensor_id) + "; payload 0 of step " +
                                 std::to_string(first.step) + ", tensor " + std::to_string(first.tensor_id));
      }
      contributions += h.contributions;
      for (size_t e = 0; e < sum.size(); ++e) sum[e] += q[e];
    }
    if (contributions > std::numeric_limits<uint32_t>::max())
      throw std::runtime_error(spec_ + " aggregate: more than 2^32 - 1 contributions");
    for (size_t e = 0; e < sum.size(); ++e)
      if (!std::isfinite(sum[e])) throw std::runtime_error(spec_ + " aggregate: the float32 sum of Q overflows");
    Header h = first;
    h.kind = kKindSum;
    h.contributions = static_cast<uint32_t>(contributions);
    out.resize(kHeaderBytes + 4 * sum.size());
    write_header(h, out.data());
    for (size_t e = 0; e < sum.size(); ++e) store_float_le(out.data() + kHeaderBytes + 4 * e, sum[e]);
  }

  // Warm start: Q = this step's Q_sum (zero columns restart from the draw).
  void observe_aggregate(std::span<const uint8_t> aggregate, uint64_t n, const DecodeContext& ctx) override {
    std::vector<float> q;
    parse(aggregate, n, "observe_aggregate", true, q);
    const uint64_t cols = n / params_.rows, r = params_.rank;
    for (uint64_t k = 0; k < r; ++k) {
      bool zero = true;
      for (uint64_t j = 0; j < cols && zero; ++j) zero = q[j * r + k] == 0.0f;
      if (zero)
        for (uint64_t j = 0; j < cols; ++j) q[j * r + k] = initial_q(ctx.tensor_id, j * r + k);
    }
    q_ = std::move(q);
  }

  std::vector<uint8_t> save_state() const override {
    if (q_.empty()) return {};
    std::vector<uint8_t> blob(kState.header_bytes + 4 * q_.size(), 0);
    write_state_header(kState, q_.size(), blob.data());
    quantize::store_le64(blob.data() + 16, params_.rows);
    quantize::store_le32(blob.data() + 24, params_.rank);
    for (size_t e = 0; e < q_.size(); ++e) store_float_le(blob.data() + kState.header_bytes + 4 * e, q_[e]);
    return blob;
  }

  // Checks the whole blob before anything changes.
  void load_state(std::span<const uint8_t> state) override {
    if (state.empty()) {
      q_.clear();
      return;
    }
    const std::string what = spec_ + " state";
    const uint64_t count = read_state_header(kState, state, what);
    const uint64_t rows = quantize::load_le64(state.data() + 16);
    const uint32_t rank = quantize::load_le32(state.data() + 24);
    if (rows != params_.rows || rank != params_.rank)
      throw std::invalid_argument(what + ": a state of rows=" + std::to_string(rows) + ", rank=" + std::to_string(rank) +
                                  ", this codec has rows=" + std::to_string(params_.rows) + ", rank=" +
                                  std::to_string(params_.rank));
    if (quantize::load_le32(state.data() + 28) != 0) throw std::invalid_argument(what + ": reserved bytes 28..31 are not zero");
    if (count % rank != 0 || count > (state.size() - kState.header_bytes) / 4 ||
        state.size() - kState.header_bytes != 4 * count)
      throw std::invalid_argument(what + ": " + std::to_string(state.size()) + " bytes do not hold Q of " +
                                  std::to_string(count) + " floats (a multiple of rank " + std::to_string(rank) + ")");
    std::vector<float> q(count);
    for (uint64_t e = 0; e < count; ++e) {
      q[e] = load_float_le(state.data() + kState.header_bytes + 4 * e);
      if (!std::isfinite(q[e])) throw std::invalid_argument(what + ": Q value " + std::to_string(e) + " is not finite");
    }
    q_ = std::move(q);  // checked against the variable's size on first use
  }

 private:
  std::string needs_context(const char* op) const {
    return spec_ + " " + op + ": a PowerSGD payload holds Q alone; decoding it needs the step's summed P (call " + op +
           "_with with a DecodeContext holding the pre-round sums)";
  }

  void check_round(uint32_t round, const char* op) const {
    if (round != 0)
      throw std::invalid_argument(spec_ + " " + op + ": round " + std::to_string(round) + ", PowerSGD has one pre-round (0)");
  }

  // cols for a variable of n elements; throws naming rows, rank and n.
  uint64_t cols_of(uint64_t n, const char* op) const {
    const std::string pre = spec_ + " " + op + ": ";
    if (params_.rows == 0)
      throw std::invalid_argument(pre + "rows is not set: the matrix shape of the variable is unknown (the trainer's codec "
                                  "plan sets rows from the variable's shape; elsewhere write powersgd:rank=R,rows=ROWS)");
    if (n == 0 || n % params_.rows != 0)
      throw std::invalid_argument(pre + "rows=" + std::to_string(params_.rows) + " does not divide the variable's " +
                                  std::to_string(n) + " elements");
    if (n > (uint64_t{1} << 40))
      throw std::invalid_argument(pre + "element count " + std::to_string(n) + " is too large for one payload");
    const uint64_t cols = n / params_.rows;
    if (params_.rank > std::min<uint64_t>(params_.rows, cols))
      throw std::invalid_argument(pre + "rank=" + std::to_string(params_.rank) + " exceeds min(rows, cols) = min(" +
                                  std::to_string(params_.rows) + ", " + std::to_string(cols) + ") of the " +
                                  std::to_string(n) + "-element variable");
    return cols;
  }

  void check_finite(std::span<const float> grad, const char* op) const {
    for (size_t i = 0; i < grad.size(); ++i)
      if (!std::isfinite(grad[i]))
        throw std::invalid_argument(spec_ + " " + op + ": gradient element " + std::to_string(i) +
                                    " is NaN or Inf (not finite)");
  }

  // The warm-start Q (the initial draw before any observed step).
  const std::vector<float>& warm_q(uint32_t tensor_id, uint64_t cols) {
    const uint64_t count = cols * params_.rank;
    if (!q_.empty() && q_.size() != count)
      throw std::invalid_argument(spec_ + ": the warm-start Q holds " + std::to_string(q_.size()) +
                                  " floats, the variable needs " + std::to_string(count) + " (a state from another variable?)");
    if (q_.empty()) {
      init_q_.resize(count);
      for (uint64_t e = 0; e < count; ++e) init_q_[e] = initial_q(tensor_id, e);
      return init_q_;
    }
    return q_;
  }

  // P^ (rows x R, float64 holding float32 values) from the pre-round sum P.
  void orthonormal_p(std::span<const std::span<const float>> presums, const char* op, std::vector<double>& p_hat) const {
    const uint64_t rows = params_.rows, r = params_.rank;
    if (presums.size() != 1 || presums[0].size() != rows * r)
      throw std::invalid_argument(spec_ + " " + op + ": needs the summed P of round 0 (" + std::to_string(rows * r) +
                                  " floats); got " + std::to_string(presums.size()) + " round sums" +
                                  (presums.empty() ? std::string() : " of " + std::to_string(presums[0].size()) + " floats"));
    const std::span<const float> p = presums[0];
    std::vector<double> a(p.begin(), p.end());
    for (size_t e = 0; e < a.size(); ++e)
      if (!std::isfinite(a[e]))
        throw std::invalid_argument(spec_ + " " + op + ": the summed P value " + std::to_string(e) + " is not finite");
    // Modified Gram-Schmidt, column by column (columns are strided by r).
    for (uint64_t k = 0; k < r; ++k) {
      double norm2 = 0.0;
      for (uint64_t i = 0; i < rows; ++i) norm2 += a[i * r + k] * a[i * r + k];
      const double norm = std::sqrt(norm2);
      if (norm > 0.0)
        for (uint64_t i = 0; i < rows; ++i) a[i * r + k] /= norm;
      for (uint64_t l = k + 1; l < r && norm > 0.0; ++l) {
        double dot = 0.0;
        for (uint64_t i = 0; i < rows; ++i) dot += a[i * r + k] * a[i * r + l];
        for (uint64_t i = 0; i < rows; ++i) a[i * r + l] -= dot * a[i * r + k];
      }
    }
    p_hat.resize(a.size());
    for (size_t e = 0; e < a.size(); ++e) p_hat[e] = static_cast<float>(a[e]);
  }

  // out (=|+=) P^ Q^T for a worker or (aggregate) sum payload; checks
  // everything before it writes.
  void expand(std::span<const uint8_t> payload, const DecodeContext& ctx, std::span<float> out, const char* op,
              bool allow_sum, bool accumulate) const {
    std::vector<float> q;
    parse(payload, out.size(), op, allow_sum, q);
    std::vector<double> p_hat;
    orthonormal_p(ctx.presums, op, p_hat);
    const uint64_t rows = params_.rows, cols = out.size() / rows, r = params_.rank;
    for (uint64_t i = 0; i < rows; ++i) {
      const double* p = p_hat.data() + i * r;
      float* o = out.data() + i * cols;
      for (uint64_t j = 0; j < cols; ++j) {
        const float* qj = q.data() + j * r;
        double s = 0.0;
        for (uint64_t k = 0; k < r; ++k) s += p[k] * qj[k];
        o[j] = accumulate ? o[j] + static_cast<float>(s) : static_cast<float>(s);
      }
    }
  }

  // Checks a payload of n elements, leaves its Q in q; throws naming the
  // problem (std::invalid_argument for a payload of another size than asked).
  Header parse(std::span<const uint8_t> payload, uint64_t n, const char* op, bool allow_sum, std::vector<float>& q) const {
    const std::string pre = spec_ + " " + op + ": ";
    auto bad = [&](const std::string& what) { throw std::runtime_error(pre + what); };
    if (payload.size() < kHeaderBytes)
      bad("payload has " + std::to_string(payload.size()) + " bytes, less than the 48-byte header");
    const uint8_t* p = payload.data();
    if (quantize::load_le32(p + kMagicOffset) != kMagicLe32) bad("bad magic (expected \"TGPS\")");
    if (p[kVersionOffset] != kVersion) bad("unsupported version " + std::to_string(p[kVersionOffset]) + " (expected 1)");
    if (p[kReservedOffset] != 0 || p[kReservedOffset + 1] != 0 || quantize::load_le32(p + kReserved2Offset) != 0)
      bad("reserved header bytes are not zero");
    if (quantize::load_le32(p + kCrcOffset) != quantize::crc32_ieee(p, kCrcOffset)) bad("header CRC mismatch");
    const Header h{p[kKindOffset],
                   quantize::load_le64(p + kCountOffset),
                   quantize::load_le64(p + kRowsOffset),
                   quantize::load_le32(p + kRankOffset),
                   quantize::load_le32(p + kContribOffset),
                   quantize::load_le32(p + kStepOffset),
                   quantize::load_le32(p + kTensorOffset)};
    if (h.kind == kKindWorker) {
      if (h.contributions != 1) bad("a worker payload with " + std::to_string(h.contributions) + " contributions");
    } else if (h.kind == kKindSum) {
      if (!allow_sum) bad("a sum payload (decode it with decode_aggregate_with)");
      if (h.contributions == 0) bad("a sum payload of 0 contributions");
    } else {
      bad("unknown payload kind " + std::to_string(h.kind));
    }
    if (h.n != n)
      throw std::invalid_argument(pre + "payload holds " + std::to_string(h.n) + " elements, expected " + std::to_string(n));
    if (h.rows != params_.rows || h.rank != params_.rank)
      bad("payload of rows=" + std::to_string(h.rows) + ", rank=" + std::to_string(h.rank) + ", this codec has rows=" +
          std::to_string(params_.rows) + ", rank=" + std::to_string(params_.rank));
    const uint64_t cols = cols_of(n, op), count = cols * params_.rank;
    if ((payload.size() - kHeaderBytes) % 4 != 0 || (payload.size() - kHeaderBytes) / 4 != count)
      bad("payload has " + std::to_string(payload.size()) + " bytes, Q of " + std::to_string(cols) + " x " +
          std::to_string(params_.rank) + " floats takes " + std::to_string(kHeaderBytes + 4 * count));
    q.resize(count);
    for (uint64_t e = 0; e < count; ++e) {
      q[e] = load_float_le(p + kHeaderBytes + 4 * e);
      if (!std::isfinite(q[e])) bad("Q value " + std::to_string(e) + " is NaN or Inf");
    }
    return h;
  }

  PowerSgdParams params_;
  std::string spec_;
  std::vector<float> q_;                 // the warm-start state (empty: the initial draw)
  std::vector<float> init_q_;            // scratch: the initial draw
  std::vector<double> acc_, p_hat_;      // scratch
};

}  // namespace

std::unique_ptr<GradientCodec> make_powersgd_codec(const PowerSgdParams& params) {
  return std::make_unique<PowerSgdCodec>(params);
}

}  // namespace terngrad::comm::detail
