// Under TG_CPU_SIMD=<level> (ctest runs the codec suites once per level),
// says which kernels the suite exercises, and skips the whole suite with a
// message when this CPU cannot run the requested level: the codec would fall
// back to another level, and the run would test that one twice.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "terngrad/quantize/cpu_features.h"

namespace tq = terngrad::quantize;

namespace {

class ForcedSimdLevel : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* v = std::getenv("TG_CPU_SIMD");
    if (v == nullptr || *v == '\0') return;
    const auto wanted = tq::parse_simd_level(v);
    if (wanted && !tq::simd_level_supported(*wanted))
      GTEST_SKIP() << "TG_CPU_SIMD=" << v << ": this CPU cannot run the " << tq::simd_level_name(*wanted)
                   << " kernels (supported here: up to "
                   << tq::simd_level_name(tq::supported_simd_levels().back()) << ")";
    std::printf("TG_CPU_SIMD=%s: codec kernels in use: %s\n", v, tq::simd_level_name(tq::cpu_simd_level()));
  }
};

[[maybe_unused]] ::testing::Environment* const kForcedSimdLevel =
    ::testing::AddGlobalTestEnvironment(new ForcedSimdLevel);

}  // namespace
