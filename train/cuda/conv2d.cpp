// Conv2D on the GPU with cuDNN, the CPU Conv2D (train/layers/conv2d.cpp) its
// reference.
//
// Layouts: activations stay NHWC (cuDNN's NHWC tensor descriptors), so no
// activation is ever transposed. cuDNN has no HWIO filter format; its NHWC
// filter format is KRSC ([filters, kh, kw, cin/groups]), which is exactly the
// transpose of the HWIO weights viewed as a [kh*kw*cin/groups, filters]
// matrix. Forward transposes the (small) weights once per call; backward gets
// dW in KRSC and transposes it back, accumulating into the HWIO gradient.
//
// Padding: cuDNN pads symmetrically. TF's SAME padding is symmetric exactly
// when the total padding is even (5x5 stride 1, all of LeNet's and
// CifarNet's convolutions), and then cuDNN pads. Otherwise (AlexNet's conv1:
// 11x11 stride 4 on 224 pads 3 before and 4 after) the input is zero-padded
// explicitly into a scratch buffer, cuDNN convolves it unpadded, and
// backward crops the padded input gradient: the same sums over the same
// zeros as the CPU layer's im2col.
//
// Determinism and precision: only algorithms cuDNN reports as deterministic
// are used, with CUDNN_FMA_MATH (plain fp32, no TF32), so a run repeats
// bit for bit and stays within 1e-4 relative of the CPU layer. With
// TG_GPU_TF32=1 (context.h) the descriptor allows tensor-op math, and each
// pass runs with the math type its chosen algorithm was reported for (as
// PyTorch's convolutions with TF32 allowed, its default).
#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_layers.h"
#include "kernels.h"
#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/errors.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::cuda {

namespace {

// The algorithms (and math types, workspace sizes) chosen for one
// convolution problem on one device. Chosen once per process and problem,
// whichever worker meets it first, as torch.backends.cudnn.benchmark caches
// its picks: every worker then runs the same algorithms (the same bits for
// the same inputs), and a timed pick is made once, on an idle device.
struct ConvAlgorithms {
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  // The math type each pass's algorithm was chosen for (CUDNN_FMA_MATH unless TF32 is on).
  cudnnMathType_t fwd_math = CUDNN_FMA_MATH, bwd_data_math = CUDNN_FMA_MATH, bwd_filter_math = CUDNN_FMA_MATH;
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;
};

struct ConvGpuScratch final : GpuScratch {
  Shape shape;  // input shape the descriptors were made for
  cudnnTensorDescriptor_t x_desc = nullptr, y_desc = nullptr;
  cudnnFilterDescriptor_t w_desc = nullptr;
  cudnnConvolutionDescriptor_t conv_desc = nullptr;
  ConvAlgorithms algos;
  DeviceBuffer w_krsc, dw_krsc, dz, partials;
  // Asymmetric SAME padding: the explicitly padded input's shape (empty when
  // cuDNN pads), the input's offset in it, and the padded x and dx.
  Shape padded;
  int64_t pad_top = 0, pad_left = 0;
  DeviceBuffer x_pad, dx_pad;

