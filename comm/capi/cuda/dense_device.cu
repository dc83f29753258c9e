// fp32 / fp16 encode and decode kernels (see dense_device.h). Each has a CPU
// reference in comm/codecs (fp32_codec.cpp, fp16_convert.cpp); the C API
// CUDA test checks that both give the same bytes and floats.
#include "dense_device.h"

#include <cuda_fp16.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "terngrad/device/grid_stride.cuh"
#include "terngrad/quantize/error.h"
#include "terngrad/quantize/format.h"  // load_le32 / load_le64 (host and device)

namespace terngrad::capi::cuda {

using terngrad::device::grid_stride_range;
using terngrad::device::grid_thread_index;

using comm::detail::codec_name;
using comm::detail::DenseType;
using comm::detail::kDenseCountOffset;
using comm::detail::kDenseHeaderBytes;
using comm::detail::kDenseMagicOffset;
using comm::detail::kDenseReservedOffset;
using comm::detail::kDenseTypeOffset;
using comm::detail::kDenseVersionOffset;

// What the header kernel found, in check_dense_payload()'s order.
enum class DenseFault : uint32_t {
  kNone = 0,
  kTooShort,
  kBadMagic,
  kBadVersion,
  kBadType,
  kReserved,
  kLengthMismatch,
  kCountMismatch,  // well formed, but not n elements: the caller's shape error
};

struct DenseFaultRecord {
  uint32_t fault;       // DenseFault; 0 = nothing pending
  uint32_t codec_type;  // the DenseType of the decoding codec
  uint64_t payload_bytes;
  uint64_t n;
  uint8_t header[kDenseHeaderBytes];  // as received (zeros past a short payload)
};

namespace {

constexpr int kBlock = 256;

[[noreturn]] void cuda_fail(cudaError_t err, const char* call) {
  (void)cudaGetLastError();  // launch errors are not sticky: do not leave them for the next call
  throw quantize::CodecError(quantize::Errc::kCuda,
                             std::string(call) + " failed: " + cudaGetErrorString(err));
}

void cuda_try(cudaError_t err, const char* call) {
  if (err != cudaSuccess) cuda_fail(err, call);
}

unsigned grid_for(uint64_t n) {
  const uint64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);  // grid-stride beyond
}

__device__ __forceinline__ bool fault_pending(const DenseFaultRecord* r) {
  return *static_cast<const volatile uint32_t*>(&r->fault) != 0u;
}

// float -> binary16 bits with fp16_convert.h's rules: round to nearest even
// (the hardware conversion), but finite values beyond 65504 saturate and a
// NaN keeps its sign and top 9 payload bits (quieted).
__device__ __forceinline__ uint16_t half_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return sign | 0x7E00u | static_cast<uint16_t>((a >> 13) & 0x1FFu);
  if (a < 0x7F800000u && a >= 0x477FE000u) return sign | 0x7BFFu;
  return __half_as_ushort(__float2half_rn(x));
}

// binary16 bits -> float; Inf and NaN built by hand so a NaN keeps its payload.
__device__ __forceinline__ float half_value(uint16_t h) {
  if ((h & 0x7C00u) == 0x7C00u) {
    const uint32_t m = h & 0x3FFu;
    return __uint_as_float((static_cast<uint32_t>(h & 0x8000u) << 16) | 0x7F800000u | (m << 13) |
                           (m ? 0x400000u : 0u));
  }
  return __half2float(__ushort_as_half(h));
}

// Bytes, not words: neither the payload nor its body need be aligned.
// The 16 header bytes, passed to the encode kernel by value.
struct HeaderBytes {
  uint8_t b[kDenseHeaderBytes];
};

