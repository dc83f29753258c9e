// The paper's three networks. Layer names, shapes, initializers and weight
// decay follow the TensorFlow definitions the TernGrad authors trained.
#include "terngrad/train/models.h"

#include <stdexcept>

#include "terngrad/train/layers.h"

namespace terngrad::train {

namespace {

float pick(double requested, float fallback) { return requested >= 0 ? static_cast<float>(requested) : fallback; }

std::unique_ptr<Layer> conv(const std::string& name, int64_t filters, int64_t k, int64_t stride, Padding pad,
                            int64_t groups, float stddev, float bias, float wd) {
  Conv2DConfig c;
  c.name = name;
  c.filters = filters;
  c.kernel_h = c.kernel_w = k;
  c.stride = stride;
  c.padding = pad;
  c.groups = groups;
  c.init_stddev = stddev;
  c.bias_init = bias;
  c.weight_decay = wd;
  c.relu = true;
  return std::make_unique<Conv2D>(c);
}

std::unique_ptr<Layer> pool(const std::string& name, int64_t k, int64_t stride, Padding pad) {
  return std::make_unique<MaxPool>(MaxPoolConfig{name, k, stride, pad});
}

std::unique_ptr<Layer> dense(const std::string& name, int64_t units, float stddev, float bias, float wd, bool relu,
                             bool logits = false) {
  DenseConfig d;
  d.name = name;
  d.units = units;
  d.init_stddev = stddev;
  d.bias_init = bias;
  d.weight_decay = wd;
  d.relu = relu;
  d.is_logits = logits;
  return std::make_unique<Dense>(d);
}

std::unique_ptr<Layer> lrn(const std::string& name) {
  // tf.nn.lrn(depth_radius=4, bias=1.0, alpha=0.001/9.0, beta=0.75), as in cifar10.py.
  return std::make_unique<LocalResponseNorm>(LocalResponseNormConfig{name, 4, 1.0f, 0.001f / 9.0f, 0.75f});
}

std::unique_ptr<Model> lenet(const ModelOptions& o) {
  const float wd = pick(o.weight_decay, 5e-4f);
  auto m = std::make_unique<Model>("lenet", Shape{28, 28, 1}, o.num_classes);
  m->add(conv("conv1", 20, 5, 1, Padding::kSame, 1, 0.05f, 0.0f, wd));
  m->add(pool("pool1", 2, 2, Padding::kValid));
  m->add(conv("conv2", 50, 5, 1, Padding::kSame, 1, 0.05f, 0.0f, wd));
  m->add(pool("pool2", 2, 2, Padding::kValid));
  m->add(dense("fc3", 500, 0.048f, 0.0f, wd, true));
  m->add(dense("logits", o.num_classes, 0.0767f, 0.0f, wd, false, true));
  return m;
}

std::unique_ptr<Model> cifarnet(const ModelOptions& o) {
  // cifar10.py: weight decay only on the two fully connected hidden layers.
  const float wd = pick(o.weight_decay, 0.004f);
  auto m = std::make_unique<Model>("cifarnet", Shape{24, 24, 3}, o.num_classes);
  m->add(conv("conv1", 64, 5, 1, Padding::kSame, 1, 0.05f, 0.0f, 0.0f));
  m->add(pool("pool1", 3, 2, Padding::kSame));
  m->add(lrn("norm1"));
  m->add(conv("conv2", 64, 5, 1, Padding::kSame, 1, 0.05f, 0.1f, 0.0f));
  m->add(lrn("norm2"));
  m->add(pool("pool2", 3, 2, Padding::kSame));
  m->add(dense("local3", 384, 0.04f, 0.1f, wd, true));
  m->add(dense("local4", 192, 0.04f, 0.1f, wd, true));
  m->add(dense("softmax_linear", o.num_classes, 1.0f / 192.0f, 0.0f, 0.0f, false, true));
  return m;
}

std::unique_ptr<Model> alexnet(const ModelOptions& o) {
  const float wd = pick(o.weight_decay, 5e-4f);
  const float keep = pick(o.keep_prob, 0.5f);
  auto m = std::make_unique<Model>("alexnet", Shape{224, 224, 3}, o.num_classes);
  m->add(conv("conv1", 96, 11, 4, Padding::kSame, 1, 0.01f, 0.0f, wd));  // 2 x 48 filters, both on the image
  m->add(lrn("lrn1"));
  m->add(pool("pool1", 3, 2, Padding::kValid));
  m->add(conv("conv2", 256, 5, 1, Padding::kSame, 2, 0.01f, 0.1f, wd));
  m->add(lrn("lrn2"));
  m->add(pool("pool2", 3, 2, Padding::kValid));
  m->add(conv("conv3", 384, 3, 1, Padding::kSame, 1, 0.01f, 0.0f, wd));  // each tower sees all of pool2
  m->add(conv("conv4", 384, 3, 1, Padding::kSame, 2, 0.01f, 0.1f, wd));
  m->add(conv("conv5", 256, 3, 1, Padding::kSame, 2, 0.01f, 0.1f, wd));
  m->add(pool("pool5", 3, 2, Padding::kValid));
  m->add(dense("fc6", 4096, 0.005f, 0.1f, wd, true));
  m->add(std::make_unique<Dropout>(DropoutConfig{"dropout6", keep}));
  m->add(dense("fc7", 4096, 0.005f, 0.1f, wd, true));
  m->add(std::make_unique<Dropout>(DropoutConfig{"dropout7", keep}));
  m->add(dense("logits", o.num_classes, 0.01f, 0.0f, wd, false, true));
  return m;
}

}  // namespace

std::unique_ptr<Model> make_model(const std::string& net, const ModelOptions& opts, uint64_t init_seed) {
  if (opts.num_classes < 2) throw std::invalid_argument(net + ": num_classes must be >= 2");
  std::unique_ptr<Model> m;
  if (net == "lenet") m = lenet(opts);
  else if (net == "cifarnet") m = cifarnet(opts);
  else if (net == "alexnet") m = alexnet(opts);
  else throw std::invalid_argument("unknown net '" + net + "' (lenet, cifarnet, alexnet)");
  m->build(init_seed);
  return m;
}

}  // namespace terngrad::train
