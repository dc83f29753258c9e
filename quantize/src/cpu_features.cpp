#include "terngrad/quantize/cpu_features.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cpu_kernels.h"
#include "terngrad/quantize/error.h"

namespace terngrad::quantize {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// F16C from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports does
// not know "f16c" (a compile error), and the fuzz build (fuzz/) is clang.
// The OS side (AVX state in XCR0) is what the "avx2" check below covers.
bool has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

// What the CPU and OS provide (libgcc's __builtin_cpu_supports checks XCR0,
// so a feature the OS does not save is reported missing). The AVX2 level is
// Highway's AVX2 target, whose code may use everything listed here.
bool cpu_has(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPortable:
      return true;
#if defined(__x86_64__) && defined(__GNUC__)
    case SimdLevel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
             has_f16c() && __builtin_cpu_supports("sse4.2") &&
             __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("aes");
    case SimdLevel::kAvx512:
      return cpu_has(SimdLevel::kAvx2) && __builtin_cpu_supports("avx512f") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
    case SimdLevel::kNeon:
      return true;  // Advanced SIMD is part of every ARMv8-A CPU
#endif
    default:
      return false;
  }
}

// Preference order, best first.
constexpr SimdLevel kBestFirst[] = {SimdLevel::kAvx512, SimdLevel::kAvx2, SimdLevel::kNeon,
                                    SimdLevel::kPortable};

SimdLevel best_level() {
  for (SimdLevel l : kBestFirst)
    if (simd_level_supported(l)) return l;
  return SimdLevel::kPortable;
}

// The best supported level that is not above `wanted` in kBestFirst.
SimdLevel fallback_for(SimdLevel wanted) {
  bool reached = false;
  for (SimdLevel l : kBestFirst) {
    reached |= l == wanted;
    if (reached && simd_level_supported(l)) return l;
  }
  return SimdLevel::kPortable;
}

SimdLevel level_from_env() {
  const char* v = std::getenv("TG_CPU_SIMD");
  if (v == nullptr || *v == '\0') return best_level();
  const std::optional<SimdLevel> wanted = parse_simd_level(v);
  if (!wanted) {
    const SimdLevel best = best_level();
    std::fprintf(stderr,
                 "terngrad: TG_CPU_SIMD=%s is not one of portable, avx2, avx512, neon, native; "
                 "using %s\n",
                 v, simd_level_name(best));
    return best;
  }
  if (simd_level_supported(*wanted)) return *wanted;
  const SimdLevel used = fallback_for(*wanted);
  std::fprintf(stderr, "terngrad: TG_CPU_SIMD=%s but this CPU cannot run the %s kernels; using %s\n",
               v, simd_level_name(*wanted), simd_level_name(used));
  return used;
}

std::atomic<SimdLevel>& active_level() {
  static std::atomic<SimdLevel> level{level_from_env()};
  return level;
}

}  // namespace

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kPortable:
      return "portable";
    case SimdLevel::kAvx2:
      return "avx2";
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kNeon:
      return "neon";
  }
  return "unknown";
}

std::optional<SimdLevel> parse_simd_level(std::string_view text) {
  if (text == "portable" || text == "0") return SimdLevel::kPortable;
  if (text == "avx2") return SimdLevel::kAvx2;
  if (text == "avx512") return SimdLevel::kAvx512;
  if (text == "neon") return SimdLevel::kNeon;
  if (text == "native" || text == "1") return best_level();
  return std::nullopt;
}

bool simd_level_supported(SimdLevel level) {
  return cpu_has(level) && detail::kernels_compiled(level);
}

std::vector<SimdLevel> supported_simd_levels() {
  std::vector<SimdLevel> out;
  for (auto it = std::rbegin(kBestFirst); it != std::rend(kBestFirst); ++it)
    if (simd_level_supported(*it)) out.push_back(*it);
  return out;
}

SimdLevel cpu_simd_level() { return active_level().load(std::memory_order_relaxed); }

void set_cpu_simd_level(SimdLevel level) {
  if (!simd_level_supported(level)) {
    throw CodecError(Errc::kInvalidArgument, std::string("this CPU cannot run the ") +
                                                 simd_level_name(level) + " kernels");
  }
  active_level().store(level, std::memory_order_relaxed);
}

bool cpu_simd_active() { return cpu_simd_level() != SimdLevel::kPortable; }

void set_cpu_simd(bool enabled) {
  active_level().store(enabled ? best_level() : SimdLevel::kPortable, std::memory_order_relaxed);
}

namespace detail {
const KernelTable& kernels() { return kernels_for(cpu_simd_level()); }
}  // namespace detail

std::string cpu_model_name() {
  std::string name = "unknown";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      const std::string l(line);
      if (l.rfind("model name", 0) != 0 && l.rfind("CPU part", 0) != 0) continue;
      const size_t colon = l.find(':');
      if (colon == std::string::npos) continue;
      name = l.substr(l.find_first_not_of(' ', colon + 1));
      name.erase(name.find_last_not_of(" \n") + 1);
      if (l.rfind("model name", 0) == 0) break;  // "CPU part" only where there is no model name
    }
    std::fclose(f);
  }
  return name.empty() ? "unknown" : name;
}

}  // namespace terngrad::quantize
