// The TernGrad paper's networks, as defined in the authors' TensorFlow code.
#pragma once

#include <memory>
#include <string>

#include "terngrad/train/model.h"

namespace terngrad::train {

struct ModelOptions {
  int num_classes = 10;
  // -1: the net's default (LeNet 5e-4, CifarNet fc 0.004, AlexNet 5e-4, GoogLeNet 4e-5, VGG-A 5e-4)
  double weight_decay = -1;
  double keep_prob = -1;  // dropout keep probability (-1: AlexNet and VGG-A 0.5, GoogLeNet 0.8)
};

// "lenet" (28x28x1), "cifarnet" (24x24x3), "alexnet", "googlenet", "vgg_a"
// (224x224x3; GoogLeNet and VGG-A have batch norm, whose moving statistics
// are the Model's state()). Built
// and initialized from init_seed. Unknown names throw std::invalid_argument.
std::unique_ptr<Model> make_model(const std::string& net, const ModelOptions& opts, uint64_t init_seed);

}  // namespace terngrad::train
