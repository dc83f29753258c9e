// One GPU training step of LeNet and CifarNet with N virtual workers on one
// GPU (default 4 x batch 64): device forward/backward, TernGrad encode with
// the CUDA codec, on-device aggregation, momentum update
// (terngrad/train/cuda/virtual_workers.h). Also fp32 (no codec) for the
// codec's share of the step. Prints one line per configuration and, when
// bench/pytorch_gpu_reference.py runs (python3 with torch and CUDA), the
// PyTorch eager figures of the same step and the ratio.
//
//   ./build/bench/gpu_train_step_bench [--workers=4] [--batch=64] [--steps=100]
//
// Without a device it prints "no CUDA device: ..." and exits 0 (so the
// check script can run it everywhere).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "terngrad/train/cuda/context.h"
#include "terngrad/train/cuda/virtual_workers.h"
#include "terngrad/train/models.h"

namespace tt = terngrad::train;
namespace tc = terngrad::train::cuda;

namespace {

int flag(int argc, char** argv, const std::string& name, int fallback) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) return std::atoi(a.c_str() + name.size() + 3);
  }
  return fallback;
}

double examples_per_sec(const std::string& net, const std::string& codec, int workers, int batch, int steps) {
  auto model = tt::make_model(net, tt::ModelOptions{}, 1);
  tc::VirtualWorkersConfig cfg;
  cfg.num_workers = workers;
  cfg.plan.assign(model->params().size(), codec);
  for (int w = 0; w < workers; ++w) cfg.codec_seeds.push_back(1000 + w);
  cfg.dropout_seed = [](int64_t step, int w) { return static_cast<uint64_t>(step) * 1000 + w; };  // any distinct seeds
  tc::VirtualWorkers vw(*model, cfg);
  tt::Shape in{batch};
  for (int64_t d : model->input_shape()) in.push_back(d);
  std::vector<tt::Tensor> x(workers, tt::Tensor(in));
  std::vector<std::vector<int32_t>> y(workers, std::vector<int32_t>(batch));
  std::mt19937 rng(0);
  std::normal_distribution<float> nd;
  for (auto& t : x)
    for (float& v : t.data) v = nd(rng);
  for (auto& l : y)
    for (int32_t& v : l) v = static_cast<int32_t>(rng() % 10);
  for (int s = 0; s < 10; ++s) vw.step(s, x, y, 0.01f);  // warm-up: cuDNN algorithm choice, allocations
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) vw.step(10 + s, x, y, 0.01f);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  return workers * batch / best;
}

}  // namespace

int main(int argc, char** argv) {
  if (!tc::gpu_available()) {
    std::printf("no CUDA device: %s; gpu_train_step_bench measured nothing\n", tc::gpu_unavailable_reason().c_str());
    return 0;
  }
  const int workers = flag(argc, argv, "workers", 4), batch = flag(argc, argv, "batch", 64);
  const int steps = flag(argc, argv, "steps", 100);
  std::printf("net       codec     workers batch  examples/s  ms/step\n");
  for (const char* net : {"lenet", "cifarnet"}) {
    for (const char* codec : {"terngrad:clip=2.5,share_scale=1", "fp32"}) {
      const double eps = examples_per_sec(net, codec, workers, batch, steps);
      std::printf("%-9s %-9s %7d %5d %11.0f %8.3f\n", net, std::string(codec).substr(0, 8).c_str(), workers, batch, eps,
                  1e3 * workers * batch / eps);
    }
  }
  std::fflush(stdout);
#ifdef TG_PYTORCH_GPU_SCRIPT
  // The PyTorch reference, same GPU, same workers and batch.
  const std::string cmd = "python3 " TG_PYTORCH_GPU_SCRIPT " --workers=" + std::to_string(workers) +
                          " --batch=" + std::to_string(batch);
  std::printf("PyTorch reference: %s\n", cmd.c_str());
  std::fflush(stdout);
  if (std::system(cmd.c_str()) != 0) std::printf("PyTorch reference did not run (python3 with torch+CUDA needed)\n");
#endif
  return 0;
}
