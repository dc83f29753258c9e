// Workspace lifetime, error reporting (check / stats / scale) and the host
// helpers shared by the launchers.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "device_state.cuh"
#include "terngrad/quantize/entropy_format.h"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::cuda {

namespace detail {

void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  // Launch-configuration and argument errors are not sticky; clear them so
  // that the next call on this thread does not report a stale error.
  (void)cudaGetLastError();
  throw CodecError(Errc::kCuda, std::string(call) + " failed: " + cudaGetErrorString(err) +
                                    " at " + file + ":" + std::to_string(line));
}

void fail(Errc code, const std::string& message) { throw CodecError(code, message); }

uint32_t next_op_id() {
  static std::atomic<uint32_t> counter{0};
  uint32_t id;
  do {
    id = counter.fetch_add(1, std::memory_order_relaxed) + 1;
  } while (id == 0);  // 0 would make an error tag that reads as "no error"
  return id;
}

int sm_count() {
  int device = 0;
  TG_CUDA_CHECK(cudaGetDevice(&device));
  static std::mutex mu;
  static std::vector<int> cache;  // by device ordinal; 0 = not yet asked
  std::lock_guard<std::mutex> lock(mu);
  if (static_cast<size_t>(device) >= cache.size()) cache.resize(device + 1, 0);
  if (cache[device] == 0) {
    int sms = 0;
    TG_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    cache[device] = sms > 0 ? sms : 1;
  }
  return cache[device];
}

int resident_blocks(const void* kernel, int block) {
  int blocks = 0;
  TG_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, block, 0));
  return blocks > 0 ? blocks : 1;
}

unsigned grid_for(uint64_t items, int block, int resident_blocks_per_sm) {
  const uint64_t wanted = (items + block - 1) / block;
  const uint64_t resident = static_cast<uint64_t>(sm_count()) * resident_blocks_per_sm;
  const uint64_t g = wanted < resident ? wanted : resident;
  return static_cast<unsigned>(g > 0 ? g : 1);
}

void require_device_pointer(const void* p, uint64_t n, size_t align, const char* what) {
  if (n > 0 && p == nullptr)
    fail(Errc::kInvalidArgument,
         std::string(what) + " is null with n = " + std::to_string(n) + " elements");
  if (p != nullptr && reinterpret_cast<uintptr_t>(p) % align != 0)
    fail(Errc::kInvalidArgument, std::string(what) + " is not " + std::to_string(align) +
                                     "-byte aligned (address " +
                                     std::to_string(reinterpret_cast<uintptr_t>(p)) + ")");
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) throw_cuda(err, kernel, file, line);
}

std::string fmt_float(float v) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.9g", static_cast<double>(v));
  return buf;
}

namespace {

std::string str(unsigned long long v) { return std::to_string(v); }

// The CPU's messages (packed_cpu.cpp check_base3_header, entropy_payload.cpp
// check_entropy_header and read_entropy_symbols, rans_block.cpp
// block_fault_name), from the values the device recorded.
[[noreturn]] void throw_base3_header(const ErrorRecord& e) {
  const auto f = static_cast<Base3Fault>(e.detail - kBase3HeaderDetail);
  const uint64_t count = e.u0;
  const std::string prefix = "malformed base-3 payload (" + str(e.u1) + " bytes): ";
  std::string why;
  switch (f) {
    case Base3Fault::kTooShort: why = "shorter than the 40-byte header"; break;
    case Base3Fault::kBadMagic: why = "bad magic (expected \"TGRD\")"; break;
    case Base3Fault::kBadVersion: why = "unsupported format version (expected 1 or 2)"; break;
    case Base3Fault::kBadHeaderSize: why = "header size field is not 40"; break;
    case Base3Fault::kUnknownFlags: why = "reserved flag bits are set"; break;
    case Base3Fault::kBadCrc: why = "header CRC-32 mismatch (corrupt header)"; break;
    case Base3Fault::kBadScale: why = "scale is negative, NaN or Inf"; break;
    case Base3Fault::kLengthMismatch:
      why = "payload length disagrees with the element count " + str(count) + " (expected " +
            (count > (uint64_t{1} << 62) ? std::string("at most 2^62 elements")
                                         : str(base3_payload_bytes(count)) + " bytes") +
            ")";
      break;
    default: why = "unknown fault " + std::to_string(e.detail - kBase3HeaderDetail); break;
  }
  fail(Errc::kMalformedPayload, prefix + why);
}

[[noreturn]] void throw_entropy_header(const ErrorRecord& e) {
  const auto f = static_cast<EntropyFault>(e.detail - kEntropyHeaderDetail);
  std::string why;
  switch (f) {
    case EntropyFault::kTooShort: why = str(e.u0) + " bytes, shorter than the 52-byte header"; break;
    case EntropyFault::kBadMagic: why = "bad magic (expected \"TGRD\")"; break;
    case EntropyFault::kBadVersion: why = "format version " + str(e.u0) + " (expected 1 or 2)"; break;
    case EntropyFault::kBadHeaderSize: why = "header size field " + str(e.u0) + " (expected 52)"; break;
    case EntropyFault::kBadCrc: why = "header CRC-32 mismatch (corrupt header)"; break;
    case EntropyFault::kBadScale: {
      char hex[9];
      std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(e.u0));
      why = std::string("scale is negative, NaN or Inf (bits 0x") + hex + ")";
      break;
    }
    case EntropyFault::kCountTooLarge: why = "element count " + str(e.u0) + " above 2^62"; break;
    case EntropyFault::kBadLanes: why = "lanes " + str(e.u0) + " (expected 1..32)"; break;
    case EntropyFault::kBadBlockLog2: why = "log2 block symbols " + str(e.u0) + " (expected 4..20)"; break;
    case EntropyFault::kBadGroup:
      why = "elements per symbol " + str(e.u0) + " (expected 5 for 3 element values)";
      break;
    case EntropyFault::kReservedByte: why = "reserved byte 39 is " + str(e.u0); break;
    case EntropyFault::kLengthMismatch:
      // The CPU decoder's words (entropy_payload.cpp), which the tests compare.
      why = "length field says " + str(e.u0) + " bytes, the payload has " + str(e.u1) +
            (e.u0 < e.u1 ? " (padded payload: an entropy-coded payload is shorter than its buffer; pass only "
                           "the bytes encode() returned, or payload_length())"
                         : " (truncated payload)");
      break;
    case EntropyFault::kDirectoryTooLarge: {
      const uint64_t symbols = (e.u0 + 4) / 5;
      const uint64_t per = uint64_t{1} << e.u2;
      why = str(e.u0) + " elements make " + str((symbols + per - 1) >> e.u2) +
            " blocks, whose directory does not fit " + str(e.u1) + " bytes";
      break;
    }
    case EntropyFault::kStreamsMismatch:
      why = "the directory's streams total " + str(e.u0) + " bytes, the payload holds " + str(e.u1) +
            " after the directory";
      break;
    case EntropyFault::kUnknownFlags: why = "reserved flag bits are set"; break;
    default: why = "unknown fault " + std::to_string(e.detail - kEntropyHeaderDetail); break;
  }
  fail(Errc::kMalformedPayload, "malformed entropy-coded payload: " + why);
}

