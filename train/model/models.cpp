// The paper's networks. Layer names, shapes, initializers and weight decay
// follow the TensorFlow definitions the TernGrad authors trained
// (github.com/wenwei202/terngrad: cifar10 for CifarNet, inception/slim for
// AlexNet, GoogLeNet = inception_v1.py and VGG-A = models.py's _vgg_a).
#include "terngrad/train/models.h"

#include <stdexcept>
#include <vector>

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

// slim.conv2d with normalizer_fn=slim.batch_norm: a conv without biases, then
// batch norm (beta, no gamma) and the ReLU. Two layers, named as TF names
// the variables: "<scope>/weights", "<scope>/BatchNorm/beta".
void conv_bn(std::vector<std::unique_ptr<Layer>>& out, const std::string& scope, int64_t filters, int64_t k,
             int64_t stride, WeightInit init, float stddev, float wd, float bn_decay) {
  Conv2DConfig c;
  c.name = scope;
  c.filters = filters;
  c.kernel_h = c.kernel_w = k;
  c.stride = stride;
  c.padding = Padding::kSame;
  c.init = init;
  c.init_stddev = stddev;
  c.weight_decay = wd;
  c.bias = false;
  c.relu = false;
  out.push_back(std::make_unique<Conv2D>(c));
  out.push_back(std::make_unique<BatchNorm>(BatchNormConfig{scope + "/BatchNorm", 0.001f, bn_decay, true}));
}

void add_all(Model& m, std::vector<std::unique_ptr<Layer>> layers) {
  for (auto& l : layers) m.add(std::move(l));
}

// GoogLeNet: slim's inception_v1 under inception_arg_scope(weight_decay=4e-5)
// as the authors ran it. inception_v1_base's own arg_scope sets
// trunc_normal(0.01) for its convs, which overrides the arg_scope's
// variance_scaling_initializer() there (the inner scope wins); only the
// logits conv, outside the base, gets variance scaling. Batch norm: decay
// 0.9997, epsilon 0.001, center, no scale. The TF variable scope
// "InceptionV1/" is left out of the names, as the other nets leave theirs.
struct Mixed {
  const char* name;
  int64_t b0, b1a, b1b, b2a, b2b, b3;
};

std::unique_ptr<Model> googlenet(const ModelOptions& o) {
  const float wd = pick(o.weight_decay, 4e-5f);
  const float keep = pick(o.keep_prob, 0.8f);  // the authors' run script; slim's default too
  const float decay = 0.9997f;
  const WeightInit tn = WeightInit::kTruncatedNormal;
  auto m = std::make_unique<Model>("googlenet", Shape{224, 224, 3}, o.num_classes);
  auto conv = [&](const std::string& scope, int64_t filters, int64_t k, int64_t stride) {
    std::vector<std::unique_ptr<Layer>> l;
    conv_bn(l, scope, filters, k, stride, tn, 0.01f, wd, decay);
    add_all(*m, std::move(l));
  };
  auto maxpool = [&](const std::string& name, int64_t k, int64_t stride) {
    m->add(std::make_unique<MaxPool>(MaxPoolConfig{name, k, stride, Padding::kSame}));
  };
  auto mixed = [&](const Mixed& x) {
    const std::string p = x.name;
    std::vector<BranchConcat::Branch> br(4);
    conv_bn(br[0], p + "/Branch_0/Conv2d_0a_1x1", x.b0, 1, 1, tn, 0.01f, wd, decay);
    conv_bn(br[1], p + "/Branch_1/Conv2d_0a_1x1", x.b1a, 1, 1, tn, 0.01f, wd, decay);
    conv_bn(br[1], p + "/Branch_1/Conv2d_0b_3x3", x.b1b, 3, 1, tn, 0.01f, wd, decay);
    conv_bn(br[2], p + "/Branch_2/Conv2d_0a_1x1", x.b2a, 1, 1, tn, 0.01f, wd, decay);
    // inception_v1.py names Mixed_5b's second Branch_2 conv "Conv2d_0a_3x3".
    conv_bn(br[2], p + (p == "Mixed_5b" ? "/Branch_2/Conv2d_0a_3x3" : "/Branch_2/Conv2d_0b_3x3"), x.b2b, 3, 1, tn,
            0.01f, wd, decay);
    br[3].push_back(std::make_unique<MaxPool>(MaxPoolConfig{p + "/Branch_3/MaxPool_0a_3x3", 3, 1, Padding::kSame}));
    conv_bn(br[3], p + "/Branch_3/Conv2d_0b_1x1", x.b3, 1, 1, tn, 0.01f, wd, decay);
    m->add(std::make_unique<BranchConcat>(p, std::move(br)));
  };
  conv("Conv2d_1a_7x7", 64, 7, 2);
  maxpool("MaxPool_2a_3x3", 3, 2);
  conv("Conv2d_2b_1x1", 64, 1, 1);
  conv("Conv2d_2c_3x3", 192, 3, 1);
  maxpool("MaxPool_3a_3x3", 3, 2);
  mixed({"Mixed_3b", 64, 96, 128, 16, 32, 32});
  mixed({"Mixed_3c", 128, 128, 192, 32, 96, 64});
  maxpool("MaxPool_4a_3x3", 3, 2);
  mixed({"Mixed_4b", 192, 96, 208, 16, 48, 64});
  mixed({"Mixed_4c", 160, 112, 224, 24, 64, 64});
  mixed({"Mixed_4d", 128, 128, 256, 24, 64, 64});
  mixed({"Mixed_4e", 112, 144, 288, 32, 64, 64});
  mixed({"Mixed_4f", 256, 160, 320, 32, 128, 128});
  maxpool("MaxPool_5a_2x2", 2, 2);
  mixed({"Mixed_5b", 256, 160, 320, 32, 128, 128});
  mixed({"Mixed_5c", 384, 192, 384, 48, 128, 128});
  // Logits: 7x7 VALID average (a global one at 224), dropout, and a 1x1 conv
  // with biases to the classes, no BN, no ReLU: on a 1x1 map that is a Dense
  // layer, whose weights [1024, classes] are the conv's [1, 1, 1024, classes].
  m->add(std::make_unique<AvgPool>(AvgPoolConfig{"logits/MaxPool_0a_7x7", 7, 1, Padding::kValid}));
  m->add(std::make_unique<Dropout>(DropoutConfig{"logits/Dropout_0b", keep}));
  DenseConfig d;
  d.name = "logits/Conv2d_0c_1x1";
  d.units = o.num_classes;
  d.init = WeightInit::kVarianceScaling;
  d.weight_decay = wd;
  d.is_logits = true;
  m->add(std::make_unique<Dense>(d));
  return m;
}

