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
#ifdef __CUDACC__
#include <cuda_fp16.h>
#endif

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
  uint32_t u2;            // entropy header faults: the log2 block symbols (for the directory message)
};

inline constexpr int kCountMismatchDetail = 1000;  // kInvalidArgument: header count != n
inline constexpr int kSharedScaleDetail = 1001;    // kInvalidArgument: shared scale < own
inline constexpr int kDeviceScaleDetail = 1002;    // kInvalidArgument: d_scales[u0] = f0 not finite >= +0
// Packed payloads (codecs 4 and 5, packed_kernels.cu). Header faults carry
// the fault in detail (base + the fault enum) and its values in u0/u1/u2; body
// faults are keyed errors (kInvalidCode) whose detail says how to read the key.
inline constexpr int kBase3HeaderDetail = 2000;    // kMalformedPayload: + Base3Fault
inline constexpr int kEntropyHeaderDetail = 2100;  // kMalformedPayload: + EntropyFault
inline constexpr int kBase3BodyDetail = 2200;      // kInvalidCode: key = byte << 8 | value (> 242, or bad padding); u0 = n
inline constexpr int kEntropyBlockDetail = 2201;   // kInvalidCode: key = block << 4 | EntropyBlockFault; u0 = blocks
inline constexpr int kEntropyPaddingDetail = 2202; // kInvalidCode: u0 = digit index, u1 = its value
inline constexpr int kEntropyModelDetail = 2203;   // kInvalidArgument: an encoder model broke its invariants (a bug)
inline constexpr unsigned kPaddingPosition = 4;

// A base-3 header's faults, in check_base3_header()'s order (packed_cpu.cpp).
enum class Base3Fault : int {
  kNone = 0, kTooShort, kBadMagic, kBadVersion, kBadHeaderSize, kUnknownFlags, kBadCrc, kBadScale, kLengthMismatch,
};
// An entropy header's faults, in check_entropy_header()'s order
// (entropy_payload.cpp), then check_symbol_header()'s flags check.
enum class EntropyFault : int {
  kNone = 0, kTooShort, kBadMagic, kBadVersion, kBadCodec, kBadHeaderSize, kBadCrc, kBadScale, kCountTooLarge,
  kBadLanes, kBadBlockLog2, kBadGroup, kReservedByte, kLengthMismatch, kDirectoryTooLarge, kStreamsMismatch,
  kUnknownFlags,
};
// A codec-5 block's faults: rans_block.h's BlockFault values, then the model's.
enum class EntropyBlockFault : int {
  kNone = 0, kStreamTooShort, kOddStream, kBadState, kOverrun, kTrailingWords, kFinalState, kBadProbs, kBadModel,
};
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
  uint64_t encoded_bytes;  // length of the last encode*_async's payload (any packing)
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
  // The *_any_async decoders: the codec id their header kernel accepted (1, 4
  // or 5; 0 while none), which the later kernels of the operation gate on, and
  // a codec-5 payload's lanes and log2 block symbols.
  uint32_t payload_codec;
  uint32_t payload_lanes;
  uint32_t payload_block_log2;
  // The entropy encode's verdict (packed_kernels.cu): 1 = the rANS payload is
  // strictly smaller than base-3 and is written, 0 = the base-3 payload stays.
  uint32_t encode_entropy;
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

