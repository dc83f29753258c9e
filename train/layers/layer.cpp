// Layer's defaults for the split backward pass (layer.h).
#include <stdexcept>

#include "terngrad/train/layer.h"

namespace terngrad::train {

void Layer::backward_params(const ParamSet&, const Tensor&, const Tensor&, const Tensor&, GradSet&, LayerScratch*,
                            const GradsDone*) const {
  throw std::logic_error(name() + ": backward_params on a layer that does not split its backward pass");
}

void Layer::backward_input(const ParamSet&, const Tensor&, const Tensor&, const Tensor&, Tensor*,
                           LayerScratch*) const {
  throw std::logic_error(name() + ": backward_input on a layer that does not split its backward pass");
}

}  // namespace terngrad::train
