// Device decode of ternary sum payloads (cuda_sum.h). The body is a
// little-endian bit stream of b-bit fields (b <= 16 since R <= 32767), so a
// field touches at most three bytes; one thread per element reads them.
#include <climits>
#include <string>

#include "device_state.cuh"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/quantize/cuda_sum.h"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::cuda {

using terngrad::device::grid_stride_range;

namespace {

constexpr unsigned kBlock = 256;
constexpr unsigned long long kNone = ULLONG_MAX;
// Reported in place of an element index when the padding bits are nonzero.
constexpr unsigned long long kPadding = ULLONG_MAX - 1;

__device__ __forceinline__ uint32_t field_at(const uint8_t* body, uint64_t body_bytes, uint64_t i, uint32_t bits) {
  const uint64_t bit = i * bits;
  const uint64_t byte = bit / 8;
  uint32_t window = 0;
  for (uint32_t k = 0; k < 3 && byte + k < body_bytes; ++k) window |= static_cast<uint32_t>(body[byte + k]) << (8 * k);
  return (window >> (bit % 8)) & ((1u << bits) - 1u);
}

// Pass 1: every field <= 2R and zero padding, else the smallest bad index.
__global__ void validate_kernel(const uint8_t* body, uint64_t body_bytes, uint64_t n, uint32_t bits,
                                uint32_t max_field, unsigned long long* bad) {
  for (const uint64_t i : grid_stride_range(n))
    if (field_at(body, body_bytes, i, bits) > max_field) atomicMin(bad, static_cast<unsigned long long>(i));
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const uint64_t used = n * bits;
    if (used % 8 != 0 && (body[used / 8] >> (used % 8)) != 0) atomicMin(bad, kPadding);
  }
}

// Pass 2: out[i] = scale * (field - R), decode_sum's expression; skipped
// entirely when pass 1 (or an unchecked earlier decode) found a bad field.
__global__ void decode_kernel(const uint8_t* body, uint64_t body_bytes, uint64_t n, uint32_t bits, int32_t r,
                              float scale, const unsigned long long* bad, float* out) {
  if (*static_cast<const volatile unsigned long long*>(bad) != kNone) return;
  for (const uint64_t i : grid_stride_range(n))
    out[i] = scale * static_cast<float>(static_cast<int32_t>(field_at(body, body_bytes, i, bits)) - r);
}

unsigned grid(uint64_t n) {
  const uint64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > 65535ull * 8 ? 65535ull * 8 : blocks);
}

}  // namespace

SumDecoder::SumDecoder() {
  TG_CUDA_CHECK(cudaMalloc(&d_bad_, sizeof(unsigned long long)));
  // Finished before any caller's stream (non-blocking streams do not wait
  // for the legacy stream the memset runs on).
  TG_CUDA_CHECK(cudaMemset(d_bad_, 0xFF, sizeof(unsigned long long)));
  TG_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

SumDecoder::~SumDecoder() {
  if (d_bad_) cudaFree(d_bad_);
}

void SumDecoder::decode_async(const uint8_t* d_payload, const SumHeader& h, float* d_out, cudaStream_t stream) {
  if (h.bits == 0 || h.bits > 16 || h.contributions == 0)
    detail::fail(Errc::kInvalidArgument, "SumDecoder::decode_async: header not from read_sum_header (" +
                                             std::to_string(h.bits) + " bits, " + std::to_string(h.contributions) +
                                             " contributions)");
  if (h.count == 0) return;
  if (d_payload == nullptr || d_out == nullptr)
    detail::fail(Errc::kInvalidArgument, "SumDecoder::decode_async: null device pointer");
  max_field_ = 2 * h.contributions;
  const uint8_t* body = d_payload + kHeaderBytes;
  const uint64_t body_bytes = (h.count * h.bits + 7) / 8;
  validate_kernel<<<grid(h.count), kBlock, 0, stream>>>(body, body_bytes, h.count, h.bits, max_field_, d_bad_);
  TG_CHECK_LAUNCH("sum validate_kernel");
  decode_kernel<<<grid(h.count), kBlock, 0, stream>>>(body, body_bytes, h.count, h.bits,
                                                      static_cast<int32_t>(h.contributions), h.scale, d_bad_, d_out);
  TG_CHECK_LAUNCH("sum decode_kernel");
}

void SumDecoder::check(cudaStream_t stream) {
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  unsigned long long bad = kNone;
  TG_CUDA_CHECK(cudaMemcpy(&bad, d_bad_, sizeof bad, cudaMemcpyDeviceToHost));
  if (bad == kNone) return;
  // Reset on the caller's stream and wait: the next decode on it sees the reset.
  TG_CUDA_CHECK(cudaMemsetAsync(d_bad_, 0xFF, sizeof(unsigned long long), stream));
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (bad == kPadding)
    detail::fail(Errc::kInvalidCode, "ternary sum payload: nonzero padding bits in the last byte");
  detail::fail(Errc::kInvalidCode, "ternary sum payload: element " + std::to_string(bad) +
                                       " holds a field above 2R = " + std::to_string(max_field_));
}

}  // namespace terngrad::quantize::cuda