__global__ void encode_kernel(DenseType type, HeaderBytes header, const float* x,
                              uint64_t n, uint8_t* out) {
  // The first kDenseHeaderBytes threads of the grid also copy one header byte each.
  const uint64_t thread = grid_thread_index<uint64_t>();
  if (thread < kDenseHeaderBytes) out[thread] = header.b[thread];
  uint8_t* body = out + kDenseHeaderBytes;
  for (const uint64_t i : grid_stride_range(n)) {
    if (type == DenseType::kFloat32) {
      const uint32_t u = __float_as_uint(x[i]);
      for (int b = 0; b < 4; ++b) body[4 * i + b] = static_cast<uint8_t>(u >> (8 * b));
    } else {
      const uint16_t h = half_bits(x[i]);
      body[2 * i] = static_cast<uint8_t>(h);
      body[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
}

// One thread: check_dense_payload() on the device.
__global__ void header_kernel(DenseType type, const uint8_t* p, size_t payload_bytes, uint64_t n,
                              DenseFaultRecord* rec) {
  if (fault_pending(rec)) return;  // an unchecked earlier fault: do nothing
  DenseFault f = DenseFault::kNone;
  const uint64_t w = type == DenseType::kFloat32 ? 4 : 2;
  if (payload_bytes < kDenseHeaderBytes) {
    f = DenseFault::kTooShort;
  } else if (quantize::load_le32(p + kDenseMagicOffset) != comm::detail::kDenseMagicLe32) {
    f = DenseFault::kBadMagic;
  } else if (p[kDenseVersionOffset] != comm::detail::kDenseVersion) {
    f = DenseFault::kBadVersion;
  } else if (p[kDenseTypeOffset] != static_cast<uint8_t>(type)) {
    f = DenseFault::kBadType;
  } else if (p[kDenseReservedOffset] != 0 || p[kDenseReservedOffset + 1] != 0) {
    f = DenseFault::kReserved;
  } else {
    const uint64_t count = quantize::load_le64(p + kDenseCountOffset), body = payload_bytes - kDenseHeaderBytes;
    if (body % w != 0 || body / w != count)
      f = DenseFault::kLengthMismatch;
    else if (count != n)
      f = DenseFault::kCountMismatch;
  }
  if (f == DenseFault::kNone) return;
  rec->codec_type = static_cast<uint32_t>(type);
  rec->payload_bytes = payload_bytes;
  rec->n = n;
  for (size_t i = 0; i < kDenseHeaderBytes; ++i) rec->header[i] = i < payload_bytes ? p[i] : 0;
  rec->fault = static_cast<uint32_t>(f);
}

__global__ void decode_kernel(DenseType type, const uint8_t* body, uint64_t n, float* out,
                              bool accumulate, const DenseFaultRecord* rec) {
  if (fault_pending(rec)) return;  // the header was refused: write nothing
  for (const uint64_t i : grid_stride_range(n)) {
    float v;
    if (type == DenseType::kFloat32) {
      v = __uint_as_float(quantize::load_le32(body + 4 * i));
    } else {
      v = half_value(static_cast<uint16_t>(body[2 * i] | (body[2 * i + 1] << 8)));
    }
    out[i] = accumulate ? out[i] + v : v;
  }
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

// The host-side report of a recorded fault, worded like check_dense_payload().
[[noreturn]] void throw_fault(const DenseFaultRecord& r) {
  const uint8_t* h = r.header;
  const std::string pre = std::string(codec_name(static_cast<DenseType>(r.codec_type))) + " decode (device): ";
  switch (static_cast<DenseFault>(r.fault)) {
    case DenseFault::kTooShort:
      throw std::runtime_error(pre + "payload has " + std::to_string(r.payload_bytes) +
                               " bytes, less than the " + std::to_string(kDenseHeaderBytes) +
                               "-byte header");
    case DenseFault::kBadMagic:
      throw std::runtime_error(pre + "bad magic " + hex32(quantize::load_le32(h + kDenseMagicOffset)) + " (expected " +
                               hex32(comm::detail::kDenseMagicLe32) + ", \"TGDN\")");
    case DenseFault::kBadVersion:
      throw std::runtime_error(pre + "unsupported version " + std::to_string(h[kDenseVersionOffset]) + " (expected " +
                               std::to_string(comm::detail::kDenseVersion) + ")");
    case DenseFault::kBadType:
      throw std::runtime_error(pre + "element type " + std::to_string(h[kDenseTypeOffset]) +
                               ", this codec decodes type " + std::to_string(r.codec_type));
    case DenseFault::kReserved:
      throw std::runtime_error(pre + "reserved header bytes 6-7 are " + std::to_string(h[kDenseReservedOffset]) +
                               ", " + std::to_string(h[kDenseReservedOffset + 1]) + " (must be 0)");
    case DenseFault::kLengthMismatch:
      throw std::runtime_error(pre + "header says " + std::to_string(quantize::load_le64(h + kDenseCountOffset)) +
                               " elements but the payload has " + std::to_string(r.payload_bytes) +
                               " bytes");
    case DenseFault::kCountMismatch:
      throw std::invalid_argument(pre + "output has " + std::to_string(r.n) +
                                  " elements, payload has " +
                                  std::to_string(quantize::load_le64(h + kDenseCountOffset)));
    case DenseFault::kNone: break;
  }
  throw quantize::CodecError(quantize::Errc::kCuda,
                             "corrupt device fault record (fault " + std::to_string(r.fault) + ")");
}

}  // namespace

DenseDevice::DenseDevice() {
  void* p = nullptr;
  cuda_try(cudaMalloc(&p, sizeof(DenseFaultRecord)), "cudaMalloc (fault record)");
  rec_ = static_cast<DenseFaultRecord*>(p);
  // Synchronized: callers' non-blocking streams do not wait for the legacy stream.
  cudaError_t err = cudaMemset(rec_, 0, sizeof(DenseFaultRecord));
  if (err == cudaSuccess) err = cudaStreamSynchronize(cudaStreamLegacy);
  if (err != cudaSuccess) {
    cudaFree(rec_);
    rec_ = nullptr;
    cuda_fail(err, "cudaMemset (fault record)");
  }
}

DenseDevice::~DenseDevice() {
  if (rec_ != nullptr) cudaFree(rec_);  // a destructor cannot report errors
}

void DenseDevice::check(cudaStream_t stream) {
  DenseFaultRecord r{};
  cuda_try(cudaMemcpyAsync(&r, rec_, sizeof r, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync");
  cuda_try(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  if (r.fault == 0) return;
  cuda_try(cudaMemsetAsync(rec_, 0, sizeof r, stream), "cudaMemsetAsync");
  cuda_try(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  throw_fault(r);
}

void dense_encode_async(DenseType type, const uint8_t (&header)[kDenseHeaderBytes], const float* d_x,
                        uint64_t n, uint8_t* d_out, cudaStream_t stream) {
  HeaderBytes bytes{};
  for (size_t i = 0; i < kDenseHeaderBytes; ++i) bytes.b[i] = header[i];
  const uint64_t threads = n > kDenseHeaderBytes ? n : kDenseHeaderBytes;
  encode_kernel<<<grid_for(threads), kBlock, 0, stream>>>(type, bytes, d_x, n, d_out);
  cuda_try(cudaGetLastError(), "encode_kernel launch");
}

void dense_decode_async(DenseType type, const uint8_t* d_payload, size_t payload_bytes, float* d_out,
                        uint64_t n, bool accumulate, DenseDevice& dev, cudaStream_t stream) {
  header_kernel<<<1, 1, 0, stream>>>(type, d_payload, payload_bytes, n, dev.record());
  cuda_try(cudaGetLastError(), "header_kernel launch");
  if (n == 0) return;
  decode_kernel<<<grid_for(n), kBlock, 0, stream>>>(type, d_payload + kDenseHeaderBytes, n, d_out,
                                                   accumulate, dev.record());
  cuda_try(cudaGetLastError(), "decode_kernel launch");
}

}  // namespace terngrad::capi::cuda
