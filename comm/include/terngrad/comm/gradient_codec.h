// The pluggable gradient codec: how one worker's gradient tensor becomes bytes
// on the wire and back. The in-process virtual-worker trainer and the
// distributed ps/worker path use this same interface, so a codec written once
// (fp32, fp16, terngrad, or a user's own) works in both.
//
// Codecs are created from a spec string or its typed form (codec_config.h):
//   make_codec("fp32"), make_codec("terngrad:clip=2.5"), make_codec("ef(topk:ratio=0.01)"),
//   make_codec(CodecConfig{QsgdParams{.levels = 15}}).
//
// The life of one variable's gradient in one step:
//   worker:  local_scale(grad)        (codecs that share scales; max-reduced)
//            presum(round, grad, ...) (multi-round codecs: k pre-rounds of float
//                                      vectors, each summed over the workers)
//            encode_slices(grad, ...) (one payload per slice / ps shard)
//   server:  aggregate(payloads of the workers, in worker order)
//   worker:  decode_aggregate_with(...) (the sum), then scaled by 1/R
//            observe_aggregate(...)   (codecs whose next step depends on this sum)
// The in-process trainer runs the same calls without a network, so both give
// the same bits.
//
// Multi-round codecs (PowerSGD: P = M Q is summed before Q = M^T P^ is sent)
// declare presum_rounds() = k > 0. Round i: every worker computes
// presum(i, ...) (presum_floats(i, n) floats), whoever runs the step sums them
// over the workers in worker order (float32, 0 + w0 + w1 + ...), and hands the
// sums of rounds 0..i to round i+1 and to encode_slices() (EncodeContext::
// presums) and all k sums to the decoders (DecodeContext::presums). The
// payloads of the final round travel and are summed as any codec's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "terngrad/comm/codec_config.h"
#include "terngrad/comm/codec_spec.h"
#include "terngrad/quantize/half_input.h"

namespace terngrad::comm {

// What an encoder needs besides the values.
struct EncodeContext {
  uint32_t tensor_id = 0;  // stable id of the variable (its index in the model)
  uint32_t step = 0;       // global step
  uint64_t seed = 0;       // per worker: workers must draw independent randomness
  // Scale sharing: the max over workers of local_scale(), for codecs that want it.
  std::optional<float> shared_scale;
  // Multi-round codecs: the workers' sums of the pre-rounds done so far
  // (presum: rounds before the one asked; encode_slices: all of them). The
  // spans are the caller's and live for the call.
  std::vector<std::span<const float>> presums;
};

// What decoding needs besides the payload: for multi-round codecs, the sums of
// every pre-round of the payload's step (a PowerSGD payload holds Q; the sum
// of P gives P^). Single-round codecs ignore it.
struct DecodeContext {
  uint32_t tensor_id = 0;  // as EncodeContext::tensor_id
  uint32_t step = 0;
  std::vector<std::span<const float>> presums;  // [round], presum_floats(round, n) floats each
};

// Where a server's sum belongs: the variable, the step and the slice's first
// element (a codec that re-encodes the sum draws its randomness from these).
struct AggregateContext {
  uint32_t tensor_id = 0;  // as EncodeContext::tensor_id
  uint32_t step = 0;
  uint64_t begin = 0;  // first element of the slice in its variable
};

// Elements [begin, begin + count) of a variable.
struct ElementRange {
  uint64_t begin = 0;
  uint64_t count = 0;
};

// Slices start at multiples of this many elements (TernGrad packs 4 per byte).
inline constexpr uint64_t kSliceAlignment = 4;

class GradientCodec {
 public:
  virtual ~GradientCodec() = default;

  // Canonical spec, e.g. "terngrad:clip=2.5,share_scale=1": make_codec(spec())
  // rebuilds an equal codec. Built-in codecs print to_spec(config()).
  virtual std::string spec() const = 0;

  // Typed parameters (codec_config.h). Built-in codecs return their own
  // struct; the default, for a user's registered codec, is its parsed spec()
  // as CustomParams.
  virtual CodecConfig config() const;

