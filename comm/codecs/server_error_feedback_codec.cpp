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
#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "builtin_codecs.h"
#include "forwarding_codec.h"
#include "terngrad/quantize/format.h"

namespace terngrad::comm::detail {

namespace {

constexpr uint32_t kStateMagic = 0x45534754u;  // "TGSE" read as little-endian u32
constexpr uint32_t kStateVersion = 1;
constexpr size_t kStateHeaderBytes = 16;
// The server's randomness: distinct from any worker's seed stream by this
// constant, and per slice by its first element (splitmix64's multiplier).
constexpr uint64_t kServerSeed = 0x5e7e5e7ef00dull;

uint64_t server_seed(uint64_t begin) { return kServerSeed ^ (begin * 0x9E3779B97F4A7C15ull); }

class ServerErrorFeedbackCodec final : public ForwardingCodec {
 public:
  explicit ServerErrorFeedbackCodec(std::unique_ptr<GradientCodec> inner)
      : ForwardingCodec(std::move(inner)), encoder_(make_codec(inner_->config())), spec_(to_spec(config())) {}

  std::string spec() const override { return spec_; }
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

  void aggregate_step(std::span<const std::span<const uint8_t>> payloads, uint64_t n, const AggregateContext& ctx,
                      std::vector<uint8_t>& state, std::vector<uint8_t>& out) const override {
    validate_aggregate_state(state, n);
    std::lock_guard<std::mutex> lock(mutex_);  // one slice's server; the scratch is shared
    inner_->aggregate(payloads, n, summed_);   // validates every payload
    corrected_.resize(n);
    inner_->decode_aggregate(summed_, corrected_);
    if (!state.empty()) {
      const uint8_t* e = state.data() + kStateHeaderBytes;
      for (uint64_t i = 0; i < n; ++i) corrected_[i] += load_float(e + 4 * i);
    }
    EncodeContext ec;
    ec.tensor_id = ctx.tensor_id;
    ec.step = ctx.step;
    ec.seed = server_seed(ctx.begin);
    if (encoder_->wants_shared_scale()) ec.shared_scale = encoder_->local_scale(corrected_);
    sent_.resize(encoder_->payload_bytes(n));
    encoder_->encode(corrected_, ec, sent_);  // throws (non-finite sum) before anything changes
    decoded_.resize(n);
    encoder_->decode(sent_, decoded_);
    // Commit: nothing below throws.
    state.resize(kStateHeaderBytes + 4 * n);
    quantize::store_le32(state.data(), kStateMagic);
    quantize::store_le32(state.data() + 4, kStateVersion);
    quantize::store_le32(state.data() + 8, static_cast<uint32_t>(n));
    quantize::store_le32(state.data() + 12, static_cast<uint32_t>(n >> 32));
    uint8_t* e = state.data() + kStateHeaderBytes;
    for (uint64_t i = 0; i < n; ++i) store_float(e + 4 * i, corrected_[i] - decoded_[i]);
    out.assign(sent_.begin(), sent_.end());
  }

  void validate_aggregate_state(std::span<const uint8_t> state, uint64_t n) const override {
    if (state.empty()) return;
    const std::string what = spec_ + " server state";
    if (state.size() < kStateHeaderBytes)
      throw std::invalid_argument(what + ": " + std::to_string(state.size()) + " bytes, shorter than its " +
                                  std::to_string(kStateHeaderBytes) + "-byte header");
    if (quantize::load_le32(state.data()) != kStateMagic)
      throw std::invalid_argument(what + ": bad magic (not a server error-feedback state)");
    if (const uint32_t v = quantize::load_le32(state.data() + 4); v != kStateVersion)
      throw std::invalid_argument(what + ": version " + std::to_string(v) + ", this build reads version " +
                                  std::to_string(kStateVersion));
    const uint64_t held = quantize::load_le32(state.data() + 8) |
                          static_cast<uint64_t>(quantize::load_le32(state.data() + 12)) << 32;
    if (held != n)
      throw std::invalid_argument(what + ": a residual of " + std::to_string(held) + " elements for a slice of " +
                                  std::to_string(n) + " (a state from another slice?)");
    if ((state.size() - kStateHeaderBytes) / 4 != n || (state.size() - kStateHeaderBytes) % 4 != 0)
      throw std::invalid_argument(what + ": " + std::to_string(state.size()) + " bytes do not hold " +
                                  std::to_string(n) + " floats after the header");
    for (uint64_t i = 0; i < n; ++i)
      if (!std::isfinite(load_float(state.data() + kStateHeaderBytes + 4 * i)))
        throw std::invalid_argument(what + ": residual element " + std::to_string(i) + " is not finite");
  }

  // What the server sent back: one payload of the codec.
  void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const override {
    inner_->decode(aggregate, out);
  }

 private:
  static float load_float(const uint8_t* p) {
    const uint32_t bits = quantize::load_le32(p);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  static void store_float(uint8_t* p, float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    quantize::store_le32(p, bits);
  }

  std::unique_ptr<GradientCodec> encoder_;  // the server's own instance (codecs cache between calls)
  std::string spec_;
  mutable std::mutex mutex_;
  mutable std::vector<uint8_t> summed_, sent_;
  mutable std::vector<float> corrected_, decoded_;
};

}  // namespace

std::unique_ptr<GradientCodec> make_server_error_feedback_codec(std::unique_ptr<GradientCodec> inner) {
  return std::make_unique<ServerErrorFeedbackCodec>(std::move(inner));
}

}  // namespace terngrad::comm::detail
