// Decode side. Every operation runs three stream-ordered kernels:
//   header_kernel   check_header() + count == n (+ the counts' shared scale);
//   validate_kernel every body code and the padding bits of the last byte;
//   body kernel     decode / decode-accumulate / accumulate-counts,
// and the body kernel writes nothing while an error is recorded, so a bad
// payload never leaves an accumulator half-updated.
#include <string>

#include "device_state.cuh"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::cuda {

using terngrad::device::grid_stride_range;

namespace detail {

namespace {

constexpr int kBodyBlock = 256;

enum class BodyOp { kDecode, kAccumulate, kCounts };

// One thread: the header is 40 bytes, its CRC a few hundred cycles.
__global__ void header_kernel(const uint8_t* __restrict__ payload, size_t payload_bytes,
                              uint64_t n, Workspace::Device* dev, uint32_t op,
                              bool track_counts_scale) {
  if (error_pending(dev)) return;  // an earlier unchecked error: this op does nothing
  const HeaderFault fault = check_header(payload, payload_bytes);
  if (fault != HeaderFault::kNone) {
    if (claim_error(dev, op, Errc::kMalformedPayload) == 1) {
      dev->view.err.detail = static_cast<int>(fault);
      // The count, when the bytes reach past it, for the error message.
      dev->view.err.u0 = payload_bytes >= kHeaderCountOffset + sizeof(uint64_t) ? header_count(payload) : 0;
      dev->view.err.u1 = payload_bytes;
    }
    return;
  }
  accept_header(dev, op, header_count(payload), n, header_scale_bits(payload), track_counts_scale);
}

// Validates body bytes 4w .. 4w+3 per thread per grid-stride step. kWord: the
// body is 4-byte aligned, so a full group is one 32-bit load.
template <bool kWord>
__global__ void __launch_bounds__(kBodyBlock)
    validate_kernel(const uint8_t* __restrict__ body, uint64_t n, Workspace::Device* dev,
                    uint32_t op, uint32_t gate) {
  if (error_pending(dev)) return;  // header refused: the body is not worth reading
  if (gate != 0 && dev->payload_codec != gate) return;  // *_any_async: another codec's payload
  const uint64_t nbytes = body_bytes(n);
  const uint64_t groups = (nbytes + 3) / 4;
  const uint32_t pad = padding_mask(n);
  unsigned long long first_bad = ~0ull;  // smallest key this thread found
  for (const uint64_t w : grid_stride_range(groups)) {
    const uint64_t k0 = 4 * w;
    uint32_t word = 0;
    if (kWord && k0 + 4 <= nbytes) {
      word = reinterpret_cast<const uint32_t*>(body)[w];
    } else {
      for (int b = 0; b < 4 && k0 + b < nbytes; ++b) word |= uint32_t{body[k0 + b]} << (8 * b);
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint64_t k = k0 + b;
      if (k >= nbytes) break;
      uint32_t byte = (word >> (8 * b)) & 0xFFu;
      const bool last = k == nbytes - 1;
      // In the last byte only the used positions hold codes; the rest is
      // padding, reported as such even when it happens to read 0b11.
      const uint32_t bad = invalid_code_mask(last ? byte & ~pad : byte);
      unsigned long long key = ~0ull;
      if (bad != 0)
        key = (static_cast<unsigned long long>(k) << 3) | ((__ffs(bad) - 1) / 2);
      else if (last && (byte & pad) != 0)
        key = (static_cast<unsigned long long>(k) << 3) | kPaddingPosition;
      if (key < first_bad) first_bad = key;
    }
  }
  if (first_bad != ~0ull) record_keyed_error(dev, op, Errc::kInvalidCode, first_bad);
}

// Decoded value of code c under scale s, exactly as the CPU forms it.
__device__ __forceinline__ float decoded(float s, uint32_t byte, int pos) {
  return s * static_cast<float>(code_sign((byte >> (2 * pos)) & 3u));
}

// kVec: the output is aligned for one vector access per body byte
// (float4 for floats, 8 bytes for four int16 counts).
template <BodyOp kOp, bool kVec, typename T>
__global__ void __launch_bounds__(kBodyBlock)
    body_kernel(const uint8_t* __restrict__ body, uint64_t n, T* __restrict__ out,
                const Workspace::Device* dev, uint32_t gate) {
  if (error_pending(dev)) return;  // bad header or body: write nothing
  if (gate != 0 && dev->payload_codec != gate) return;  // *_any_async: another codec's payload
  const uint64_t nbytes = body_bytes(n);
  const float s = dev->payload_scale;
  for (const uint64_t k : grid_stride_range(nbytes)) {
    const uint32_t byte = body[k];
    const uint64_t i = 4 * k;
    if constexpr (kOp == BodyOp::kCounts) {
      if (kVec && i + 3 < n) {
        short4 c = reinterpret_cast<const short4*>(out)[k];
        c.x = static_cast<int16_t>(c.x + code_sign(byte & 3u));
        c.y = static_cast<int16_t>(c.y + code_sign((byte >> 2) & 3u));
        c.z = static_cast<int16_t>(c.z + code_sign((byte >> 4) & 3u));
        c.w = static_cast<int16_t>(c.w + code_sign((byte >> 6) & 3u));
        reinterpret_cast<short4*>(out)[k] = c;
      } else {
        for (int p = 0; p < 4 && i + p < n; ++p)
          out[i + p] = static_cast<int16_t>(out[i + p] + code_sign((byte >> (2 * p)) & 3u));
      }
    } else {
      if (kVec && i + 3 < n) {
        float4 v{decoded(s, byte, 0), decoded(s, byte, 1), decoded(s, byte, 2),
                 decoded(s, byte, 3)};
        if constexpr (kOp == BodyOp::kAccumulate) {
          const float4 o = reinterpret_cast<const float4*>(out)[k];
          v.x = o.x + v.x;
          v.y = o.y + v.y;
          v.z = o.z + v.z;
          v.w = o.w + v.w;
        }
        reinterpret_cast<float4*>(out)[k] = v;
      } else {
        for (int p = 0; p < 4 && i + p < n; ++p) {
          const float v = decoded(s, byte, p);
          if constexpr (kOp == BodyOp::kAccumulate)
            out[i + p] = out[i + p] + v;
          else
            out[i + p] = v;
        }
      }
    }
  }
}

template <bool kWord>
void launch_validate(const uint8_t* body, uint64_t n, Workspace::Device* dev, uint32_t op,
                     cudaStream_t stream, uint32_t gate = 0) {
  static const int resident =
      resident_blocks(reinterpret_cast<const void*>(&validate_kernel<kWord>), kBodyBlock);
  const unsigned grid = grid_for((body_bytes(n) + 3) / 4, kBodyBlock, resident);
  validate_kernel<kWord><<<grid, kBodyBlock, 0, stream>>>(body, n, dev, op, gate);
  TG_CHECK_LAUNCH("validate_kernel");
}

template <BodyOp kOp, bool kVec, typename T>
void launch_body(const uint8_t* body, uint64_t n, T* out, const Workspace::Device* dev,
                 cudaStream_t stream, uint32_t gate = 0) {
  static const int resident =
      resident_blocks(reinterpret_cast<const void*>(&body_kernel<kOp, kVec, T>), kBodyBlock);
  const unsigned grid = grid_for(body_bytes(n), kBodyBlock, resident);
  body_kernel<kOp, kVec, T><<<grid, kBodyBlock, 0, stream>>>(body, n, out, dev, gate);
  TG_CHECK_LAUNCH("body_kernel");
}

// Host checks, then the three kernels.
template <BodyOp kOp, typename T>
void run_decode(const char* fn, const uint8_t* d_payload, size_t payload_bytes, T* d_out,
                uint64_t n, Workspace& ws, cudaStream_t stream) {
  const std::string name(fn);
  if (n > ws.max_elements())
    fail(Errc::kInvalidArgument, name + ": n = " + std::to_string(n) +
                                     " exceeds the workspace's max_elements " +
                                     std::to_string(ws.max_elements()));
  if (d_payload == nullptr) fail(Errc::kInvalidArgument, name + ": d_payload is null");
  if (payload_bytes != max_encoded_bytes(n))
    fail(Errc::kMalformedPayload, name + ": payload is " + std::to_string(payload_bytes) +
                                      " bytes, but n = " + std::to_string(n) +
                                      " elements take exactly " +
                                      std::to_string(max_encoded_bytes(n)));
  require_device_pointer(d_out, n, alignof(T), (name + ": d_out").c_str());

  const uint32_t op = next_op_id();
  Workspace::Device* dev = ws.device();
  header_kernel<<<1, 1, 0, stream>>>(d_payload, payload_bytes, n, dev, op,
                                     kOp == BodyOp::kCounts);
  TG_CHECK_LAUNCH("header_kernel");
  if (n == 0) return;
  const uint8_t* body = d_payload + kHeaderBytes;
  if (reinterpret_cast<uintptr_t>(body) % 4 == 0)
    launch_validate<true>(body, n, dev, op, stream);
  else
    launch_validate<false>(body, n, dev, op, stream);
  constexpr size_t kVecAlign = 4 * sizeof(T);  // float4 or short4
  if (reinterpret_cast<uintptr_t>(d_out) % kVecAlign == 0)
    launch_body<kOp, true, T>(body, n, d_out, dev, stream);
  else
    launch_body<kOp, false, T>(body, n, d_out, dev, stream);
}

// Any packing: the header kernel picks the codec on the device; the codec-1
// kernels above and the packed ones each return unless it is theirs.
template <BodyOp kOp, typename T>
void run_decode_any(const char* fn, const uint8_t* d_payload, size_t payload_bytes, T* d_out, uint64_t n,
                    Workspace& ws, cudaStream_t stream) {
  const std::string name(fn);
  if (n > ws.max_elements())
    fail(Errc::kInvalidArgument, name + ": n = " + std::to_string(n) +
                                     " exceeds the workspace's max_elements " +
                                     std::to_string(ws.max_elements()));
  if (d_payload == nullptr) fail(Errc::kInvalidArgument, name + ": d_payload is null");
  require_device_pointer(d_out, n, alignof(T), (name + ": d_out").c_str());

  const uint32_t op = next_op_id();
  Workspace::Device* dev = ws.device();
  constexpr bool kCounts = kOp == BodyOp::kCounts;
  launch_any_header(d_payload, payload_bytes, n, ws, op, kCounts, stream);
  // Codec 5's directory checks (and its count and scale checks) run even for
  // n = 0; the rest has nothing to read or write then.
  launch_packed_validate(d_payload, payload_bytes, n, ws, op, kCounts, stream);
  if (n == 0) return;
  // Codec 1: its validation and body kernels, gated. Its body starts at byte
  // 40 whenever the header kernel accepted it.
  const uint8_t* body = d_payload + kHeaderBytes;
  if (reinterpret_cast<uintptr_t>(body) % 4 == 0)
    launch_validate<true>(body, n, dev, op, stream, kCodecTernary2Bit);
  else
    launch_validate<false>(body, n, dev, op, stream, kCodecTernary2Bit);
  constexpr size_t kVecAlign = 4 * sizeof(T);
  if (reinterpret_cast<uintptr_t>(d_out) % kVecAlign == 0)
    launch_body<kOp, true, T>(body, n, d_out, dev, stream, kCodecTernary2Bit);
  else
    launch_body<kOp, false, T>(body, n, d_out, dev, stream, kCodecTernary2Bit);
  // Codecs 4 and 5: their symbols, expanded.
  launch_packed_body(d_payload, n, kOp == BodyOp::kDecode ? 0 : kOp == BodyOp::kAccumulate ? 1 : 2, d_out, ws,
                     stream);
}

}  // namespace

}  // namespace detail