  // Whether aggregate() sums payloads without decoding them to floats
  // (TernGrad's shared-scale counts, the sign vote, random-k's aligned
  // values): what the server sends back is then as compact as what it got.
  virtual bool sums_without_decoding() const { return false; }

  // Bytes encode() writes for n elements: exact for fixed-size codecs (every
  // payload of n elements has this size), the capacity (the most encode
  // writes, never exceeded) for variable-size ones. Callers size buffers with
  // it either way.
  virtual size_t payload_bytes(uint64_t n) const = 0;

  // Whether a payload's length depends on the values (an entropy-coded
  // payload), not only on n. Then payload_bytes(n) is a capacity, the payload
  // says in its own header how long it is, and callers send, check and sum
  // only encoded_size() bytes of what encode_slices() wrote.
  virtual bool variable_size() const { return false; }

  // The bytes a just-encoded payload of n elements uses, read from the start
  // of written (the buffer encode_slices() wrote, possibly longer than the
  // payload); at most payload_bytes(n). The default, for fixed-size codecs,
  // is payload_bytes(n), and throws std::invalid_argument where written is
  // shorter. A variable-size codec reads its header and throws
  // (std::invalid_argument or the codec's error) naming the problem where
  // written does not start with a payload of this codec of n elements or is
  // shorter than the length the header says. It reads a header, it does not
  // validate the body: validate() does that.
  virtual size_t encoded_size(std::span<const uint8_t> written, uint64_t n) const;

  // Scale sharing: codecs that return true want every worker's local_scale()
  // max-reduced and passed back as EncodeContext::shared_scale.
  virtual bool wants_shared_scale() const { return false; }
  virtual float local_scale(std::span<const float> grad) { (void)grad; return 0.0f; }

  // Error feedback fused into the codec: ef() without momentum takes this
  // path where the codec offers it (fuses_error_feedback()), for the bytes and
  // floats of its generic path in two passes over the variable instead of
  // about seven, and without storing p = grad + residual
  // (terngrad/quantize/error_feedback.h).
  //   prepare_error_feedback(): local_scale(p), keeping p's statistics for
  //     the next call with the same spans (as local_scale()'s cache). Throws
  //     naming an element where p is not finite.
  //   encode_slices_error_feedback(): encode_slices(p, ...), and residual[i]
  //     = p[i] - decode(sent)[i] on the slices' elements (written
  //     0 - (-p + d), as the generic path rounds it), p[i] on elements no
  //     slice covers. Throws as encode_slices() does, before the residual
  //     changes.
  // grad and residual have one length. The defaults throw std::logic_error:
  // callers ask fuses_error_feedback().
  virtual bool fuses_error_feedback() const { return false; }
  virtual float prepare_error_feedback(std::span<const float> grad, std::span<const float> residual);
  virtual void encode_slices_error_feedback(std::span<const float> grad, const EncodeContext& ctx,
                                            std::span<const ElementRange> slices,
                                            std::span<const std::span<uint8_t>> outs, std::span<float> residual);

  // 16-bit gradients (float16 / bfloat16 buckets of mixed-precision
  // training): local_scale(), encode_slices() and the fused error feedback
  // calls of the widened gradient, bit for bit, with the same pairing rule
  // (the same tensor in local_scale_half() and the encode after it). TernGrad,
  // and ef() / server_ef() of it, read the halves directly, block by block in
  // cache (terngrad/quantize/half_input.h); the defaults widen the whole
  // variable into a float32 copy the codec keeps, and call the float32 calls.
  virtual float local_scale_half(quantize::HalfTensor grad);
  virtual void encode_slices_half(quantize::HalfTensor grad, const EncodeContext& ctx,
                                  std::span<const ElementRange> slices, std::span<const std::span<uint8_t>> outs);
  virtual float prepare_error_feedback_half(quantize::HalfTensor grad, std::span<const float> residual);
  virtual void encode_slices_error_feedback_half(quantize::HalfTensor grad, const EncodeContext& ctx,
                                                 std::span<const ElementRange> slices,
                                                 std::span<const std::span<uint8_t>> outs, std::span<float> residual);

