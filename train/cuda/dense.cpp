// Dense on the GPU with cuBLAS, the CPU Dense (train/layers/dense.cpp) its
// reference.
//
// cuBLAS is column-major; the tensors are row-major. A row-major [r, c]
// matrix is the column-major [c, r] matrix (its transpose) with leading
// dimension c, so every row-major product P = A B is computed as the
// column-major P^T = B^T A^T with the operands swapped:
//   y  [N, U] = x [N, D] W [D, U]      ->  y^T  = W^T x^T      gemm(N, N, U, N, D)
//   dW [D, U] += x^T dz                ->  dW^T += dz^T x      gemm(N, T, U, D, N), beta 1
//   dx [N, D] = dz W^T                 ->  dx^T = W dz^T       gemm(T, N, D, N, U)
#include <algorithm>
#include <string>

#include "gpu_layers.h"
#include "kernels.h"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

namespace {

struct DenseGpuScratch final : GpuScratch {
  DeviceBuffer dz, partials;
};

class GpuDense final : public GpuLayer {
 public:
  explicit GpuDense(const Dense& cpu) : GpuLayer(cpu), dense_(cpu) {}

  std::unique_ptr<GpuScratch> make_scratch() const override { return std::make_unique<DenseGpuScratch>(); }

  void forward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, DeviceTensor& y,
               GpuScratch*, const ForwardContext&) const override {
    const Shape out = output_shape(x.shape);  // validates like the CPU layer
    const int n = static_cast<int>(out[0]), u = static_cast<int>(out[1]);
    const int d = static_cast<int>(x.size() / std::max<int64_t>(out[0], 1));
    const DeviceTensor& w = params.at(dense_.weights_index());
    const DeviceTensor& b = params.at(dense_.biases_index());
    check_param(w, {d, u}, "weights");
    y.resize(out);
    const float one = 1.0f, zero = 0.0f;
    TG_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, u, n, d, &one, w.ptr(), u, x.ptr(), d, &zero,
                                y.ptr(), u));
    detail::add_bias_act(y.ptr(), b.ptr(), n, u, dense_.config().relu, ctx.stream());
  }

  void backward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, const DeviceTensor& y,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads& grads, GpuScratch* scratch) const override {
    auto* s = dynamic_cast<DenseGpuScratch*>(scratch);
    if (!s) throw std::invalid_argument(dense_.name() + " (GPU): needs the scratch from its own make_scratch()");
    const Shape out = output_shape(x.shape);
    if (dy.shape != out)
      throw std::invalid_argument(dense_.name() + " (GPU): dy has shape " + shape_string(dy.shape) + ", expected " +
                                  shape_string(out));
    const int n = static_cast<int>(out[0]), u = static_cast<int>(out[1]);
    const int d = static_cast<int>(x.size() / std::max<int64_t>(out[0], 1));
    const DeviceTensor& w = params.at(dense_.weights_index());
    DeviceTensor& dw = grads.at(dense_.weights_index());
    DeviceTensor& db = grads.at(dense_.biases_index());
    check_param(dw, {d, u}, "weights gradient");

    const float* dz = dy.ptr();
    if (dense_.config().relu) {
      s->dz.reserve(static_cast<size_t>(dy.size()) * sizeof(float));
      detail::relu_grad(s->dz.as<float>(), y.ptr(), dy.ptr(), dy.size(), ctx.stream());
      dz = s->dz.as<float>();
    }
    s->partials.reserve(static_cast<size_t>(detail::bias_grad_partial_floats(n, u)) * sizeof(float));
    detail::bias_grad(db.ptr(), dz, n, u, s->partials.as<float>(), ctx.stream());
    const float one = 1.0f, zero = 0.0f;
    TG_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, u, d, n, &one, dz, u, x.ptr(), d, &one,
                                dw.ptr(), u));
    if (dx) {
      dx->resize(x.shape);
      TG_CUBLAS_CHECK(cublasSgemm(ctx.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, d, n, u, &one, w.ptr(), u, dz, u, &zero,
                                  dx->ptr(), d));
    }
  }

 private:
  void check_param(const DeviceTensor& t, const Shape& expected, const char* what) const {
    if (t.shape != expected)
      throw std::invalid_argument(dense_.name() + " (GPU): " + what + " have shape " + shape_string(t.shape) +
                                  ", the input needs " + shape_string(expected));
  }

  const Dense& dense_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_dense(const Dense& cpu) { return std::make_unique<GpuDense>(cpu); }

}  // namespace terngrad::train::cuda
