// encode_async: statistics and header on the device (stats_kernels.cu), then
// one fused quantize+pack pass. Body byte k depends only on x[4k..4k+3], the
// scale and Philox(seed; k, step, tensor id), all through the shared
// ternary_math.h functions, so any thread may produce any byte and the bytes
// equal the CPU encoder's.
#include <cmath>
#include <string>

#include "device_state.cuh"
#include "terngrad/device/grid_stride.cuh"
#include "terngrad/quantize/format.h"

namespace terngrad::quantize::cuda {

using terngrad::device::grid_stride_range;

namespace detail {

namespace {

constexpr int kPackBlock = 256;

// Body byte k's four elements x[4k, 4k + 4); absent ones (beyond n) pass
// 0.0f and become the zero padding. kVec: x is 16-byte aligned, so a full
// byte's four elements are one float4 load.
template <InputKind K, bool kVec>
__device__ __forceinline__ void load_byte_elements(const void* __restrict__ x, uint64_t n, uint64_t k, float v[4]) {
  const uint64_t i = 4 * k;
  if (kVec && i + 3 < n) {
    const float4 f = static_cast<const float4*>(x)[k];
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
    return;
  }
  v[0] = load_input<K>(x, i);
  v[1] = i + 1 < n ? load_input<K>(x, i + 1) : 0.0f;
  v[2] = i + 2 < n ? load_input<K>(x, i + 2) : 0.0f;
  v[3] = i + 3 < n ? load_input<K>(x, i + 3) : 0.0f;
}

// The packers' first step. Stats found NaN/Inf or the shared scale was
// refused (or an earlier, unchecked operation failed): the header was not
// written, neither is the body. An all-zero tensor (or shared scale 0): every
// code is 0, as encode_byte would give, written without spending Philox
// rounds on it. Otherwise the caller codes the body (true).
__device__ __forceinline__ bool body_needs_codes(uint64_t n, uint8_t* __restrict__ body,
                                                 const Workspace::Device* dev) {
  if (error_pending(dev)) return false;
  if (dev->view.scale > 0.0f) return true;
  for (const uint64_t k : grid_stride_range(body_bytes(n))) body[k] = 0;
  return false;
}

// One body byte per thread per grid-stride step, reading an input of kind K
// (float32, or halves widened as loaded): nearest rounding and version 1
// (version 2's stochastic codes: pack_pairs_kernel).
template <InputKind K, bool kVec>
__global__ void __launch_bounds__(kPackBlock)
    pack_kernel(const void* __restrict__ x, uint64_t n, uint8_t* __restrict__ body,
                const Workspace::Device* dev, RngStream rng, bool nearest) {
  static_assert(!kVec || K == InputKind::kFloat32, "the float4 loads read float32");
  if (!body_needs_codes(n, body, dev)) return;
  const uint64_t nbytes = body_bytes(n);
  const TernaryQuantizer q = make_quantizer(dev->view.scale);
  for (const uint64_t k : grid_stride_range(nbytes)) {
    float v[4];  // 4k < n since k < body_bytes(n)
    load_byte_elements<K, kVec>(x, n, k, v);
    body[k] = nearest ? encode_byte_nearest(v[0], v[1], v[2], v[3], q) : encode_byte(v[0], v[1], v[2], v[3], q, rng, k);
  }
}

// Pairs of global body bytes (2p, 2p + 1) that local bytes [0, nbytes) of a
// payload starting at global byte `offset` touch.
__host__ __device__ inline uint64_t body_pairs(uint64_t nbytes, uint64_t offset) {
  return ((nbytes + offset + 1) >> 1) - (offset >> 1);
}

// Format version 2's stochastic codes: one Philox4x32-7 block serves global
// body bytes 2p and 2p + 1 (half16_words), so one thread codes both from one
// block, where pack_kernel would compute the block once per byte: half the
// Philox arithmetic, which bounds pack_kernel on an H200 (compute 65% busy,
// DRAM 37%, Nsight Compute). The same bytes as pack_kernel.
template <InputKind K, bool kVec>
__global__ void __launch_bounds__(kPackBlock)
    pack_pairs_kernel(const void* __restrict__ x, uint64_t n, uint8_t* __restrict__ body,
                      const Workspace::Device* dev, RngStream rng) {
  static_assert(!kVec || K == InputKind::kFloat32, "the float4 loads read float32");
  if (!body_needs_codes(n, body, dev)) return;
  const uint64_t nbytes = body_bytes(n);
  const TernaryQuantizer q = make_quantizer(dev->view.scale);
  const uint64_t offset = rng.block_offset;  // global byte of local byte 0
  for (const uint64_t j : grid_stride_range(body_pairs(nbytes, offset))) {
    const uint64_t pair = (offset >> 1) + j;
    const Philox4x32Counter w = stream_block<7>(rng, pair);
#pragma unroll
    for (uint32_t odd = 0; odd < 2; ++odd) {
      const uint64_t global = 2 * pair + odd;
      if (global < offset || global - offset >= nbytes) continue;  // the slice's ends
      const uint64_t k = global - offset;
      float v[4];
      load_byte_elements<K, kVec>(x, n, k, v);
      body[k] = encode_byte_with(v[0], v[1], v[2], v[3], q, half16_words(w, odd));
    }
  }
}

template <InputKind K, bool kVec>
void launch_pack_of(const void* d_x, uint64_t n, uint8_t* body, const Workspace::Device* dev, const RngStream& rng,
                    bool nearest, cudaStream_t stream) {
  if (!nearest && rng.stream == RandomStream::kPhilox7Half16) {
    static const int resident =
        resident_blocks(reinterpret_cast<const void*>(&pack_pairs_kernel<K, kVec>), kPackBlock);
    const unsigned grid = grid_for(body_pairs(body_bytes(n), rng.block_offset), kPackBlock, resident);
    pack_pairs_kernel<K, kVec><<<grid, kPackBlock, 0, stream>>>(d_x, n, body, dev, rng);
    TG_CHECK_LAUNCH("pack_pairs_kernel");
    return;
  }
  static const int resident = resident_blocks(reinterpret_cast<const void*>(&pack_kernel<K, kVec>), kPackBlock);
  const unsigned grid = grid_for(body_bytes(n), kPackBlock, resident);
  pack_kernel<K, kVec><<<grid, kPackBlock, 0, stream>>>(d_x, n, body, dev, rng, nearest);
  TG_CHECK_LAUNCH("pack_kernel");
}

void launch_pack(const DeviceInput& x, uint64_t n, uint8_t* body, const Workspace::Device* dev, const RngStream& rng,
                 bool nearest, cudaStream_t stream) {
  switch (x.kind) {
    case InputKind::kFloat32:
      if (reinterpret_cast<uintptr_t>(x.data) % alignof(float4) == 0)
        launch_pack_of<InputKind::kFloat32, true>(x.data, n, body, dev, rng, nearest, stream);
      else
        launch_pack_of<InputKind::kFloat32, false>(x.data, n, body, dev, rng, nearest, stream);
      return;
    case InputKind::kFloat16:
      launch_pack_of<InputKind::kFloat16, false>(x.data, n, body, dev, rng, nearest, stream);
      return;
    case InputKind::kBFloat16:
      launch_pack_of<InputKind::kBFloat16, false>(x.data, n, body, dev, rng, nearest, stream);
      return;
  }
}

}  // namespace

}  // namespace detail

namespace {

// Where the scale of an encode comes from besides the tensor itself: nothing
// or params.shared_scale (scales == nullptr), or the max of count device floats.
struct DeviceScales {
  const float* scales = nullptr;
  uint32_t count = 0;
};

// Statistics of d_stats[0, n_stats), then the payload of d_x[0, n): the whole
// tensor (d_x == d_stats) or the slice of it at params.element_offset.
void encode_impl(const detail::DeviceInput& d_stats, uint64_t n_stats, const detail::DeviceInput& d_x, uint64_t n,
                 const EncodeParams& params, const DeviceScales& device_scales, uint8_t* d_out,
                 size_t out_capacity, Workspace& ws, cudaStream_t stream, const char* fn) {
  using detail::fail;
  const std::string name = fn;
  if (n_stats > ws.max_elements())
    fail(Errc::kInvalidArgument, name + ": n = " + std::to_string(n_stats) +
                                     " exceeds the workspace's max_elements " +
                                     std::to_string(ws.max_elements()));
  const bool halves = d_stats.kind != detail::InputKind::kFloat32;
  detail::require_device_pointer(d_stats.data, n_stats, halves ? 2 : alignof(float), (name + ": d_x").c_str());
  if (halves && params.packing != Packing::k2Bit)
    fail(Errc::kInvalidArgument, name + ": 16-bit inputs take the 2-bit packing on the device (packing " +
                                     packing_name(params.packing) + "): widen them to float32 first");
  if (params.element_offset % 4 != 0)
    fail(Errc::kInvalidArgument, name + ": element_offset must be a multiple of 4, got " +
                                     std::to_string(params.element_offset));
  if (d_out == nullptr)
    fail(Errc::kInvalidArgument, name + ": d_out is null (the header needs " +
                                     std::to_string(kHeaderBytes) + " bytes even for n = 0)");
  if (params.packing != Packing::k2Bit && params.packing != Packing::kBase3 &&
      params.packing != Packing::kEntropy)
    fail(Errc::kInvalidArgument, name + ": unknown packing " +
                                     std::to_string(static_cast<int>(params.packing)));
  const size_t needed = max_encoded_bytes(n, params.packing);
  if (out_capacity < needed)
    fail(Errc::kBufferTooSmall, name + ": out_capacity " + std::to_string(out_capacity) +
                                    " bytes is below the " + std::to_string(needed) + " bytes needed for n = " +
                                    std::to_string(n) + " (packing " + packing_name(params.packing) + ")");
  if (!(params.clip_factor >= 0.0f) || std::isinf(params.clip_factor))
    fail(Errc::kInvalidArgument,
         name + ": clip_factor must be a finite number >= 0 (0 disables clipping), got " +
             detail::fmt_float(params.clip_factor));
  detail::FinishParams fp;
  fp.encode = true;
  fp.clip_factor = params.clip_factor;
  if (params.shared_scale.has_value()) {
    const float s = *params.shared_scale;
    // -0.0 is refused too: check_header() rejects a payload whose scale has the sign bit set.
    if (std::isnan(s) || std::isinf(s) || std::signbit(s))
      fail(Errc::kInvalidArgument, name + ": shared_scale must be finite and >= 0 (not -0), got " +
                                       detail::fmt_float(s));
    fp.has_shared = true;
    fp.shared_scale = s;
  }
  if (device_scales.scales != nullptr) {
    fp.shared_scales = device_scales.scales;
    fp.num_shared_scales = device_scales.count;
  }
  fp.seed = params.seed;
  fp.step = params.step;
  fp.tensor_id = params.tensor_id;
  fp.nearest = params.rounding == Rounding::kNearest;
  fp.version = payload_version(params.stream, fp.nearest);
  fp.header_out = d_out;
  fp.header_count = n;
  // Base-3 and entropy start from the codec-4 header (the entropy encode's
  // fallback); the entropy finishing kernel replaces it when rANS is smaller.
  fp.codec = params.packing == Packing::k2Bit ? kCodecTernary2Bit : kCodecTernaryBase3;
  fp.encoded_bytes = needed;

  const uint32_t op = detail::next_op_id();
  detail::launch_stats(d_stats, n_stats, fp, ws, stream, op);
  if (n == 0) return;  // header-only payload
  const RngStream rng{params.seed, params.step, params.tensor_id, params.element_offset / 4, params.stream};
  if (params.packing != Packing::k2Bit) {
    detail::launch_packed_encode(static_cast<const float*>(d_x.data), n, params.packing == Packing::kEntropy, rng,
                                 fp.nearest, d_out, ws, stream, op);
    return;
  }
  detail::launch_pack(d_x, n, d_out + kHeaderBytes, ws.device(), rng, fp.nearest, stream);
}

detail::DeviceInput floats(const float* d_x) { return {d_x, detail::InputKind::kFloat32}; }

detail::DeviceInput input_of(const DeviceHalves& x) {
  return {x.data, x.type == HalfType::kFloat16 ? detail::InputKind::kFloat16 : detail::InputKind::kBFloat16};
}

// Host checks of the device-scale arguments, before anything is enqueued.
DeviceScales device_scales_arg(const EncodeParams& params, const float* d_scales, uint32_t num_scales,
                               const char* fn) {
  const std::string name = fn;
  // Two sources for one scale would leave the caller guessing which one won.
  if (params.shared_scale.has_value())
    detail::fail(Errc::kInvalidArgument,
                 name + ": params.shared_scale must be empty (it is " +
                     detail::fmt_float(*params.shared_scale) + "): the shared scale is the max of d_scales");
  if (d_scales == nullptr)
    detail::fail(Errc::kInvalidArgument, name + ": d_scales is null (num_scales = " +
                                             std::to_string(num_scales) + ")");
  if (num_scales == 0)
    detail::fail(Errc::kInvalidArgument, name + ": num_scales is 0: the max of no scales is undefined");
  detail::require_device_pointer(d_scales, num_scales, alignof(float), (name + ": d_scales").c_str());
  return DeviceScales{d_scales, num_scales};
}

void check_slice(uint64_t n_whole, uint64_t count, const EncodeParams& params, const char* fn) {
  if (params.element_offset > n_whole || count > n_whole - params.element_offset)
    detail::fail(Errc::kInvalidArgument,
                 std::string(fn) + ": slice [" + std::to_string(params.element_offset) + ", +" +
                     std::to_string(count) + ") lies outside the tensor of " + std::to_string(n_whole) +
                     " elements");
}

}  // namespace

void encode_async(const float* d_x, uint64_t n, const EncodeParams& params, uint8_t* d_out,
                  size_t out_capacity, Workspace& ws, cudaStream_t stream) {
  encode_impl(floats(d_x), n, floats(d_x), n, params, DeviceScales{}, d_out, out_capacity, ws, stream,
              "encode_async");
}

size_t encode(const float* d_x, uint64_t n, const EncodeParams& params, uint8_t* d_out, size_t out_capacity,
              Workspace& ws, cudaStream_t stream) {
  encode_impl(floats(d_x), n, floats(d_x), n, params, DeviceScales{}, d_out, out_capacity, ws, stream, "encode");
  return ws.encoded_bytes(stream);
}

size_t encode_slice(const float* d_whole, uint64_t n_whole, uint64_t count, const EncodeParams& params,
                    uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream) {
  check_slice(n_whole, count, params, "encode_slice");
  encode_impl(floats(d_whole), n_whole, floats(d_whole + params.element_offset), count, params, DeviceScales{},
              d_out, out_capacity, ws, stream, "encode_slice");
  return ws.encoded_bytes(stream);
}

void encode_slice_async(const float* d_whole, uint64_t n_whole, uint64_t count, const EncodeParams& params,
                        uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream) {
  check_slice(n_whole, count, params, "encode_slice_async");
  encode_impl(floats(d_whole), n_whole, floats(d_whole + params.element_offset), count, params, DeviceScales{},
              d_out, out_capacity, ws, stream, "encode_slice_async");
}

void encode_shared_async(const float* d_x, uint64_t n, const EncodeParams& params, const float* d_scales,
                         uint32_t num_scales, uint8_t* d_out, size_t out_capacity, Workspace& ws,
                         cudaStream_t stream) {
  const DeviceScales scales = device_scales_arg(params, d_scales, num_scales, "encode_shared_async");
  encode_impl(floats(d_x), n, floats(d_x), n, params, scales, d_out, out_capacity, ws, stream,
              "encode_shared_async");
}

void encode_slice_shared_async(const float* d_whole, uint64_t n_whole, uint64_t count,
                               const EncodeParams& params, const float* d_scales, uint32_t num_scales,
                               uint8_t* d_out, size_t out_capacity, Workspace& ws, cudaStream_t stream) {
  check_slice(n_whole, count, params, "encode_slice_shared_async");
  const DeviceScales scales = device_scales_arg(params, d_scales, num_scales, "encode_slice_shared_async");
  encode_impl(floats(d_whole), n_whole, floats(d_whole + params.element_offset), count, params, scales, d_out,
              out_capacity, ws, stream, "encode_slice_shared_async");
}

void stats_async(const DeviceHalves& x, Workspace& ws, cudaStream_t stream) {
  if (x.size > ws.max_elements())
    detail::fail(Errc::kInvalidArgument, "stats_async: n = " + std::to_string(x.size) +
                                             " exceeds the workspace's max_elements " +
                                             std::to_string(ws.max_elements()));
  detail::require_device_pointer(x.data, x.size, 2, "stats_async: d_x");
  detail::launch_stats(input_of(x), x.size, detail::FinishParams{}, ws, stream, detail::next_op_id());
}

void encode_async(const DeviceHalves& x, const EncodeParams& params, uint8_t* d_out, size_t out_capacity,
                  Workspace& ws, cudaStream_t stream) {
  encode_impl(input_of(x), x.size, input_of(x), x.size, params, DeviceScales{}, d_out, out_capacity, ws, stream,
              "encode_async");
}

void encode_slice_async(const DeviceHalves& whole, uint64_t count, const EncodeParams& params, uint8_t* d_out,
                        size_t out_capacity, Workspace& ws, cudaStream_t stream) {
  check_slice(whole.size, count, params, "encode_slice_async");
  encode_impl(input_of(whole), whole.size, input_of(whole).at(params.element_offset), count, params, DeviceScales{},
              d_out, out_capacity, ws, stream, "encode_slice_async");
}

}  // namespace terngrad::quantize::cuda