  // Multi-round codecs (see the top of this file): the number of pre-rounds
  // (0 for every single-round codec), the floats round `round` produces for a
  // variable of n elements (exact; throws std::invalid_argument naming the
  // problem where n does not fit the codec's parameters), and one worker's
  // vector of that round: out (presum_floats(round, n) floats) from grad (the
  // whole variable) and ctx.presums (the sums of rounds 0..round-1). A
  // non-finite gradient throws naming an element, out is then unspecified.
  virtual uint32_t presum_rounds() const { return 0; }
  virtual uint64_t presum_floats(uint32_t round, uint64_t n) const;
  virtual void presum(uint32_t round, std::span<const float> grad, const EncodeContext& ctx, std::span<float> out);

  // Whether a slice's payload depends on that slice's elements alone (fp32:
  // no statistics, scale or state of the whole variable). A replica may then
  // encode and send each slice as soon as the backward pass has finished its
  // elements, before the rest of the variable exists.
  virtual bool encodes_slices_separately() const { return false; }

  // Codecs whose payload is not an element range of the variable (PowerSGD's
  // factors) return true: encode_slices() then takes only one slice, the
  // whole variable, and placement keeps such a variable in one shard.
  virtual bool slices_whole_variable_only() const { return false; }

  // Encodes slices of one variable: grad is the whole variable, outs[i]
  // receives slices[i] (holds at least payload_bytes(slices[i].count) bytes;
  // a variable-size codec writes encoded_size() of them, the rest is
  // unspecified and is not sent). A slice's
  // payload does not depend on how the variable is cut: statistics, scale and
  // random draws are the whole variable's, so the slices of any sharding
  // decode to the whole variable's decoding. Slices start at multiples of
  // kSliceAlignment and lie inside grad (std::invalid_argument otherwise).
  // A gradient holding NaN or infinity throws naming an element; the payload
  // bytes are then unspecified (threaded encoders may have written parts of
  // them), so a caller sends nothing from a throwing encode.
  virtual void encode_slices(std::span<const float> grad, const EncodeContext& ctx,
                             std::span<const ElementRange> slices, std::span<const std::span<uint8_t>> outs) = 0;

  // The whole variable as one payload; returns the bytes of out it uses,
  // encoded_size(out, grad.size()) (payload_bytes(grad.size()) for
  // fixed-size codecs).
  size_t encode(std::span<const float> grad, const EncodeContext& ctx, std::span<uint8_t> out);

  // out = decoded payload / out += decoded payload. A malformed payload throws
  // with a message naming the problem and leaves out untouched.
  virtual void decode(std::span<const uint8_t> payload, std::span<float> out) const = 0;
  virtual void decode_accumulate(std::span<const uint8_t> payload, std::span<float> out) const = 0;
  // The same with the step's pre-round sums (multi-round codecs need them:
  // their context-free decode() throws saying so). The defaults ignore ctx.
  virtual void decode_with(std::span<const uint8_t> payload, const DecodeContext& ctx, std::span<float> out) const;
  virtual void decode_accumulate_with(std::span<const uint8_t> payload, const DecodeContext& ctx,
                                      std::span<float> out) const;

  // Checks that payload is a well-formed payload of n elements (what a
  // server does on receipt, before it keeps anything); throws naming the
  // problem. The default decodes into a scratch buffer.
  virtual void validate(std::span<const uint8_t> payload, uint64_t n) const;
  // What a server calls on receipt instead: validate(), then the form to keep
  // of the payload in place of its bytes, or empty to keep them (the
  // default). The kept form must decode, sum and aggregate() as the payload
  // would. terngrad keeps a base-3 or entropy-coded push as the 2-bit payload
  // of the same codes (quantize::repack): validating decodes it anyway, and
  // the step's sum then adds 2-bit codes instead of decoding it again.
  virtual std::vector<uint8_t> validate_for_server(std::span<const uint8_t> payload, uint64_t n) const;

