// Workspace lifetime, error reporting (check / stats / scale) and the host
// helpers shared by the launchers.
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "device_state.cuh"
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

// Turns a pending record into the exception check() throws.
[[noreturn]] void throw_record(const ErrorRecord& e) {
  const auto code = static_cast<Errc>(static_cast<int>(e.tag & 0xFFFFFFFFull));
  const unsigned long long key = ~e.inv_key;
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
  const size_t bytes =
      detail::kPartialsOffset + 2 * sizeof(double) * detail::stats_chunks(max_elements);
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

}  // namespace terngrad::quantize::cuda
