// Status codes and the per-thread error message of the C API.
#include <new>
#include <stdexcept>
#include <string>

#include "capi_internal.h"
#include "terngrad/quantize/error.h"

namespace terngrad::capi {

namespace {

// One message per thread: a call on one thread never overwrites another
// thread's report.
thread_local std::string t_message;

tg_status status_of(quantize::Errc code) {
  switch (code) {
    case quantize::Errc::kInvalidArgument: return TG_ERR_INVALID_ARGUMENT;
    case quantize::Errc::kNonFinite: return TG_ERR_NON_FINITE;
    case quantize::Errc::kBufferTooSmall: return TG_ERR_BUFFER_TOO_SMALL;
    case quantize::Errc::kMalformedPayload: return TG_ERR_MALFORMED_PAYLOAD;
    case quantize::Errc::kInvalidCode: return TG_ERR_INVALID_CODE;
    case quantize::Errc::kScaleMismatch: return TG_ERR_SCALE_MISMATCH;
    case quantize::Errc::kCuda: return TG_ERR_CUDA;
  }
  return TG_ERR_INTERNAL;
}

}  // namespace

void clear_error() noexcept { t_message.clear(); }

tg_status record_current_exception(const char* function, Operation op) noexcept {
  tg_status status = TG_ERR_INTERNAL;
  const char* what = "unknown exception";
  try {
    throw;
  } catch (const ApiError& e) {
    status = e.status();
    what = e.what();
  } catch (const quantize::CodecError& e) {
    status = status_of(e.code());
    what = e.what();
  } catch (const std::invalid_argument& e) {
    status = TG_ERR_INVALID_ARGUMENT;
    what = e.what();
  } catch (const std::bad_alloc&) {
    status = TG_ERR_OUT_OF_MEMORY;
    what = "out of memory";
  } catch (const std::runtime_error& e) {
    status = op == Operation::kDecode ? TG_ERR_MALFORMED_PAYLOAD : TG_ERR_INTERNAL;
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  try {
    t_message = std::string(function) + ": " + what;
  } catch (...) {
    t_message.clear();  // no memory even for the message: the status still says what happened
  }
  return status;
}

}  // namespace terngrad::capi

extern "C" {

const char* tg_last_error_message(void) { return terngrad::capi::t_message.c_str(); }

const char* tg_status_name(tg_status status) {
  switch (status) {
    case TG_OK: return "TG_OK";
    case TG_ERR_INVALID_ARGUMENT: return "TG_ERR_INVALID_ARGUMENT";
    case TG_ERR_NON_FINITE: return "TG_ERR_NON_FINITE";
    case TG_ERR_BUFFER_TOO_SMALL: return "TG_ERR_BUFFER_TOO_SMALL";
    case TG_ERR_MALFORMED_PAYLOAD: return "TG_ERR_MALFORMED_PAYLOAD";
    case TG_ERR_INVALID_CODE: return "TG_ERR_INVALID_CODE";
    case TG_ERR_SCALE_MISMATCH: return "TG_ERR_SCALE_MISMATCH";
    case TG_ERR_CUDA: return "TG_ERR_CUDA";
    case TG_ERR_UNSUPPORTED: return "TG_ERR_UNSUPPORTED";
    case TG_ERR_OUT_OF_MEMORY: return "TG_ERR_OUT_OF_MEMORY";
    case TG_ERR_INTERNAL: return "TG_ERR_INTERNAL";
  }
  return "unknown status";
}

}  // extern "C"