  // Server side: the sum of several workers' payloads of one slice of n
  // elements, summed in the order given, as one payload (what the server
  // sends back). The default is the float32 sum, decode_accumulate() in
  // order, in an "fp32" payload; terngrad returns shared-scale sums as
  // integer counts (quantize/ternary_sum.h). Malformed payloads throw.
  // The length aggregate() gives for `count` payloads of n elements that
  // this codec encoded with one shared scale (scale sharing, as a
  // reduce-scatter encodes its slices), when that length follows from n and
  // count alone; nullopt when it depends on the payloads (entropy-coded or
  // sparse sums) or when the codec cannot tell. A collective sizes its
  // buffers from it instead of exchanging lengths. The default: nullopt.
  virtual std::optional<size_t> aggregate_bytes(uint64_t n, size_t count) const;
  virtual void aggregate(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                         std::vector<uint8_t>& out) const;

  // What a server calls: the sum of one slice's payloads at one step, with
  // the slice's server state. Codecs whose aggregate keeps state between
  // steps (server_ef(), the server's error-feedback residual) say so with
  // aggregate_keeps_state(); the server then keeps one state per slice,
  // starting empty, hands it to every aggregate_step() of that slice in step
  // order, and checkpoints it. On a throw, state and out are unchanged. The
  // default ignores ctx and state and calls aggregate().
  virtual bool aggregate_keeps_state() const { return false; }
  virtual void aggregate_step(std::span<const std::span<const uint8_t>> payloads, uint64_t n,
                              const AggregateContext& ctx, std::vector<uint8_t>& state,
                              std::vector<uint8_t>& out) const;
  // Checks a saved server state of a slice of n elements before a server
  // takes it (a checkpoint read back); throws naming the problem. Empty is
  // always valid (a fresh state).
  virtual void validate_aggregate_state(std::span<const uint8_t> state, uint64_t n) const;

  // out = the sum an aggregate() payload stands for.
  virtual void decode_aggregate(std::span<const uint8_t> aggregate, std::span<float> out) const;
  // The same with the step's pre-round sums; the default ignores ctx.
  virtual void decode_aggregate_with(std::span<const uint8_t> aggregate, const DecodeContext& ctx,
                                     std::span<float> out) const;

  // Codecs whose next encoding depends on this step's sum (PowerSGD's warm
  // start: next step's Q is this step's summed Q) return true. Every worker's
  // codec of the variable (not only the one that decodes) is then handed the
  // step's aggregate of each slice, the slice being the whole variable for
  // the codecs that do this today, once per step after the sum came back; it
  // updates the codec's state (saved by save_state()). A malformed aggregate
  // throws and changes nothing. The default does nothing.
  virtual bool observes_aggregate() const { return false; }
  virtual void observe_aggregate(std::span<const uint8_t> aggregate, uint64_t n, const DecodeContext& ctx);

  // Per-tensor state carried between steps (e.g. error-feedback residuals),
  // saved in checkpoints. Stateless codecs keep these defaults.
  virtual std::vector<uint8_t> save_state() const { return {}; }
  virtual void load_state(std::span<const uint8_t> state) {
    if (!state.empty()) throw std::invalid_argument(spec() + ": this codec has no state to load");
  }

 private:
  // The defaults' float32 copy of a 16-bit gradient: slot 0 for a pair's
  // first call (local_scale_half, prepare_error_feedback_half) and an encode
  // of the same tensor after it, slot 1 for an encode of another tensor, so a
  // codec's statistics cache (keyed by the span) never serves it.
  std::span<const float> widened(quantize::HalfTensor grad, bool starts_pair);
  std::vector<float> widened_[2];
  const void* widened_from_ = nullptr;
  uint64_t widened_size_ = 0;
};

using CodecFactory = std::function<std::unique_ptr<GradientCodec>(const CodecSpec&)>;

// Registers a codec name (fp32, fp16 and terngrad are built in). Throws if taken.
void register_codec(const std::string& name, CodecFactory factory);

// Creates a codec from a spec; unknown names, unknown keys and bad values
// throw std::invalid_argument naming them and listing what is accepted.
std::unique_ptr<GradientCodec> make_codec(std::string_view spec);
// Creates a codec from typed parameters (checked as parse_codec_config checks them).
std::unique_ptr<GradientCodec> make_codec(const CodecConfig& config);

std::vector<std::string> registered_codecs();

}  // namespace terngrad::comm
