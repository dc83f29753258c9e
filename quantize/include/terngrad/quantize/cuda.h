// TernGrad codec, CUDA path: the same operations as codec.h on device
// pointers, ordered on a caller's stream, producing the same bytes.
//
// Nothing is synchronized and nothing allocates after the Workspace exists.
// Errors found on the device (NaN/Inf input, malformed payload, invalid code,
// a shared scale below the tensor's own, a device shared scale that is not a
// finite number >= +0) are recorded in the workspace; the kernels after the
// failing check write nothing (local_scale_async's NaN scale aside, see
// there), so an accumulator is never half-updated. Workspace::check(stream)
// synchronizes and throws CodecError.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/half_input.h"

namespace terngrad::quantize::cuda {

// True if a CUDA device can be used (tests skip with a message otherwise).
bool device_available();

// Device-side scratch for tensors of up to max_elements elements: stats
// partials, the scale, the error record, and the entropy packing's scratch
// (about 0.7 byte per element: every block's rANS stream slot, the symbols
// the encode codes, the decoded symbols). One per stream in flight.
class Workspace {
 public:
  explicit Workspace(uint64_t max_elements);
  ~Workspace();
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  uint64_t max_elements() const { return max_elements_; }

  // Waits for the stream, then throws CodecError if any operation since the
  // last check recorded an error (and clears it). Returns normally otherwise.
  void check(cudaStream_t stream);

  // Waits for the stream and returns the statistics of the last stats_async(),
  // local_scale_async() or encode*_async() (throws like check()).
  TensorStats stats(cudaStream_t stream);

  // Waits for the stream and returns the scale of the last encode*_async()
  // (the shared scale when one was used; local_scale_async() leaves it alone).
  float scale(cudaStream_t stream);

  // Waits for the stream and returns the length in bytes of the payload the
  // last encode*_async() wrote (throws like check()): max_encoded_bytes(n,
  // packing) for the fixed-size packings, at most that for Packing::kEntropy,
  // whose length is decided on the device.
  size_t encoded_bytes(cudaStream_t stream);

  struct Device;  // device-resident state, defined in the .cu files
  Device* device() const { return dev_; }

 private:
  uint64_t max_elements_;
  Device* dev_ = nullptr;  // device pointer
};

// Statistics of d_x[0, n) into the workspace (read with ws.stats()).
void stats_async(const float* d_x, uint64_t n, Workspace& ws, cudaStream_t stream);

// *d_scale_out = the tensor's own scale, bit-identical to the CPU's
// local_scale(compute_stats(x[0, n)), clip_factor): the stats pass of
// stats_async() whose last kernel also writes the scale (ws.stats() reports
// the statistics afterwards). Nothing is synchronized, so a worker's scale can
// feed encode_shared_async() below without a host round trip.
// clip_factor is checked at the call (negative, NaN or Inf: kInvalidArgument,
// as local_scale()). NaN/Inf input is recorded for ws.check() as in
// stats_async(), and then, as also when an earlier unchecked error is pending
// in ws, *d_scale_out is set to NaN instead of keeping a stale value: an
// encode_shared_async() reading it, in any workspace, refuses it too.
void local_scale_async(const float* d_x, uint64_t n, float clip_factor, float* d_scale_out,
                       Workspace& ws, cudaStream_t stream);

// Encodes d_x[0, n) into d_out, which holds at least
// max_encoded_bytes(n, params.packing) bytes (kBufferTooSmall otherwise). The
// header (scale included) is written on the device: no host round trip.
// Every packing gives the CPU's encode() bytes: codec 1 (k2Bit), codec 4
// (kBase3), and for kEntropy codec 5, or codec 4 when the rANS payload would
// not be strictly smaller (tiny or dense tensors), exactly as the CPU decides.
// The payload's length is ws.encoded_bytes(stream) afterwards (or encode()
// below); a kEntropy payload is shorter than its buffer, whose bytes past
// the payload are left as they were.
void encode_async(const float* d_x, uint64_t n, const EncodeParams& params, uint8_t* d_out,
                  size_t out_capacity, Workspace& ws, cudaStream_t stream);

// encode_async(), then waits for the stream and returns the payload's length
// (throws like ws.check() if the encode failed on the device).
size_t encode(const float* d_x, uint64_t n, const EncodeParams& params, uint8_t* d_out, size_t out_capacity,
              Workspace& ws, cudaStream_t stream);

// Scale sharing on the device: encode_async() with params.shared_scale =
// max(d_scales[0, num_scales)), that max being taken by the encode's own
// stats kernel, so the bytes equal the CPU's encode() with the host's max of
// the same floats. d_scales is typically the workers' local_scale_async()
// outputs; it is read in stream order, so the caller orders the other
// workers' streams before this one (cudaStreamWaitEvent).
// At the call (kInvalidArgument): params.shared_scale set (one source of the
// scale only), d_scales null or misaligned, num_scales 0, and encode_async()'s
// own checks. On the device (ws.check(), nothing written): a d_scales value
// that is NaN, Inf, negative or -0 (naming its index), a max below this
// tensor's own scale (the same error as a host shared_scale below it), and
// NaN/Inf input. The max is a serial loop in one thread: meant for the
// handful of scales of a worker group, not thousands.
void encode_shared_async(const float* d_x, uint64_t n, const EncodeParams& params, const float* d_scales,
                         uint32_t num_scales, uint8_t* d_out, size_t out_capacity, Workspace& ws,
                         cudaStream_t stream);

// The payload of the slice d_whole[params.element_offset, + count) with the
// whole tensor's statistics (and so its scale): byte-identical to the CPU's
// encode_with_stats(slice, compute_stats(whole), params).
void encode_slice_async(const float* d_whole, uint64_t n_whole, uint64_t count, const EncodeParams& params,
                        uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream);

// encode_slice_async(), then waits and returns the payload's length.
size_t encode_slice(const float* d_whole, uint64_t n_whole, uint64_t count, const EncodeParams& params,
                    uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream);

// encode_slice_async() with the shared scale max(d_scales[0, num_scales)) read
// on the device, as encode_shared_async(): the CPU's encode_with_stats(slice,
// compute_stats(whole), params with shared_scale = that max).
void encode_slice_shared_async(const float* d_whole, uint64_t n_whole, uint64_t count,
                               const EncodeParams& params, const float* d_scales, uint32_t num_scales,
                               uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream);

// d_out[0, n) = decoded d_payload. payload_bytes must be max_encoded_bytes(n),
// and the header's count must equal n (checked on the device).
void decode_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out, uint64_t n,
                  Workspace& ws, cudaStream_t stream);

