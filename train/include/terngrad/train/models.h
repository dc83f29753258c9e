// The TernGrad paper's networks, as defined in the authors' TensorFlow code.
#pragma once

#include <memory>
#include <string>

#include "terngrad/train/model.h"

namespace terngrad::train {

struct ModelOptions {
  int num_classes = 10;
  double weight_decay = -1;  // -1: the net's default (LeNet 5e-4, CifarNet fc 0.004, AlexNet 5e-4)
  double keep_prob = -1;     // AlexNet dropout keep probability (-1: 0.5)
};

// "lenet" (28x28x1), "cifarnet" (24x24x3), "alexnet" (224x224x3). Built
// and initialized from init_seed. Unknown names throw std::invalid_argument.
std::unique_ptr<Model> make_model(const std::string& net, const ModelOptions& opts, uint64_t init_seed);

}  // namespace terngrad::train
