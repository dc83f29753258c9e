// "server_ef(<codec>)": the server re-encodes the sum it sends back, with
// error feedback of its own (terngrad/comm/codec_config.h,
// ServerErrorFeedbackParams).
//
// Workers encode, validate and decode exactly as <codec> alone does (the
// calls pass through, forwarding_codec.h; so does the workers' own state). The
// server, per slice and step (aggregate_step):
//   S   = the workers' sum, as <codec>'s own aggregate gives it
//   p   = S + e                                    (e: the slice's residual, 0 at first)
//   out = encode(p) with <codec>                   (its own scale, clip, levels...)
//   e'  = p - decode(out)
// (where the codec fuses error feedback, terngrad: p's statistics and out
// with e' in two passes, p never stored, e' written 0 - (-p + d) as ef()
// writes it, which is p - d but for the sign of a zero where p is -0)
// so what the workers pull is one <codec> payload (2 bits per element for
// terngrad, whatever the worker count), and what it leaves out is sent in
// later steps. Randomness (stochastic codecs) comes from its own stream:
// seed = kServerSeed mixed with the slice's first element, counters from the
// variable and step, so no worker's draws repeat and no two slices share one.
// The server's scale is the slice's own (a codec that shares scales gets
// local_scale(p) as the shared scale): a variable split over several ps is
// re-encoded per slice, as the sparse codecs select per slice.
//
// The residual is the server's state (one per slice, checkpointed by whoever
// runs the server). State blob, little-endian:
//   "TGSE" | u32 version = 1 | u64 n | n float32 residual
// An empty state is a residual of zeros.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "builtin_codecs.h"
#include "forwarding_codec.h"
#include "state_blob.h"
#include "terngrad/quantize/format.h"

namespace terngrad::comm::detail {

namespace {

// "TGSE" read as little-endian u32.
constexpr StateFrame kState{0x45534754u, 1, 16, "a server error-feedback state"};
constexpr size_t kStateHeaderBytes = kState.header_bytes;
// The server's randomness: distinct from any worker's seed stream by this
// constant, and per slice by its first element (splitmix64's multiplier).
constexpr uint64_t kServerSeed = 0x5e7e5e7ef00dull;

uint64_t server_seed(uint64_t begin) { return kServerSeed ^ (begin * 0x9E3779B97F4A7C15ull); }

// The index of the first Inf or NaN among the little-endian floats of
// `bytes`, or their count. A chunk at a time, by the largest magnitude's
// bits (a max reduction, which vectorizes where an early exit would not);
// a chunk that holds one is searched again.
uint32_t magnitude_bits(const uint8_t* p) {
  uint32_t bits;
  if constexpr (std::endian::native == std::endian::little)
    std::memcpy(&bits, p, 4);
  else
    bits = quantize::load_le32(p);
  return bits & 0x7FFFFFFFu;
}
uint64_t first_non_finite_le(std::span<const uint8_t> bytes) {
  constexpr uint64_t kChunk = 4096;
  constexpr uint32_t kInf = 0x7F800000u;  // magnitudes from here up: Inf, NaN
  const uint64_t n = bytes.size() / 4;
  for (uint64_t b = 0; b < n; b += kChunk) {
    const uint64_t e = std::min(n, b + kChunk);
    uint32_t largest = 0;
    for (uint64_t i = b; i < e; ++i) largest = std::max(largest, magnitude_bits(bytes.data() + 4 * i));
    if (largest < kInf) continue;
    for (uint64_t i = b; i < e; ++i)
      if (magnitude_bits(bytes.data() + 4 * i) >= kInf) return i;
  }
  return n;
}
uint64_t first_non_finite(std::span<const float> x) {
  if constexpr (std::endian::native == std::endian::little)
    return first_non_finite_le({reinterpret_cast<const uint8_t*>(x.data()), 4 * x.size()});
  for (uint64_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i])) return i;
  return x.size();
}

class ServerErrorFeedbackCodec final : public ForwardingCodec {
 public:
  explicit ServerErrorFeedbackCodec(std::unique_ptr<GradientCodec> inner)
      : ForwardingCodec(std::move(inner)), encoder_(make_codec(inner_->config())), spec_(to_spec(config())) {}

