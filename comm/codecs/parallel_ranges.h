// Private: how the codecs' element passes are split over the OpenMP team.
//
// A pass over n elements is cut into one contiguous range per thread, every
// range but the last a multiple of `align` elements long, so a range starts
// where a packed payload starts a whole byte (8 elements of any bit width)
// or a Philox block (4 elements). Each range's output is a pure function of
// the range's elements and position, never of the cut, so the payload is the
// same with 1 thread or many (tests/comm/threaded_encode_test.cpp).
//
// Small tensors run on the calling thread: even a disabled `omp parallel
// if(...)` enters libgomp and builds a one-thread team, which costs more
// than the pass (quantize's cpu_kernels.h follows the same rule).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace terngrad::comm::detail {

// Below this many elements a pass runs on the calling thread.
inline constexpr uint64_t kParallelMinElements = uint64_t{1} << 17;

// Whether a pass over n elements runs on the OpenMP team.
inline bool run_parallel(uint64_t n) { return n >= kParallelMinElements && omp_get_max_threads() > 1; }

// Runs f(begin, end) over [0, n) cut into ranges starting at multiples of
// `align`: one range per thread for large n, the whole range on the calling
// thread otherwise. f must not throw (an exception cannot leave an OpenMP
// region): passes record what is wrong and the caller throws afterwards.
template <class F>
void for_each_range(uint64_t n, uint64_t align, F&& f) {
  if (!run_parallel(n)) {
    if (n > 0) f(uint64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const uint64_t threads = static_cast<uint64_t>(omp_get_num_threads());
    const uint64_t t = static_cast<uint64_t>(omp_get_thread_num());
    const uint64_t per = ((n + threads - 1) / threads + align - 1) / align * align;
    const uint64_t begin = std::min(n, t * per), end = std::min(n, begin + per);
    if (begin < end) f(begin, end);
  }
}

}  // namespace terngrad::comm::detail
