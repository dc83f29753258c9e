// Statistics in the canonical order of ternary_math.h, so that the sums,
// and hence the scale, are bit-identical to the CPU path:
//  level 1: one warp per kStatsChunk-element chunk; lane l adds elements
//           chunk*4096 + l + 32*j for j = 0, 1, ... in float64, then the 32
//           lanes fold with the __shfl_down_sync butterfly (butterfly_sum32);
//  level 2: one warp adds the chunk partials the same way (lane l adds
//           p[l], p[l+32], ...), a second warp does the squares in parallel,
//           both from shared memory that the whole block fills;
//           thread 0 then derives stats, scale and header.
// max|x| is a max of bit patterns, which is order-free: per-block
// cub::BlockReduce, then one atomicMax per block.
#include <cub/block/block_reduce.cuh>
#include <cuda/functional>

#include <cmath>
#include <string>

#include "device_state.cuh"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::cuda {

namespace detail {

namespace {

constexpr int kStatsBlock = 256;
constexpr int kWarpsPerStatsBlock = kStatsBlock / 32;
constexpr int kLaneIters = static_cast<int>(kStatsChunk) / kStatsLanes;  // 128 elements per lane
constexpr int kLoadBatch = 16;        // loads in flight per lane before they are added in order
constexpr int kFinishThreads = 1024;  // the level-2 kernel's loaders
constexpr uint32_t kFinishSlab = 2048;  // partials of each array staged at once (32 KiB of shared memory for both)
static_assert(kFinishSlab % kStatsLanes == 0, "a slab must hold whole rows of the 32 lanes' chains");
static_assert(kLaneIters % kLoadBatch == 0, "batches must tile a chunk lane");
static_assert(kStatsLanes == 32, "the butterfly below is one warp of shuffles");

// Canonical fold of the 32 lane sums; lane 0 ends with butterfly_sum32's result
// (at offset o, lane l < o adds lane l + o, exactly the loop in ternary_math.h).
__device__ __forceinline__ double warp_butterfly(double v) {
#pragma unroll
  for (int offset = kStatsLanes / 2; offset > 0; offset /= 2)
    v += __shfl_down_sync(0xFFFFFFFFu, v, offset);
  return v;
}

// Class of a non-finite float for the error key (see ErrorRecord::inv_key).
__device__ __forceinline__ unsigned non_finite_class(uint32_t bits) {
  if ((bits & kAbsMask) > kExpAllOnes) return kNonFiniteNaN;
  return (bits >> 31) ? kNonFiniteNegInf : kNonFinitePosInf;
}

template <InputKind K>
__global__ void __launch_bounds__(kStatsBlock)
    chunk_stats_kernel(const void* __restrict__ x, uint64_t n, uint64_t chunks,
                       double* __restrict__ part_sum, double* __restrict__ part_sq,
                       Workspace::Device* dev, uint32_t op) {
  const unsigned lane = threadIdx.x % 32;
  const uint64_t chunk = uint64_t{blockIdx.x} * kWarpsPerStatsBlock + threadIdx.x / 32;
  uint32_t max_bits = 0;

  if (chunk < chunks) {  // warp-uniform: the shuffles below see all 32 lanes
    const uint64_t first = chunk * kStatsChunk;
    const uint64_t lane_x = first + lane;  // this lane's first element
    double sum = 0.0;
    double sum_sq = 0.0;
    if (first + kStatsChunk <= n) {
      // Full chunk: batches of independent coalesced loads (a warp reads 128
      // consecutive bytes per load), added strictly in increasing j.
      for (int j0 = 0; j0 < kLaneIters; j0 += kLoadBatch) {
        float v[kLoadBatch];
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u) v[u] = load_input<K>(x, lane_x + uint64_t(j0 + u) * kStatsLanes);
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u) {
          const double d = v[u];
          sum += d;
          sum_sq = fma(d, d, sum_sq);  // d*d is exact in float64: same as sum_sq + d*d
          max_bits = max(max_bits, float_bits(v[u]) & kAbsMask);
        }
      }
    } else {
      // The last, partial chunk: absent elements are skipped, as on the CPU.
      const uint64_t present = n - first;
      for (int j = 0; j < kLaneIters; ++j) {
        const uint64_t e = lane + uint64_t(j) * kStatsLanes;
        if (e < present) {
          const float f = load_input<K>(x, lane_x + uint64_t(j) * kStatsLanes);
          const double d = f;
          sum += d;
          sum_sq = fma(d, d, sum_sq);
          max_bits = max(max_bits, float_bits(f) & kAbsMask);
        }
      }
    }
    sum = warp_butterfly(sum);
    sum_sq = warp_butterfly(sum_sq);
    if (lane == 0) {
      part_sum[chunk] = sum;
      part_sq[chunk] = sum_sq;
    }
    // Rare path: this lane saw NaN/Inf. Its elements increase with j, so its
    // first bad one is its smallest; the atomicMax on ~key keeps the global first.
    if (max_bits >= kExpAllOnes) {
      const uint64_t present = n - first;
      for (int j = 0; j < kLaneIters; ++j) {
        const uint64_t e = lane + uint64_t(j) * kStatsLanes;
        if (e >= present) break;
        const uint32_t bits = float_bits(load_input<K>(x, lane_x + uint64_t(j) * kStatsLanes));
        if ((bits & kAbsMask) >= kExpAllOnes) {
          record_keyed_error(dev, op, Errc::kNonFinite, ((first + e) << 2) | non_finite_class(bits));
          break;
        }
      }
    }
  }

