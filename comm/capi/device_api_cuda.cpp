// The C API on device pointers (CUDA builds): terngrad through the CUDA
// codec (quantize/cuda.h, cuda_sum.h), fp32 and fp16 through dense_device.cu.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>

#include "capi_internal.h"
#include "cuda/dense_device.h"
#include "dense_header.h"
#include "terngrad/quantize/cuda.h"
#include "terngrad/quantize/cuda_sum.h"
#include "terngrad/quantize/ternary_sum.h"

namespace terngrad::capi {

namespace qc = quantize::cuda;
using comm::detail::DenseType;

// Created on a handle's first device call: the terngrad codec's workspace
// (grown when a larger tensor arrives) or the dense codecs' fault record;
// for the sums of a reduce-scatter, the int16 counts (grown, stream-ordered)
// and the sum decoder's fault record.
struct DeviceState {
  std::unique_ptr<qc::Workspace> workspace;
  std::unique_ptr<cuda::DenseDevice> dense;
  int16_t* counts = nullptr;
  uint64_t counts_capacity = 0;
  std::unique_ptr<qc::SumDecoder> sums;
  ~DeviceState() {
    if (counts != nullptr) cudaFree(counts);  // waits for the device work that may still use it
  }
};

void destroy_device_state(DeviceState* state) noexcept { delete state; }

namespace {

cudaStream_t stream_of(void* stream) { return static_cast<cudaStream_t>(stream); }

DeviceState& state_of(tg_codec& h) {
  if (h.kind == CodecKind::kOther)
    throw ApiError(TG_ERR_UNSUPPORTED,
                   "codec " + h.codec->spec() + " has no device path" +
                       (h.codec->variable_size()
                            ? std::string(": its payloads' length depends on the values (a variable-size codec), "
                                          "which the device functions cannot report; use the host functions")
                            : std::string()));
  if (!h.device) h.device.reset(new DeviceState);
  return *h.device;
}

// A workspace for n elements. Replacing a smaller one first reports any
// error its earlier work recorded, so nothing found on the device is lost.
qc::Workspace& workspace_for(tg_codec& h, uint64_t n, cudaStream_t stream) {
  DeviceState& s = state_of(h);
  if (!s.workspace || s.workspace->max_elements() < n) {
    if (s.workspace) s.workspace->check(stream);
    s.workspace.reset();
    s.workspace = std::make_unique<qc::Workspace>(std::max<uint64_t>(n, 1));
  }
  return *s.workspace;
}

cuda::DenseDevice& dense_for(tg_codec& h) {
  DeviceState& s = state_of(h);
  if (!s.dense) s.dense = std::make_unique<cuda::DenseDevice>();
  return *s.dense;
}

DenseType dense_type(const tg_codec& h) {
  return h.kind == CodecKind::kFp32 ? DenseType::kFloat32 : DenseType::kFloat16;
}

// The reduce-scatter's sums on the device: terngrad's 2-bit payloads with
// one shared scale, as the host's aggregate() sums them without decoding.
void require_device_sum(const tg_codec& h, const char* what) {
  if (h.kind != CodecKind::kTernGrad || !h.share_scale)
    throw ApiError(TG_ERR_UNSUPPORTED, std::string(what) + " on the device takes terngrad with scale sharing (2-bit "
                                           "packing, share_scale=1), whose payloads sum to integer counts; codec " +
                                           h.codec->spec() + " sums on the host (tg_codec_aggregate)");
}

// n int16 counts on the stream: grown in stream order (the old buffer is
// freed after the work queued before it).
// A CUDA runtime call's failure as the codec reports one (TG_ERR_CUDA).
void cuda_try(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // not sticky: do not leave it for the next call
  throw quantize::CodecError(quantize::Errc::kCuda, std::string(call) + " failed: " + cudaGetErrorString(err));
}

int16_t* counts_for(tg_codec& h, uint64_t n, cudaStream_t stream) {
  DeviceState& s = state_of(h);
  if (s.counts_capacity < n) {
    if (s.counts != nullptr) cuda_try(cudaFreeAsync(s.counts, stream), "cudaFreeAsync (sum counts)");
    s.counts = nullptr;
    s.counts_capacity = 0;
    cuda_try(cudaMallocAsync(reinterpret_cast<void**>(&s.counts), n * sizeof(int16_t), stream),
             "cudaMallocAsync (sum counts)");
    s.counts_capacity = n;
  }
  return s.counts;
}

void decode_device(tg_codec& h, const uint8_t* d_payload, size_t payload_bytes, float* d_out,
                   uint64_t n, void* stream, bool accumulate) {
  state_of(h);  // refuses codecs without a device path
  require_buffer(d_payload, payload_bytes, "d_payload", "bytes");
  require_buffer(d_out, n, "d_out", "elements");
  const cudaStream_t s = stream_of(stream);
  if (h.kind == CodecKind::kTernGrad) {
    qc::Workspace& ws = workspace_for(h, n, s);
    if (accumulate)
      qc::decode_accumulate_async(d_payload, payload_bytes, d_out, n, ws, s);
    else
      qc::decode_async(d_payload, payload_bytes, d_out, n, ws, s);
    return;
  }
  cuda::dense_decode_async(dense_type(h), d_payload, payload_bytes, d_out, n, accumulate,
                           dense_for(h), s);
}

// A device gradient of tg_dtype: float32, or halves for terngrad's codec.
struct DeviceGradient {
  const float* floats = nullptr;
  std::optional<qc::DeviceHalves> halves;
};

DeviceGradient device_gradient(const tg_codec& h, const void* d_grad, uint64_t n, tg_dtype dtype) {
  if (dtype == TG_FLOAT32) {
    require_buffer(static_cast<const float*>(d_grad), n, "d_grad", "elements");
    return {static_cast<const float*>(d_grad), std::nullopt};
  }
  require_dtype(dtype);
  if (h.kind != CodecKind::kTernGrad)
    throw ApiError(TG_ERR_UNSUPPORTED, "codec " + h.codec->spec() +
                                           " takes float32 device gradients only (16-bit ones: terngrad); widen "
                                           "the gradient to float32 first");
  require_buffer(d_grad, n, "d_grad", "elements");
  return {nullptr, qc::DeviceHalves{static_cast<const uint16_t*>(d_grad), n, half_type_of(dtype)}};
}

// The terngrad handle's encode parameters for one call.
terngrad::quantize::EncodeParams encode_params(const tg_codec& h, uint32_t tensor_id, uint32_t step, uint64_t seed,
                                               const float* shared_scale) {
  terngrad::quantize::EncodeParams p;
  p.clip_factor = h.clip;
  p.seed = seed;
  p.step = step;
  p.tensor_id = tensor_id;
  p.rounding = h.rounding;
  p.stream = h.stream;  // format version 1 or 2, as the host codec
  // As the host codec: share_scale=0 ignores a shared scale.
  if (h.share_scale && shared_scale != nullptr) p.shared_scale = *shared_scale;
  return p;
}

tg_status local_scale_device(const char* fn, tg_codec_t* codec, const void* d_grad, uint64_t n, tg_dtype dtype,
                             void* stream, float* out_scale) {
  return guarded(fn, Operation::kOther, [&] {
    tg_codec& h = handle_of(codec);
    require(out_scale, "out_scale");
    state_of(h);  // refuses codecs without a device path
    const DeviceGradient g = device_gradient(h, d_grad, n, dtype);
    if (h.kind != CodecKind::kTernGrad) {
      *out_scale = 0.0f;  // fp32 / fp16 have no scale, as on the host
      return;
    }
    const cudaStream_t s = stream_of(stream);
    qc::Workspace& ws = workspace_for(h, n, s);
    if (g.halves)
      qc::stats_async(*g.halves, ws, s);
    else
      qc::stats_async(g.floats, n, ws, s);
    *out_scale = terngrad::quantize::local_scale(ws.stats(s), h.clip);
  });
}

tg_status encode_device(const char* fn, tg_codec_t* codec, const void* d_grad, uint64_t n, tg_dtype dtype,
                        uint32_t tensor_id, uint32_t step, uint64_t seed, const float* shared_scale, uint8_t* d_out,
                        size_t capacity, void* stream, size_t* out_written) {
  return guarded(fn, Operation::kOther, [&] {
    tg_codec& h = handle_of(codec);
    state_of(h);
    const DeviceGradient g = device_gradient(h, d_grad, n, dtype);
    require_payload_capacity(*h.codec, n, capacity);
    require(d_out, "d_out");
    const cudaStream_t s = stream_of(stream);
    if (h.kind == CodecKind::kTernGrad) {
      const terngrad::quantize::EncodeParams p = encode_params(h, tensor_id, step, seed, shared_scale);
      if (g.halves)
        qc::encode_async(*g.halves, p, d_out, capacity, workspace_for(h, n, s), s);
      else
        qc::encode_async(g.floats, n, p, d_out, capacity, workspace_for(h, n, s), s);
    } else {
      uint8_t header[terngrad::comm::detail::kDenseHeaderBytes];
      // Capacity was checked above for the whole payload.
      terngrad::comm::detail::write_dense_header_bytes(dense_type(h), n, header);
      terngrad::capi::cuda::dense_encode_async(dense_type(h), header, g.floats, n, d_out, s);
    }
    if (out_written != nullptr) *out_written = h.codec->payload_bytes(n);
  });
}

// Slices of one device gradient, each with the whole tensor's statistics
// (terngrad: encode_slice_async per slice) or as the dense codecs encode
// any range.
void encode_slices_device(tg_codec& h, const DeviceGradient& g, uint64_t n, size_t count, const uint64_t* begins,
                          const uint64_t* lengths, const terngrad::quantize::EncodeParams& base,
                          uint8_t* const* d_outs, const size_t* capacities, cudaStream_t s, size_t* out_written) {
  for (size_t i = 0; i < count; ++i) {
    const std::string slice = "slice " + std::to_string(i);
    if (begins[i] % 4 != 0)
      throw ApiError(TG_ERR_INVALID_ARGUMENT, slice + " begins at " + std::to_string(begins[i]) +
                                                  ", not a multiple of 4");
    if (begins[i] > n || lengths[i] > n - begins[i])
      throw ApiError(TG_ERR_INVALID_ARGUMENT, slice + " [" + std::to_string(begins[i]) + ", +" +
                                                  std::to_string(lengths[i]) + ") lies outside the " +
                                                  std::to_string(n) + "-element gradient");
    require_payload_capacity(*h.codec, lengths[i], capacities[i]);
    if (d_outs[i] == nullptr) throw ApiError(TG_ERR_INVALID_ARGUMENT, "d_outs[" + std::to_string(i) + "] is NULL");
  }
  for (size_t i = 0; i < count; ++i) {
    if (h.kind == CodecKind::kTernGrad) {
      terngrad::quantize::EncodeParams p = base;
      p.element_offset = begins[i];
      qc::Workspace& ws = workspace_for(h, n, s);
      if (g.halves)
        qc::encode_slice_async(*g.halves, lengths[i], p, d_outs[i], capacities[i], ws, s);
      else
        qc::encode_slice_async(g.floats, n, lengths[i], p, d_outs[i], capacities[i], ws, s);
    } else {
      uint8_t header[terngrad::comm::detail::kDenseHeaderBytes];
      terngrad::comm::detail::write_dense_header_bytes(dense_type(h), lengths[i], header);
      terngrad::capi::cuda::dense_encode_async(dense_type(h), header, g.floats + begins[i], lengths[i], d_outs[i], s);
    }
    out_written[i] = h.codec->payload_bytes(lengths[i]);
  }
}

}  // namespace

}  // namespace terngrad::capi

