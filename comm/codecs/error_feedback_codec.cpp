// "ef(<codec>)[:momentum=M]": error feedback around any codec
// (terngrad/comm/codec_config.h, ErrorFeedbackParams).
//
// Per (worker, variable) the wrapper keeps a residual e, the part of earlier
// gradients the codec has not sent yet. A step encodes p = g + e and keeps
//   e' = p - decode(sent)                         (elements no slice covers: e' = p)
// so sent + e' = g + e up to the rounding of that one subtraction, and
// nothing is lost, only delayed. With momentum M > 0 (DGC's momentum
// correction) the worker also keeps u: u' = M * u + g, p = u' + e, and u' is
// zeroed wherever the codec sent a nonzero value (momentum factor masking).
//
// The residual (and u) are the codec's state: save_state() / load_state()
// carry them through checkpoints bit for bit, so a resumed run encodes what
// the uninterrupted one would have. State blob, little-endian:
//   "TGEF" | u32 version = 1 | u64 n | u8 has_momentum | u8 has_inner | 2 bytes 0 |
//   n float32 residual | (n float32 momentum, if has_momentum) |
//   (the inner codec's own state blob, to the end, if has_inner: PowerSGD's
//   warm-start Q)
//
// Multi-round codecs (PowerSGD): presum() prepares p as local_scale() does
// and hands the inner codec p; the residual is p minus the inner codec's
// decoding of its own payload with the step's round sums (P^ Q_w^T).
//
// Fused path: where the inner codec offers it (terngrad) and there is no
// momentum, p and e' come from the codec's own two passes
// (GradientCodec::prepare_error_feedback / encode_slices_error_feedback),
// with the same floats as the steps above.
//
// Aggregation, validation and decoding are the inner codec's: the server
// never sees a residual.
//
// Like the codecs it wraps, an instance is one (worker, variable)'s and not
// thread-safe. local_scale() (scale-sharing codecs) prepares p and the very
// next encode_slices() of the same span uses it, as terngrad's stats cache
// does (terngrad_codec.cpp): the gradient must not change in between.
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "builtin_codecs.h"
#include "forwarding_codec.h"
#include "state_blob.h"
#include "slices.h"
#include "terngrad/quantize/format.h"

namespace terngrad::comm::detail {

namespace {

// "TGEF" read as little-endian u32; the header also holds has_momentum.
constexpr StateFrame kState{0x46454754u, 1, 20, "an error-feedback state"};
constexpr size_t kStateHeaderBytes = kState.header_bytes;
// Below this many elements the OpenMP team costs more than the pass.
constexpr size_t kParallelElements = size_t{1} << 17;

class ErrorFeedbackCodec final : public ForwardingCodec {
 public:
  ErrorFeedbackCodec(std::unique_ptr<GradientCodec> inner, const ErrorFeedbackParams& params)
      : ForwardingCodec(std::move(inner)), params_(params), spec_(to_spec(config())) {}

  // Printed once: encode_slices() names the codec in its checks every step.
  std::string spec() const override { return spec_; }
  CodecConfig config() const override {
    CodecConfig c = inner_->config();
    c.error_feedback = params_;
    return c;
  }

  // ef(ef(...)) is ef's own arithmetic, not its inner codec's.
  bool fuses_error_feedback() const override { return false; }

  float local_scale(std::span<const float> grad) override {
    if (fused()) {
      const float s = prepare_fused(grad);
      prepared_ = Prepared{grad.data(), grad.size()};
      return s;
    }
    prepare(grad);
    prepared_ = Prepared{grad.data(), grad.size()};
    return inner_->local_scale(corrected_);
  }

  // 16-bit gradients: the fused path hands the halves to the inner codec,
  // which reads them block by block; any other path works on the widened
  // copy (GradientCodec's defaults, then the calls above).
  float local_scale_half(quantize::HalfTensor grad) override {
    if (!fused()) return GradientCodec::local_scale_half(grad);
    size_state(grad.size());
    const float s = inner_->prepare_error_feedback_half(grad, residual_);
    prepared_ = Prepared{grad.bits.data(), grad.size()};
    return s;
  }

  void encode_slices_half(quantize::HalfTensor grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                          std::span<const std::span<uint8_t>> outs) override {
    if (!fused()) return GradientCodec::encode_slices_half(grad, ctx, slices, outs);
    const std::optional<Prepared> prepared = std::exchange(prepared_, std::nullopt);
    check_slices(spec(), grad.size(), slices, outs, *this);
    if (!prepared || prepared->data != grad.bits.data() || prepared->size != grad.size()) {
      size_state(grad.size());
      inner_->prepare_error_feedback_half(grad, residual_);
    }
    inner_->encode_slices_error_feedback_half(grad, ctx, slices, outs, residual_);
  }

