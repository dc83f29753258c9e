#include "im2col.h"

#include <algorithm>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace terngrad::train::detail {

namespace {

// The runs moved here are short (kw*C floats: 5 for LeNet's first layer, 15
// for CifarNet's, 100 for LeNet's second), so per-run overhead dominates: a
// vectorized loop's scalar tail costs more than the copy, and the plain loops
// below become memcpy/memset calls. With AVX-512 each run is whole 16-float
// vectors plus one masked vector; with AVX2 whole 8-float vectors plus one
// overlapping the previous (masked stores are microcoded on AMD CPUs);
// otherwise plain loops.
#if defined(__AVX512F__)
inline __mmask16 tail_mask(int64_t len) { return static_cast<__mmask16>((1u << len) - 1u); }
inline void zero(float* dst, int64_t len) {
  int64_t t = 0;
  for (; t + 16 <= len; t += 16) _mm512_storeu_ps(dst + t, _mm512_setzero_ps());
  if (t < len) _mm512_mask_storeu_ps(dst + t, tail_mask(len - t), _mm512_setzero_ps());
}
inline void copy(float* dst, const float* src, int64_t len) {
  int64_t t = 0;
  for (; t + 16 <= len; t += 16) _mm512_storeu_ps(dst + t, _mm512_loadu_ps(src + t));
  if (t < len) {
    const __mmask16 m = tail_mask(len - t);
    _mm512_mask_storeu_ps(dst + t, m, _mm512_maskz_loadu_ps(m, src + t));
  }
}
inline void add(float* dst, const float* src, int64_t len) {
  int64_t t = 0;
  for (; t + 16 <= len; t += 16)
    _mm512_storeu_ps(dst + t, _mm512_add_ps(_mm512_loadu_ps(dst + t), _mm512_loadu_ps(src + t)));
  if (t < len) {
    const __mmask16 m = tail_mask(len - t);
    _mm512_mask_storeu_ps(dst + t, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dst + t), _mm512_maskz_loadu_ps(m, src + t)));
  }
}
#elif defined(__AVX2__)
// A run that is not a whole number of 8-float vectors ends with the vector
// that ends at the run's end, overlapping the one before: zero and copy write
// the same values twice there, add keeps the lanes it already added. Runs
// under 8 floats take 4-float vectors the same way, and under 4 single floats
// (spelled out, so GCC does not turn them into library calls).
inline void zero(float* dst, int64_t len) {
  if (len < 8) {
    if (len >= 4) {
      _mm_storeu_ps(dst, _mm_setzero_ps());
      _mm_storeu_ps(dst + len - 4, _mm_setzero_ps());
    } else {
      if (len > 0) dst[0] = 0.0f;
      if (len > 1) dst[1] = 0.0f;
      if (len > 2) dst[2] = 0.0f;
    }
    return;
  }
  int64_t t = 0;
  for (; t + 8 <= len; t += 8) _mm256_storeu_ps(dst + t, _mm256_setzero_ps());
  if (t < len) _mm256_storeu_ps(dst + len - 8, _mm256_setzero_ps());
}
inline void copy(float* dst, const float* src, int64_t len) {
  if (len < 8) {
    if (len >= 4) {
      const __m128 head = _mm_loadu_ps(src), tail = _mm_loadu_ps(src + len - 4);
      _mm_storeu_ps(dst, head);
      _mm_storeu_ps(dst + len - 4, tail);
    } else {
      if (len > 0) dst[0] = src[0];
      if (len > 1) dst[1] = src[1];
      if (len > 2) dst[2] = src[2];
    }
    return;
  }
  int64_t t = 0;
  for (; t + 8 <= len; t += 8) _mm256_storeu_ps(dst + t, _mm256_loadu_ps(src + t));
  if (t < len) _mm256_storeu_ps(dst + len - 8, _mm256_loadu_ps(src + len - 8));
}
inline void add(float* dst, const float* src, int64_t len) {
  int64_t t = 0;
  for (; t + 8 <= len; t += 8) _mm256_storeu_ps(dst + t, _mm256_add_ps(_mm256_loadu_ps(dst + t), _mm256_loadu_ps(src + t)));
  if (t < len && len >= 8) {
    // Lanes l >= 8 - (len - t) of the last vector are new; the others keep
    // the sums just stored (blended, not re-added, so nothing changes there).
    static constexpr int32_t kNewLanes[16] = {0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1};
    const __m256 is_new = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(kNewLanes + (len - t))));
    const __m256 d = _mm256_loadu_ps(dst + len - 8);
    _mm256_storeu_ps(dst + len - 8, _mm256_blendv_ps(d, _mm256_add_ps(d, _mm256_loadu_ps(src + len - 8)), is_new));
    return;
  }
  for (; t < len; ++t) dst[t] += src[t];
}
#else
inline void zero(float* __restrict dst, int64_t len) {
  for (int64_t t = 0; t < len; ++t) dst[t] = 0.0f;
}
inline void copy(float* __restrict dst, const float* __restrict src, int64_t len) {
  for (int64_t t = 0; t < len; ++t) dst[t] = src[t];
}
inline void add(float* __restrict dst, const float* __restrict src, int64_t len) {
  for (int64_t t = 0; t < len; ++t) dst[t] += src[t];
}
#endif