void decode_any_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out, uint64_t n, Workspace& ws,
                      cudaStream_t stream) {
  detail::run_decode_any<detail::BodyOp::kDecode>("decode_any_async", d_payload, payload_bytes, d_out, n, ws,
                                                  stream);
}

void decode_accumulate_any_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out, uint64_t n,
                                 Workspace& ws, cudaStream_t stream) {
  detail::run_decode_any<detail::BodyOp::kAccumulate>("decode_accumulate_any_async", d_payload, payload_bytes,
                                                      d_out, n, ws, stream);
}

void accumulate_counts_any_async(const uint8_t* d_payload, size_t payload_bytes, int16_t* d_counts, uint64_t n,
                                 Workspace& ws, cudaStream_t stream) {
  detail::run_decode_any<detail::BodyOp::kCounts>("accumulate_counts_any_async", d_payload, payload_bytes,
                                                  d_counts, n, ws, stream);
}

void decode_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out, uint64_t n,
                  Workspace& ws, cudaStream_t stream) {
  detail::run_decode<detail::BodyOp::kDecode>("decode_async", d_payload, payload_bytes, d_out, n,
                                              ws, stream);
}

void decode_accumulate_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out,
                             uint64_t n, Workspace& ws, cudaStream_t stream) {
  detail::run_decode<detail::BodyOp::kAccumulate>("decode_accumulate_async", d_payload,
                                                  payload_bytes, d_out, n, ws, stream);
}

void accumulate_counts_async(const uint8_t* d_payload, size_t payload_bytes, int16_t* d_counts,
                             uint64_t n, Workspace& ws, cudaStream_t stream) {
  detail::run_decode<detail::BodyOp::kCounts>("accumulate_counts_async", d_payload,
                                              payload_bytes, d_counts, n, ws, stream);
}

void begin_counts_async(Workspace& ws, cudaStream_t stream) {
  // counts_scale_bits and counts_scale_set, adjacent in the host view.
  static_assert(offsetof(detail::HostView, counts_scale_set) ==
                offsetof(detail::HostView, counts_scale_bits) + sizeof(uint32_t));
  TG_CUDA_CHECK(cudaMemsetAsync(&ws.device()->view.counts_scale_bits, 0, 2 * sizeof(uint32_t), stream));
}

}  // namespace terngrad::quantize::cuda
