// One GPU training step of LeNet, CifarNet and AlexNet with N virtual workers on one
// GPU (default 4 x batch 64): device forward/backward, TernGrad encode with
// the CUDA codec, on-device aggregation, momentum update
// (terngrad/train/cuda/virtual_workers.h). Also fp32 (no codec) for the
// codec's share of the step, and each rate twice: the batches on the device
// (PyTorch's reference keeps them there: the like-for-like figure) and each
// step copying them from host memory first; 'host ms' is the host's time to
// enqueue a step (near ms/step: the step is bound by the host). 'threads':
// whether each worker's launches are issued from its own host thread
// (VirtualWorkersConfig::host_threads; --host_threads=both times the step
// both ways in the same run, one thread first). Before timing, the first step's loss is checked
// against the CPU model's loss on the same batches and weights (1e-4
// relative; 1e-2 with TG_GPU_TF32=1). Prints one line per configuration and, given the JSON lines of
// bench/pytorch_gpu_reference.py run on the same GPU (--reference), the
// PyTorch eager rate of the same step and the ratio (target: >= 2x).
//
//   ./build/bench/gpu_train_step_bench [--workers=4] [--batch=64] [--steps=100] [--reference=FILE]
//                                      [--nets=lenet,cifarnet,alexnet] [--host_threads=1|0|both]
//
// Without a device it prints "no CUDA device: ..." and exits 0 (so the
// check script can run it everywhere).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
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

std::string text_flag(int argc, char** argv, const std::string& name) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--" + name + "=", 0) == 0) return a.substr(name.size() + 3);
  }
  return "";
}

// examples_per_sec of the train_step line for (net, codec) in the reference
// script's JSON lines; 0 when absent.
// tf32: the line with PyTorch's default (cuDNN convolutions in TF32) or with
// TF32 off (like for like: ours run in fp32); a file without "tf32" fields
// (older reference runs) serves the default.
double reference_rate(const std::string& path, const std::string& net, const std::string& codec, bool tf32) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.find("\"train_step\"") == std::string::npos || line.find("\"net\": \"" + net + "\"") == std::string::npos ||
        line.find("\"codec\": \"" + codec + "\"") == std::string::npos)
      continue;
    const bool has_field = line.find("\"tf32\"") != std::string::npos;
    if (has_field ? line.find(std::string("\"tf32\": ") + (tf32 ? "true" : "false")) == std::string::npos : !tf32)
      continue;
    const std::string key = "\"examples_per_sec\": ";
    const size_t at = line.find(key);
    if (at != std::string::npos) return std::atof(line.c_str() + at + key.size());
  }
  return 0;
}

uint64_t dropout_seed(int64_t step, int w) { return static_cast<uint64_t>(step) * 1000 + static_cast<uint64_t>(w); }

struct Rates {
  double on_device = 0;    // batches staged on the device once (PyTorch's reference keeps its batches there)
  double with_upload = 0;  // each step copies its batches from (pageable) host memory first
  double enqueue_ms = 0;   // host time a step (batches on the device) spends enqueueing its work
};

// The fastest of three timed runs of `steps` calls.
template <class Step>
double seconds_per_step(int steps, Step&& one_step) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) one_step(s);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  return best;
}

