// Private to libterngrad's C API: what a tg_codec_t handle holds, and the
// wrapper that turns C++ exceptions into a tg_status plus the thread's
// error message (nothing may unwind across the C boundary).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "terngrad.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/quantize/codec.h"

namespace terngrad::capi {

// The codecs with a device path; kOther is a codec the device functions refuse.
enum class CodecKind { kTernGrad, kFp32, kFp16, kOther };

// Device-side state of one handle (workspaces, error records), created on
// first device use. Defined by device_api_cuda.cpp, or device_api_none.cpp
// in builds without CUDA.
struct DeviceState;
void destroy_device_state(DeviceState* state) noexcept;
struct DeviceStateDeleter {
  void operator()(DeviceState* s) const noexcept { destroy_device_state(s); }
};

// An error the C API itself detects (null pointer, small buffer, ...).
class ApiError : public std::runtime_error {
 public:
  ApiError(tg_status status, const std::string& what) : std::runtime_error(what), status_(status) {}
  tg_status status() const noexcept { return status_; }

 private:
  tg_status status_;
};

// What the caller was doing when an exception arrived: codecs report a
// malformed payload with a plain std::runtime_error, which only means
// TG_ERR_MALFORMED_PAYLOAD while decoding.
enum class Operation { kOther, kDecode };

// Maps the exception being handled to a status, and records
// "<function>: <message>" as this thread's error message.
tg_status record_current_exception(const char* function, Operation op) noexcept;

// Clears this thread's error message (every successful call does).
void clear_error() noexcept;

// Runs body() and returns TG_OK, or the status of what it threw.
template <class Body>
tg_status guarded(const char* function, Operation op, Body&& body) noexcept {
  try {
    std::forward<Body>(body)();
    clear_error();
    return TG_OK;
  } catch (...) {
    return record_current_exception(function, op);
  }
}

// Throws ApiError(TG_ERR_INVALID_ARGUMENT) naming `what` when p is null
// (for buffers: only when they must hold at least one element/byte).
inline void require(const void* p, const char* what) {
  if (p == nullptr) throw ApiError(TG_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL");
}
inline void require_buffer(const void* p, unsigned long long count, const char* what,
                           const char* unit) {
  if (p == nullptr && count > 0)
    throw ApiError(TG_ERR_INVALID_ARGUMENT, std::string(what) + " is NULL with " +
                                                std::to_string(count) + " " + unit);
}

// A tg_dtype this API knows (TG_ERR_INVALID_ARGUMENT naming it otherwise).
inline void require_dtype(tg_dtype dtype) {
  if (dtype != TG_FLOAT32 && dtype != TG_FLOAT16 && dtype != TG_BFLOAT16)
    throw ApiError(TG_ERR_INVALID_ARGUMENT, "dtype " + std::to_string(static_cast<int>(dtype)) +
                                                " is not TG_FLOAT32 (0), TG_FLOAT16 (1) or TG_BFLOAT16 (2)");
}

// The half type of a 16-bit tg_dtype (TG_FLOAT16 or TG_BFLOAT16, checked by require_dtype()).
inline quantize::HalfType half_type_of(tg_dtype dtype) {
  return dtype == TG_FLOAT16 ? quantize::HalfType::kFloat16 : quantize::HalfType::kBFloat16;
}

// Throws TG_ERR_BUFFER_TOO_SMALL unless capacity >= the payload size for n.
void require_payload_capacity(const comm::GradientCodec& codec, uint64_t n, size_t capacity);

}  // namespace terngrad::capi

// The handle. Global namespace: terngrad.h declares `struct tg_codec`.
struct tg_codec {
  std::unique_ptr<terngrad::comm::GradientCodec> codec;
  terngrad::capi::CodecKind kind = terngrad::capi::CodecKind::kOther;
  // From the canonical spec, for the device path of "terngrad".
  float clip = 0.0f;
  bool share_scale = false;
  terngrad::quantize::Rounding rounding = terngrad::quantize::Rounding::kStochastic;
  terngrad::quantize::RandomStream stream = terngrad::quantize::RandomStream::kPhilox7Half16;
  std::unique_ptr<terngrad::capi::DeviceState, terngrad::capi::DeviceStateDeleter> device;
};

// Throws TG_ERR_INVALID_ARGUMENT for a NULL handle; returns *codec.
inline tg_codec& handle_of(tg_codec* codec) {
  terngrad::capi::require(codec, "codec");
  return *codec;
}
inline const tg_codec& handle_of(const tg_codec* codec) {
  terngrad::capi::require(codec, "codec");
  return *codec;
}