// VGG-A: models.py's _vgg_a under _vgg_arg_scope. Convs 3x3 SAME with batch
// norm (slim defaults: decay 0.999, epsilon 0.001, center, no scale) and no
// biases, then ReLU; 2x2/2 VALID max pools; fully connected layers with
// biases; xavier (Glorot uniform) weights, zero biases, weight decay 5e-4 on
// every weight; dropout keep 0.5.
std::unique_ptr<Model> vgg_a(const ModelOptions& o) {
  const float wd = pick(o.weight_decay, 5e-4f);
  const float keep = pick(o.keep_prob, 0.5f);
  const WeightInit xavier = WeightInit::kGlorotUniform;
  auto m = std::make_unique<Model>("vgg_a", Shape{224, 224, 3}, o.num_classes);
  auto conv = [&](const std::string& scope, int64_t filters) {
    std::vector<std::unique_ptr<Layer>> l;
    conv_bn(l, scope, filters, 3, 1, xavier, 0.0f, wd, 0.999f);
    add_all(*m, std::move(l));
  };
  auto fc = [&](const std::string& name, int64_t units, bool relu, bool logits) {
    DenseConfig d;
    d.name = name;
    d.units = units;
    d.init = xavier;
    d.weight_decay = wd;
    d.relu = relu;
    d.is_logits = logits;
    m->add(std::make_unique<Dense>(d));
  };
  conv("conv1", 64);
  m->add(pool("pool1", 2, 2, Padding::kValid));
  conv("conv2", 128);
  m->add(pool("pool2", 2, 2, Padding::kValid));
  conv("conv3_1", 256);
  conv("conv3_2", 256);
  m->add(pool("pool3", 2, 2, Padding::kValid));
  conv("conv4_1", 512);
  conv("conv4_2", 512);
  m->add(pool("pool4", 2, 2, Padding::kValid));
  conv("conv5_1", 512);
  conv("conv5_2", 512);
  m->add(pool("pool5", 2, 2, Padding::kValid));
  fc("fc14", 4096, true, false);
  m->add(std::make_unique<Dropout>(DropoutConfig{"dropout14", keep}));
  fc("fc15", 4096, true, false);
  m->add(std::make_unique<Dropout>(DropoutConfig{"dropout15", keep}));
  fc("fc16", o.num_classes, false, true);
  return m;
}

}  // namespace

std::unique_ptr<Model> make_model(const std::string& net, const ModelOptions& opts, uint64_t init_seed) {
  if (opts.num_classes < 2) throw std::invalid_argument(net + ": num_classes must be >= 2");
  std::unique_ptr<Model> m;
  if (net == "lenet") m = lenet(opts);
  else if (net == "cifarnet") m = cifarnet(opts);
  else if (net == "alexnet") m = alexnet(opts);
  else if (net == "googlenet") m = googlenet(opts);
  else if (net == "vgg_a") m = vgg_a(opts);
  else throw std::invalid_argument("unknown net '" + net + "' (lenet, cifarnet, alexnet, googlenet, vgg_a)");
  m->build(init_seed);
  return m;
}

}  // namespace terngrad::train