  std::string spec() const override { return spec_; }

  // Workers encode as <codec> alone does, its fused error feedback and its
  // 16-bit reads included (ForwardingCodec): ef(server_ef(terngrad)) fuses on
  // the workers.

  CodecConfig config() const override {
    CodecConfig c = inner_->config();
    c.server_error_feedback = ServerErrorFeedbackParams{};
    return c;
  }
  // The server decodes, adds its residual and re-encodes.
  bool sums_without_decoding() const override { return false; }

  // Without a server state there is nothing to re-encode against: a caller
  // that does not keep state (aggregate_keeps_state()) gets told, not a
  // silently different sum.
  void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                 std::vector<uint8_t>& out) const override {
    (void)payloads;
    (void)n;
    (void)out;
    throw std::logic_error(spec_ + ": the server keeps a residual per slice; call aggregate_step() with it");
  }

  bool aggregate_keeps_state() const override { return true; }
  std::optional<size_t> aggregate_bytes(uint64_t, size_t) const override { return std::nullopt; }

  void aggregate_step(std::span<const std::span<const uint8_t>> payloads, uint64_t n, const AggregateContext& ctx,
                      std::vector<uint8_t>& state, std::vector<uint8_t>& out) const override {
    check_state_frame(state, n);  // its values are checked as they are read below
    std::lock_guard<std::mutex> lock(mutex_);  // one slice's server; the scratch is shared
    inner_->aggregate(payloads, n, summed_);   // validates every payload
    corrected_.resize(n);
    inner_->decode_aggregate(summed_, corrected_);
    if (encoder_->fuses_error_feedback()) {
      fused_step(n, ctx, state, out);
      return;
    }
    if (!state.empty()) {
      const uint8_t* e = state.data() + kStateHeaderBytes;
      for (uint64_t i = 0; i < n; ++i) {
        const float ei = load_float_le(e + 4 * i);
        if (!std::isfinite(ei)) throw non_finite_residual(i);  // nothing has changed yet
        corrected_[i] += ei;
      }
    }
    EncodeContext ec;
    ec.tensor_id = ctx.tensor_id;
    ec.step = ctx.step;
    ec.seed = server_seed(ctx.begin);
    if (encoder_->wants_shared_scale()) ec.shared_scale = encoder_->local_scale(corrected_);
    sent_.resize(encoder_->payload_bytes(n));
    // throws (non-finite sum) before anything changes; a variable-size
    // codec's payload is cut to the bytes it uses, all that is sent back
    sent_.resize(encoder_->encode(corrected_, ec, sent_));
    decoded_.resize(n);
    encoder_->decode(sent_, decoded_);
    // Commit: nothing below throws.
    state.resize(kStateHeaderBytes + 4 * n);
    write_state_header(kState, n, state.data());
    uint8_t* e = state.data() + kStateHeaderBytes;
    for (uint64_t i = 0; i < n; ++i) store_float_le(e + 4 * i, corrected_[i] - decoded_[i]);
    out.assign(sent_.begin(), sent_.end());
  }

  void validate_aggregate_state(std::span<const uint8_t> state, uint64_t n) const override {
    check_state_frame(state, n);
    if (state.empty()) return;
    if (const uint64_t bad = first_non_finite_le(state.subspan(kStateHeaderBytes)); bad < n)
      throw non_finite_residual(bad);
  }

  // What the server sent back: one payload of the codec.
  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    inner_->decode(aggregate, out);
  }
  void decode_aggregate_with(std::span<const uint8_t> aggregate, const DecodeContext& ctx,
                             std::span<float> out) const override {
    inner_->decode_with(aggregate, ctx, out);
  }

 private:
  // aggregate_step() with the encoder's fused error feedback: corrected_
  // holds the sum S; p = S + e is never stored, its statistics and the
  // payload with e' take two passes (terngrad/quantize/error_feedback.h).
  // e' is written 0 - (-p + d), ef()'s expression: p - d but for the sign of
  // a zero residual where p is -0.
  // The residual is read and rewritten where the state blob holds it (its
  // floats are little-endian, as this machine's): without a copy in and
  // out, the step's memory traffic drops from about 44 to 28 bytes per
  // element and two scalar loops go. A fresh slice's zeros are built aside
  // and swapped in.
  // Nothing changes before prepare_error_feedback() has accepted p (it
  // throws on a non-finite sum); the encode after it does not throw.
  void fused_step(uint64_t n, const AggregateContext& ctx, std::vector<uint8_t>& state,
                  std::vector<uint8_t>& out) const {
    const bool fresh = state.empty();
    std::vector<uint8_t>& blob = fresh ? fresh_ : state;
    if (fresh) {
      fresh_.assign(kStateHeaderBytes + 4 * n, 0);  // +0.0f is four zero bytes
      write_state_header(kState, n, fresh_.data());
    }
    std::span<float> residual = residual_of(blob, n);
    if (const uint64_t bad = first_non_finite(residual); bad < n) throw non_finite_residual(bad);
    EncodeContext ec;
    ec.tensor_id = ctx.tensor_id;
    ec.step = ctx.step;
    ec.seed = server_seed(ctx.begin);
    const float scale = encoder_->prepare_error_feedback(corrected_, residual);  // throws on a non-finite sum
    if (encoder_->wants_shared_scale()) ec.shared_scale = scale;
    sent_.resize(encoder_->payload_bytes(n));
    const ElementRange whole{0, n};
    const std::span<uint8_t> buffer(sent_);
    encoder_->encode_slices_error_feedback(corrected_, ec, std::span(&whole, 1), std::span(&buffer, 1), residual);
    sent_.resize(encoder_->encoded_size(sent_, n));  // a variable-size payload: the bytes it uses
    commit_residual(blob, residual);
    if (fresh) state.swap(fresh_);
    out.assign(sent_.begin(), sent_.end());
  }

  // The blob's n residual floats as this machine's floats: the blob's own
  // bytes on a little-endian machine, else a copy (written back by
  // commit_residual()).
  std::span<float> residual_of(std::vector<uint8_t>& blob, uint64_t n) const {
    uint8_t* bytes = blob.data() + kStateHeaderBytes;
    if constexpr (std::endian::native == std::endian::little) {
      // The blob's storage comes from operator new (aligned for any float),
      // and the header is 16 bytes: the floats are aligned.
      return {reinterpret_cast<float*>(bytes), n};
    } else {
      residual_.resize(n);
      for (uint64_t i = 0; i < n; ++i) residual_[i] = load_float_le(bytes + 4 * i);
      return residual_;
    }
  }
  void commit_residual(std::vector<uint8_t>& blob, std::span<const float> residual) const {
    if constexpr (std::endian::native != std::endian::little) {
      for (uint64_t i = 0; i < residual.size(); ++i)
        store_float_le(blob.data() + kStateHeaderBytes + 4 * i, residual[i]);
    }
  }

  // The header and length of a state for n elements (empty: fresh).
  void check_state_frame(std::span<const uint8_t> state, uint64_t n) const {
    if (state.empty()) return;
    const std::string what = spec_ + " server state";
    const uint64_t held = read_state_header(kState, state, what);
    if (held != n)
      throw std::invalid_argument(what + ": a residual of " + std::to_string(held) + " elements for a slice of " +
                                  std::to_string(n) + " (a state from another slice?)");
    if ((state.size() - kStateHeaderBytes) / 4 != n || (state.size() - kStateHeaderBytes) % 4 != 0)
      throw std::invalid_argument(what + ": " + std::to_string(state.size()) + " bytes do not hold " +
                                  std::to_string(n) + " floats after the header");
  }
  std::invalid_argument non_finite_residual(uint64_t i) const {
    return std::invalid_argument(spec_ + " server state: residual element " + std::to_string(i) + " is not finite");
  }

  std::unique_ptr<GradientCodec> encoder_;  // the server's own instance (codecs cache between calls)
  std::string spec_;
  mutable std::mutex mutex_;
  mutable std::vector<uint8_t> summed_, sent_, fresh_;
  mutable std::vector<float> corrected_, decoded_, residual_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_server_error_feedback_codec(std::unique_ptr<GradientCodec> inner) {
  return std::make_unique<ServerErrorFeedbackCodec>(std::move(inner));
}

}  // namespace terngrad::comm::detail