  void presum(uint32_t round, std::span<const float> grad, const EncodeContext& ctx, std::span<float> out) override {
    // Round 0 starts the step: p is prepared afresh (prepare() is idempotent
    // within a step, so after local_scale() this costs a pass, not bits).
    if (round == 0 || !prepared_ || prepared_->data != grad.data() || prepared_->size != grad.size()) prepare(grad);
    prepared_ = Prepared{grad.data(), grad.size()};
    inner_->presum(round, corrected_, ctx, out);
  }

  void encode_slices(std::span<const float> grad, const EncodeContext& ctx, std::span<const ElementRange> slices,
                     std::span<const std::span<uint8_t>> outs) override {
    const std::optional<Prepared> prepared = std::exchange(prepared_, std::nullopt);
    check_slices(spec(), grad.size(), slices, outs, *this);
    const bool same = prepared && prepared->data == grad.data() && prepared->size == grad.size();
    if (fused()) {
      // p's statistics in one pass, then the payloads and e' in one, p never
      // stored (terngrad/quantize/error_feedback.h): the generic path's floats.
      if (!same) prepare_fused(grad);
      inner_->encode_slices_error_feedback(grad, ctx, slices, outs, residual_);
      return;
    }
    if (!same) prepare(grad);
    const std::span<const float> p(corrected_);
    inner_->encode_slices(p, ctx, slices, outs);  // throws before any state changes
    // The residual is against what is sent: a variable-size payload's used
    // bytes, read (and so checked) before any state changes.
    sent_bytes_.resize(slices.size());
    for (size_t i = 0; i < slices.size(); ++i) sent_bytes_[i] = inner_->encoded_size(outs[i], slices[i].count);
    const size_t n = grad.size();
    const DecodeContext dctx{ctx.tensor_id, ctx.step, ctx.presums};

    if (params_.momentum == 0.0f) {
      // e' = p - d in two passes rather than four: d - p is accumulated onto
      // -p by the inner codec's own decode_accumulate, and 0 - (d - p) is
      // exactly p - d (round-to-nearest is symmetric; 0 - x, not -x, gives
      // +0 where d == p, as p - d does). Elements outside
      // every slice keep e' = p: nothing of them was sent.
      // The last step, e' = 0 - (d - p), is left to whoever reads the
      // residual next (the next prepare(), save_state()): residual_ holds
      // d - p and negated_ says so, which saves a pass over the variable.
      float* e = residual_.data();
      const float* pp = p.data();
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
      for (size_t i = 0; i < n; ++i) e[i] = -pp[i];
      for (size_t i = 0; i < slices.size(); ++i)
        inner_->decode_accumulate_with(outs[i].first(sent_bytes_[i]), dctx,
                                       residual_span().subspan(slices[i].begin, slices[i].count));
      negated_ = true;
      return;
    }
    // Momentum masking needs what was sent, element by element.
    sent_.assign(n, 0.0f);
    negated_ = false;  // prepare() read the residual as it was; it is rewritten whole below
    for (size_t i = 0; i < slices.size(); ++i) {
      const std::span<float> part = std::span<float>(sent_).subspan(slices[i].begin, slices[i].count);
      inner_->decode_with(outs[i].first(sent_bytes_[i]), dctx, part);
    }
    momentum_.swap(momentum_next_);
    for (size_t i = 0; i < n; ++i) {
      residual_[i] = p[i] - sent_[i];
      if (sent_[i] != 0.0f) momentum_[i] = 0.0f;
    }
  }


  std::vector<uint8_t> save_state() const override {
    const std::vector<uint8_t> inner = inner_->save_state();
    if (residual_.empty() && inner.empty()) return {};  // nothing encoded yet: nothing to carry
    const bool has_momentum = params_.momentum != 0.0f && !residual_.empty();
    const size_t n = residual_.size();
    const size_t arrays_end = kStateHeaderBytes + n * 4 * (has_momentum ? 2 : 1);
    std::vector<uint8_t> blob(arrays_end + inner.size(), 0);
    write_state_header(kState, n, blob.data());
    blob[16] = has_momentum ? 1 : 0;
    blob[17] = inner.empty() ? 0 : 1;
    if (negated_) {  // the residual is 0 - (what residual_ holds)
      for (size_t i = 0; i < n; ++i) store_float_le(blob.data() + kStateHeaderBytes + 4 * i, 0.0f - residual_[i]);
    } else {
      store_floats(residual_, blob.data() + kStateHeaderBytes);
    }
    if (has_momentum) store_floats(momentum_, blob.data() + kStateHeaderBytes + n * 4);
    std::copy(inner.begin(), inner.end(), blob.begin() + static_cast<std::ptrdiff_t>(arrays_end));
    return blob;
  }