const char* entropy_block_fault_name(EntropyBlockFault f) {
  switch (f) {
    case EntropyBlockFault::kNone: return "no fault";
    case EntropyBlockFault::kStreamTooShort: return "stream shorter than its lanes' initial states";
    case EntropyBlockFault::kOddStream: return "stream holds a partial 16-bit word";
    case EntropyBlockFault::kBadState: return "an initial lane state is below 2^16";
    case EntropyBlockFault::kOverrun:
      return "the symbols need more words than the stream holds (truncated stream)";
    case EntropyBlockFault::kTrailingWords: return "words left over after the last symbol";
    case EntropyBlockFault::kFinalState:
      return "a lane does not end in the encoders' initial state 2^16 (corrupt stream)";
    case EntropyBlockFault::kBadProbs: return "element probabilities do not sum to 2^12";
    case EntropyBlockFault::kBadModel: return "element probabilities give no usable symbol model";
  }
  return "unknown fault";
}

[[noreturn]] void throw_packed_body(const ErrorRecord& e, unsigned long long key) {
  if (e.detail == kBase3BodyDetail) {
    const unsigned long long byte = key >> 8;
    const unsigned value = static_cast<unsigned>(key & 0xFF);
    const bool padding = value <= kBase3MaxByte;  // a byte <= 242 is refused only for its padding digits
    fail(Errc::kInvalidCode, "corrupt base-3 payload: body byte " + str(byte) + " is " + std::to_string(value) +
                                 (padding ? ": its digits beyond element " + str(e.u0 - 1) + " are not 0"
                                          : std::string(" (above 242 = 3^5 - 1)")));
  }
  if (e.detail == kEntropyBlockDetail) {
    const unsigned long long block = key >> 4;
    fail(Errc::kInvalidCode, "entropy-coded payload, block " + str(block) + " of " + str(e.u0) + ": " +
                                 entropy_block_fault_name(static_cast<EntropyBlockFault>(key & 15)));
  }
  // kEntropyPaddingDetail
  fail(Errc::kInvalidCode, "entropy-coded payload: padding digit " + str(e.u0) + " of the last symbol is " +
                               str(e.u1) + " instead of the zero value 0");
}

