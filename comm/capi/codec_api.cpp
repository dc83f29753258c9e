// The host side of the C API: library version, codec handles over the comm
// codec registry (make_codec), and encode / decode on host pointers.
#include <cstring>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "capi_internal.h"

// The header's API version is the project's version (CMake passes it in):
// bumping one without the other would give a SOVERSION that lies.
static_assert(TG_API_VERSION_MAJOR == TG_PROJECT_VERSION_MAJOR &&
                  TG_API_VERSION_MINOR == TG_PROJECT_VERSION_MINOR &&
                  TG_API_VERSION_PATCH == TG_PROJECT_VERSION_PATCH,
              "terngrad.h TG_API_VERSION_* must match project(terngrad VERSION ...)");

namespace terngrad::capi {

namespace {

using comm::EncodeContext;

// Kind and device parameters from the codec's typed parameters.
void describe(tg_codec& h) {
  const comm::CodecConfig config = h.codec->config();
  if (config.error_feedback) return;  // stateful: host pointers only
  // The device encoders write fixed-size payloads and cannot say how long a
  // variable-size one is: host pointers only (device_api_cuda.cpp says so).
  if (h.codec->variable_size()) return;
  if (std::holds_alternative<comm::Fp32Params>(config.params)) {
    h.kind = CodecKind::kFp32;
  } else if (std::holds_alternative<comm::Fp16Params>(config.params)) {
    h.kind = CodecKind::kFp16;
  } else if (const auto* t = std::get_if<comm::TernGradParams>(&config.params); t != nullptr && t->bucket == 0 &&
             t->pack == comm::TernaryPacking::k2Bit) {  // base3/entropy: host pointers only (no device packing yet)
    h.kind = CodecKind::kTernGrad;
    h.clip = t->clip;
    h.share_scale = t->share_scale;
    h.rounding = t->round == terngrad::comm::TernaryRounding::kNearest ? terngrad::quantize::Rounding::kNearest
                                                                       : terngrad::quantize::Rounding::kStochastic;
    h.stream = t->stream;
  }
}

std::span<const float> values(const float* p, uint64_t n, const char* what) {
  require_buffer(p, n, what, "elements");
  return {p, static_cast<size_t>(n)};
}

std::span<float> values(float* p, uint64_t n, const char* what) {
  require_buffer(p, n, what, "elements");
  return {p, static_cast<size_t>(n)};
}

// A gradient of any tg_dtype: float32 values, or halves (half_input.h).
struct Gradient {
  std::span<const float> floats;
  std::optional<terngrad::quantize::HalfTensor> halves;
};

Gradient gradient(const void* p, uint64_t n, tg_dtype dtype) {
  require_dtype(dtype);
  if (dtype == TG_FLOAT32) return {values(static_cast<const float*>(p), n, "grad"), std::nullopt};
  require_buffer(p, n, "grad", "elements");
  return {{}, terngrad::quantize::HalfTensor{{static_cast<const uint16_t*>(p), static_cast<size_t>(n)},
                                             half_type_of(dtype)}};
}

terngrad::comm::EncodeContext context(uint32_t tensor_id, uint32_t step, uint64_t seed, const float* shared_scale) {
  terngrad::comm::EncodeContext ctx;
  ctx.tensor_id = tensor_id;
  ctx.step = step;
  ctx.seed = seed;
  if (shared_scale != nullptr) ctx.shared_scale = *shared_scale;
  return ctx;
}

void encode_gradient(terngrad::comm::GradientCodec& codec, const Gradient& g, const terngrad::comm::EncodeContext& ctx,
                     std::span<const terngrad::comm::ElementRange> slices, std::span<const std::span<uint8_t>> outs) {
  if (g.halves)
    codec.encode_slices_half(*g.halves, ctx, slices, outs);
  else
    codec.encode_slices(g.floats, ctx, slices, outs);
}

std::span<const uint8_t> bytes(const uint8_t* p, size_t n, const char* what) {
  require_buffer(p, n, what, "bytes");
  return {p, n};
}

}  // namespace

void require_payload_capacity(const comm::GradientCodec& codec, uint64_t n, size_t capacity) {
  const size_t need = codec.payload_bytes(n);
  if (capacity < need)
    throw ApiError(TG_ERR_BUFFER_TOO_SMALL, "output capacity is " + std::to_string(capacity) +
                                                " bytes, " + std::to_string(n) + " elements of " +
                                                codec.spec() + " need " + std::to_string(need));
}

}  // namespace terngrad::capi