// Scratch of the entropy-coded payloads (codec 5), after the partials:
//   slots     encode: one rANS stream slot of kStreamSlotBytes per block of
//             2^14 symbols (streams are written back to front, before their
//             length is known); decode: the decoded symbols (n/5 bytes).
//   counts    encode: per block the counts of 0, +, - (u32 x 3).
//   probs     encode: per block the element probabilities (u16 x 3).
//   bytes     encode: per block the stream's length.
//   offsets   per block, the stream's offset in the payload: encode (blocks of
//             2^14 symbols) and decode (blocks of 2^4 symbols at the least, the
//             smallest a valid payload may use), + 1.
//   symbols   encode: the base-3 symbols (n/5 bytes), the rANS coder's input,
//             copied into the payload only when base-3 wins; so an
//             entropy-coded payload leaves its buffer past its length
//             untouched (its symbols in the buffer would be overwritten only
//             up to the shorter rANS payload).
// About 0.7 byte per element of max_elements: the price of encoding every
// block at once without knowing the streams' lengths beforehand.
inline constexpr uint64_t kEncodeBlockSymbols = uint64_t{1} << 14;  // rans::kEncoderBlockLog2
inline constexpr uint64_t kStreamSlotBytes = 4 * 32 + 2 * kEncodeBlockSymbols;  // Layout::max_stream_bytes
inline uint64_t packed_symbols(uint64_t n) { return (n + 4) / 5; }
inline uint64_t encode_blocks(uint64_t n) { return (packed_symbols(n) + kEncodeBlockSymbols - 1) / kEncodeBlockSymbols; }
inline uint64_t decode_blocks_max(uint64_t n) { return (packed_symbols(n) + 15) / 16; }

struct PackedScratch {
  uint8_t* slots;
  uint8_t* symbols;
  uint32_t* counts;
  uint16_t* probs;
  uint32_t* bytes;
  uint64_t* offsets;
};

struct PackedScratchLayout {
  size_t slots, counts, probs, bytes, offsets, symbols, end;  // byte offsets from the workspace base
};

inline size_t round_up_256(size_t v) { return (v + 255) / 256 * 256; }

inline PackedScratchLayout packed_scratch_layout(uint64_t max_elements) {
  PackedScratchLayout l;
  const uint64_t blocks = encode_blocks(max_elements);
  l.slots = round_up_256(kPartialsOffset + 2 * sizeof(double) * stats_chunks(max_elements));
  const uint64_t slot_bytes = blocks * kStreamSlotBytes;
  const uint64_t sym_bytes = packed_symbols(max_elements);
  l.counts = round_up_256(l.slots + (slot_bytes > sym_bytes ? slot_bytes : sym_bytes));
  l.probs = round_up_256(l.counts + 3 * sizeof(uint32_t) * blocks);
  l.bytes = round_up_256(l.probs + 3 * sizeof(uint16_t) * blocks);
  l.offsets = round_up_256(l.bytes + sizeof(uint32_t) * blocks);
  const uint64_t offsets = (decode_blocks_max(max_elements) > blocks ? decode_blocks_max(max_elements) : blocks) + 1;
  l.symbols = round_up_256(l.offsets + sizeof(uint64_t) * offsets);
  l.end = l.symbols + sym_bytes;
  return l;
}

