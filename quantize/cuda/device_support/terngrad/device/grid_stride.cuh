// The grid-stride loop of the project's element-wise CUDA kernels, written once:
//
//   for (const uint64_t i : terngrad::device::grid_stride_range(n)) out[i] = f(x[i]);
//
// Thread t of a grid of T threads visits t, t + T, t + 2T, ... below n, so the
// grid covers [0, n) exactly once whatever its size: launchers may cap the
// grid (quantize's grid_for, train's blocks_for) and the loop does the rest.
//
// Private to the project's CUDA sources (terngrad_quantize_cuda,
// terngrad_train_cuda, the C API's device path) through the INTERFACE target
// terngrad_cuda_device_support; not installed.
#pragma once

#if !defined(__CUDACC__)
#error "grid_stride.cuh holds device code: include it from .cu files only"
#endif

#include <cstdint>
#include <type_traits>

namespace terngrad::device {

// 64-bit indices only: i += T must not wrap for any tensor that fits in
// device memory, which a 32-bit index would for n near 2^32. Signed for the
// trainer's int64_t shapes, unsigned for the codec's uint64_t counts.
template <typename Index>
concept GridIndex = std::is_same_v<Index, uint64_t> || std::is_same_v<Index, int64_t>;

// This thread's index in the (one-dimensional) grid.
template <GridIndex Index>
__device__ __forceinline__ Index grid_thread_index() {
  return static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
}

// Threads in the grid: the step between one thread's consecutive indices.
template <GridIndex Index>
__device__ __forceinline__ Index grid_thread_count() {
  return static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
}

// This thread's indices in [first, end): first + grid_thread_index(), then
// every grid_thread_count() after it. Iterate it with a range-for; the loop
// stops at the first index >= end (so first >= end visits nothing).
template <GridIndex Index>
class GridStrideRange {
 public:
  struct Sentinel {};

  class Iterator {
   public:
    __device__ __forceinline__ Iterator(Index i, Index step, Index end) : i_(i), step_(step), end_(end) {}
    __device__ __forceinline__ Index operator*() const { return i_; }
    __device__ __forceinline__ Iterator& operator++() {
      i_ += step_;
      return *this;
    }
    __device__ __forceinline__ bool operator!=(Sentinel) const { return i_ < end_; }

   private:
    Index i_, step_, end_;
  };

  __device__ __forceinline__ GridStrideRange(Index first, Index end)
      : first_(first + grid_thread_index<Index>()), end_(end), step_(grid_thread_count<Index>()) {}

  __device__ __forceinline__ Iterator begin() const { return Iterator(first_, step_, end_); }
  __device__ __forceinline__ Sentinel end() const { return {}; }

 private:
  Index first_, end_, step_;
};

// [first, end): first and end have the same 64-bit type (GridIndex), so a
// mixed-type call fails to compile instead of converting silently.
template <GridIndex Index>
__device__ __forceinline__ GridStrideRange<Index> grid_stride_range(Index first, Index end) {
  return GridStrideRange<Index>(first, end);
}

// [0, end).
template <GridIndex Index>
__device__ __forceinline__ GridStrideRange<Index> grid_stride_range(Index end) {
  return GridStrideRange<Index>(Index{0}, end);
}

}  // namespace terngrad::device
