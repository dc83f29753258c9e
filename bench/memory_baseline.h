// Memory-bandwidth baselines for codec_cpu_bench: the fastest this machine
// can stream a float tensor (a read-only sum) and copy it (memcpy), run on the
// very buffers and OpenMP team the codec benchmarks use. The codec's
// frac_of_floor is measured against these numbers, so they must be honest
// upper bounds: explicit AVX-512 with enough accumulators to keep both load
// ports busy when the data sits in L1, and contiguous per-thread chunks so the
// hardware prefetchers see one stream per core when it does not.
#pragma once

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TG_BENCH_X86 1
#endif

namespace tg_bench {

// Page-aligned, uninitialised storage.
template <class T>
class AlignedArray {
 public:
  AlignedArray() = default;
  explicit AlignedArray(size_t n) : n_(n) {
    // Every size starts at the start of a page, so sizes differ only in
    // length, never in alignment effects.
    const size_t bytes = std::max<size_t>(4096, (n * sizeof(T) + 4095) / 4096 * 4096);
    p_ = static_cast<T*>(std::aligned_alloc(4096, bytes));
    if (p_ == nullptr) throw std::bad_alloc();
  }
  AlignedArray(AlignedArray&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  AlignedArray& operator=(AlignedArray&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  AlignedArray(const AlignedArray&) = delete;
  AlignedArray& operator=(const AlignedArray&) = delete;
  ~AlignedArray() { std::free(p_); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Splits [0, n) into one contiguous chunk per OpenMP thread, each starting on
// a 64-byte boundary (16 floats), and calls f(begin, end) on every non-empty one.
// With parallel == false the calling thread does all of it: at cache-resident
// sizes the fork/join costs more than the data, and the codec makes the same choice.
template <class F>
void for_each_thread_chunk(size_t n, bool parallel, F&& f) {
  if (!parallel) {
    f(size_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
    const size_t begin = std::min(n, t * per);
    const size_t end = std::min(n, begin + per);
    if (begin < end) f(begin, end);
  }
}

#if defined(TG_BENCH_X86)
// Eight independent accumulators: a vaddps has 4 cycles latency and two loads
// issue per cycle, so fewer chains would measure the adder, not the memory.
__attribute__((target("avx512f"))) inline float sum_floats_avx512(const float* x, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
    a1 = _mm512_add_ps(a1, _mm512_loadu_ps(x + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_loadu_ps(x + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_loadu_ps(x + i + 48));
    a4 = _mm512_add_ps(a4, _mm512_loadu_ps(x + i + 64));
    a5 = _mm512_add_ps(a5, _mm512_loadu_ps(x + i + 80));
    a6 = _mm512_add_ps(a6, _mm512_loadu_ps(x + i + 96));
    a7 = _mm512_add_ps(a7, _mm512_loadu_ps(x + i + 112));
  }
  for (; i + 16 <= n; i += 16) a0 = _mm512_add_ps(a0, _mm512_loadu_ps(x + i));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    a0 = _mm512_add_ps(a0, _mm512_maskz_loadu_ps(m, x + i));
  }
  a0 = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));
  a4 = _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7));
  // Spilled and summed by hand: GCC 12's _mm512_reduce_add_ps trips -Wuninitialized.
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, _mm512_add_ps(a0, a4));
  float s = 0.0f;
  for (float v : lanes) s += v;
  return s;
}
#endif

// Portable fallback; omp simd licenses the reassociation that vectorizes it.
inline float sum_floats_generic(const float* x, size_t n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (size_t i = 0; i < n; ++i) s += x[i];
  return s;
}

inline bool have_avx512() {
#if defined(TG_BENCH_X86)
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
#else
  return false;
#endif
}

inline float sum_floats(const float* x, size_t n) {
#if defined(TG_BENCH_X86)
  if (have_avx512()) return sum_floats_avx512(x, n);
#endif
  return sum_floats_generic(x, n);
}

// The read-only pass: every byte of x once. The sum is returned so that the
// loads cannot be optimized away.
inline float read_pass(const float* x, size_t n, bool parallel) {
  if (!parallel) return sum_floats(x, n);
  float total = 0.0f;
#pragma omp parallel reduction(+ : total)
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num());
    const size_t nt = static_cast<size_t>(omp_get_num_threads());
    const size_t per = ((n + nt - 1) / nt + 15) / 16 * 16;
    const size_t begin = std::min(n, t * per);
    const size_t end = std::min(n, begin + per);
    if (begin < end) total += sum_floats(x + begin, end - begin);
  }
  return total;
}

// The copy baseline: the library memcpy on each thread's chunk.
inline void copy_pass(float* dst, const float* src, size_t n, bool parallel) {
  for_each_thread_chunk(n, parallel, [&](size_t b, size_t e) {
    std::memcpy(dst + b, src + b, (e - b) * sizeof(float));
  });
}

// Bytes/s of read_pass over x[0, n) in `rounds` timed rounds. Each round
// repeats the pass until it has run >= min_round_s, so timer resolution is
// small against it. Both the median and the best round are kept: on a shared
// machine other processes can only slow a pass down, so the best round is the
// better estimate of what the hardware can do, i.e. of the floor.
struct BandwidthSample {
  double median = 0.0;
  double best = 0.0;
};

inline BandwidthSample measure_read_bandwidth(const float* x, size_t n, bool parallel, int rounds,
                                              double min_round_s) {
  using clock = std::chrono::steady_clock;
  volatile float sink = 0.0f;
  // Warm-up: page faults, caches, the OpenMP team.
  for (int i = 0; i < 3; ++i) sink = sink + read_pass(x, n, parallel);
  // Passes between clock reads: about 1M floats' worth, so reading the clock
  // costs nothing measurable even when one pass over L1 takes ~100 ns.
  const size_t batch = std::max<size_t>(1, (size_t{1} << 20) / std::max<size_t>(n, 1));
  std::vector<double> bw;
  bw.reserve(static_cast<size_t>(rounds));
  for (int r = 0; r < rounds; ++r) {
    size_t reps = 0;
    const auto t0 = clock::now();
    double elapsed = 0.0;
    do {
      for (size_t b = 0; b < batch; ++b) sink = sink + read_pass(x, n, parallel);
      reps += batch;
      elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    } while (elapsed < min_round_s);
    bw.push_back(static_cast<double>(reps) * static_cast<double>(n * sizeof(float)) / elapsed);
  }
  std::sort(bw.begin(), bw.end());
  return {bw[bw.size() / 2], bw.back()};
}

}  // namespace tg_bench
