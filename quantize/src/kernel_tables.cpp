// The kernels of each SIMD level. The Highway kernels (simd_kernels.cpp) serve
// every level; at AVX-512 and AVX2 the hand-written encodes
// (avx512_kernels.cpp, avx2_kernels.cpp: Philox words in element order, no
// transposes) replace Highway's (bench/RESULTS.md). For repeating that
// comparison, TG_HWY_AVX512=1 / TG_HWY_AVX2=1 keep the Highway encode; ctest
// runs the codec suite that way as well. At NEON the rANS decode is
// rans_neon.cpp's (Highway 1.0 has no expand for its refill).
#include <cstdlib>
#include <cstring>

#include "cpu_kernels.h"
#include "rans_block.h"

namespace terngrad::quantize::detail {
namespace {

const KernelTable kPortable{chunk_sums_portable,        encode_bytes_portable,
                            decode_bytes_portable,      sum_groups_portable,
                            sum_fields_max_portable,    decode_sum_fields_portable,
                            fp16::encode_portable,      fp16::decode_portable,
                            fp16::decode_accumulate_portable, dense_sum_f32_portable,
                            dense_sum_f16_portable,     rans_encode_portable,
                            encode_bytes_nearest,       add_f32_portable,
                            ef_residual_portable,       rans_decode_block,
                            bf16_widen_portable};

#if defined(__x86_64__)
KernelTable avx512_table() {
  KernelTable t = *highway_kernels(SimdLevel::kAvx512);
  const char* v = std::getenv("TG_HWY_AVX512");
  if (v != nullptr && std::strcmp(v, "1") == 0) return t;
  t.encode_bytes = encode_bytes_avx512;
  t.encode_bytes_nearest = encode_bytes_nearest_avx512;
  t.add_f32 = add_f32_avx512;
  t.ef_residual = ef_residual_avx512;
  t.rans_decode = rans_decode_avx512;
  t.rans_encode = rans_encode_avx512;
  return t;
}
KernelTable avx2_table() {
  KernelTable t = *highway_kernels(SimdLevel::kAvx2);
  const char* v = std::getenv("TG_HWY_AVX2");
  if (v != nullptr && std::strcmp(v, "1") == 0) return t;
  t.encode_bytes = encode_bytes_avx2;
  t.encode_bytes_nearest = encode_bytes_nearest_avx2;
  t.add_f32 = add_f32_avx2;
  t.ef_residual = ef_residual_avx2;
  t.rans_decode = rans_decode_avx2;
  t.rans_encode = rans_encode_avx2;
  return t;
}
#endif

#if defined(__aarch64__)
// NEON: Highway's kernels but the rANS decode (rans_neon.cpp).
KernelTable neon_table() {
  KernelTable t = *highway_kernels(SimdLevel::kNeon);
  t.rans_decode = rans_decode_neon;
  return t;
}
#endif

}  // namespace

bool kernels_compiled(SimdLevel level) {
  return level == SimdLevel::kPortable || highway_kernels(level) != nullptr;
}

const KernelTable& kernels_for(SimdLevel level) {
#if defined(__x86_64__)
  if (level == SimdLevel::kAvx512 && kernels_compiled(level)) {
    static const KernelTable table = avx512_table();
    return table;
  }
  if (level == SimdLevel::kAvx2 && kernels_compiled(level)) {
    static const KernelTable table = avx2_table();
    return table;
  }
#endif
#if defined(__aarch64__)
  if (level == SimdLevel::kNeon && kernels_compiled(level)) {
    static const KernelTable table = neon_table();
    return table;
  }
#endif
  const KernelTable* t = highway_kernels(level);
  return t != nullptr ? *t : kPortable;
}

}  // namespace terngrad::quantize::detail
