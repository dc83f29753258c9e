// train_step_bench: one training step (forward, backward, weight decay,
// momentum update) of LeNet and CifarNet at batch 64 on the CPU, reported
// three ways in one run:
//   - examples/s;
//   - achieved GFLOP/s over the step's counted FLOPs (3 x 2 x forward MACs per
//     example) as a fraction of Eigen's GEMM rate measured in this binary;
//   - the ratio against the same network and batch in PyTorch eager on the
//     CPU with the same thread count (bench/pytorch_train_step.py, run by
//     Debian's python3 with python3-torch; "n/a" when it is not installed).
// Two ways to use both cores are timed: one worker of 64 with Eigen's GEMM
// threads, and two virtual workers of 32 in parallel (the trainer's mode).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <Eigen/Dense>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "python_baseline.h"
#include "terngrad/train/models.h"
#include "terngrad/train/optimizer.h"

namespace tt = terngrad::train;

namespace {

constexpr int64_t kBatch = 64;

struct StepFixture {
  std::unique_ptr<tt::Model> model;
  std::unique_ptr<tt::Optimizer> opt;
  int workers;
  std::vector<tt::Model::Workspace> ws;
  std::vector<tt::GradSet> grads;
  std::vector<tt::Tensor> x;
  std::vector<std::vector<int32_t>> y;
  tt::GradSet avg;

  StepFixture(const std::string& net, int w) : workers(w) {
    model = tt::make_model(net, tt::ModelOptions{}, 1);
    tt::OptimizerOptions oo;
    oo.momentum = 0.9;
    opt = tt::make_optimizer("momentum", oo);
    opt->init(model->params());
    std::mt19937 gen(3);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int i = 0; i < w; ++i) {
      ws.push_back(model->make_workspace());
      grads.push_back(model->make_grads());
      tt::Shape s{kBatch / w};
      for (int64_t d : model->input_shape()) s.push_back(d);
      x.emplace_back(s);
      for (float& v : x.back().data) v = nd(gen);
      y.emplace_back(kBatch / w);
      for (auto& l : y.back()) l = static_cast<int32_t>(gen() % 10);
    }
    avg = model->make_grads();
  }

  void step() {
    tt::ForwardContext ctx;
    ctx.training = true;
    const auto& params = model->params().params;
#pragma omp parallel for num_threads(workers) if (workers > 1)
    for (int w = 0; w < workers; ++w) model->forward_backward(ws[w], x[w], y[w], grads[w], ctx);
    for (size_t v = 0; v < params.size(); ++v) {
      float* a = avg[v].ptr();
      const float* p = params[v].value.ptr();
      const float wd = params[v].weight_decay, inv = 1.0f / workers;
      for (int64_t i = 0; i < avg[v].size(); ++i) {
        float s = 0;
        for (int w = 0; w < workers; ++w) s += grads[w][v].data[i];
        a[i] = s * inv + wd * p[i];
      }
    }
    opt->apply(model->params(), avg, 0.01f);
  }
};

std::map<std::string, double> g_seconds;  // benchmark name -> seconds per iteration

void BM_EigenGemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Eigen::MatrixXf a = Eigen::MatrixXf::Random(n, n), b = Eigen::MatrixXf::Random(n, n), c(n, n);
  for (auto _ : state) {
    c.noalias() = a * b;
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_TrainStep(benchmark::State& state, const std::string& net, int workers) {
  StepFixture f(net, workers);
  f.step();  // warm-up: buffers reach their steady-state sizes
  for (auto _ : state) f.step();
  const double flops = 6.0 * static_cast<double>(f.model->forward_macs_per_example()) * kBatch;
  state.counters["examples/s"] = benchmark::Counter(kBatch, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(flops, benchmark::Counter::kIsIterationInvariantRate);
}

class CapturingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration) continue;
      const double s = r.GetAdjustedRealTime() / benchmark::GetTimeUnitMultiplier(r.time_unit);
      auto it = g_seconds.find(r.benchmark_name());
      if (it == g_seconds.end() || s < it->second) g_seconds[r.benchmark_name()] = s;
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

std::map<std::string, double> pytorch_examples_per_sec(int threads) {
  std::map<std::string, double> out;
  const char* script = std::getenv("TG_PYTORCH_SCRIPT");
  const std::string cmd = std::string("/usr/bin/python3 ") + (script ? script : TG_PYTORCH_SCRIPT_PATH) + " " +
                          std::to_string(threads) + " 2>/dev/null";
  const std::string s = terngrad::bench::command_output(cmd);
  for (const char* key : {"lenet", "cifarnet"})
    if (const auto v = terngrad::bench::json_number(s, key)) out[key] = *v;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = omp_get_max_threads();
  benchmark::RegisterBenchmark("eigen_gemm", BM_EigenGemm)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
  for (const char* net : {"lenet", "cifarnet"}) {
    for (int workers : {1, 2}) {
      const std::string name = std::string("train_step/") + net + "/workers:" + std::to_string(workers);
      benchmark::RegisterBenchmark(name.c_str(), [net, workers](benchmark::State& s) { BM_TrainStep(s, net, workers); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  CapturingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  const auto torch = pytorch_examples_per_sec(threads);
  const double gemm_gflops = 2.0 * 1024.0 * 1024 * 1024 / g_seconds["eigen_gemm/1024/real_time"] / 1e9;
  std::printf("\n=== train_step_bench summary (batch %lld, %d threads) ===\n", (long long)kBatch, threads);
  std::printf("Eigen GEMM 1024^3: %.1f GFLOP/s\n", gemm_gflops);
  std::printf("%-9s %8s %10s %9s %9s %13s %9s\n", "net", "workers", "examples/s", "GFLOP/s", "of GEMM", "PyTorch ex/s",
              "vs torch");
  for (const char* net : {"lenet", "cifarnet"}) {
    const double macs = static_cast<double>(tt::make_model(net, {}, 1)->forward_macs_per_example());
    for (int workers : {1, 2}) {
      const std::string name = std::string("train_step/") + net + "/workers:" + std::to_string(workers) + "/real_time";
      const double s = g_seconds[name];
      const double eps = kBatch / s, gflops = 6.0 * macs * kBatch / s / 1e9;
      const auto it = torch.find(net);
      char vs[32] = "n/a", tex[32] = "n/a";
      if (it != torch.end() && it->second > 0) {
        std::snprintf(vs, sizeof vs, "%.1fx", eps / it->second);
        std::snprintf(tex, sizeof tex, "%.0f", it->second);
      }
      std::printf("%-9s %8d %10.0f %9.1f %8.1f%% %13s %9s\n", net, workers, eps, gflops, 100 * gflops / gemm_gflops,
                  tex, vs);
    }
  }
  std::printf("targets: >= 3x PyTorch and >= 40%% of the GEMM rate (best of the two worker layouts)\n");
  return 0;
}
