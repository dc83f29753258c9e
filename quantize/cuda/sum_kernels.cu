// Ternary sum payloads on the device: their decode (cuda_sum.h) and the sum
// of shared-scale payloads written as one (cuda.h, sum_payloads_async). The
// body is a little-endian bit stream of b-bit fields (b <= 16 since R <=
// 32767), so a field touches at most three bytes; one thread per element
// reads them, and one thread per group of 8 fields (b whole bytes) writes them.
#include <climits>
#include <string>

#include "device_state.cuh"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/quantize/cuda.h"
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

// The codec-2 sum of the counts accumulated in `dev` (count + R per field,
// encode_sum()'s packing), with the first payload's tensor id, step and
// scale in the header (all payloads carried that scale, or an error is
// pending). Writes nothing while an error is pending in the workspace.
// Group g covers fields [8g, 8g + 8): bytes [g b, g b + b) of the body, the
// last group's cut at the body's end; fields past n are zero padding.
__global__ void pack_sum_kernel(const int16_t* counts, uint64_t n, uint32_t r, uint32_t bits, const uint8_t* first,
                                const Workspace::Device* dev, uint8_t* out) {
  if (detail::error_pending(dev)) return;
  const uint64_t body_bytes = (n * bits + 7) / 8;
  if (blockIdx.x == 0 && threadIdx.x == 0)
    write_sum_header_bits(out, n, header_scale_bits(first), r, static_cast<uint8_t>(bits),
                          load_le32(first + kHeaderTensorIdOffset), load_le32(first + kHeaderStepOffset));
  uint8_t* body = out + kHeaderBytes;
  for (const uint64_t g : grid_stride_range((n + 7) / 8)) {
    uint8_t group[16];
    quantize::detail::pack_sum_group(counts + 8 * g, g, n, r, bits, group);
    for (uint32_t k = 0; k < bits && g * bits + k < body_bytes; ++k) body[g * bits + k] = group[k];
  }
}

// d_out = the payload's bytes, unless an error is pending (its check found one).
__global__ void copy_unless_error_kernel(const uint8_t* payload, uint64_t bytes, const Workspace::Device* dev,
                                         uint8_t* out) {
  if (detail::error_pending(dev)) return;
  for (const uint64_t i : grid_stride_range(bytes)) out[i] = payload[i];
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

namespace {

// d_counts = the codes of count payloads of n elements summed, a new sum in
// ws: each payload's header (count n, scale equal to the first's), codes and
// padding checked on the way (errors recorded in ws).
void count_checked_async(const std::string& name, const uint8_t* const* d_payloads, size_t count, uint64_t n,
                         int16_t* d_counts, Workspace& ws, cudaStream_t stream) {
  if (n > 0) detail::require_device_pointer(d_counts, n, alignof(int16_t), (name + ": d_counts").c_str());
  begin_counts_async(ws, stream);
  if (n > 0) TG_CUDA_CHECK(cudaMemsetAsync(d_counts, 0, n * sizeof(int16_t), stream));
  for (size_t j = 0; j < count; ++j) accumulate_counts_async(d_payloads[j], max_encoded_bytes(n), d_counts, n, ws, stream);
}

}  // namespace

void sum_payloads_async(const uint8_t* const* d_payloads, size_t count, uint64_t n, int16_t* d_counts,
                        uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream) {
  const std::string name = "sum_payloads_async";
  if (count == 0 || count > kMaxSumContributions)
    detail::fail(Errc::kInvalidArgument, name + ": " + std::to_string(count) + " payloads (1 to " +
                                             std::to_string(kMaxSumContributions) + ")");
  if (d_payloads == nullptr) detail::fail(Errc::kInvalidArgument, name + ": d_payloads is null");
  for (size_t j = 0; j < count; ++j)
    if (d_payloads[j] == nullptr) detail::fail(Errc::kInvalidArgument, name + ": payload " + std::to_string(j) + " is null");
  if (d_out == nullptr) detail::fail(Errc::kInvalidArgument, name + ": d_out is null");
  const size_t bytes = sum_payload_bytes(n, static_cast<uint32_t>(count));
  if (out_capacity < bytes)
    detail::fail(Errc::kBufferTooSmall, name + ": d_out has " + std::to_string(out_capacity) + " bytes, the sum of " +
                                            std::to_string(n) + " elements needs " + std::to_string(bytes));
  count_checked_async(name, d_payloads, count, n, d_counts, ws, stream);
  const uint32_t r = static_cast<uint32_t>(count);
  pack_sum_kernel<<<grid((n + 7) / 8), kBlock, 0, stream>>>(d_counts, n, r, sum_bits(r), d_payloads[0], ws.device(),
                                                            d_out);
  TG_CHECK_LAUNCH("pack_sum_kernel");
}

void copy_checked_payload_async(const uint8_t* d_payload, uint64_t n, int16_t* d_counts, uint8_t* d_out,
                                size_t out_capacity, Workspace& ws, cudaStream_t stream) {
  const std::string name = "copy_checked_payload_async";
  if (d_payload == nullptr) detail::fail(Errc::kInvalidArgument, name + ": d_payload is null");
  if (d_out == nullptr) detail::fail(Errc::kInvalidArgument, name + ": d_out is null");
  const size_t bytes = max_encoded_bytes(n);
  if (out_capacity < bytes)
    detail::fail(Errc::kBufferTooSmall, name + ": d_out has " + std::to_string(out_capacity) + " bytes, the payload of " +
                                            std::to_string(n) + " elements has " + std::to_string(bytes));
  // The check of a sum of one (header, codes, padding): its counts are discarded.
  count_checked_async(name, &d_payload, 1, n, d_counts, ws, stream);
  copy_unless_error_kernel<<<grid(bytes), kBlock, 0, stream>>>(d_payload, bytes, ws.device(), d_out);
  TG_CHECK_LAUNCH("copy_unless_error_kernel");
}

}  // namespace terngrad::quantize::cuda