  using BlockMax = cub::BlockReduce<uint32_t, kStatsBlock>;
  __shared__ typename BlockMax::TempStorage tmp;
  const uint32_t block_max = BlockMax(tmp).Reduce(max_bits, ::cuda::maximum<>{});
  if (threadIdx.x == 0 && block_max != 0) atomicMax(&dev->max_abs_bits, block_max);
}

struct FinishKernelArgs {
  const double* part_sum;
  const double* part_sq;
  uint64_t chunks;
  uint64_t n;
  Workspace::Device* dev;
  uint32_t op;
  FinishParams fp;
};

// Level 2: warp 0 adds the sums' partials, warp 1 the squares', lane l
// adding p[l], p[l + 32], ... in increasing order (the canonical chain); thread 0
// then finishes. The chains are sequential by definition, so the kernel
// keeps their loads off them: all kFinishThreads threads stage a slab of
// both arrays in shared memory (many loads in flight), then the two warps
// run their chains through it. Two warps loading for themselves waited on
// one round of loads per 32 partials: 54 us for the 16,384 of a 64M tensor
// on an H200 (Nsight Compute), most of a stats pass's 108 us.
__global__ void __launch_bounds__(kFinishThreads) finish_stats_kernel(FinishKernelArgs a) {
  __shared__ double slab[2][kFinishSlab];
  __shared__ double sum_sq_total;
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  double v = 0.0;  // warp 0: lane's chain of sums; warp 1: of squares
  for (uint64_t base = 0; base < a.chunks; base += kFinishSlab) {
    const uint32_t count = static_cast<uint32_t>(min(uint64_t{kFinishSlab}, a.chunks - base));
    for (uint32_t i = threadIdx.x; i < 2 * kFinishSlab; i += kFinishThreads) {
      const uint32_t which = i / kFinishSlab, k = i % kFinishSlab;
      if (k < count) slab[which][k] = (which == 0 ? a.part_sum : a.part_sq)[base + k];
    }
    __syncthreads();
    // base is a multiple of 32: the slab holds lane's next elements, in order.
    if (warp < 2) {
#pragma unroll 8
      for (uint32_t k = lane; k < count; k += kStatsLanes) v += slab[warp][k];
    }
    __syncthreads();  // the slab is refilled next
  }
  if (warp < 2) v = warp_butterfly(v);
  if (warp == 1 && lane == 0) sum_sq_total = v;
  __syncthreads();
  if (threadIdx.x != 0) return;

  Workspace::Device* dev = a.dev;
  const uint32_t max_bits = dev->max_abs_bits;
  dev->max_abs_bits = 0;  // restore the invariant for the next operation
  // NaN/Inf found by this pass, or an unchecked error of an earlier operation:
  // leave stats, scale and the caller's header alone. A requested local scale
  // becomes NaN rather than keeping a stale value: an encode that takes it as
  // a shared scale, possibly in another workspace, then refuses instead of
  // quantizing with last step's scale.
  if (error_pending(dev)) {
    if (a.fp.scale_out != nullptr) *a.fp.scale_out = __int_as_float(0x7FC00000);
    return;
  }

  const TensorStats st = stats_from_sums(a.n, v, sum_sq_total, max_bits);
  dev->view.stats = st;
  if (!a.fp.encode && a.fp.scale_out == nullptr) return;

  const float own = scale_from_stats(st, a.fp.clip_factor);
  if (a.fp.scale_out != nullptr) *a.fp.scale_out = own;
  if (!a.fp.encode) return;

  float scale = own;
  bool shared_ok = a.fp.has_shared;
  float shared = a.fp.shared_scale;
  if (a.fp.shared_scales != nullptr) {
    // The host checked a host shared scale; device ones are checked here, with
    // the same rule (finite, sign bit clear, since check_header() refuses -0).
    // With every value >= +0 and none NaN the max does not depend on the
    // order, so it equals the host's std::max over the same floats.
    shared = 0.0f;
    for (uint32_t i = 0; i < a.fp.num_shared_scales; ++i) {
      const float s = a.fp.shared_scales[i];
      const uint32_t bits = float_bits(s);
      if ((bits >> 31) != 0 || (bits & kAbsMask) >= kExpAllOnes) {
        if (claim_error(dev, a.op, Errc::kInvalidArgument) == 1) {
          dev->view.err.detail = kDeviceScaleDetail;
          dev->view.err.u0 = i;
          dev->view.err.f0 = s;
        }
        return;
      }
      shared = s > shared ? s : shared;
    }
    shared_ok = true;
  }
  if (shared_ok) {
    if (shared < own) {
      if (claim_error(dev, a.op, Errc::kInvalidArgument) == 1) {
        dev->view.err.detail = kSharedScaleDetail;
        dev->view.err.f0 = shared;
        dev->view.err.f1 = own;
      }
      return;
    }
    scale = shared;
  }
  dev->view.scale = scale;
  dev->view.encoded_bytes = a.fp.encoded_bytes;
  const uint8_t flags = (shared_ok ? kFlagSharedScale : uint8_t{0}) | (a.fp.nearest ? kFlagNearest : uint8_t{0});
  // Codec 1, or 4 (base-3, and the entropy packing's fallback until its
  // finishing kernel decides): the same 40-byte layout.
  ::terngrad::quantize::detail::write_header_layout(a.fp.header_out, a.fp.codec, flags, a.fp.header_count,
                                                    float_bits(scale), a.fp.tensor_id,
                                                    a.fp.nearest ? uint64_t{0} : a.fp.seed, a.fp.step,
                                                    a.fp.version);
}

}  // namespace