Rates examples_per_sec(const std::string& net, const std::string& codec, int workers, int batch, int steps,
                       bool host_threads) {
  auto model = tt::make_model(net, tt::ModelOptions{}, 1);
  tc::VirtualWorkersConfig cfg;
  cfg.num_workers = workers;
  cfg.host_threads = host_threads;
  cfg.plan.assign(model->params().size(), codec);
  for (int w = 0; w < workers; ++w) cfg.codec_seeds.push_back(1000 + w);
  cfg.dropout_seed = dropout_seed;
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
  // Correct before fast: step 0's loss is the CPU model's mean loss at the
  // same (initial) weights, batches and dropout seeds.
  double cpu_loss = 0;
  for (int w = 0; w < workers; ++w) {
    auto ws = model->make_workspace();
    tt::GradSet g = model->make_grads();
    cpu_loss += model->forward_backward(ws, x[w], y[w], g, tt::ForwardContext{true, dropout_seed(0, w)});
  }
  cpu_loss /= workers;
  const float gpu_loss = vw.step(0, x, y, 0.01f);
  // TF32 rounds every product's inputs to a 10-bit mantissa: 1e-2 then.
  const double tolerance = tc::tf32_enabled() ? 1e-2 : 1e-4;
  if (!(std::abs(gpu_loss - cpu_loss) <= tolerance * std::max(1.0, std::abs(cpu_loss)))) {
    std::printf("%s %s: GPU step loss %.7g differs from the CPU model's %.7g: not timed\n", net.c_str(),
                codec.c_str(), gpu_loss, cpu_loss);
    std::exit(1);
  }
  for (int s = 1; s < 10; ++s) vw.step(s, x, y, 0.01f);  // warm-up: cuDNN algorithm choice, allocations
  Rates r;
  r.with_upload = workers * batch / seconds_per_step(steps, [&](int s) { vw.step(10 + s, x, y, 0.01f); });
  vw.stage(x, y);
  double enqueue_s = 0;
  r.on_device = workers * batch / seconds_per_step(steps, [&](int s) {
    vw.step_staged(10 + steps + s, 0.01f);
    enqueue_s += vw.last_enqueue_seconds();
  });
  r.enqueue_ms = 1e3 * enqueue_s / (3.0 * steps);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string reference = text_flag(argc, argv, "reference");
  if (!reference.empty() && !std::ifstream(reference)) {
    std::printf("--reference=%s: cannot read the file (bench/pytorch_gpu_reference.py's JSON lines)\n",
                reference.c_str());
    return 2;
  }
  if (!tc::gpu_available()) {
    std::printf("no CUDA device: %s; gpu_train_step_bench measured nothing\n", tc::gpu_unavailable_reason().c_str());
    return 0;
  }
  const int workers = flag(argc, argv, "workers", 4), batch = flag(argc, argv, "batch", 64);
  const int steps = flag(argc, argv, "steps", 100);
  const std::string threads_flag = text_flag(argc, argv, "host_threads");
  std::vector<bool> thread_modes;
  if (threads_flag.empty() || threads_flag == "1") thread_modes = {true};
  else if (threads_flag == "0") thread_modes = {false};
  else if (threads_flag == "both") thread_modes = {false, true};
  else {
    std::printf("--host_threads=%s: expected 1, 0 or both\n", threads_flag.c_str());
    return 2;
  }
  const char* algo = std::getenv("TG_CUDNN_ALGO");
  std::printf("cuDNN algorithms: %s; TF32: %s (TG_CUDNN_ALGO, TG_GPU_TF32). examples/s and the ratios: batches on the "
              "device, as in PyTorch's reference; 'with upload': each step copies its batches from host memory\n",
              algo && *algo ? algo : "heuristic", tc::tf32_enabled() ? "on" : "off");
  std::printf("net       codec     threads workers batch  examples/s  ms/step  host ms  with upload  PyTorch ex/s  "
              "x PyTorch  x PyTorch, TF32 off\n");
  std::vector<std::string> nets;
  {
    std::string list = text_flag(argc, argv, "nets");
    if (list.empty()) list = "lenet,cifarnet,alexnet";
    for (size_t at = 0; at <= list.size();) {
      const size_t comma = std::min(list.find(',', at), list.size());
      nets.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
  }
  for (const std::string& name : nets) {
    const char* net = name.c_str();
    for (const char* codec : {"terngrad:clip=2.5,share_scale=1", "fp32"}) {
      for (const bool threads : thread_modes) {
        const std::string label = std::string(codec).substr(0, std::string(codec).find(':'));
        Rates rates;
        try {
          rates = examples_per_sec(net, codec, workers, batch, steps, threads);
        } catch (const std::exception& e) {
          std::printf("--nets: %s: %s\n", net, e.what());
          return 2;
        }
        const double ref = reference.empty() ? 0 : reference_rate(reference, net, label, true);
        const double ref_fp32 = reference.empty() ? 0 : reference_rate(reference, net, label, false);
        const double eps = rates.on_device;
        std::printf("%-9s %-9s %7s %7d %5d %11.0f %8.3f %8.3f %12.0f", net, label.c_str(), threads ? "yes" : "no",
                    workers, batch, eps,
                    1e3 * workers * batch / eps, rates.enqueue_ms, rates.with_upload);
        if (ref > 0)
          std::printf(" %13.0f %10.2f", ref, eps / ref);
        else
          std::printf(" %13s %10s", "-", "-");
        if (ref_fp32 > 0)
          std::printf(" %20.2f\n", eps / ref_fp32);
        else
          std::printf(" %20s\n", "-");
      }
    }
  }
  std::fflush(stdout);
  // The PyTorch eager reference (bench/pytorch_gpu_reference.py, same workers
  // and batch) runs right after this program in scripts/gpu_checks.sh, with
  // the machine's own library path.
  return 0;
}