// Turns a pending record into the exception check() throws.
[[noreturn]] void throw_record(const ErrorRecord& e) {
  const auto code = static_cast<Errc>(static_cast<int>(e.tag & 0xFFFFFFFFull));
  const unsigned long long key = ~e.inv_key;
  if (code == Errc::kMalformedPayload && e.detail >= kBase3HeaderDetail && e.detail < kEntropyHeaderDetail)
    throw_base3_header(e);
  if (code == Errc::kMalformedPayload && e.detail >= kEntropyHeaderDetail && e.detail < kBase3BodyDetail)
    throw_entropy_header(e);
  if (code == Errc::kInvalidCode && e.detail >= kBase3BodyDetail && e.detail <= kEntropyPaddingDetail)
    throw_packed_body(e, key);
  if (code == Errc::kInvalidArgument && e.detail == kEntropyModelDetail)
    fail(Errc::kInvalidArgument, "internal error: an entropy model broke its invariants (CUDA encoder)");
  switch (code) {
    case Errc::kNonFinite: {
      const unsigned long long index = key >> 2;
      const unsigned cls = static_cast<unsigned>(key & 3);
      const char* what = cls == kNonFiniteNaN ? "NaN" : (cls == kNonFinitePosInf ? "+Inf" : "-Inf");
      fail(code, "input element " + std::to_string(index) + " is " + what);
    }
    case Errc::kInvalidArgument:
      if (e.detail == kCountMismatchDetail)
        fail(code, "the payload holds " + std::to_string(e.u0) + " elements but the output has " +
                       std::to_string(e.u1));
      if (e.detail == kDeviceScaleDetail)
        fail(code, "shared scale d_scales[" + std::to_string(e.u0) + "] = " + fmt_float(e.f0) +
                       " is not a finite number >= +0 (a failed local_scale_async writes NaN)");
      fail(code, "shared scale " + fmt_float(e.f0) + " is below this tensor's own scale " +
                     fmt_float(e.f1) + ": the shared scale must be the max over workers");
    case Errc::kMalformedPayload: {
      std::string msg = std::string("payload header: ") +
                        header_fault_name(static_cast<HeaderFault>(e.detail));
      if (static_cast<HeaderFault>(e.detail) == HeaderFault::kLengthMismatch)
        msg += " (header count " + std::to_string(e.u0) + ", payload " + std::to_string(e.u1) +
               " bytes)";
      fail(code, msg);
    }
    case Errc::kInvalidCode: {
      const unsigned long long byte = key >> 3;
      const unsigned pos = static_cast<unsigned>(key & 7);
      const std::string where = "payload byte " + std::to_string(byte + kHeaderBytes) +
                                " (body byte " + std::to_string(byte) + ")";
      if (pos == kPaddingPosition)
        fail(code, where + ", the last, has nonzero padding bits after the last element");
      fail(code, where + " holds the invalid code 0b11 for element " +
                     std::to_string(byte * 4 + pos));
    }
    case Errc::kScaleMismatch:
      fail(code, "payload scale " + fmt_float(e.f1) + " differs from the scale " +
                     fmt_float(e.f0) + " of the payloads already summed into these counts");
    default:
      fail(Errc::kCuda, "corrupt workspace error record (code " +
                            std::to_string(static_cast<int>(code)) + ")");
  }
}

}  // namespace

}  // namespace detail

bool device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();  // no driver / no device is an answer here, not a pending error
  return err == cudaSuccess && count > 0;
}

Workspace::Workspace(uint64_t max_elements) : max_elements_(max_elements) {
  // Keys pack a body byte index with 3 spare bits; no real tensor comes close.
  if (max_elements > (uint64_t{1} << 58))
    detail::fail(Errc::kInvalidArgument,
                 "Workspace max_elements " + std::to_string(max_elements) + " exceeds 2^58");
  // Partials, then the packed payloads' scratch (device_state.cuh).
  const size_t bytes = detail::packed_scratch_layout(max_elements).end;
  void* p = nullptr;
  TG_CUDA_CHECK(cudaMalloc(&p, bytes));
  dev_ = static_cast<Device*>(p);
  // The state must start zeroed (no error, max_abs_bits 0) before any stream
  // uses it; construction is rare, so a synchronous clear is fine.
  const cudaError_t set = cudaMemsetAsync(dev_, 0, sizeof(Device), cudaStreamLegacy);
  const cudaError_t sync = set == cudaSuccess ? cudaStreamSynchronize(cudaStreamLegacy) : set;
  if (sync != cudaSuccess) {
    cudaFree(dev_);
    dev_ = nullptr;
    detail::throw_cuda(sync, "clearing the workspace", __FILE__, __LINE__);
  }
}

Workspace::~Workspace() {
  if (dev_ != nullptr) cudaFree(dev_);  // errors cannot be reported from a destructor
}

namespace {

// Waits for the stream and reads the host view; then clears the check window
// if anything is in it, and throws if an error was pending.
detail::HostView settle(Workspace& ws, cudaStream_t stream) {
  detail::HostView v{};
  TG_CUDA_CHECK(cudaMemcpyAsync(&v, ws.device(), sizeof v, cudaMemcpyDeviceToHost, stream));
  TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (v.err.tag != 0 || v.counts_scale_set != 0) {
    TG_CUDA_CHECK(cudaMemsetAsync(ws.device(), 0, detail::kCheckWindowBytes, stream));
    TG_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  if (v.err.tag != 0) detail::throw_record(v.err);
  return v;
}

}  // namespace

void Workspace::check(cudaStream_t stream) { settle(*this, stream); }

TensorStats Workspace::stats(cudaStream_t stream) { return settle(*this, stream).stats; }

float Workspace::scale(cudaStream_t stream) { return settle(*this, stream).scale; }

size_t Workspace::encoded_bytes(cudaStream_t stream) {
  return static_cast<size_t>(settle(*this, stream).encoded_bytes);
}

}  // namespace terngrad::quantize::cuda