void launch_stats(const DeviceInput& x, uint64_t n, const FinishParams& fp, Workspace& ws, cudaStream_t stream,
                  uint32_t op) {
  const Partials parts = partials_of(ws);
  const uint64_t chunks = stats_chunks(n);
  if (chunks > 0) {
    const uint64_t blocks = (chunks + kWarpsPerStatsBlock - 1) / kWarpsPerStatsBlock;
    if (blocks > 0x7FFFFFFFull)
      fail(Errc::kInvalidArgument, "tensor of " + std::to_string(n) + " elements is too large");
    const unsigned grid = static_cast<unsigned>(blocks);
    switch (x.kind) {
      case InputKind::kFloat32:
        chunk_stats_kernel<InputKind::kFloat32><<<grid, kStatsBlock, 0, stream>>>(x.data, n, chunks, parts.sum,
                                                                                  parts.sum_sq, ws.device(), op);
        break;
      case InputKind::kFloat16:
        chunk_stats_kernel<InputKind::kFloat16><<<grid, kStatsBlock, 0, stream>>>(x.data, n, chunks, parts.sum,
                                                                                  parts.sum_sq, ws.device(), op);
        break;
      case InputKind::kBFloat16:
        chunk_stats_kernel<InputKind::kBFloat16><<<grid, kStatsBlock, 0, stream>>>(x.data, n, chunks, parts.sum,
                                                                                   parts.sum_sq, ws.device(), op);
        break;
    }
    TG_CHECK_LAUNCH("chunk_stats_kernel");
  }
  const FinishKernelArgs args{parts.sum, parts.sum_sq, chunks, n, ws.device(), op, fp};
  finish_stats_kernel<<<1, kFinishThreads, 0, stream>>>(args);
  TG_CHECK_LAUNCH("finish_stats_kernel");
}

void launch_stats(const float* d_x, uint64_t n, const FinishParams& fp, Workspace& ws, cudaStream_t stream,
                  uint32_t op) {
  launch_stats(DeviceInput{d_x, InputKind::kFloat32}, n, fp, ws, stream, op);
}

}  // namespace detail

void stats_async(const float* d_x, uint64_t n, Workspace& ws, cudaStream_t stream) {
  if (n > ws.max_elements())
    detail::fail(Errc::kInvalidArgument, "stats_async: n = " + std::to_string(n) +
                                             " exceeds the workspace's max_elements " +
                                             std::to_string(ws.max_elements()));
  detail::require_device_pointer(d_x, n, alignof(float), "stats_async: d_x");
  detail::launch_stats(d_x, n, detail::FinishParams{}, ws, stream, detail::next_op_id());
}

void local_scale_async(const float* d_x, uint64_t n, float clip_factor, float* d_scale_out,
                       Workspace& ws, cudaStream_t stream) {
  if (n > ws.max_elements())
    detail::fail(Errc::kInvalidArgument, "local_scale_async: n = " + std::to_string(n) +
                                             " exceeds the workspace's max_elements " +
                                             std::to_string(ws.max_elements()));
  detail::require_device_pointer(d_x, n, alignof(float), "local_scale_async: d_x");
  if (d_scale_out == nullptr)
    detail::fail(Errc::kInvalidArgument, "local_scale_async: d_scale_out is null");
  detail::require_device_pointer(d_scale_out, 1, alignof(float), "local_scale_async: d_scale_out");
  // The same rule as quantize::local_scale, checked before anything is enqueued.
  if (!(clip_factor >= 0.0f) || std::isinf(clip_factor))
    detail::fail(Errc::kInvalidArgument,
                 "local_scale_async: clip_factor must be a finite number >= 0 (0 disables clipping), got " +
                     detail::fmt_float(clip_factor));
  detail::FinishParams fp;
  fp.clip_factor = clip_factor;
  fp.scale_out = d_scale_out;
  detail::launch_stats(d_x, n, fp, ws, stream, detail::next_op_id());
}

}  // namespace terngrad::quantize::cuda
