#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using detail::fail;

namespace {

struct PoolScratch final : LayerScratch {
  // Per output element: the winning input cell's offset within its example
  // (H*W*C of one example always fits 32 bits; the whole batch might not).
  std::vector<int32_t> argmax;
};

using detail::PoolGeometry;

// The shared window geometry, plus the argmax's bound: offsets within one
// example are stored as int32.
PoolGeometry pool_geometry(const MaxPoolConfig& cfg, const std::string& name, const Shape& in) {
  const PoolGeometry g = detail::pool_geometry(name, in, cfg.kernel, cfg.stride, cfg.padding);
  if (in[1] * in[2] * in[3] > std::numeric_limits<int32_t>::max())
    fail(name, "input " + shape_string(in) + " has more than 2^31 elements per example");
  return g;
}

// Max and argmax over the window rows [y0, y1) x columns [x0, x1) of one
// example, per channel. The first cell seeds both (a real index even for
// NaN input); later cells win only when strictly greater, so on ties the
// first cell in row-major window order keeps the argmax.
//
// GCC vectorizes the portable loop (at the end) with masked stores
// (vmaskmovps) for its conditional updates, which AMD CPUs run microcoded:
// CifarNet's pool1 took 2.3 ms instead of 0.34 ms per 32 examples on Zen 4.
// Hence the AVX-512 and AVX2 versions.
#if defined(__AVX512F__)
// 16 channels at a time, the window's running max kept in registers.
void window_max(const float* xn, int64_t w, int64_t c, int64_t y0, int64_t y1, int64_t x0, int64_t x1, float* out,
                int32_t* arg) {
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const int32_t first = static_cast<int32_t>((y0 * w + x0) * c);
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    const __mmask16 m = c - c0 >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (c - c0)) - 1u);
    __m512 best = _mm512_maskz_loadu_ps(m, xn + first + c0);
    __m512i best_at = _mm512_add_epi32(_mm512_set1_epi32(first + static_cast<int32_t>(c0)), lanes);
    for (int64_t iy = y0; iy < y1; ++iy) {
      for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ++ix) {
        const int32_t cell = static_cast<int32_t>((iy * w + ix) * c + c0);
        const __m512 v = _mm512_maskz_loadu_ps(m, xn + cell);
        const __mmask16 win = _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ);
        best = _mm512_mask_mov_ps(best, win, v);
        best_at = _mm512_mask_mov_epi32(best_at, win, _mm512_add_epi32(_mm512_set1_epi32(cell), lanes));
      }
    }
    _mm512_mask_storeu_ps(out + c0, m, best);
    _mm512_mask_storeu_epi32(arg + c0, m, best_at);
  }
}
#elif defined(__AVX2__)
// 8 channels [c0, c0 + 8) at a time, the window's running max kept in
// registers. The last partial vector loads under a mask (masked loads are
// cheap; masked stores are not) and stores its valid lanes one by one.
template <bool kPartial>
void window_max8(const float* xn, int64_t w, int64_t c, int64_t c0, int64_t y0, int64_t y1, int64_t x0, int64_t x1,
                 float* out, int32_t* arg) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i valid = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(c - c0)), lanes);
  auto load = [&](int64_t at) { return kPartial ? _mm256_maskload_ps(xn + at, valid) : _mm256_loadu_ps(xn + at); };
  const int32_t first = static_cast<int32_t>((y0 * w + x0) * c + c0);
  __m256 best = load(first);
  __m256i best_at = _mm256_add_epi32(_mm256_set1_epi32(first), lanes);
  for (int64_t iy = y0; iy < y1; ++iy) {
    for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ++ix) {
      const int32_t cell = static_cast<int32_t>((iy * w + ix) * c + c0);
      const __m256 v = load(cell);
      const __m256 win = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
      const __m256i at = _mm256_add_epi32(_mm256_set1_epi32(cell), lanes);
      best = _mm256_blendv_ps(best, v, win);
      best_at = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(best_at), _mm256_castsi256_ps(at), win));
    }
  }
  if constexpr (kPartial) {
    alignas(32) float b[8];
    alignas(32) int32_t a[8];
    _mm256_store_ps(b, best);
    _mm256_store_si256(reinterpret_cast<__m256i*>(a), best_at);
    for (int64_t l = 0; l < c - c0; ++l) out[c0 + l] = b[l], arg[c0 + l] = a[l];
  } else {
    _mm256_storeu_ps(out + c0, best);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(arg + c0), best_at);
  }
}

void window_max(const float* xn, int64_t w, int64_t c, int64_t y0, int64_t y1, int64_t x0, int64_t x1, float* out,
                int32_t* arg) {
  int64_t c0 = 0;
  for (; c0 + 8 <= c; c0 += 8) window_max8<false>(xn, w, c, c0, y0, y1, x0, x1, out, arg);
  if (c0 < c) window_max8<true>(xn, w, c, c0, y0, y1, x0, x1, out, arg);
}
#else
void window_max(const float* xn, int64_t w, int64_t c, int64_t y0, int64_t y1, int64_t x0, int64_t x1,
                float* __restrict out, int32_t* __restrict arg) {
  const int32_t first = static_cast<int32_t>((y0 * w + x0) * c);
  for (int64_t ch = 0; ch < c; ++ch) {
    out[ch] = xn[first + ch];
    arg[ch] = first + static_cast<int32_t>(ch);
  }
  for (int64_t iy = y0; iy < y1; ++iy) {
    for (int64_t ix = (iy == y0 ? x0 + 1 : x0); ix < x1; ++ix) {
      const int32_t cell = static_cast<int32_t>((iy * w + ix) * c);
      const float* __restrict src = xn + cell;
      for (int64_t ch = 0; ch < c; ++ch) {
        const bool win = src[ch] > out[ch];
        out[ch] = win ? src[ch] : out[ch];
        arg[ch] = win ? cell + static_cast<int32_t>(ch) : arg[ch];
      }
    }
  }
}
#endif

}  // namespace

