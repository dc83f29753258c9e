// Constructors of the GPU layers, one per file (private to train_cuda);
// make_gpu_layer() dispatches on the CPU layer's type.
#pragma once

#include <memory>

#include "terngrad/train/cuda/gpu_layer.h"
#include "terngrad/train/layers.h"

namespace terngrad::train::cuda {

std::unique_ptr<GpuLayer> make_gpu_conv2d(const Conv2D& cpu);
std::unique_ptr<GpuLayer> make_gpu_max_pool(const MaxPool& cpu);
std::unique_ptr<GpuLayer> make_gpu_lrn(const LocalResponseNorm& cpu);
std::unique_ptr<GpuLayer> make_gpu_dense(const Dense& cpu);
std::unique_ptr<GpuLayer> make_gpu_relu(const ReLU& cpu);
std::unique_ptr<GpuLayer> make_gpu_dropout(const Dropout& cpu);
std::unique_ptr<GpuLayer> make_gpu_batch_norm(const BatchNorm& cpu);
std::unique_ptr<GpuLayer> make_gpu_avg_pool(const AvgPool& cpu);
std::unique_ptr<GpuLayer> make_gpu_branch_concat(const BranchConcat& cpu);

}  // namespace terngrad::train::cuda