using namespace terngrad::capi;

extern "C" {

int tg_cuda_built(void) { return 1; }

int tg_cuda_available(void) { return qc::device_available() ? 1 : 0; }

tg_status tg_codec_local_scale_device(tg_codec_t* codec, const float* d_grad, uint64_t n,
                                      void* stream, float* out_scale) {
  return local_scale_device(__func__, codec, d_grad, n, TG_FLOAT32, stream, out_scale);
}

tg_status tg_codec_local_scale_device_typed(tg_codec_t* codec, const void* d_grad, uint64_t n, tg_dtype dtype,
                                            void* stream, float* out_scale) {
  return local_scale_device(__func__, codec, d_grad, n, dtype, stream, out_scale);
}

tg_status tg_codec_encode_device(tg_codec_t* codec, const float* d_grad, uint64_t n,
                                 uint32_t tensor_id, uint32_t step, uint64_t seed,
                                 const float* shared_scale, uint8_t* d_out, size_t capacity,
                                 void* stream, size_t* out_written) {
  return encode_device(__func__, codec, d_grad, n, TG_FLOAT32, tensor_id, step, seed, shared_scale, d_out, capacity,
                       stream, out_written);
}

tg_status tg_codec_encode_device_typed(tg_codec_t* codec, const void* d_grad, uint64_t n, tg_dtype dtype,
                                       uint32_t tensor_id, uint32_t step, uint64_t seed, const float* shared_scale,
                                       uint8_t* d_out, size_t capacity, void* stream, size_t* out_written) {
  return encode_device(__func__, codec, d_grad, n, dtype, tensor_id, step, seed, shared_scale, d_out, capacity,
                       stream, out_written);
}

tg_status tg_codec_device_takes(const tg_codec_t* codec, tg_dtype dtype, int* out_takes) {
  return guarded(__func__, Operation::kOther, [&] {
    const tg_codec& h = handle_of(codec);
    require(out_takes, "out_takes");
    require_dtype(dtype);
    *out_takes = h.kind == CodecKind::kTernGrad || (h.kind != CodecKind::kOther && dtype == TG_FLOAT32);
  });
}

tg_status tg_codec_decode_device(tg_codec_t* codec, const uint8_t* d_payload, size_t payload_bytes,
                                 float* d_out, uint64_t n, void* stream) {
  return guarded(__func__, Operation::kDecode, [&] {
    decode_device(handle_of(codec), d_payload, payload_bytes, d_out, n, stream, false);
  });
}

tg_status tg_codec_decode_accumulate_device(tg_codec_t* codec, const uint8_t* d_payload,
                                            size_t payload_bytes, float* d_out, uint64_t n,
                                            void* stream) {
  return guarded(__func__, Operation::kDecode, [&] {
    decode_device(handle_of(codec), d_payload, payload_bytes, d_out, n, stream, true);
  });
}

tg_status tg_codec_device_check(tg_codec_t* codec, void* stream) {
  return guarded(__func__, Operation::kDecode, [&] {
    tg_codec& h = handle_of(codec);
    if (!h.device) return;  // no device work yet
    const cudaStream_t s = stream_of(stream);
    if (h.device->workspace) h.device->workspace->check(s);
    if (h.device->dense) h.device->dense->check(s);
    if (h.device->sums) h.device->sums->check(s);
  });
}

static tg_status encode_slices_device_call(const char* fn, tg_codec_t* codec, const void* d_grad, uint64_t n,
                                           tg_dtype dtype, size_t count, const uint64_t* begins,
                                           const uint64_t* lengths, uint32_t tensor_id, uint32_t step, uint64_t seed,
                                           const float* shared_scale, uint8_t* const* d_outs,
                                           const size_t* capacities, void* stream, size_t* out_written) {
  return guarded(fn, Operation::kOther, [&] {
    tg_codec& h = handle_of(codec);
    state_of(h);  // refuses codecs without a device path
    const DeviceGradient g = device_gradient(h, d_grad, n, dtype);
    if (count == 0) return;
    require(begins, "begins");
    require(lengths, "lengths");
    require(d_outs, "d_outs");
    require(capacities, "capacities");
    require(out_written, "out_written");
    encode_slices_device(h, g, n, count, begins, lengths, encode_params(h, tensor_id, step, seed, shared_scale),
                         d_outs, capacities, stream_of(stream), out_written);
  });
}

tg_status tg_codec_encode_slices_device(tg_codec_t* codec, const float* d_grad, uint64_t n, size_t count,
                                        const uint64_t* begins, const uint64_t* lengths, uint32_t tensor_id,
                                        uint32_t step, uint64_t seed, const float* shared_scale,
                                        uint8_t* const* d_outs, const size_t* capacities, void* stream,
                                        size_t* out_written) {
  return encode_slices_device_call(__func__, codec, d_grad, n, TG_FLOAT32, count, begins, lengths, tensor_id, step,
                                   seed, shared_scale, d_outs, capacities, stream, out_written);
}

tg_status tg_codec_encode_slices_device_typed(tg_codec_t* codec, const void* d_grad, uint64_t n, tg_dtype dtype,
                                              size_t count, const uint64_t* begins, const uint64_t* lengths,
                                              uint32_t tensor_id, uint32_t step, uint64_t seed,
                                              const float* shared_scale, uint8_t* const* d_outs,
                                              const size_t* capacities, void* stream, size_t* out_written) {
  return encode_slices_device_call(__func__, codec, d_grad, n, dtype, count, begins, lengths, tensor_id, step, seed,
                                   shared_scale, d_outs, capacities, stream, out_written);
}

tg_status tg_codec_aggregate_device(tg_codec_t* codec, const uint8_t* const* d_payloads, const size_t* payload_bytes,
                                    size_t count, uint64_t n, uint8_t* d_out, size_t capacity, void* stream,
                                    size_t* out_length) {
  return guarded(__func__, Operation::kDecode, [&] {
    tg_codec& h = handle_of(codec);
    require_device_sum(h, "tg_codec_aggregate_device");
    if (count == 0) throw ApiError(TG_ERR_INVALID_ARGUMENT, "count is 0: there is nothing to sum");
    require(d_payloads, "d_payloads");
    require(payload_bytes, "payload_bytes");
    const size_t each = h.codec->payload_bytes(n);
    for (size_t i = 0; i < count; ++i)
      if (payload_bytes[i] != each)
        throw ApiError(TG_ERR_MALFORMED_PAYLOAD, "payload " + std::to_string(i) + " has " +
                                                     std::to_string(payload_bytes[i]) + " bytes; a 2-bit payload of " +
                                                     std::to_string(n) + " elements has " + std::to_string(each));
    // One payload's aggregate is the payload itself, as on the host
    // (aggregate_bytes(n, 1) is its length); several sum to packed counts.
    const size_t bytes = count == 1 ? each : terngrad::quantize::sum_payload_bytes(n, static_cast<uint32_t>(count));
    if (out_length != nullptr) *out_length = bytes;
    if (capacity < bytes)
      throw ApiError(TG_ERR_BUFFER_TOO_SMALL, "capacity " + std::to_string(capacity) + " cannot hold the " +
                                                  std::to_string(bytes) + "-byte sum");
    const cudaStream_t s = stream_of(stream);
    qc::Workspace& ws = workspace_for(h, n, s);
    int16_t* counts = counts_for(h, n, s);
    if (count == 1)
      qc::copy_checked_payload_async(d_payloads[0], n, counts, d_out, capacity, ws, s);
    else
      qc::sum_payloads_async(d_payloads, count, n, counts, d_out, capacity, ws, s);
  });
}

tg_status tg_codec_decode_aggregate_device(tg_codec_t* codec, const uint8_t* d_aggregate, size_t aggregate_bytes,
                                           float* d_out, uint64_t n, void* stream) {
  return guarded(__func__, Operation::kDecode, [&] {
    tg_codec& h = handle_of(codec);
    require_device_sum(h, "tg_codec_decode_aggregate_device");
    require(d_aggregate, "d_aggregate");
    require_buffer(d_out, n, "d_out", "elements");
    const cudaStream_t s = stream_of(stream);
    // The header on the host (40 bytes; the stream is waited for), checked
    // as read_sum_header() checks a host payload; the body is checked on the
    // device as it is unpacked (tg_codec_device_check reports it).
    std::array<uint8_t, terngrad::quantize::kHeaderBytes> header{};
    const size_t have = std::min(aggregate_bytes, header.size());
    cuda_try(cudaMemcpyAsync(header.data(), d_aggregate, have, cudaMemcpyDeviceToHost, s), "reading the sum's header");
    cuda_try(cudaStreamSynchronize(s), "reading the sum's header");
    // A single payload's aggregate is that payload (codec 1): decoded as one.
    if (have == header.size() && terngrad::quantize::header_codec(header.data()) == terngrad::quantize::kCodecTernary2Bit) {
      decode_device(h, d_aggregate, aggregate_bytes, d_out, n, stream, false);
      return;
    }
    const terngrad::quantize::SumHeader sh = terngrad::quantize::read_sum_header(header, aggregate_bytes);
    if (sh.count != n)
      throw ApiError(TG_ERR_INVALID_ARGUMENT, "the sum holds " + std::to_string(sh.count) +
                                                  " elements, d_out has " + std::to_string(n));
    DeviceState& st = state_of(h);
    if (!st.sums) st.sums = std::make_unique<qc::SumDecoder>();
    st.sums->decode_async(d_aggregate, sh, d_out, s);
  });
}

}  // extern "C"