  // Checks the whole blob before anything changes.
  void load_state(std::span<const uint8_t> state) override {
    if (state.empty()) {
      inner_->load_state({});
      residual_.clear();
      momentum_.clear();
      negated_ = false;
      return;
    }
    const std::string what = spec() + " state";
    const uint64_t n = read_state_header(kState, state, what);
    const uint8_t has_momentum = state[16], has_inner = state[17];
    // A state saved before the first encode (n = 0) holds no momentum buffer.
    const bool want_momentum = params_.momentum != 0.0f && n != 0;
    if (has_momentum > 1 || (has_momentum == 1) != want_momentum)
      throw std::invalid_argument(what + ": " + (has_momentum ? "holds" : "lacks") +
                                  " a momentum buffer, the codec " + (want_momentum ? "needs" : "has") + " one");
    if (has_inner > 1 || state[18] != 0 || state[19] != 0)
      throw std::invalid_argument(what + ": header bytes 17..19 must be a 0/1 inner-state flag and two zeros");
    const uint64_t arrays = want_momentum ? 2 : 1;
    const uint64_t body = state.size() - kStateHeaderBytes;
    if (n > body / 4 / arrays || (has_inner ? body <= n * 4 * arrays : body != n * 4 * arrays))
      throw std::invalid_argument(what + ": " + std::to_string(state.size()) + " bytes do not hold " +
                                  std::to_string(arrays) + " array(s) of " + std::to_string(n) + " floats" +
                                  (has_inner ? " and the inner codec's state" : ""));
    std::vector<float> residual(n), momentum(want_momentum ? n : 0);
    load_floats(state.data() + kStateHeaderBytes, residual);
    if (want_momentum) load_floats(state.data() + kStateHeaderBytes + n * 4, momentum);
    // The inner codec checks its part before anything of ours changes.
    inner_->load_state(has_inner ? state.subspan(kStateHeaderBytes + n * 4 * arrays) : std::span<const uint8_t>{});
    residual_ = std::move(residual);
    momentum_ = std::move(momentum);
    negated_ = false;
  }

 private:
  struct Prepared {
    const void* data;  // float32 or halves
    size_t size;
  };

  // The fused path: no momentum, an inner codec that offers it, and a
  // residual held as it is (a state loaded or saved mid-way is never negated_
  // on this path: it always writes the residual itself).
  bool fused() const { return params_.momentum == 0.0f && inner_->fuses_error_feedback() && !negated_; }

  // The first call sizes the state; a gradient of another size is refused.
  void size_state(size_t n) {
    if (residual_.empty()) residual_.assign(n, 0.0f), negated_ = false;
    if (residual_.size() != n)
      throw std::invalid_argument(spec() + ": the residual holds " + std::to_string(residual_.size()) +
                                  " elements, the gradient has " + std::to_string(n) +
                                  " (a state from another variable?)");
  }

  // The statistics of g + e, kept by the inner codec; returns its local scale.
  float prepare_fused(std::span<const float> g) {
    size_state(g.size());
    return inner_->prepare_error_feedback(g, residual_);
  }

  // corrected_ = g + e (or, with momentum, u' = M u + g kept in
  // momentum_next_ and corrected_ = u' + e). The first call sizes the state.
  void prepare(std::span<const float> g) {
    const size_t n = g.size();
    size_state(n);
    corrected_.resize(n);
    if (params_.momentum == 0.0f) {
      float* p = corrected_.data();
      const float* e = residual_.data();
      const float* gg = g.data();
      if (negated_) {  // e = 0 - residual_: the last step of the previous update, done here
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
        for (size_t i = 0; i < n; ++i) p[i] = gg[i] + (0.0f - e[i]);
      } else {
#pragma omp parallel for simd schedule(static) if (n >= kParallelElements)
        for (size_t i = 0; i < n; ++i) p[i] = gg[i] + e[i];
      }
      return;
    }
    if (momentum_.empty()) momentum_.assign(n, 0.0f);
    momentum_next_.resize(n);
    const float m = params_.momentum;
    for (size_t i = 0; i < n; ++i) {
      momentum_next_[i] = m * momentum_[i] + g[i];
      corrected_[i] = momentum_next_[i] + residual_[i];
    }
  }

  std::span<float> residual_span() { return residual_; }

  static void store_floats(const std::vector<float>& v, uint8_t* out) {
    for (size_t i = 0; i < v.size(); ++i) store_float_le(out + 4 * i, v[i]);
  }
  static void load_floats(const uint8_t* in, std::vector<float>& v) {
    for (size_t i = 0; i < v.size(); ++i) v[i] = load_float_le(in + 4 * i);
  }

  ErrorFeedbackParams params_;
  std::string spec_;
  // The state. Without momentum, residual_ may hold d - p of the last step
  // (negated_), whose 0 - x is the residual: every reader applies it.
  std::vector<float> residual_, momentum_;
  bool negated_ = false;
  std::vector<float> corrected_, momentum_next_, sent_;  // scratch of one step
  std::vector<size_t> sent_bytes_;                        // per slice, of one step
  std::optional<Prepared> prepared_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_error_feedback_codec(std::unique_ptr<GradientCodec> inner,
                                                         const ErrorFeedbackParams& params) {
  return std::make_unique<ErrorFeedbackCodec>(std::move(inner), params);
}

}  // namespace terngrad::comm::detail
