// Private: the CPU kernels behind codec.h, ternary_sum.h, fp16.h and
// dense_sum.h, and the threading policy shared by the codec's passes. Each
// hot pass has a portable scalar kernel (the reference) and Highway kernels
// for AVX2, AVX-512 and NEON (simd_kernels.cpp); encode also a hand-written
// AVX-512 one, which measured faster. A KernelTable per SIMD level picks
// among them (cpu_features.h says how a level is chosen).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/ternary_math.h"

namespace terngrad::quantize::detail {

// Below this many elements a pass runs on the calling thread: an OpenMP
// fork/join costs more than the work.
inline constexpr uint64_t kParallelMinElements = uint64_t{1} << 17;

// Runs f(b) for b in [0, blocks): on all OpenMP threads for large tensors, as
// a plain loop otherwise. The plain loop matters: even a disabled
// `omp parallel if(...)` enters libgomp and builds a one-thread team, which
// costs more than encoding a small tensor.
template <class F>
void for_each_block(uint64_t n, uint64_t blocks, F&& f) {
  if (n < kParallelMinElements || blocks < 2) {
    for (uint64_t b = 0; b < blocks; ++b) f(b);
    return;
  }
#pragma omp parallel for schedule(static)
  for (uint64_t b = 0; b < blocks; ++b) f(b);
}

// Canonical partial sums of one stats chunk (len <= kStatsChunk elements).
struct ChunkSums {
  double sum = 0.0;
  double sum_sq = 0.0;
  uint32_t max_abs_bits = 0;
};
ChunkSums chunk_sums_portable(const float* x, size_t len);
// Adds x[from, len) to the 32 canonical lanes and folds them: the scalar
// tail every SIMD chunk kernel ends with.
ChunkSums finish_chunk(const float* x, size_t from, size_t len, double* lane_sum, double* lane_sq,
                       uint32_t max_bits);

// Body bytes [k_begin, k_end) of a tensor with n elements.
void encode_bytes_portable(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                           const TernaryQuantizer& q, const RngStream& rng, uint8_t* body);
void encode_bytes_avx512(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                         const TernaryQuantizer& q, const RngStream& rng, uint8_t* body);
void encode_bytes_avx2(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                       const TernaryQuantizer& q, const RngStream& rng, uint8_t* body);
// Nearest rounding (no random stream): the same bytes for every SIMD level.
// The portable kernel; the x86 ones are the stochastic kernels' quantize
// step with every random word at kNearestWord.
void encode_bytes_nearest(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q,
                          uint8_t* body);
void encode_bytes_nearest_avx512(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                                 const TernaryQuantizer& q, uint8_t* body);
void encode_bytes_nearest_avx2(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                               const TernaryQuantizer& q, uint8_t* body);
// Fused error feedback's element passes (KernelTable::add_f32, ef_residual):
// float adds, and d = +0, +s or -s as decode gives it, so every level's
// floats are the portable ones.
void add_f32_portable(const float* a, const float* b, float* out, size_t len);
void ef_residual_portable(const float* p, const uint8_t* body, uint64_t len, float scale, float* r);
void add_f32_avx512(const float* a, const float* b, float* out, size_t len);
void ef_residual_avx512(const float* p, const uint8_t* body, uint64_t len, float scale, float* r);
void add_f32_avx2(const float* a, const float* b, float* out, size_t len);
void ef_residual_avx2(const float* p, const uint8_t* body, uint64_t len, float scale, float* r);

// Whether the x86 encode kernels must test a >= s for clipped elements:
// false when the threshold of a = s, (s * pre) * inv24, exceeds every 24-bit
// random integer, so that u < t keeps them already (avx512_kernels.cpp).
bool clip_test_needed(const TernaryQuantizer& q);

// The x86 encode kernels' entry (stochastic and nearest, AVX2 and AVX-512):
// an all-zero tensor's codes are all 0; otherwise range.template
// operator()<kUnitPre, kClip>() runs for this quantizer's case. Returns the
// first byte not written, for the portable kernel to finish.
template <class Range>
uint64_t x86_encode_case(const TernaryQuantizer& q, uint64_t k_begin, uint64_t k_end, uint8_t* body, Range&& range) {
  if (q.scale == 0.0f) {
    for (uint64_t k = k_begin; k < k_end; ++k) body[k] = 0;
    return k_end;
  }
  const bool unit = q.pre == 1.0f, clip = clip_test_needed(q);
  return unit ? (clip ? range.template operator()<true, true>() : range.template operator()<true, false>())
              : (clip ? range.template operator()<false, true>() : range.template operator()<false, false>());
}

// Version 2's vector kernels start on a block edge (a block is two body
// bytes): the first byte of [k_begin, k_end) goes to the portable kernel
// when it is a block's second one. Returns where the vector range starts.
inline uint64_t half_stream_head(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                                 const TernaryQuantizer& q, const RngStream& rng, uint8_t* body) {
  const uint64_t head = std::min(k_end, k_begin + ((k_begin + rng.block_offset) & 1u));
  encode_bytes_portable(x, n, k_begin, head, q, rng, body);
  return head;
}

// The x86 stochastic encode entries (AVX2, AVX-512) of both streams: the
// version-2 head, x86_encode_case, then the portable kernel for the tail.
// range.template operator()<kUnitPre, kClip, kHalves>(begin) encodes from
// begin and returns the first byte it did not write.
template <class Range>
void x86_encode_drawn(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end, const TernaryQuantizer& q,
                      const RngStream& rng, uint8_t* body, Range&& range) {
  const bool halves = rng.stream == RandomStream::kPhilox7Half16;
  const uint64_t begin = halves ? half_stream_head(x, n, k_begin, k_end, q, rng, body) : k_begin;
  const uint64_t k = x86_encode_case(q, begin, k_end, body, [&]<bool kUnitPre, bool kClip>() {
    return halves ? range.template operator()<kUnitPre, kClip, true>(begin)
                  : range.template operator()<kUnitPre, kClip, false>(begin);
  });
  encode_bytes_portable(x, n, k, k_end, q, rng, body);
}

// Elements [4*k_begin, min(n, 4*k_end)) from body bytes [k_begin, k_end).
// Mode: write (out = v), accumulate (out += v).
void decode_bytes_portable(const uint8_t* body, uint64_t n, uint64_t k_begin, uint64_t k_end,
                           float scale, bool accumulate, float* out);

// Body bytes per parallel block of the decode side's passes.
inline constexpr uint64_t kDecodeBlockBytes = 16384;

// The first body byte of an n-element body holding the reserved code 0b11,
// or, failing that, the last byte if its padding bits are nonzero; kNoBadByte
// if the body is clean. Word-at-a-time, on all threads for large bodies.
// Shared by the codec-1 decoder and the bucketed one (bucketed_cpu.cpp).
inline constexpr uint64_t kNoBadByte = ~uint64_t{0};
uint64_t first_bad_byte(const uint8_t* body, uint64_t n);

// The ps's fused sum (ternary_sum.h, sum_payloads): for the groups of 8
// elements [g0, g1), adds the codes of `count` validated-length bodies (each
// byte 2g, 2g+1 present for every group) as count + R fields and packs them,
// `bits` bits each, into out (the sum body; group g starts at byte g*bits).
// Writes exactly bytes [g0*bits, g1*bits). Returns nonzero if any input byte
// held the reserved code 0b11 (the output is then garbage and discarded).
uint32_t sum_groups_portable(const uint8_t* const* bodies, size_t count, uint64_t g0, uint64_t g1,
                             uint32_t bits, uint8_t* out);

// The fields of elements [e0, e1) of a sum body of body_bytes bytes, `bits`
// bits each (e0 a multiple of 8): their largest value (validation), and
// out[i] = scale * (field_i - R) (decode_sum).
uint32_t sum_fields_max_portable(const uint8_t* body, uint64_t body_bytes, uint64_t e0, uint64_t e1,
                                 uint32_t bits);
void decode_sum_fields_portable(const uint8_t* body, uint64_t body_bytes, uint64_t e0, uint64_t e1,
                                uint32_t bits, uint32_t contributions, float scale, float* out);

// The ps's dense sum (dense_sum.h): out elements [e0, e1) = the float32 sum
// of elements [e0, e1) of `count` float32 / binary16 bodies, in body order
// from +0 (out and bodies are byte pointers to element 0, any alignment).
// stream: a hint that the output will not be read soon, so SIMD kernels may
// write it with non-temporal stores (the portable ones ignore it).
void dense_sum_f32_portable(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out,
                            bool stream);
void dense_sum_f16_portable(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out,
                            bool stream);

}  // namespace terngrad::quantize::detail

