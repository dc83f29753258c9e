// The ps's dense sum (dense_sum.h): the portable scalar kernels, which are the
// reference every SIMD level must match bit for bit, and the entry points that
// split a sum into blocks over the OpenMP threads and run the level's kernel.
#include <algorithm>
#include <bit>

#include "cpu_kernels.h"
#include "terngrad/quantize/dense_sum.h"
#include "terngrad/quantize/format.h"
#include "terngrad/quantize/fp16.h"

namespace terngrad::quantize {

namespace detail {

namespace {

// The sum rule in scalar form: per element acc = +0, then acc += v_r for
// r = 0..R-1. Elements go kChunk at a time (a stack accumulator, each
// body streamed through once per chunk) so that the compiler may vectorize
// the inner loop; that changes nothing in the arithmetic (one add per element
// per body, in body order). Load(p, i) is element i of the body at p.
template <size_t kInBytes, class Load>
void sum_bodies(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out, Load load) {
  constexpr size_t kChunk = 256;
  float acc[kChunk];
  for (uint64_t b = e0; b < e1; b += kChunk) {
    const size_t m = static_cast<size_t>(std::min<uint64_t>(kChunk, e1 - b));
    std::fill(acc, acc + m, 0.0f);
    for (size_t r = 0; r < count; ++r) {
      const uint8_t* p = bodies[r] + kInBytes * b;
      for (size_t i = 0; i < m; ++i) acc[i] += load(p, i);
    }
    for (size_t i = 0; i < m; ++i) store_le32(out + 4 * (b + i), std::bit_cast<uint32_t>(acc[i]));
  }
}

}  // namespace

void dense_sum_f32_portable(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out,
                            bool) {
  sum_bodies<4>(bodies, count, e0, e1, out,
                [](const uint8_t* p, size_t i) { return std::bit_cast<float>(load_le32(p + 4 * i)); });
}

void dense_sum_f16_portable(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out,
                            bool) {
  sum_bodies<2>(bodies, count, e0, e1, out, [](const uint8_t* p, size_t i) {
    return fp16::to_float(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
  });
}

}  // namespace detail

namespace {

// 64 Ki elements per parallel block: 256 KiB of output and of each float32
// body, so a thread's R+1 streams of one block stay within its 1-2 MiB L2
// while the hardware prefetchers run ahead of them.
constexpr uint64_t kDenseBlock = uint64_t{1} << 16;

// From this many elements (16 MiB of float32 output, and R times that read)
// a sum does not fit the last-level cache of the machines measured (32 MiB
// L3 on Zen 4), so its output is written past the caches (the `stream` hint):
// nothing is gained by keeping it, and regular stores read each line first.
constexpr uint64_t kStreamMinElements = uint64_t{1} << 22;

using DenseKernel = void (*)(const uint8_t* const*, size_t, uint64_t, uint64_t, uint8_t*, bool);

void run_blocks(DenseKernel kernel, std::span<const uint8_t* const> bodies, size_t n, uint8_t* out) {
  const uint64_t blocks = (n + kDenseBlock - 1) / kDenseBlock;
  const bool stream = n >= kStreamMinElements;
  detail::for_each_block(n, blocks, [&](uint64_t b) {
    const uint64_t e0 = b * kDenseBlock;
    kernel(bodies.data(), bodies.size(), e0, std::min<uint64_t>(n, e0 + kDenseBlock), out, stream);
  });
}

}  // namespace

void dense_sum_f32(std::span<const uint8_t* const> bodies, size_t n, uint8_t* out) {
  run_blocks(detail::kernels().dense_sum_f32, bodies, n, out);
}

void dense_sum_f16(std::span<const uint8_t* const> bodies, size_t n, uint8_t* out) {
  run_blocks(detail::kernels().dense_sum_f16, bodies, n, out);
}

}  // namespace terngrad::quantize
