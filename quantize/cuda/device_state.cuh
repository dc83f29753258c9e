// Private to the CUDA codec: the device-resident workspace state, the error
// record the kernels write, and the host helpers the launchers share.
//
// Error protocol. Kernels never stop the stream; they record the first error
// in Workspace::Device::view.err, and every later kernel that would write a
// caller's buffer returns at once while a record is pending. Because the
// kernels of one operation run in stream order, "validate everything, then
// write" needs no host round trip, and a failed operation leaves the output
// untouched. Workspace::check() reports the record and clears it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "terngrad/quantize/cuda.h"
#include "terngrad/quantize/error.h"
#include "terngrad/quantize/ternary_math.h"

namespace terngrad::quantize::cuda {

namespace detail {

// The first error since the last check. tag = (operation id << 32) | Errc:
// the first operation to fail claims the record with atomicCAS, and only
// threads of that same operation and error kind may refine it afterwards, so
// an unchecked later operation cannot mix its indices into the report.
struct ErrorRecord {
  unsigned long long tag;
  // ~key, maximized with atomicMax so that the smallest key wins and an
  // all-zero record means "no key" (the record is reset with a memset).
  // Non-finite input: key = element index << 2 | class (0 NaN, 1 +Inf, 2 -Inf).
  // Invalid body: key = body byte << 3 | position (0..3 element in the byte,
  // kPaddingPosition for nonzero padding bits).
  unsigned long long inv_key;
  unsigned long long u0;  // header count (malformed payload) or d_scales index
  unsigned long long u1;  // payload bytes or expected element count
  int detail;             // HeaderFault, kCountMismatchDetail or kSharedScaleDetail
  float f0;               // shared scale / scale recorded for the counts / bad d_scales value
  float f1;               // own scale / this payload's scale
  uint32_t reserved;
};

inline constexpr int kCountMismatchDetail = 1000;  // kInvalidArgument: header count != n
inline constexpr int kSharedScaleDetail = 1001;    // kInvalidArgument: shared scale < own
inline constexpr int kDeviceScaleDetail = 1002;    // kInvalidArgument: d_scales[u0] = f0 not finite >= +0
inline constexpr unsigned kPaddingPosition = 4;
inline constexpr unsigned kNonFiniteNaN = 0, kNonFinitePosInf = 1, kNonFiniteNegInf = 2;

// The part of the device state the host reads back in one copy. Everything
// before `stats` is the check window that check() clears.
struct HostView {
  ErrorRecord err;
  // Scale of the payloads summed by accumulate_counts_async since the last check.
  uint32_t counts_scale_bits;
  uint32_t counts_scale_set;
  TensorStats stats;  // of the last stats_async / local_scale_async / encode*_async
  float scale;        // of the last encode_async
  uint32_t reserved;
};
inline constexpr size_t kCheckWindowBytes = offsetof(HostView, stats);

inline __host__ __device__ constexpr unsigned long long make_tag(uint32_t op, Errc code) {
  return (static_cast<unsigned long long>(op) << 32) |
         static_cast<unsigned long long>(static_cast<uint32_t>(code));
}

}  // namespace detail

// Device-resident; allocated by the Workspace constructor together with the
// two arrays of first-level partial sums that follow it (see Partials).
struct Workspace::Device {
  detail::HostView view;
  float payload_scale;    // header scale of the payload being decoded
  uint32_t max_abs_bits;  // max |x| bits of the running stats pass; 0 between operations
};

namespace detail {

// First-level (per kStatsChunk) partial sums, located after the Device struct.
struct Partials {
  double* sum;
  double* sum_sq;
};

inline uint64_t stats_chunks(uint64_t n) { return (n + kStatsChunk - 1) / kStatsChunk; }

// Byte offset of the partial arrays inside the workspace allocation.
inline constexpr size_t kPartialsOffset = (sizeof(Workspace::Device) + 255) / 256 * 256;

inline Partials partials_of(const Workspace& ws) {
  auto* base = reinterpret_cast<char*>(ws.device()) + kPartialsOffset;
  auto* sum = reinterpret_cast<double*>(base);
  return Partials{sum, sum + stats_chunks(ws.max_elements())};
}

#if defined(__CUDACC__)
// True while an error is pending. The record is written by earlier kernels
// (kernel boundaries order and publish it) or by this kernel's other threads,
// which only matters as an early exit, never for correctness of the output.
__device__ __forceinline__ bool error_pending(const Workspace::Device* d) {
  return *static_cast<const volatile unsigned long long*>(&d->view.err.tag) != 0ull;
}

// Claims the record for (op, code). Returns 1 if this call claimed it first,
// 2 if the same operation already holds it with the same code (the caller may
// refine the key), 0 if another error owns it.
__device__ __forceinline__ int claim_error(Workspace::Device* d, uint32_t op, Errc code) {
  const unsigned long long tag = make_tag(op, code);
  const unsigned long long old = atomicCAS(&d->view.err.tag, 0ull, tag);
  return old == 0ull ? 1 : (old == tag ? 2 : 0);
}

// Records (or refines) a keyed error: the smallest key of this operation wins.
__device__ __forceinline__ void record_keyed_error(Workspace::Device* d, uint32_t op, Errc code,
                                                   unsigned long long key) {
  if (claim_error(d, op, code) != 0) atomicMax(&d->view.err.inv_key, ~key);
}
#endif

// ---- host helpers (workspace.cu) ----

// Throws CodecError(kCuda) naming the call, the CUDA error and the location.
[[noreturn]] void throw_cuda(cudaError_t err, const char* call, const char* file, int line);

// Throws CodecError(code, message).
[[noreturn]] void fail(Errc code, const std::string& message);

// A float for a message, with all the digits that identify it ("%.9g").
std::string fmt_float(float v);

// A process-wide id for each operation, never 0 (see ErrorRecord::tag).
uint32_t next_op_id();

// Multiprocessors of the current device (cached per device ordinal).
int sm_count();

// Grid for a grid-stride kernel: enough blocks to cover `items` with one
// item per thread, capped at what fits on the device at once.
unsigned grid_for(uint64_t items, int block, int resident_blocks_per_sm);

// Blocks of `kernel` resident per multiprocessor at `block` threads.
int resident_blocks(const void* kernel, int block);

// Common host-side checks of a pointer that must be non-null for n > 0 and
// aligned to `align` bytes.
void require_device_pointer(const void* p, uint64_t n, size_t align, const char* what);

// Launch check: a bad configuration shows up immediately in cudaGetLastError.
void check_launch(const char* kernel, const char* file, int line);

// Shared by stats_async, local_scale_async and the encodes (stats_kernels.cu):
// the canonical two-level statistics of x[0, n), and then, on one warp pair,
// the scale and (for encode) the payload header written to header_out.
struct FinishParams {
  bool encode = false;  // false: no header, and view.scale is left as it was
  float clip_factor = 0.0f;
  // local_scale_async: the tensor's own scale goes to this caller's device
  // float (NaN when the operation fails, see cuda.h).
  float* scale_out = nullptr;
  // Shared scale, either a host value (has_shared) or, with shared_scales
  // non-null, the max of num_shared_scales device floats read by the finish
  // kernel, so that the workers' scales never travel through the host.
  bool has_shared = false;
  float shared_scale = 0.0f;
  const float* shared_scales = nullptr;
  uint32_t num_shared_scales = 0;
  uint64_t seed = 0;
  uint32_t step = 0;
  uint32_t tensor_id = 0;
  bool nearest = false;  // Rounding::kNearest: kFlagNearest in the header, seed field 0
  uint8_t* header_out = nullptr;
  // Elements the header announces: n, or the slice's count when the stats
  // cover a whole tensor and the payload one slice of it.
  uint64_t header_count = 0;
};
void launch_stats(const float* d_x, uint64_t n, const FinishParams& fp, Workspace& ws,
                  cudaStream_t stream, uint32_t op);

}  // namespace detail

}  // namespace terngrad::quantize::cuda

#define TG_CUDA_CHECK(call)                                                                     \
  do {                                                                                          \
    const cudaError_t tg_cuda_err_ = (call);                                                    \
    if (tg_cuda_err_ != cudaSuccess)                                                            \
      ::terngrad::quantize::cuda::detail::throw_cuda(tg_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define TG_CHECK_LAUNCH(name) ::terngrad::quantize::cuda::detail::check_launch(name, __FILE__, __LINE__)