  ~ConvGpuScratch() override {
    if (x_desc) cudnnDestroyTensorDescriptor(x_desc);
    if (y_desc) cudnnDestroyTensorDescriptor(y_desc);
    if (w_desc) cudnnDestroyFilterDescriptor(w_desc);
    if (conv_desc) cudnnDestroyConvolutionDescriptor(conv_desc);
  }
};

[[noreturn]] void fail(const std::string& layer, const std::string& what) {
  throw std::invalid_argument(layer + " (GPU): " + what);
}

// Scratch one convolution pass may ask for; algorithms wanting more are passed over.
constexpr size_t kMaxWorkspaceBytes = size_t{1} << 30;

// How the algorithms are chosen, once per layer and input shape:
// TG_CUDNN_ALGO=heuristic (the default) asks cuDNN's heuristic
// (cudnnGet*Algorithm_v7); TG_CUDNN_ALGO=find times them on the device
// (cudnnFind*Algorithm, as torch.backends.cudnn.benchmark does). Either way
// only deterministic plain-fp32 algorithms are taken. A timed pick can
// differ between processes, so runs are then no longer bit-identical across
// processes (a GPU cluster against the in-process GPU trainer): the default
// stays the heuristic. Measured against it by gpu_train_step_bench
// (bench/RESULTS.md, runs 5 and 6 on an H100: the same AlexNet step in plain
// fp32, 2.1x faster with TF32 allowed).
bool time_the_algorithms() {
  static const bool find = env_switch("TG_CUDNN_ALGO", "heuristic", "find");
  return find;
}

template <class Perf>
const Perf& pick_deterministic(const std::vector<Perf>& perf, int returned, const std::string& layer, const char* pass) {
  // cuDNN returns the algorithms fastest first (by its heuristics, or as
  // timed with TG_CUDNN_ALGO=find). Plain fp32 only (a tensor-op entry
  // would be TF32) unless TF32 is on; never fp16 down-conversion; a
  // bounded workspace.
  const bool tf32 = tf32_enabled();
  for (int i = 0; i < returned; ++i) {
    const cudnnMathType_t m = perf[i].mathType;
    const bool math_ok = tf32 ? m != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
                              : (m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH);
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].determinism == CUDNN_DETERMINISTIC && math_ok &&
        perf[i].memory <= kMaxWorkspaceBytes)
      return perf[i];
  }
  fail(layer, std::string("cuDNN offers no deterministic ") + (tf32 ? "fp32/TF32 " : "fp32 ") + pass +
                  " algorithm within " +
                  std::to_string(kMaxWorkspaceBytes >> 20) + " MiB of workspace for this shape");
}

// device, the input cuDNN sees (n, h, w, c), filters, kernel, pads, stride, groups.
using ConvProblem = std::array<int64_t, 12>;

class ConvAlgorithmCache {
 public:
  // The cached choice for `problem`, or choose(...)'s, stored. Under a lock:
  // two workers meeting a new shape together choose once.
  template <class Choose>
  ConvAlgorithms get(const ConvProblem& problem, Choose&& choose) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(problem);
    if (it == cache_.end()) it = cache_.emplace(problem, choose()).first;
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<ConvProblem, ConvAlgorithms> cache_;
};

ConvAlgorithmCache& algorithm_cache() {
  static ConvAlgorithmCache cache;
  return cache;
}

class GpuConv2D final : public GpuLayer {
 public:
  explicit GpuConv2D(const Conv2D& cpu) : GpuLayer(cpu), conv_(cpu) {}

  std::unique_ptr<GpuScratch> make_scratch() const override { return std::make_unique<ConvGpuScratch>(); }

