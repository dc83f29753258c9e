// Which CPU kernels run. One binary runs everywhere: the codec's hot passes
// (stats, encode, decode, decode-accumulate, the ps's payload sums, the fp16
// codec's conversions, and the ps's dense float32 / binary16 sums,
// dense_sum.h) have one kernel per instruction-set level, chosen
// at run time. Every level produces the same bytes as the portable scalar
// kernels, which are the reference (tests/quantize/simd_levels_test.cpp).
//
// The level in use starts as the best this CPU supports; the environment
// variable TG_CPU_SIMD, read once at the first codec call, can force another:
//   TG_CPU_SIMD=portable (or 0)   the scalar reference kernels
//   TG_CPU_SIMD=avx2              x86-64 AVX2 + FMA + F16C + BMI2
//   TG_CPU_SIMD=avx512            x86-64 AVX-512 F/BW/DQ/VL
//   TG_CPU_SIMD=neon              AArch64 Advanced SIMD
//   TG_CPU_SIMD=native (or 1)     the best level (the default)
// A level this CPU lacks falls back to the best one below it, and an unknown
// value to the best level; both print one line on stderr saying so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace terngrad::quantize {

enum class SimdLevel : uint8_t {
  kPortable = 0,
  kAvx2 = 1,
  kAvx512 = 2,
  kNeon = 3,
};

// "portable", "avx2", "avx512", "neon".
const char* simd_level_name(SimdLevel level);

// The level a TG_CPU_SIMD value names, or nullopt for an unknown value
// ("native" / "1" name the best level this CPU supports).
std::optional<SimdLevel> parse_simd_level(std::string_view text);

// Whether this CPU (and the build) can run the level's kernels.
bool simd_level_supported(SimdLevel level);

// Every supported level, portable first, best last.
std::vector<SimdLevel> supported_simd_levels();

// The level in use.
SimdLevel cpu_simd_level();

// Switches every codec kernel to `level` (for tests and benchmarks; not
// meant to race with codec calls on other threads). Throws CodecError
// (kInvalidArgument) naming the level if this CPU cannot run it.
void set_cpu_simd_level(SimdLevel level);

// True if a SIMD level (not the portable kernels) is in use.
bool cpu_simd_active();

// false: the portable kernels; true: the best supported level.
void set_cpu_simd(bool enabled);

// The CPU's name as the kernel reports it (/proc/cpuinfo "model name", or
// "CPU part" on ARM), for figures and caches keyed by machine; "unknown"
// where there is none.
std::string cpu_model_name();

}  // namespace terngrad::quantize
