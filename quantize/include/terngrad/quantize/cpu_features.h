// Which CPU kernels run. The AVX-512 kernels are chosen at run time when the
// processor has AVX-512 F/BW/DQ, so one binary runs everywhere; the portable
// scalar kernels are the reference they must match bit for bit.
#pragma once

namespace terngrad::quantize {

// True if the AVX-512 kernels are in use.
bool cpu_simd_active();

// Forces the portable kernels (false) or re-enables AVX-512 where supported
// (true). For tests and benchmarks; also settable with TG_CPU_SIMD=0.
void set_cpu_simd(bool enabled);

}  // namespace terngrad::quantize