// d_out[0, n) += decoded d_payload.
void decode_accumulate_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out,
                             uint64_t n, Workspace& ws, cudaStream_t stream);

// d_counts[0, n) += signed codes of d_payload (exact shared-scale summation).
// Every payload summed into one workspace until the next check() or
// begin_counts_async() must carry the same scale (else kScaleMismatch).
void accumulate_counts_async(const uint8_t* d_payload, size_t payload_bytes, int16_t* d_counts,
                             uint64_t n, Workspace& ws, cudaStream_t stream);

// The decoders above take codec 1 only, of exactly max_encoded_bytes(n) bytes
// (checked at the call). These take every packing, as the CPU's decode():
// the header's codec id (1, 4 or 5) is read on the device and picks the
// path, so nothing is synchronized. payload_bytes is the payload's length
// (for codec 5 the length encode wrote, not its buffer's capacity); it is
// checked on the device against the header (kMalformedPayload, with the
// CPU's message), as is everything else: header fields, codec 5's block
// directory, every block's probabilities and rANS stream (overrun, words
// left over, final states, with the block's index), base-3 bytes above 242
// and nonzero padding digits (kInvalidCode), the header's count == n
// (kInvalidArgument). Nothing is written to d_out unless all of it passed.
// At the call: n above the workspace's max_elements, d_payload null, d_out
// null (n > 0) or misaligned (kInvalidArgument).
void decode_any_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out, uint64_t n,
                      Workspace& ws, cudaStream_t stream);
void decode_accumulate_any_async(const uint8_t* d_payload, size_t payload_bytes, float* d_out, uint64_t n,
                                 Workspace& ws, cudaStream_t stream);
void accumulate_counts_any_async(const uint8_t* d_payload, size_t payload_bytes, int16_t* d_counts, uint64_t n,
                                 Workspace& ws, cudaStream_t stream);

// 16-bit tensors on the device (half_input.h): n halves of `type` at data
// (2-byte aligned). Every call below is its float32 namesake's on the
// widened tensor, bit for bit (and so the CPU's); the kernels widen each
// element as they load it, so no float32 copy is made. The 2-bit packing
// only (kInvalidArgument for the others: widen first).
struct DeviceHalves {
  const uint16_t* data = nullptr;
  uint64_t size = 0;
  HalfType type = HalfType::kBFloat16;
};
void stats_async(const DeviceHalves& x, Workspace& ws, cudaStream_t stream);
void encode_async(const DeviceHalves& x, const EncodeParams& params, uint8_t* d_out, size_t out_capacity,
                  Workspace& ws, cudaStream_t stream);
void encode_slice_async(const DeviceHalves& whole, uint64_t count, const EncodeParams& params, uint8_t* d_out,
                        size_t out_capacity, Workspace& ws, cudaStream_t stream);

// Starts a new shared-scale sum in `ws` without a check(): the next
// accumulate_counts_async takes its payload's scale as the sum's. Lets one
// workspace sum several variables (each with its own shared scale) in
// stream order and be checked once. Pending errors are kept.
void begin_counts_async(Workspace& ws, cudaStream_t stream);

// The ternary sum payload (codec 2, ternary_sum.h) of `count` codec-1
// payloads of n elements that share one scale, each of max_encoded_bytes(n)
// bytes at d_payloads[j] (a host array of device pointers), into d_out: the
// bytes of the CPU's sum_payloads() (tensor id, step and scale from the
// first payload), with no host round trip. d_counts is the caller's scratch
// of n int16. Starts its own sum (begin_counts_async) and checks each payload
// as accumulate_counts_async() does (count, codes, padding, scale mismatch);
// on any error (ws.check()) d_out is left as it was.
// At the call (kInvalidArgument / kBufferTooSmall): count 0 or above
// kMaxSumContributions, a null pointer (d_counts, d_out or a payload, n > 0
// for d_counts), n above ws.max_elements(), out_capacity below
// sum_payload_bytes(n, count).
void sum_payloads_async(const uint8_t* const* d_payloads, size_t count, uint64_t n, int16_t* d_counts,
                        uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream);

// The aggregate of a single payload, as the host codecs' aggregate() gives
// it: the payload itself (max_encoded_bytes(n) bytes), not a sum of one.
// Checked first as sum_payloads_async() checks its inputs (count, codes,
// padding; d_counts is scratch for that check), and copied into d_out only
// when no error is pending in ws: on any error d_out is left as it was.
// At the call (kInvalidArgument / kBufferTooSmall): a null pointer, n above
// ws.max_elements(), out_capacity below max_encoded_bytes(n).
void copy_checked_payload_async(const uint8_t* d_payload, uint64_t n, int16_t* d_counts, uint8_t* d_out,
                                size_t out_capacity, Workspace& ws, cudaStream_t stream);

}  // namespace terngrad::quantize::cuda
