// BranchConcat on the GPU: the CPU composite's branches as GPU twins, run in
// branch order on one stream; the channel slices are strided 2-D copies
// (cudaMemcpy2DAsync) and the branches' input gradients are summed in branch
// order, as the CPU sums them.
#include <stdexcept>

#include "gpu_layers.h"
#include "kernels.h"
#include "terngrad/train/cuda/errors.h"

namespace terngrad::train::cuda {

namespace {

struct BranchGpuScratch {
  std::vector<DeviceTensor> acts, dacts;
  std::vector<std::unique_ptr<GpuScratch>> scratch;
  DeviceTensor dy, dx;
};

struct ConcatGpuScratch final : GpuScratch {
  std::vector<BranchGpuScratch> branches;
};

// rows x cols floats from src (row pitch src_cols) to dst (row pitch dst_cols).
void copy_block(float* dst, int64_t dst_cols, const float* src, int64_t src_cols, int64_t rows, int64_t cols,
                cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  TG_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_cols * sizeof(float), src, src_cols * sizeof(float), cols * sizeof(float),
                                  rows, cudaMemcpyDeviceToDevice, s));
}

class GpuBranchConcat final : public GpuLayer {
 public:
  explicit GpuBranchConcat(const BranchConcat& cpu) : GpuLayer(cpu), mix_(cpu) {
    for (const auto& branch : cpu.branches()) {
      std::vector<std::unique_ptr<GpuLayer>> b;
      for (const auto& l : branch) b.push_back(make_gpu_layer(*l));
      branches_.push_back(std::move(b));
    }
  }

  std::unique_ptr<GpuScratch> make_scratch() const override {
    auto s = std::make_unique<ConcatGpuScratch>();
    for (const auto& branch : branches_) {
      BranchGpuScratch b;
      b.acts.resize(branch.size());
      b.dacts.resize(branch.size());
      for (const auto& l : branch) b.scratch.push_back(l->make_scratch());
      s->branches.push_back(std::move(b));
    }
    return s;
  }

  void forward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, DeviceTensor& y,
               GpuScratch* scratch, const ForwardContext& fwd) const override {
    auto& s = scratch_of(scratch);
    const Shape out = output_shape(x.shape);
    y.resize(out);
    const int64_t rows = out[0] * out[1] * out[2];
    int64_t offset = 0;
    for (size_t b = 0; b < branches_.size(); ++b) {
      BranchGpuScratch& bs = s.branches[b];
      const DeviceTensor* in = &x;
      for (size_t i = 0; i < branches_[b].size(); ++i) {
        branches_[b][i]->forward(ctx, params, *in, bs.acts[i], bs.scratch[i].get(), fwd);
        in = &bs.acts[i];
      }
      const int64_t bc = in->shape[3];
      copy_block(y.ptr() + offset, out[3], in->ptr(), bc, rows, bc, ctx.stream());
      offset += bc;
    }
  }

  void backward(GpuContext& ctx, const DeviceParams& params, const DeviceTensor& x, const DeviceTensor& y,
                const DeviceTensor& dy, DeviceTensor* dx, DeviceGrads& grads, GpuScratch* scratch) const override {
    auto& s = scratch_of(scratch);
    const Shape out = output_shape(x.shape);
    if (dy.shape != out || y.shape != out)
      throw std::invalid_argument(mix_.name() + " (GPU): dy " + shape_string(dy.shape) + " and y " +
                                  shape_string(y.shape) + " must be " + shape_string(out));
    const int64_t rows = out[0] * out[1] * out[2];
    if (dx) {
      dx->resize(x.shape);
      dx->zero(ctx.stream());
    }
    int64_t offset = 0;
    for (size_t b = 0; b < branches_.size(); ++b) {
      BranchGpuScratch& bs = s.branches[b];
      const auto& branch = branches_[b];
      const Shape& last = bs.acts.back().shape;
      if (last.size() != 4 || last[0] != out[0])
        throw std::invalid_argument(mix_.name() + " (GPU): backward without a forward on this scratch");
      const int64_t bc = last[3];
      bs.dy.resize(last);
      copy_block(bs.dy.ptr(), bc, dy.ptr() + offset, out[3], rows, bc, ctx.stream());
      offset += bc;
      const DeviceTensor* d = &bs.dy;
      for (size_t i = branch.size(); i-- > 0;) {
        const DeviceTensor& in = i == 0 ? x : bs.acts[i - 1];
        DeviceTensor* din = i == 0 ? (dx ? &bs.dx : nullptr) : &bs.dacts[i];
        branch[i]->backward(ctx, params, in, bs.acts[i], *d, din, grads, bs.scratch[i].get());
        d = din;
      }
      if (dx) detail::add_into(dx->ptr(), bs.dx.ptr(), dx->size(), ctx.stream());
    }
  }

  void fold_state(GpuContext& ctx, GpuScratch* scratch, StateSet& state) const override {
    auto& s = scratch_of(scratch);
    for (size_t b = 0; b < branches_.size(); ++b)
      for (size_t i = 0; i < branches_[b].size(); ++i)
        branches_[b][i]->fold_state(ctx, s.branches[b].scratch[i].get(), state);
  }

 private:
  ConcatGpuScratch& scratch_of(GpuScratch* scratch) const {
    auto* s = dynamic_cast<ConcatGpuScratch*>(scratch);
    if (!s || s->branches.size() != branches_.size())
      throw std::invalid_argument(mix_.name() + " (GPU): needs the scratch from its own make_scratch()");
    return *s;
  }

  const BranchConcat& mix_;
  std::vector<std::vector<std::unique_ptr<GpuLayer>>> branches_;
};

}  // namespace

std::unique_ptr<GpuLayer> make_gpu_branch_concat(const BranchConcat& cpu) {
  return std::make_unique<GpuBranchConcat>(cpu);
}

}  // namespace terngrad::train::cuda
