// Branches concatenated on channels (layers.h: GoogLeNet's Inception blocks).
// Each branch is run as a little chain with its own activations and
// scratches, all kept in the composite's scratch, so workers stay independent.
#include <algorithm>
#include <string>
#include <vector>

#include "layer_util.h"
#include "terngrad/train/layers.h"

namespace terngrad::train {

using detail::fail;

namespace {

struct BranchScratch {
  std::vector<Tensor> acts;   // acts[i] = output of layer i
  std::vector<Tensor> dacts;  // dacts[i] = gradient w.r.t. the input of layer i (i > 0)
  std::vector<std::unique_ptr<LayerScratch>> scratch;
  Tensor dy;  // this branch's channel slice of the block's dy
  Tensor dx;  // its gradient w.r.t. the block's input
};

struct ConcatScratch final : LayerScratch {
  std::vector<BranchScratch> branches;
};

// Copies channels [offset, offset + bc) of the [rows, total] tensor to or from a [rows, bc] one.
void copy_channels(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t bc) {
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * src_stride, src + r * src_stride + bc, dst + r * dst_stride);
}

}  // namespace

BranchConcat::BranchConcat(std::string name, std::vector<Branch> branches)
    : Layer(std::move(name)), branches_(std::move(branches)) {
  if (this->name().empty()) fail("BranchConcat", "name is empty");
  if (branches_.empty()) fail(this->name(), "has no branches");
  for (size_t b = 0; b < branches_.size(); ++b) {
    if (branches_[b].empty()) fail(this->name(), "branch " + std::to_string(b) + " has no layers");
    for (const auto& l : branches_[b])
      if (!l) fail(this->name(), "branch " + std::to_string(b) + " holds a null layer");
  }
}

std::vector<int64_t> BranchConcat::branch_channels(const Shape& in) const {
  if (in.size() != 4) fail(name(), "input " + shape_string(in) + " is not [N, H, W, C]");
  std::vector<int64_t> out;
  Shape first_out;
  for (size_t b = 0; b < branches_.size(); ++b) {
    Shape s = in;
    for (const auto& l : branches_[b]) s = l->output_shape(s);
    if (s.size() != 4) fail(name(), "branch " + std::to_string(b) + " outputs " + shape_string(s) + ", not [N, H, W, C]");
    if (b == 0) first_out = s;
    if (s[0] != first_out[0] || s[1] != first_out[1] || s[2] != first_out[2])
      fail(name(), "branch " + std::to_string(b) + " outputs " + shape_string(s) + ", branch 0 " +
                       shape_string(first_out) + ": concatenation needs the same [N, H, W]");
    out.push_back(s[3]);
  }
  return out;
}

Shape BranchConcat::output_shape(const Shape& in) const {
  const std::vector<int64_t> ch = branch_channels(in);
  Shape s = in;
  for (const auto& l : branches_[0]) s = l->output_shape(s);
  s[3] = 0;
  for (int64_t c : ch) s[3] += c;
  return s;
}

void BranchConcat::create_params(const Shape& in, ParamSet& params, std::mt19937_64& init_rng) {
  branch_channels(in);  // checks the branches fit together before creating anything
  for (auto& branch : branches_) {
    Shape s = in;
    for (auto& l : branch) {
      l->create_params(s, params, init_rng);
      s = l->output_shape(s);
    }
  }
}

void BranchConcat::create_state(const Shape& in, StateSet& state) {
  for (auto& branch : branches_) {
    Shape s = in;
    for (auto& l : branch) {
      l->create_state(s, state);
      s = l->output_shape(s);
    }
  }
}

std::unique_ptr<LayerScratch> BranchConcat::make_scratch() const {
  auto s = std::make_unique<ConcatScratch>();
  for (const auto& branch : branches_) {
    BranchScratch bs;
    bs.acts.resize(branch.size());
    bs.dacts.resize(branch.size());
    for (const auto& l : branch) bs.scratch.push_back(l->make_scratch());
    s->branches.push_back(std::move(bs));
  }
  return s;
}

void BranchConcat::fold_state(const LayerScratch* scratch, StateSet& state) const {
  auto* s = dynamic_cast<const ConcatScratch*>(scratch);
  if (!s || s->branches.size() != branches_.size()) fail(name(), "fold_state needs the scratch from its own make_scratch()");
  for (size_t b = 0; b < branches_.size(); ++b)
    for (size_t i = 0; i < branches_[b].size(); ++i) branches_[b][i]->fold_state(s->branches[b].scratch[i].get(), state);
}

int64_t BranchConcat::forward_macs_per_example(const Shape& in) const {
  int64_t macs = 0;
  for (const auto& branch : branches_) {
    Shape s = in;
    for (const auto& l : branch) {
      macs += l->forward_macs_per_example(s);
      s = l->output_shape(s);
    }
  }
  return macs;
}

void BranchConcat::forward(const ParamSet& params, const Tensor& x, Tensor& y, LayerScratch* scratch,
                           const ForwardContext& ctx) const {
  auto& s = detail::scratch_as<ConcatScratch>(scratch, name());
  const Shape out = output_shape(x.shape);
  y.resize(out);
  const int64_t rows = out[0] * out[1] * out[2], total = out[3];
  int64_t offset = 0;
  for (size_t b = 0; b < branches_.size(); ++b) {
    BranchScratch& bs = s.branches[b];
    const Tensor* in = &x;
    for (size_t i = 0; i < branches_[b].size(); ++i) {
      branches_[b][i]->forward(params, *in, bs.acts[i], bs.scratch[i].get(), ctx);
      in = &bs.acts[i];
    }
    const int64_t bc = in->shape[3];
    copy_channels(in->ptr(), bc, y.ptr() + offset, total, rows, bc);
    offset += bc;
  }
}

void BranchConcat::backward(const ParamSet& params, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor* dx,
                            GradSet& grads, LayerScratch* scratch) const {
  auto& s = detail::scratch_as<ConcatScratch>(scratch, name());
  const Shape out = output_shape(x.shape);
  detail::check_same_shape(dy, out, "dy", name());
  detail::check_same_shape(y, out, "y", name());
  const int64_t rows = out[0] * out[1] * out[2], total = out[3];
  if (dx) {
    dx->resize(x.shape);
    dx->fill(0.0f);
  }
  int64_t offset = 0;
  for (size_t b = 0; b < branches_.size(); ++b) {
    BranchScratch& bs = s.branches[b];
    const Branch& branch = branches_[b];
    const Tensor& last = bs.acts.back();
    if (last.shape.size() != 4 || last.shape[0] != out[0])
      fail(name(), "backward without a forward on this scratch (branch " + std::to_string(b) + ")");
    const int64_t bc = last.shape[3];
    bs.dy.resize(last.shape);
    copy_channels(dy.ptr() + offset, total, bs.dy.ptr(), bc, rows, bc);
    offset += bc;
    const Tensor* d = &bs.dy;
    for (size_t i = branch.size(); i-- > 0;) {
      const Tensor& in = i == 0 ? x : bs.acts[i - 1];
      Tensor* din = i == 0 ? (dx ? &bs.dx : nullptr) : &bs.dacts[i];
      branch[i]->backward(params, in, bs.acts[i], *d, din, grads, bs.scratch[i].get());
      d = din;
    }
    if (dx) {
      float* __restrict acc = dx->ptr();
      const float* __restrict src = bs.dx.ptr();
      for (int64_t k = 0; k < dx->size(); ++k) acc[k] += src[k];
    }
  }
}

}  // namespace terngrad::train
