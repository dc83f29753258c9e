// pool_window.cuh's index arithmetic, on the host (these run without a GPU):
// the pooling kernels take the 32-bit geometry where the tensors fit it, so
// the two widths must give the same windows and covering outputs, and
// covering_outputs() must list exactly the outputs whose window() holds a
// cell (what the gather-style backward passes rely on).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <set>
#include <utility>

#include "pool_window.cuh"

namespace terngrad::train::cuda::detail {
namespace {

struct PoolCase {
  int64_t h, w, k, stride;
  Padding padding;
};

PoolGeom geometry_of(const PoolCase& c) {
  const Shape in{2, c.h, c.w, 3};
  const WindowGeometry gy = window_geometry(c.h, c.k, c.stride, c.padding);
  const WindowGeometry gx = window_geometry(c.w, c.k, c.stride, c.padding);
  return pool_geom(in, Shape{2, gy.out, gx.out, 3}, c.k, c.stride, c.padding);
}

TEST(PoolWindow, BothIndexWidthsAgreeAndCoveringOutputsInvertTheWindows) {
  // AlexNet's and CifarNet's pools, odd sizes, SAME with the odd cell after, k < stride.
  const PoolCase cases[] = {{55, 55, 3, 2, Padding::kValid}, {27, 27, 3, 2, Padding::kValid},
                            {13, 13, 3, 2, Padding::kValid}, {24, 24, 3, 2, Padding::kSame},
                            {7, 5, 2, 2, Padding::kSame},    {9, 11, 3, 1, Padding::kSame},
                            {8, 8, 3, 3, Padding::kSame},    {10, 9, 2, 3, Padding::kValid},
                            {1, 1, 1, 1, Padding::kValid}};
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(testing::Message() << c.h << "x" << c.w << " k" << c.k << " s" << c.stride << " "
                                    << padding_name(c.padding));
    const PoolGeom g = geometry_of(c);
    ASSERT_TRUE(fits_32_bits(g));
    const PoolGeomOf<int32_t> g32 = narrow(g);
    std::set<std::pair<int64_t, int64_t>> covering_brute;
    for (int64_t iy = 0; iy < g.h; ++iy)
      for (int64_t ix = 0; ix < g.w; ++ix) {
        std::set<std::pair<int64_t, int64_t>> want;  // outputs whose in-image window holds (iy, ix)
        for (int64_t oy = 0; oy < g.oh; ++oy)
          for (int64_t ox = 0; ox < g.ow; ++ox) {
            int64_t y0, y1, x0, x1;
            window(g, oy, ox, y0, y1, x0, x1);
            int32_t a0, a1, b0, b1;
            window(g32, static_cast<int32_t>(oy), static_cast<int32_t>(ox), a0, a1, b0, b1);
            ASSERT_EQ((std::array<int64_t, 4>{y0, y1, x0, x1}), (std::array<int64_t, 4>{a0, a1, b0, b1}));
            if (y0 <= iy && iy < y1 && x0 <= ix && ix < x1) want.insert({oy, ox});
          }
        int64_t oy0, oy1, ox0, ox1;
        covering_outputs(g, iy, ix, oy0, oy1, ox0, ox1);
        int32_t p0, p1, q0, q1;
        covering_outputs(g32, static_cast<int32_t>(iy), static_cast<int32_t>(ix), p0, p1, q0, q1);
        ASSERT_EQ((std::array<int64_t, 4>{oy0, oy1, ox0, ox1}), (std::array<int64_t, 4>{p0, p1, q0, q1}));
        std::set<std::pair<int64_t, int64_t>> got;
        for (int64_t oy = oy0; oy <= oy1; ++oy)
          for (int64_t ox = ox0; ox <= ox1; ++ox) got.insert({oy, ox});
        ASSERT_EQ(got, want) << "cell (" << iy << ", " << ix << ")";
      }
  }
}

TEST(PoolWindow, TensorsOf2To31ElementsOrMoreKeep64BitIndices) {
  PoolGeom g = geometry_of({55, 55, 3, 2, Padding::kValid});
  g.n = 8192;  // 8192 x 55 x 55 x 3 = 74M input elements: fits
  EXPECT_TRUE(fits_32_bits(g));
  g.c = 256;  // 6.3G input elements: does not
  EXPECT_FALSE(fits_32_bits(g));
}

}  // namespace
}  // namespace terngrad::train::cuda::detail
