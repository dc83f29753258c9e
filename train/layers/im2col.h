// im2col / col2im for NHWC convolutions (private to this library).
//
// A patch row holds one output pixel's receptive field for one group, in
// (i, j, c) order with c fastest, so that row times the group's HWIO weights
// [kh*kw*cin/groups, filters/groups] is the convolution. Cells in the
// padding are zeros in the row and are skipped by col2im.
//
// im2col works one input row at a time through a zero-padded copy of that
// row (the group's channels only), so its inner loop over output columns
// moves one fixed-length run of kw*cin/groups floats per kernel row with no
// bounds checks (1.8x faster for LeNet's first layer). col2im adds straight
// into dx: accumulating through the padded row instead stalls on
// overlapping read-after-write and was 1.7x slower.
#pragma once

#include <cstdint>

namespace terngrad::train::detail {

struct ConvGeometry {
  int64_t n = 0, h = 0, w = 0, c = 0;   // input [N, H, W, C]
  int64_t oh = 0, ow = 0, f = 0;        // output [N, OH, OW, F]
  int64_t kh = 0, kw = 0, stride = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t groups = 1;
  int64_t cg = 0;  // input channels per group
  int64_t fg = 0;  // filters per group
  int64_t k = 0;   // patch row length kh * kw * cg
  int64_t pixels() const { return oh * ow; }  // patch rows per example
  // Floats of im2col's padded-row buffer (input columns the windows span,
  // including padding, times cg).
  int64_t row_buffer_floats() const { return ((ow - 1) * stride + kw) * cg; }
};

// Patch rows of examples [n0, n1) for `group` into patches ([(n1-n0)*OH*OW, K]).
// row_buffer: g.row_buffer_floats() floats of scratch.
void im2col(const ConvGeometry& g, const float* x, int64_t n0, int64_t n1, int64_t group, float* patches,
            float* row_buffer);

// Adds patch-row gradients of examples [n0, n1) for `group` back into dx
// (overlapping windows accumulate).
void col2im_add(const ConvGeometry& g, const float* dpatches, int64_t n0, int64_t n1, int64_t group, float* dx);

}  // namespace terngrad::train::detail
