// The C API's device functions in a build without CUDA (TG_CUDA=OFF): the
// same symbols, so that programs link against either build, each refusing
// with TG_ERR_UNSUPPORTED.
#include "capi_internal.h"

namespace terngrad::capi {

struct DeviceState {};

void destroy_device_state(DeviceState* state) noexcept { delete state; }

namespace {

tg_status unsupported(const char* function) {
  return guarded(function, Operation::kOther, [] {
    throw ApiError(TG_ERR_UNSUPPORTED, "libterngrad was built without CUDA (TG_CUDA=OFF)");
  });
}

}  // namespace

}  // namespace terngrad::capi

using terngrad::capi::unsupported;

extern "C" {

int tg_cuda_built(void) { return 0; }

int tg_cuda_available(void) { return 0; }

tg_status tg_codec_local_scale_device(tg_codec_t*, const float*, uint64_t, void*, float*) {
  return unsupported(__func__);
}

tg_status tg_codec_encode_device(tg_codec_t*, const float*, uint64_t, uint32_t, uint32_t, uint64_t,
                                 const float*, uint8_t*, size_t, void*, size_t*) {
  return unsupported(__func__);
}

tg_status tg_codec_decode_device(tg_codec_t*, const uint8_t*, size_t, float*, uint64_t, void*) {
  return unsupported(__func__);
}

tg_status tg_codec_decode_accumulate_device(tg_codec_t*, const uint8_t*, size_t, float*, uint64_t,
                                            void*) {
  return unsupported(__func__);
}

tg_status tg_codec_device_check(tg_codec_t*, void*) { return unsupported(__func__); }

tg_status tg_codec_local_scale_device_typed(tg_codec_t*, const void*, uint64_t, tg_dtype, void*, float*) {
  return unsupported(__func__);
}

tg_status tg_codec_encode_device_typed(tg_codec_t*, const void*, uint64_t, tg_dtype, uint32_t, uint32_t, uint64_t,
                                       const float*, uint8_t*, size_t, void*, size_t*) {
  return unsupported(__func__);
}

tg_status tg_codec_encode_slices_device(tg_codec_t*, const float*, uint64_t, size_t, const uint64_t*, const uint64_t*,
                                        uint32_t, uint32_t, uint64_t, const float*, uint8_t* const*, const size_t*,
                                        void*, size_t*) {
  return unsupported(__func__);
}

tg_status tg_codec_encode_slices_device_typed(tg_codec_t*, const void*, uint64_t, tg_dtype, size_t, const uint64_t*,
                                              const uint64_t*, uint32_t, uint32_t, uint64_t, const float*,
                                              uint8_t* const*, const size_t*, void*, size_t*) {
  return unsupported(__func__);
}

tg_status tg_codec_aggregate_device(tg_codec_t*, const uint8_t* const*, const size_t*, size_t, uint64_t, uint8_t*,
                                    size_t, void*, size_t*) {
  return unsupported(__func__);
}

tg_status tg_codec_decode_aggregate_device(tg_codec_t*, const uint8_t*, size_t, float*, uint64_t, void*) {
  return unsupported(__func__);
}

tg_status tg_codec_device_takes(const tg_codec_t* codec, tg_dtype dtype, int* out_takes) {
  return terngrad::capi::guarded(__func__, terngrad::capi::Operation::kOther, [&] {
    handle_of(codec);
    terngrad::capi::require(out_takes, "out_takes");
    terngrad::capi::require_dtype(dtype);
    *out_takes = 0;
  });
}

}  // extern "C"
