// tg_model_fixture NET OUT.safetensors BATCH: one training step of make_model(NET)
// (1000 classes, dropout off so another framework can repeat it exactly) on
// a fixed input, written for tests/python/test_models_torch.py, which builds
// the same net in PyTorch from the paper's definition and compares:
//   param:<name>  the initial weights          input   [N, 224, 224, 3]
//   grad:<name>   their gradients              labels  [N] (as floats)
//   state:<name>  model state after fold_state logits  training-mode logits
//   loss [1]      mean cross-entropy           eval_logits  predict() after the fold
// A gradient of more than 2^24 elements (VGG-A's fc14) is written as its row
// sums, "gradrowsum:<name>", to keep the file small.
#include <cstdio>
#include <exception>
#include <map>
#include <random>
#include <string>

#include "terngrad/train/models.h"
#include "terngrad/train/safetensors.h"

int main(int argc, char** argv) {
  namespace tt = terngrad::train;
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s NET OUT.safetensors BATCH\n", argv[0]);
    return 2;
  }
  try {
    const std::string net = argv[1];
    const int64_t batch = std::stoll(argv[3]);
    tt::ModelOptions o;
    o.num_classes = 1000;
    o.keep_prob = 1.0;
    auto m = tt::make_model(net, o, 17);
    std::map<std::string, tt::Tensor> out;
    for (const tt::Param& p : m->params().params) out["param:" + p.name] = p.value;

    tt::Shape in{batch};
    for (int64_t d : m->input_shape()) in.push_back(d);
    tt::Tensor x(in);
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : x.data) v = u(rng);
    std::vector<int32_t> labels;
    tt::Tensor flabels({batch});
    for (int64_t i = 0; i < batch; ++i) {
      labels.push_back(static_cast<int32_t>((37 * i + 5) % o.num_classes));
      flabels.data[i] = static_cast<float>(labels.back());
    }
    auto ws = m->make_workspace();
    auto grads = m->make_grads();
    tt::ForwardContext ctx;
    ctx.training = true;
    const float loss = m->forward_backward(ws, x, labels, grads, ctx);
    out["input"] = x;
    out["labels"] = flabels;
    out["logits"] = ws.acts.back();
    out["loss"] = tt::Tensor({1}, loss);
    for (size_t v = 0; v < grads.size(); ++v) {
      const tt::Tensor& g = grads[v];
      const std::string& name = m->params().params[v].name;
      if (g.size() <= (int64_t{1} << 24)) {
        out["grad:" + name] = g;
        continue;
      }
      tt::Tensor rows({g.shape[0]});
      const int64_t cols = g.size() / g.shape[0];
      for (int64_t r = 0; r < g.shape[0]; ++r) {
        double s = 0;
        for (int64_t c = 0; c < cols; ++c) s += g.data[r * cols + c];
        rows.data[r] = static_cast<float>(s);
      }
      out["gradrowsum:" + name] = rows;
    }
    m->fold_state(ws);
    for (const tt::StateVar& s : m->state().vars) out["state:" + s.name] = s.value;
    out["eval_logits"] = m->predict(ws, x);
    tt::export_safetensors(argv[2], out, {{"net", net}});
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg_model_fixture: %s\n", e.what());
    return 1;
  }
}