  void forward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, DeviceTensor& y,
               GpuScratch* scratch, const ForwardContext&) const override {
    auto& s = prepare(ctx, x.shape, scratch);
    const Conv2DConfig& c = conv_.config();
    const Shape out = output_shape(x.shape);
    y.resize(out);
    const DeviceTensor& w = params.at(conv_.weights_index());
    const int64_t k = w.size() / c.filters;
    detail::transpose(s.w_krsc.as<float>(), w.ptr(), k, c.filters, false, ctx.stream());
    const float one = 1.0f, zero = 0.0f;
    TG_CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv_desc, s.algos.fwd_math));
    TG_CUDNN_CHECK(cudnnConvolutionForward(ctx.cudnn(), &one, s.x_desc, conv_input(ctx, s, x), s.w_desc,
                                           s.w_krsc.data(), s.conv_desc, s.algos.fwd, ctx.workspace(s.algos.fwd_bytes),
                                           s.algos.fwd_bytes, &zero, s.y_desc, y.ptr()));
    // Without biases (a conv before batch norm) only the ReLU, if any, remains.
    if (c.bias)
      detail::add_bias_act(y.ptr(), params.at(conv_.biases_index()).ptr(), numel(out) / c.filters, c.filters, c.relu,
                           ctx.stream());
    else if (c.relu)
      detail::relu_forward(y.ptr(), y.ptr(), numel(out), ctx.stream());
  }

  void backward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, const DeviceTensor& y,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads& grads, GpuScratch* scratch) const override {
    auto& s = prepare(ctx, x.shape, scratch);
    const Conv2DConfig& c = conv_.config();
    const Shape out = output_shape(x.shape);
    if (dy.shape != out) fail(conv_.name(), "dy has shape " + shape_string(dy.shape) + ", expected " + shape_string(out));
    const int64_t rows = numel(out) / c.filters;
    const DeviceTensor& w = params.at(conv_.weights_index());
    DeviceTensor& dw = grads.at(conv_.weights_index());
    const int64_t k = w.size() / c.filters;

    const float* dz = dy.ptr();
    if (c.relu) {
      detail::relu_grad(s.dz.as<float>(), y.ptr(), dy.ptr(), numel(out), ctx.stream());
      dz = s.dz.as<float>();
    }
    if (c.bias)
      detail::bias_grad(grads.at(conv_.biases_index()).ptr(), dz, rows, c.filters, s.partials.as<float>(), ctx.stream());

    const float one = 1.0f, zero = 0.0f;
    // x is padded again (when it needs to be) rather than taken from
    // forward: backward does not rely on a forward on this scratch.
    TG_CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv_desc, s.algos.bwd_filter_math));
    TG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(ctx.cudnn(), &one, s.x_desc, conv_input(ctx, s, x), s.y_desc, dz,
                                                  s.conv_desc, s.algos.bwd_filter,
                                                  ctx.workspace(s.algos.bwd_filter_bytes), s.algos.bwd_filter_bytes,
                                                  &zero, s.w_desc, s.dw_krsc.data()));
    detail::transpose(dw.ptr(), s.dw_krsc.as<float>(), c.filters, k, true, ctx.stream());
    if (dx) {
      dx->resize(x.shape);
      // w_krsc still holds this step's weights from forward, but backward
      // must not rely on the caller having run forward on this scratch with
      // the same params: transpose again (a few KB).
      detail::transpose(s.w_krsc.as<float>(), w.ptr(), k, c.filters, false, ctx.stream());
      float* dx_conv = s.padded.empty() ? dx->ptr() : s.dx_pad.as<float>();
      TG_CUDNN_CHECK(cudnnSetConvolutionMathType(s.conv_desc, s.algos.bwd_data_math));
      TG_CUDNN_CHECK(cudnnConvolutionBackwardData(ctx.cudnn(), &one, s.w_desc, s.w_krsc.data(), s.y_desc, dz,
                                                  s.conv_desc, s.algos.bwd_data, ctx.workspace(s.algos.bwd_data_bytes),
                                                  s.algos.bwd_data_bytes, &zero, s.x_desc, dx_conv));
      if (!s.padded.empty())
        detail::crop_nhwc(dx->ptr(), dx_conv, x.shape[0], x.shape[1], x.shape[2], x.shape[3], s.pad_top, s.pad_left,
                          s.padded[1], s.padded[2], ctx.stream());
    }
  }

 private:
  // What cuDNN convolves: x itself, or x zero-padded into s.x_pad.
  const float* conv_input(GpuContext& ctx, ConvGpuScratch& s, const DeviceTensor& x) const {
    if (s.padded.empty()) return x.ptr();
    detail::pad_nhwc(s.x_pad.as<float>(), x.ptr(), x.shape[0], x.shape[1], x.shape[2], x.shape[3], s.pad_top,
                     s.pad_left, s.padded[1], s.padded[2], ctx.stream());
    return s.x_pad.as<float>();
  }

  // cuDNN's choice for the descriptors in s: its heuristic's, or the fastest
  // as timed (TG_CUDNN_ALGO=find) on an idle device: kernels of other
  // workers running meanwhile would skew the timings.
  ConvAlgorithms choose_algorithms(GpuContext& ctx, ConvGpuScratch& s) const {
    ConvAlgorithms a;
    if (time_the_algorithms()) TG_CUDA_CHECK(cudaDeviceSynchronize());
    const auto math_of = [](cudnnMathType_t picked) { return tf32_enabled() ? picked : CUDNN_FMA_MATH; };
    int count = 0, returned = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(ctx.cudnn(), &count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> fwd(count);
    if (time_the_algorithms())
      TG_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(ctx.cudnn(), s.x_desc, s.w_desc, s.conv_desc, s.y_desc,
                                                          count, &returned, fwd.data()));
    else
      TG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(ctx.cudnn(), s.x_desc, s.w_desc, s.conv_desc, s.y_desc,
                                                            count, &returned, fwd.data()));
    const auto& f = pick_deterministic(fwd, returned, conv_.name(), "forward");
    a.fwd = f.algo;
    a.fwd_math = math_of(f.mathType);
    // The heuristic's figure, or the exact query's if larger.
    size_t bytes = 0;
    TG_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(ctx.cudnn(), s.x_desc, s.w_desc, s.conv_desc,
                                                           s.y_desc, f.algo, &bytes));
    a.fwd_bytes = std::max(f.memory, bytes);

    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(ctx.cudnn(), &count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> bd(count);
    if (time_the_algorithms())
      TG_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(ctx.cudnn(), s.w_desc, s.y_desc, s.conv_desc,
                                                               s.x_desc, count, &returned, bd.data()));
    else
      TG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(ctx.cudnn(), s.w_desc, s.y_desc, s.conv_desc,
                                                                 s.x_desc, count, &returned, bd.data()));
    const auto& d = pick_deterministic(bd, returned, conv_.name(), "backward-data");
    a.bwd_data = d.algo;
    a.bwd_data_math = math_of(d.mathType);
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(ctx.cudnn(), s.w_desc, s.y_desc, s.conv_desc,
                                                                s.x_desc, d.algo, &bytes));
    a.bwd_data_bytes = std::max(d.memory, bytes);

    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(ctx.cudnn(), &count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> bf(count);
    if (time_the_algorithms())
      TG_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(ctx.cudnn(), s.x_desc, s.y_desc, s.conv_desc,
                                                                 s.w_desc, count, &returned, bf.data()));
    else
      TG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(ctx.cudnn(), s.x_desc, s.y_desc, s.conv_desc,
                                                                   s.w_desc, count, &returned, bf.data()));
    const auto& bfp = pick_deterministic(bf, returned, conv_.name(), "backward-filter");
    a.bwd_filter = bfp.algo;
    a.bwd_filter_math = math_of(bfp.mathType);
    TG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(ctx.cudnn(), s.x_desc, s.y_desc, s.conv_desc,
                                                                  s.w_desc, bfp.algo, &bytes));
    a.bwd_filter_bytes = std::max(bfp.memory, bytes);
    return a;
  }

  // Descriptors, algorithms and buffers for input shape `in` (cached: only a
  // new shape, e.g. the last partial batch, redoes this).
  ConvGpuScratch& prepare(GpuContext& ctx, const Shape& in, GpuScratch* scratch) const {
    auto* s = dynamic_cast<ConvGpuScratch*>(scratch);
    if (!s) fail(conv_.name(), "needs the scratch from its own make_scratch()");
    if (s->shape == in && s->x_desc) return *s;
    const Conv2DConfig& c = conv_.config();
    const Shape out = output_shape(in);  // validates the input like the CPU layer
    const WindowGeometry gy = window_geometry(in[1], c.kernel_h, c.stride, c.padding);
    const WindowGeometry gx = window_geometry(in[2], c.kernel_w, c.stride, c.padding);
    const int64_t pad_h_total = std::max<int64_t>((gy.out - 1) * c.stride + c.kernel_h - in[1], 0);
    const int64_t pad_w_total = std::max<int64_t>((gx.out - 1) * c.stride + c.kernel_w - in[2], 0);
    int pad_h = static_cast<int>(gy.pad_before), pad_w = static_cast<int>(gx.pad_before);
    Shape conv_in = in;  // the input cuDNN sees
    s->padded.clear();
    if (c.padding == Padding::kSame && (pad_h_total % 2 != 0 || pad_w_total % 2 != 0)) {
      // TF puts the extra cell after, which cuDNN cannot express: pad here.
      conv_in = {in[0], in[1] + pad_h_total, in[2] + pad_w_total, in[3]};
      s->padded = conv_in;
      s->pad_top = gy.pad_before, s->pad_left = gx.pad_before;
      s->x_pad.reserve(static_cast<size_t>(numel(conv_in)) * sizeof(float));
      s->dx_pad.reserve(static_cast<size_t>(numel(conv_in)) * sizeof(float));
      pad_h = pad_w = 0;
    }
    const int cin = static_cast<int>(in[3]), cg = static_cast<int>(in[3] / c.groups);

    if (!s->x_desc) {
      TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->x_desc));
      TG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&s->y_desc));
      TG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&s->w_desc));
      TG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&s->conv_desc));
    }
    TG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->x_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT,
                                              static_cast<int>(conv_in[0]), cin, static_cast<int>(conv_in[1]),
                                              static_cast<int>(conv_in[2])));
    TG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(s->y_desc, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, static_cast<int>(out[0]),
                                              static_cast<int>(out[3]), static_cast<int>(out[1]),
                                              static_cast<int>(out[2])));
    TG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(s->w_desc, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC,
                                              static_cast<int>(c.filters), cg, static_cast<int>(c.kernel_h),
                                              static_cast<int>(c.kernel_w)));
    TG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(s->conv_desc, pad_h, pad_w, static_cast<int>(c.stride),
                                                   static_cast<int>(c.stride), 1, 1, CUDNN_CROSS_CORRELATION,
                                                   CUDNN_DATA_FLOAT));
    TG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(s->conv_desc, static_cast<int>(c.groups)));
    // Restricts what the queries below offer; each pass then sets its own.
    TG_CUDNN_CHECK(cudnnSetConvolutionMathType(s->conv_desc, tf32_enabled() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));

    // cuDNN's own output shape must be the CPU layer's (a mismatch would
    // mean the padding translation above is wrong).
    int dn = 0, dc = 0, dh = 0, dwid = 0;
    TG_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(s->conv_desc, s->x_desc, s->w_desc, &dn, &dc, &dh, &dwid));
    if (Shape{dn, dh, dwid, dc} != out)
      fail(conv_.name(), "cuDNN output [" + std::to_string(dn) + ", " + std::to_string(dh) + ", " +
                             std::to_string(dwid) + ", " + std::to_string(dc) + "] differs from the CPU layer's " +
                             shape_string(out));

    int device = 0;
    TG_CUDA_CHECK(cudaGetDevice(&device));
    const ConvProblem problem = {device, conv_in[0], conv_in[1], conv_in[2], conv_in[3], c.filters, c.kernel_h,
                                 c.kernel_w, pad_h, pad_w, c.stride, c.groups};
    s->algos = algorithm_cache().get(problem, [&] { return choose_algorithms(ctx, *s); });

    const size_t wbytes = static_cast<size_t>(c.filters) * c.kernel_h * c.kernel_w * cg * sizeof(float);
    s->w_krsc.reserve(wbytes);
    s->dw_krsc.reserve(wbytes);
    if (c.relu) s->dz.reserve(static_cast<size_t>(numel(out)) * sizeof(float));
    s->partials.reserve(static_cast<size_t>(detail::bias_grad_partial_floats(numel(out) / c.filters, c.filters)) *
                        sizeof(float));
    s->shape = in;
    return *s;
  }

  const Conv2D& conv_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_conv2d(const Conv2D& cpu) { return std::make_unique<GpuConv2D>(cpu); }

}  // namespace terngrad::train::cuda
