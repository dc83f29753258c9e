#include <stdexcept>

#include "gpu_layers.h"

namespace terngrad::train::cuda {

std::unique_ptr<GpuLayer> make_gpu_layer(const Layer& cpu) {
  if (auto* c = dynamic_cast<const Conv2D*>(&cpu)) return make_gpu_conv2d(*c);
  if (auto* p = dynamic_cast<const MaxPool*>(&cpu)) return make_gpu_max_pool(*p);
  if (auto* l = dynamic_cast<const LocalResponseNorm*>(&cpu)) return make_gpu_lrn(*l);
  if (auto* d = dynamic_cast<const Dense*>(&cpu)) return make_gpu_dense(*d);
  if (auto* r = dynamic_cast<const ReLU*>(&cpu)) return make_gpu_relu(*r);
  if (auto* d = dynamic_cast<const Dropout*>(&cpu)) return make_gpu_dropout(*d);
  if (auto* b = dynamic_cast<const BatchNorm*>(&cpu)) return make_gpu_batch_norm(*b);
  if (auto* a = dynamic_cast<const AvgPool*>(&cpu)) return make_gpu_avg_pool(*a);
  if (auto* m = dynamic_cast<const BranchConcat*>(&cpu)) return make_gpu_branch_concat(*m);
  throw std::invalid_argument(cpu.name() + ": this layer type has no GPU implementation");
}

}  // namespace terngrad::train::cuda
