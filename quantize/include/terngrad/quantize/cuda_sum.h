// The ternary sum payload (ternary_sum.h) decoded on the device: what a GPU
// worker of a ps/worker cluster does with the aggregate it pulls, so that the
// sum arrives on the device as bit_width(2R)-bit counts and is expanded to
// float32 there, never on the host.
//
// The host validates the header and the length (read_sum_header: a 40-byte
// read); the device validates every field (<= 2R) and the padding bits while
// unpacking, like decode_sum does on the CPU, and writes the output only if
// the whole body is valid. The values are decode_sum's bits: one float32
// multiply scale * (field - R) per element.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "terngrad/quantize/ternary_sum.h"

namespace terngrad::quantize::cuda {

class SumDecoder {
 public:
  SumDecoder();  // allocates the device error slot
  ~SumDecoder();
  SumDecoder(const SumDecoder&) = delete;
  SumDecoder& operator=(const SumDecoder&) = delete;

  // d_out[0, h.count) = the sum d_payload (sum_payload_bytes(h.count,
  // h.contributions) bytes on the device) stands for; h is what
  // read_sum_header returned for the same bytes. Nothing is written if a
  // field or the padding is invalid (reported by check()).
  void decode_async(const uint8_t* d_payload, const SumHeader& h, float* d_out, cudaStream_t stream);

  // Waits for the stream; throws CodecError(kInvalidCode) naming the first
  // invalid element (or the padding) of any decode since the last check.
  void check(cudaStream_t stream);

 private:
  unsigned long long* d_bad_ = nullptr;  // first invalid element; UINT64_MAX when none
  uint32_t max_field_ = 0;               // of the last decode, for the message
};

}  // namespace terngrad::quantize::cuda