namespace terngrad::quantize::fp16 {
// The scalar bulk conversions of fp16.h (little-endian u16 halves).
void encode_portable(const float* x, size_t n, uint8_t* out);
void decode_portable(const uint8_t* in, size_t n, float* out);
void decode_accumulate_portable(const uint8_t* in, size_t n, float* out);
}  // namespace terngrad::quantize::fp16

namespace terngrad::quantize::detail {

struct BlockModel;            // rans_block.h
enum class BlockFault : int;  // rans_block.h
size_t rans_encode_portable(const uint8_t* syms, uint32_t count, uint32_t lanes, const BlockModel& model,
                            uint8_t* stream_end);
size_t rans_encode_avx512(const uint8_t* syms, uint32_t count, uint32_t lanes, const BlockModel& model,
                          uint8_t* stream_end);
size_t rans_encode_avx2(const uint8_t* syms, uint32_t count, uint32_t lanes, const BlockModel& model,
                        uint8_t* stream_end);
BlockFault rans_decode_block(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                             const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms);
BlockFault rans_decode_avx512(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                              const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms);
BlockFault rans_decode_avx2(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                            const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms);
BlockFault rans_decode_neon(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                            const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms);  // AArch64 only

// One kernel of each pass for one SIMD level.
void bf16_widen_portable(const uint16_t* in, size_t n, float* out);

struct KernelTable {
  ChunkSums (*chunk_sums)(const float* x, size_t len);
  void (*encode_bytes)(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                       const TernaryQuantizer& q, const RngStream& rng, uint8_t* body);
  void (*decode_bytes)(const uint8_t* body, uint64_t n, uint64_t k_begin, uint64_t k_end,
                       float scale, bool accumulate, float* out);
  uint32_t (*sum_groups)(const uint8_t* const* bodies, size_t count, uint64_t g0, uint64_t g1,
                         uint32_t bits, uint8_t* out);
  uint32_t (*sum_fields_max)(const uint8_t* body, uint64_t body_bytes, uint64_t e0, uint64_t e1,
                             uint32_t bits);
  void (*decode_sum_fields)(const uint8_t* body, uint64_t body_bytes, uint64_t e0, uint64_t e1,
                            uint32_t bits, uint32_t contributions, float scale, float* out);
  void (*fp16_encode)(const float* x, size_t n, uint8_t* out);
  void (*fp16_decode)(const uint8_t* in, size_t n, float* out);
  void (*fp16_decode_accumulate)(const uint8_t* in, size_t n, float* out);
  void (*dense_sum_f32)(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out,
                        bool stream);
  void (*dense_sum_f16)(const uint8_t* const* bodies, size_t count, uint64_t e0, uint64_t e1, uint8_t* out,
                        bool stream);
  // One rANS block (rans_block.h); the same stream at every level.
  size_t (*rans_encode)(const uint8_t* syms, uint32_t count, uint32_t lanes, const BlockModel& model,
                        uint8_t* stream_end);
  // Nearest rounding (no random stream): encode_bytes_nearest's bytes.
  void (*encode_bytes_nearest)(const float* x, uint64_t n, uint64_t k_begin, uint64_t k_end,
                               const TernaryQuantizer& q, uint8_t* body);
  // Fused error feedback (error_feedback.h): out = a + b, and the residual
  // of elements [0, len) from their body bytes, r = 0 - (-p + d).
  void (*add_f32)(const float* a, const float* b, float* out, size_t len);
  void (*ef_residual)(const float* p, const uint8_t* body, uint64_t len, float scale, float* r);
  // One rANS block's decode (rans_block.h); the same symbols and faults at every level.
  BlockFault (*rans_decode)(const uint8_t* stream, uint64_t bytes, uint32_t count, uint32_t lanes,
                            const BlockModel& model, const uint8_t* slot_symbol, uint8_t* syms);
  // bfloat16 -> float32 (half_input.h): out[i] = in[i] << 16, exact.
  void (*bf16_widen)(const uint16_t* in, size_t n, float* out);
};

// The Highway kernels compiled for a level (simd_kernels.cpp), or nullptr.
const KernelTable* highway_kernels(SimdLevel level);

// Whether this build holds kernels for the level (the CPU check is apart).
bool kernels_compiled(SimdLevel level);

// The table of a level this build holds (kernels_compiled), and of the level in use.
const KernelTable& kernels_for(SimdLevel level);
const KernelTable& kernels();

}  // namespace terngrad::quantize::detail