using namespace terngrad::capi;

extern "C" {

const char* tg_version(void) { return TG_PROJECT_VERSION; }

uint32_t tg_api_version(void) { return TG_API_VERSION; }

tg_status tg_codec_create(const char* spec, tg_codec_t** out_codec) {
  return guarded(__func__, Operation::kOther, [&] {
    require(spec, "spec");
    require(out_codec, "out_codec");
    auto h = std::make_unique<tg_codec>();
    h->codec = terngrad::comm::make_codec(spec);
    // The C API (and the Python package and DDP hook over it) encodes and
    // decodes one worker's tensor in single calls; a codec whose workers sum
    // pre-rounds between gradient and payload (PowerSGD) cannot run there.
    if (h->codec->presum_rounds() > 0)
      throw std::invalid_argument("codec \"" + h->codec->spec() + "\" sums " + std::to_string(h->codec->presum_rounds()) +
                                  " pre-round(s) over the workers before it encodes (a multi-round codec); the C API's "
                                  "single-call encode/decode cannot run it: use the trainer (tg-train, tg-cluster)");
    describe(*h);
    *out_codec = h.release();
  });
}

void tg_codec_destroy(tg_codec_t* codec) { delete codec; }

tg_status tg_codec_spec(const tg_codec_t* codec, char* buf, size_t capacity, size_t* out_length) {
  return guarded(__func__, Operation::kOther, [&] {
    const std::string spec = handle_of(codec).codec->spec();
    if (out_length != nullptr) *out_length = spec.size();
    if (capacity <= spec.size())
      throw ApiError(TG_ERR_BUFFER_TOO_SMALL, "capacity " + std::to_string(capacity) +
                                                  " cannot hold the spec \"" + spec + "\" (" +
                                                  std::to_string(spec.size() + 1) +
                                                  " bytes with the NUL)");
    require(buf, "buf");
    std::memcpy(buf, spec.c_str(), spec.size() + 1);
  });
}

tg_status tg_codec_payload_bytes(const tg_codec_t* codec, uint64_t n, size_t* out_bytes) {
  return guarded(__func__, Operation::kOther, [&] {
    const tg_codec& h = handle_of(codec);
    require(out_bytes, "out_bytes");
    *out_bytes = h.codec->payload_bytes(n);
  });
}

tg_status tg_codec_variable_size(const tg_codec_t* codec, int* out_variable) {
  return guarded(__func__, Operation::kOther, [&] {
    const tg_codec& h = handle_of(codec);
    require(out_variable, "out_variable");
    *out_variable = h.codec->variable_size() ? 1 : 0;
  });
}

tg_status tg_codec_wants_shared_scale(const tg_codec_t* codec, int* out_wants) {
  return guarded(__func__, Operation::kOther, [&] {
    const tg_codec& h = handle_of(codec);
    require(out_wants, "out_wants");
    *out_wants = h.codec->wants_shared_scale() ? 1 : 0;
  });
}

// The typed calls' bodies, under the name of the function called (errors name it).
static tg_status local_scale_call(const char* fn, tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype,
                      float* out_scale) {
  return guarded(fn, Operation::kOther, [&] {
    tg_codec& h = handle_of(codec);
    const Gradient g = gradient(grad, n, dtype);
    require(out_scale, "out_scale");
    *out_scale = g.halves ? h.codec->local_scale_half(*g.halves) : h.codec->local_scale(g.floats);
  });
}

tg_status tg_codec_local_scale(tg_codec_t* codec, const float* grad, uint64_t n, float* out_scale) {
  return local_scale_call(__func__, codec, grad, n, TG_FLOAT32, out_scale);
}

tg_status tg_codec_local_scale_typed(tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype,
                                     float* out_scale) {
  return local_scale_call(__func__, codec, grad, n, dtype, out_scale);
}

static tg_status encode_call(const char* fn, tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype,
                 uint32_t tensor_id, uint32_t step, uint64_t seed, const float* shared_scale, uint8_t* out,
                 size_t capacity, size_t* out_written) {
  return guarded(fn, Operation::kOther, [&] {
    tg_codec& h = handle_of(codec);
    const Gradient g = gradient(grad, n, dtype);
    require_payload_capacity(*h.codec, n, capacity);
    require(out, "out");
    const terngrad::comm::ElementRange whole{0, n};
    const std::span<uint8_t> outs[1] = {{out, capacity}};
    encode_gradient(*h.codec, g, context(tensor_id, step, seed, shared_scale), std::span(&whole, 1), outs);
    if (out_written != nullptr) *out_written = h.codec->encoded_size(outs[0], n);
  });
}

tg_status tg_codec_encode(tg_codec_t* codec, const float* grad, uint64_t n, uint32_t tensor_id,
                          uint32_t step, uint64_t seed, const float* shared_scale, uint8_t* out,
                          size_t capacity, size_t* out_written) {
  return encode_call(__func__, codec, grad, n, TG_FLOAT32, tensor_id, step, seed, shared_scale, out, capacity, out_written);
}

tg_status tg_codec_encode_typed(tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype, uint32_t tensor_id,
                                uint32_t step, uint64_t seed, const float* shared_scale, uint8_t* out,
                                size_t capacity, size_t* out_written) {
  return encode_call(__func__, codec, grad, n, dtype, tensor_id, step, seed, shared_scale, out, capacity, out_written);
}

tg_status tg_codec_decode(const tg_codec_t* codec, const uint8_t* payload, size_t payload_bytes,
                          float* out, uint64_t n) {
  return guarded(__func__, Operation::kDecode, [&] {
    const tg_codec& h = handle_of(codec);
    h.codec->decode(bytes(payload, payload_bytes, "payload"), values(out, n, "out"));
  });
}

tg_status tg_codec_decode_accumulate(const tg_codec_t* codec, const uint8_t* payload,
                                     size_t payload_bytes, float* out, uint64_t n) {
  return guarded(__func__, Operation::kDecode, [&] {
    const tg_codec& h = handle_of(codec);
    h.codec->decode_accumulate(bytes(payload, payload_bytes, "payload"), values(out, n, "out"));
  });
}

tg_status tg_codec_save_state(const tg_codec_t* codec, uint8_t* buf, size_t capacity, size_t* out_length) {
  return guarded(__func__, Operation::kOther, [&] {
    const std::vector<uint8_t> state = handle_of(codec).codec->save_state();
    if (out_length != nullptr) *out_length = state.size();
    if (capacity < state.size())
      throw ApiError(TG_ERR_BUFFER_TOO_SMALL, "capacity " + std::to_string(capacity) + " cannot hold the " +
                                                  std::to_string(state.size()) + "-byte state");
    if (!state.empty()) {
      require(buf, "buf");
      std::memcpy(buf, state.data(), state.size());
    }
  });
}

static tg_status encode_slices_call(const char* fn, tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype,
                        size_t count, const uint64_t* begins, const uint64_t* lengths, uint32_t tensor_id,
                        uint32_t step, uint64_t seed, const float* shared_scale, uint8_t* const* outs,
                        const size_t* capacities, size_t* out_written) {
  return guarded(fn, Operation::kOther, [&] {
    tg_codec& h = handle_of(codec);
    const Gradient g = gradient(grad, n, dtype);
    if (count == 0) return;
    require(begins, "begins");
    require(lengths, "lengths");
    require(outs, "outs");
    require(capacities, "capacities");
    require(out_written, "out_written");
    std::vector<terngrad::comm::ElementRange> slices(count);
    std::vector<std::span<uint8_t>> spans(count);
    for (size_t i = 0; i < count; ++i) {
      // The codec checks alignment and bounds (naming the slice); here what it cannot see.
      require_payload_capacity(*h.codec, lengths[i], capacities[i]);
      if (outs[i] == nullptr)
        throw ApiError(TG_ERR_INVALID_ARGUMENT, "outs[" + std::to_string(i) + "] is NULL");
      slices[i] = {begins[i], lengths[i]};
      spans[i] = {outs[i], capacities[i]};
    }
    encode_gradient(*h.codec, g, context(tensor_id, step, seed, shared_scale), slices, spans);
    for (size_t i = 0; i < count; ++i) out_written[i] = h.codec->encoded_size(spans[i], lengths[i]);
  });
}

tg_status tg_codec_encode_slices(tg_codec_t* codec, const float* grad, uint64_t n, size_t count,
                                 const uint64_t* begins, const uint64_t* lengths, uint32_t tensor_id,
                                 uint32_t step, uint64_t seed, const float* shared_scale, uint8_t* const* outs,
                                 const size_t* capacities, size_t* out_written) {
  return encode_slices_call(__func__, codec, grad, n, TG_FLOAT32, count, begins, lengths, tensor_id, step, seed,
                       shared_scale, outs, capacities, out_written);
}

tg_status tg_codec_encode_slices_typed(tg_codec_t* codec, const void* grad, uint64_t n, tg_dtype dtype, size_t count,
                                       const uint64_t* begins, const uint64_t* lengths, uint32_t tensor_id,
                                       uint32_t step, uint64_t seed, const float* shared_scale, uint8_t* const* outs,
                                       const size_t* capacities, size_t* out_written) {
  return encode_slices_call(__func__, codec, grad, n, dtype, count, begins, lengths, tensor_id, step, seed, shared_scale,
                       outs, capacities, out_written);
}

tg_status tg_codec_aggregate(const tg_codec_t* codec, const uint8_t* const* payloads, const size_t* payload_bytes,
                             size_t count, uint64_t n, uint8_t* out, size_t capacity, size_t* out_length) {
  return guarded(__func__, Operation::kDecode, [&] {
    const tg_codec& h = handle_of(codec);
    if (count == 0) throw ApiError(TG_ERR_INVALID_ARGUMENT, "count is 0: there is nothing to sum");
    require(payloads, "payloads");
    require(payload_bytes, "payload_bytes");
    std::vector<std::span<const uint8_t>> in(count);
    for (size_t i = 0; i < count; ++i) in[i] = bytes(payloads[i], payload_bytes[i], "payloads[i]");
    std::vector<uint8_t> sum;
    h.codec->aggregate(in, n, sum);
    if (out_length != nullptr) *out_length = sum.size();
    if (capacity < sum.size())
      throw ApiError(TG_ERR_BUFFER_TOO_SMALL, "capacity " + std::to_string(capacity) + " cannot hold the " +
                                                  std::to_string(sum.size()) + "-byte sum");
    require(out, "out");
    std::memcpy(out, sum.data(), sum.size());
  });
}

tg_status tg_codec_aggregate_bytes(const tg_codec_t* codec, uint64_t n, size_t count, size_t* out_bytes) {
  return guarded(__func__, Operation::kOther, [&] {
    const tg_codec& h = handle_of(codec);
    require(out_bytes, "out_bytes");
    *out_bytes = h.codec->aggregate_bytes(n, count).value_or(0);
  });
}

tg_status tg_codec_decode_aggregate(const tg_codec_t* codec, const uint8_t* aggregate, size_t aggregate_bytes,
                                    float* out, uint64_t n) {
  return guarded(__func__, Operation::kDecode, [&] {
    const tg_codec& h = handle_of(codec);
    h.codec->decode_aggregate(bytes(aggregate, aggregate_bytes, "aggregate"), values(out, n, "out"));
  });
}

tg_status tg_codec_load_state(tg_codec_t* codec, const uint8_t* state, size_t length) {
  return guarded(__func__, Operation::kOther, [&] {
    tg_codec& h = handle_of(codec);
    h.codec->load_state(length == 0 ? std::span<const uint8_t>() : bytes(state, length, "state"));
  });
}

}  // extern "C"