// Kernel columns [j0, j1) of a window starting at input column ix0 lie inside
// the image; the others are padding.
struct ColumnRange {
  int64_t j0, j1;
};
inline ColumnRange columns_inside(int64_t ix0, int64_t kw, int64_t w) {
  return {std::clamp<int64_t>(-ix0, 0, kw), std::clamp<int64_t>(w - ix0, 0, kw)};
}

}  // namespace

void im2col(const ConvGeometry& g, const float* x, int64_t n0, int64_t n1, int64_t group, float* patches,
            float* row_buffer) {
  const int64_t run = g.kw * g.cg, step = g.stride * g.cg, padded = g.row_buffer_floats();
  // Padded column p holds input column p - pad_left; input columns from
  // `inside` on are never read (VALID with a stride that skips them).
  const int64_t inside = std::min(g.w, padded / g.cg - g.pad_left);
  // The padding columns of the buffer stay zero; only the inside is rewritten.
  zero(row_buffer, padded);
  float* row_inside = row_buffer + g.pad_left * g.cg;
  for (int64_t n = n0; n < n1; ++n) {
    const float* xn = x + n * g.h * g.w * g.c + group * g.cg;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      float* rows = patches + ((n - n0) * g.oh + oy) * g.ow * g.k;  // patch row of (n, oy, ox = 0)
      for (int64_t i = 0; i < g.kh; ++i) {
        const int64_t iy = oy * g.stride - g.pad_top + i;
        float* dst = rows + i * run;
        if (iy < 0 || iy >= g.h) {
          for (int64_t ox = 0; ox < g.ow; ++ox, dst += g.k) zero(dst, run);
          continue;
        }
        const float* src = xn + iy * g.w * g.c;
        if (g.groups == 1) {
          copy(row_inside, src, inside * g.c);  // one contiguous NHWC span
        } else {
          for (int64_t ix = 0; ix < inside; ++ix) copy(row_inside + ix * g.cg, src + ix * g.c, g.cg);
        }
        for (int64_t ox = 0; ox < g.ow; ++ox, dst += g.k) copy(dst, row_buffer + ox * step, run);
      }
    }
  }
}

void col2im_add(const ConvGeometry& g, const float* dpatches, int64_t n0, int64_t n1, int64_t group, float* dx) {
  const int64_t c_off = group * g.cg, run = g.kw * g.cg;
  const float* row = dpatches;
  for (int64_t n = n0; n < n1; ++n) {
    float* dxn = dx + n * g.h * g.w * g.c + c_off;
    for (int64_t oy = 0; oy < g.oh; ++oy) {
      const int64_t iy0 = oy * g.stride - g.pad_top;
      for (int64_t ox = 0; ox < g.ow; ++ox, row += g.k) {
        const int64_t ix0 = ox * g.stride - g.pad_left;
        const ColumnRange cols = columns_inside(ix0, g.kw, g.w);
        const float* src = row;
        for (int64_t i = 0; i < g.kh; ++i, src += run) {
          const int64_t iy = iy0 + i;
          if (iy < 0 || iy >= g.h) continue;  // padding rows take no gradient
          float* dst_row = dxn + iy * g.w * g.c;
          if (g.groups == 1) {
            // One group: the in-image kernel columns are one contiguous span.
            add(dst_row + (ix0 + cols.j0) * g.c, src + cols.j0 * g.c, (cols.j1 - cols.j0) * g.c);
          } else {
            for (int64_t j = cols.j0; j < cols.j1; ++j) add(dst_row + (ix0 + j) * g.c, src + j * g.cg, g.cg);
          }
        }
      }
    }
  }
}

}  // namespace terngrad::train::detail