inline PackedScratch packed_scratch_of(const Workspace& ws) {
  const PackedScratchLayout l = packed_scratch_layout(ws.max_elements());
  auto* base = reinterpret_cast<uint8_t*>(ws.device());
  return PackedScratch{base + l.slots, base + l.symbols, reinterpret_cast<uint32_t*>(base + l.counts),
                       reinterpret_cast<uint16_t*>(base + l.probs), reinterpret_cast<uint32_t*>(base + l.bytes),
                       reinterpret_cast<uint64_t*>(base + l.offsets)};
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

// The checks of a well-formed header shared by every decoder's header kernel
// (one thread): its count must be n, and with track_counts_scale its scale
// that of the counts summed so far. Then records the payload's scale.
// Returns false after recording the error.
__device__ __forceinline__ bool accept_header(Workspace::Device* dev, uint32_t op, uint64_t count, uint64_t n,
                                              uint32_t scale_bits, bool track_counts_scale) {
  if (count != n) {
    // A well-formed payload of another tensor: a caller's shape error, as on the CPU.
    if (claim_error(dev, op, Errc::kInvalidArgument) == 1) {
      dev->view.err.detail = kCountMismatchDetail;
      dev->view.err.u0 = count;
      dev->view.err.u1 = n;
    }
    return false;
  }
  if (track_counts_scale) {
    // Counts from payloads of different scales cannot be summed exactly.
    if (dev->view.counts_scale_set != 0 && dev->view.counts_scale_bits != scale_bits) {
      if (claim_error(dev, op, Errc::kScaleMismatch) == 1) {
        dev->view.err.f0 = bits_float(dev->view.counts_scale_bits);
        dev->view.err.f1 = bits_float(scale_bits);
      }
      return false;
    }
    dev->view.counts_scale_bits = scale_bits;
    dev->view.counts_scale_set = 1;
  }
  dev->payload_scale = bits_float(scale_bits);
  return true;
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
  uint8_t version = kFormatVersion;  // payload_version(): the random stream's, 1 for nearest
  uint8_t* header_out = nullptr;
  // Elements the header announces: n, or the slice's count when the stats
  // cover a whole tensor and the payload one slice of it.
  uint64_t header_count = 0;
  // The 40-byte header's codec id: 1, or 4 for base-3 and for the entropy
  // packing, whose finishing kernel replaces it when rANS wins.
  uint8_t codec = 1;
  // view.encoded_bytes: the payload's length (entropy: base-3's, until then).
  uint64_t encoded_bytes = 0;
};
void launch_stats(const float* d_x, uint64_t n, const FinishParams& fp, Workspace& ws,
                  cudaStream_t stream, uint32_t op);

// What the statistics and the 2-bit pack kernels read: float32, or 16-bit
// halves (half_input.h) widened as they are loaded, exactly, so that every
// result is the float32 path's on the widened tensor.
enum class InputKind : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };
struct DeviceInput {
  const void* data = nullptr;
  InputKind kind = InputKind::kFloat32;
  // The input starting at element `offset` (a slice of it).
  DeviceInput at(uint64_t offset) const {
    const size_t bytes = kind == InputKind::kFloat32 ? 4 : 2;
    return {static_cast<const uint8_t*>(data) + offset * bytes, kind};
  }
};
void launch_stats(const DeviceInput& x, uint64_t n, const FinishParams& fp, Workspace& ws, cudaStream_t stream,
                  uint32_t op);

#ifdef __CUDACC__
// Element i of an input of kind K as float32 (a half's value, exactly).
template <InputKind K>
__device__ __forceinline__ float load_input(const void* x, uint64_t i) {
  if constexpr (K == InputKind::kFloat32) {
    return static_cast<const float*>(x)[i];
  } else if constexpr (K == InputKind::kBFloat16) {
    return __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(x)[i]) << 16);
  } else {
    return __half2float(__ushort_as_half(static_cast<const uint16_t*>(x)[i]));
  }
}
#endif

// ---- packed payloads (packed_kernels.cu) ----

// The body of a codec-4 payload, or of a codec-5 payload with its base-3
// fallback, of x[0, n) after launch_stats wrote the codec-4 header at d_out.
// rng as codec 1's pack kernel; nothing is written while an error is pending.
void launch_packed_encode(const float* d_x, uint64_t n, bool entropy, const RngStream& rng, bool nearest,
                          uint8_t* d_out, Workspace& ws, cudaStream_t stream, uint32_t op);

// The *_any_async decoders' kernels: the header kernel (every codec), then
// each codec's validation and body kernels, which return at once unless the
// header kernel accepted their codec. kind: 0 decode, 1 accumulate, 2 counts.
void launch_any_header(const uint8_t* d_payload, size_t payload_bytes, uint64_t n, Workspace& ws, uint32_t op,
                       bool track_counts_scale, cudaStream_t stream);
void launch_packed_validate(const uint8_t* d_payload, size_t payload_bytes, uint64_t n, Workspace& ws, uint32_t op,
                            bool track_counts_scale, cudaStream_t stream);
void launch_packed_body(const uint8_t* d_payload, uint64_t n, int kind, void* d_out, Workspace& ws,
                        cudaStream_t stream);

}  // namespace detail

}  // namespace terngrad::quantize::cuda

#define TG_CUDA_CHECK(call)                                                                     \
  do {                                                                                          \
    const cudaError_t tg_cuda_err_ = (call);                                                    \
    if (tg_cuda_err_ != cudaSuccess)                                                            \
      ::terngrad::quantize::cuda::detail::throw_cuda(tg_cuda_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define TG_CHECK_LAUNCH(name) ::terngrad::quantize::cuda::detail::check_launch(name, __FILE__, __LINE__)
