// The fp32 and fp16 codecs on device pointers, for the C API's *_device
// functions. Payloads are byte-identical to the host codecs' (comm/codecs,
// the CPU reference the tests compare against).
//
// Error protocol (as in the TernGrad CUDA codec): decoding first runs a
// one-thread header kernel that records a fault in a device-resident record;
// the body kernel writes nothing while a fault is pending, so a bad payload
// never half-updates an accumulator. DenseDevice::check() waits for the
// stream, throws the recorded fault and clears it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "dense_header.h"  // comm/codecs: DenseType, the header layout

namespace terngrad::capi::cuda {

struct DenseFaultRecord;  // device-resident, defined in dense_device.cu

class DenseDevice {
 public:
  DenseDevice();  // allocates and clears the record (synchronously)
  ~DenseDevice();
  DenseDevice(const DenseDevice&) = delete;
  DenseDevice& operator=(const DenseDevice&) = delete;

  // Waits for the stream; throws std::runtime_error (malformed payload) or
  // std::invalid_argument (count != n) for a pending fault, and clears it.
  void check(cudaStream_t stream);

  DenseFaultRecord* record() const { return rec_; }

 private:
  DenseFaultRecord* rec_ = nullptr;
};

// d_out = header (built on the host by write_dense_header) + d_x[0, n) in
// the type's little-endian encoding. No alignment is required of d_out.
void dense_encode_async(comm::detail::DenseType type, const uint8_t (&header)[comm::detail::kDenseHeaderBytes],
                        const float* d_x, uint64_t n, uint8_t* d_out, cudaStream_t stream);

// d_out[0, n) = (or +=, with accumulate) the decoded payload, after the
// header and length checks of check_dense_payload() on the device.
void dense_decode_async(comm::detail::DenseType type, const uint8_t* d_payload, size_t payload_bytes,
                        float* d_out, uint64_t n, bool accumulate, DenseDevice& dev,
                        cudaStream_t stream);

}  // namespace terngrad::capi::cuda
