#include "terngrad/quantize/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "cpu_kernels.h"

namespace terngrad::quantize {
namespace {

bool cpu_has_avx512() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

bool simd_wanted_by_env() {
  const char* v = std::getenv("TG_CPU_SIMD");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

std::atomic<bool>& simd_enabled() {
  static std::atomic<bool> enabled{cpu_has_avx512() && simd_wanted_by_env()};
  return enabled;
}

}  // namespace

bool cpu_simd_active() { return simd_enabled().load(std::memory_order_relaxed); }

void set_cpu_simd(bool enabled) {
  simd_enabled().store(enabled && cpu_has_avx512(), std::memory_order_relaxed);
}

namespace detail {
bool use_avx512() { return cpu_simd_active(); }
}  // namespace detail

}  // namespace terngrad::quantize