MaxPool::MaxPool(MaxPoolConfig cfg) : Layer(cfg.name), cfg_(std::move(cfg)) {
  if (name().empty()) fail("MaxPool", "name is empty");
  if (cfg_.kernel <= 0) fail(name(), "kernel = " + std::to_string(cfg_.kernel) + " must be positive");
  if (cfg_.stride <= 0) fail(name(), "stride = " + std::to_string(cfg_.stride) + " must be positive");
}

Shape MaxPool::output_shape(const Shape& in) const {
  const PoolGeometry g = pool_geometry(cfg_, name(), in);
  return {g.n, g.oh, g.ow, g.c};
}

std::unique_ptr<LayerScratch> MaxPool::make_scratch() const { return std::make_unique<PoolScratch>(); }

void MaxPool::forward(const ParamSet&, const Tensor& x, Tensor& y, LayerScratch* scratch,
                      const ForwardContext&) const {
  const PoolGeometry g = pool_geometry(cfg_, name(), x.shape);
  auto& s = detail::scratch_as<PoolScratch>(scratch, name());
  y.resize({g.n, g.oh, g.ow, g.c});
  if (s.argmax.size() < static_cast<size_t>(y.size())) s.argmax.resize(y.size());
  const int64_t k = cfg_.kernel, st = cfg_.stride;
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xn = x.ptr() + n * g.h * g.w * g.c;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      // Only in-image cells are visited: that is SAME's -inf padding, which
      // can never win. SAME's padding is always less than the kernel, so
      // every window holds at least one real cell.
      const int64_t y0 = std::max<int64_t>(oy * st - g.pad_top, 0);
      const int64_t y1 = std::min<int64_t>(oy * st - g.pad_top + k, g.h);
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * st - g.pad_left, 0);
        const int64_t x1 = std::min<int64_t>(ox * st - g.pad_left + k, g.w);
        const int64_t o = ((n * g.oh + oy) * g.ow + ox) * g.c;
        float* out = y.ptr() + o;
        int32_t* arg = s.argmax.data() + o;
        window_max(xn, g.w, g.c, y0, y1, x0, x1, out, arg);
      }
    }
  }
}

void MaxPool::backward(const ParamSet&, const Tensor& x, const Tensor&, const Tensor& dy, Tensor* dx, GradSet&,
                       LayerScratch* scratch) const {
  const PoolGeometry g = pool_geometry(cfg_, name(), x.shape);
  detail::check_same_shape(dy, {g.n, g.oh, g.ow, g.c}, "dy", name());
  if (!dx) return;
  auto& s = detail::scratch_as<PoolScratch>(scratch, name());
  if (s.argmax.size() < static_cast<size_t>(dy.size())) fail(name(), "backward without a forward on this scratch");
  dx->resize(x.shape);
  const int64_t per_out = g.oh * g.ow * g.c, per_in = g.h * g.w * g.c;
  const int64_t k = cfg_.kernel, st = cfg_.stride;
  // With stride == kernel (LeNet's 2x2/2) the windows tile the image: every
  // input cell is in exactly one window (SAME always; VALID when the size
  // divides), so each cell's gradient is written once, without a zero fill
  // and scatter pass over dx.
  const bool tiles = st == k && (cfg_.padding == Padding::kSame || (g.h % k == 0 && g.w % k == 0));
  if (tiles) {
    for (int64_t n = 0; n < g.n; ++n) {
      float* dxn = dx->ptr() + n * per_in;
      for (int64_t oy = 0; oy < g.oh; ++oy) {
        const int64_t y0 = std::max<int64_t>(oy * st - g.pad_top, 0);
        const int64_t y1 = std::min<int64_t>(oy * st - g.pad_top + k, g.h);
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          const int64_t x0 = std::max<int64_t>(ox * st - g.pad_left, 0);
          const int64_t x1 = std::min<int64_t>(ox * st - g.pad_left + k, g.w);
          const int64_t o = n * per_out + (oy * g.ow + ox) * g.c;
          const float* __restrict d = dy.ptr() + o;
          const int32_t* __restrict arg = s.argmax.data() + o;
          for (int64_t iy = y0; iy < y1; ++iy) {
            for (int64_t ix = x0; ix < x1; ++ix) {
              const int32_t cell = static_cast<int32_t>((iy * g.w + ix) * g.c);
              float* __restrict dst = dxn + cell;
              for (int64_t ch = 0; ch < g.c; ++ch) dst[ch] = arg[ch] == cell + static_cast<int32_t>(ch) ? d[ch] : 0.0f;
            }
          }
        }
      }
    }
    return;
  }
  // Overlapping (3x3/2) or gapped windows: zero, then route each output's
  // gradient to its argmax (a cell may receive several).
  dx->fill(0.0f);
  for (int64_t n = 0; n < g.n; ++n) {
    float* dxn = dx->ptr() + n * per_in;
    const float* dyn = dy.ptr() + n * per_out;
    const int32_t* arg = s.argmax.data() + n * per_out;
    for (int64_t i = 0; i < per_out; ++i) dxn[arg[i]] += dyn[i];
  }
}

}  // namespace terngrad::train
