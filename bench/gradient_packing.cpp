// Bits per element of the three TernGrad packings (2bit, base3, entropy) on
// real gradients saved by `tg-train --save_gradients=DIR` (DIR/step-S/
// worker-W/<v>-<name>.npy) and on synthetic AlexNet-shaped ones, worker
// payloads and the ps's R-replica shared-scale sum (bit_width(2R) packing
// against entropy coding). The codes are the same in every packing, so this
// is the whole difference a run sees on the wire.
//
//   gradient_packing --dirs=/g/lenet,/g/cifarnet [--alexnet] [--replicas=4] [--min_elements=1000]
//                    [--json=out.json]
//
// Every worker's gradient of a variable is encoded with the scale shared
// over the workers (the trainer's default flow: max of the 2.5-sigma
// scales), seeds 1..R; variables below --min_elements (TernGrad's
// size_to_binarize, 1000) stay fp32 in a run and are left out of the totals.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "npy_io.h"
#include "terngrad/quantize/codec.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/quantize/ternary_sum.h"
#include "terngrad/train/models.h"

namespace fs = std::filesystem;
namespace tq = terngrad::quantize;

namespace {

struct Totals {
  double elements = 0, two = 0, base3 = 0, entropy = 0, sum_fixed = 0, sum_entropy = 0;
  void add(const Totals& o) {
    elements += o.elements;
    two += o.two;
    base3 += o.base3;
    entropy += o.entropy;
    sum_fixed += o.sum_fixed;
    sum_entropy += o.sum_entropy;
  }
};

// One variable: the R workers' gradients -> payload sizes (per worker, averaged) and the sum's sizes.
Totals measure(const std::vector<std::vector<float>>& workers, uint32_t tensor_id) {
  const size_t n = workers[0].size();
  const uint32_t r = static_cast<uint32_t>(workers.size());
  float shared = 0.0f;
  for (const auto& g : workers) shared = std::max(shared, tq::local_scale(tq::compute_stats(g), 2.5f));
  Totals t;
  t.elements = static_cast<double>(n);
  std::vector<std::vector<uint8_t>> two(r);
  for (uint32_t w = 0; w < r; ++w) {
    tq::EncodeParams p;
    p.seed = w + 1;
    p.step = 1;
    p.tensor_id = tensor_id;
    p.shared_scale = shared;
    for (tq::Packing pk : {tq::Packing::k2Bit, tq::Packing::kBase3, tq::Packing::kEntropy}) {
      p.packing = pk;
      std::vector<uint8_t> out(tq::max_encoded_bytes(n, pk));
      out.resize(tq::encode(workers[w], p, out));
      const double bytes = static_cast<double>(out.size()) / r;
      (pk == tq::Packing::k2Bit ? t.two : pk == tq::Packing::kBase3 ? t.base3 : t.entropy) += bytes;
      if (pk == tq::Packing::k2Bit) two[w] = std::move(out);
    }
  }
  std::vector<std::span<const uint8_t>> views(two.begin(), two.end());
  std::vector<uint8_t> sum(tq::sum_payload_bytes(n, r));
  t.sum_fixed = static_cast<double>(tq::sum_payloads(views, sum));
  t.sum_entropy = static_cast<double>(tq::sum_payloads(views, sum, tq::SumPacking::kEntropy));
  return t;
}

double bits(double bytes, double elements) { return 8.0 * bytes / elements; }

void print_row(const std::string& name, const Totals& t) {
  std::printf("| %s | %.0f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f%% |\n", name.c_str(), t.elements,
              bits(t.two, t.elements), bits(t.base3, t.elements), bits(t.entropy, t.elements),
              bits(t.sum_fixed, t.elements), bits(t.sum_entropy, t.elements),
              100.0 * (1.0 - t.sum_entropy / t.sum_fixed));
}

void header(const std::string& what, uint32_t r) {
  std::printf("\n### %s\n\n| variable | elements | 2bit | base3 | entropy | sum of %u, bit_width(2R) | sum of %u, entropy | "
              "sum saved |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
              what.c_str(), r, r);
}

std::string arg(int argc, char** argv, const std::string& key, const std::string& def) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(key + "=", 0) == 0) return a.substr(key.size() + 1);
    if (a == key) return "1";
  }
  return def;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= s.size() && !s.empty()) {
    const size_t e = s.find(',', b);
    out.push_back(s.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return out;
}

}  // namespace

// A positive number given as --key=value, or the tool exits naming the flag.
double number(int argc, char** argv, const std::string& key, const std::string& def) {
  const std::string v = arg(argc, argv, key, def);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x > 0)) {
    std::fprintf(stderr, "gradient_packing: %s=%s is not a positive number\n", key.c_str(), v.c_str());
    std::exit(2);
  }
  return x;
}

int main(int argc, char** argv) {
  const uint32_t replicas = static_cast<uint32_t>(number(argc, argv, "--replicas", "4"));
  const double min_elements = number(argc, argv, "--min_elements", "1000");
  std::printf("gradient_packing: SIMD %s; clip 2.5, scale shared over %u replicas; bits per element "
              "(payload bytes, headers included, * 8 / elements)\n",
              tq::simd_level_name(tq::cpu_simd_level()), replicas);
  std::map<std::string, Totals> grand;
  for (const std::string& dir : split(arg(argc, argv, "--dirs", ""))) {
    if (!fs::is_directory(dir)) {
      std::fprintf(stderr, "gradient_packing: --dirs: %s is not a directory (tg-train --save_gradients=DIR writes one)\n",
                   dir.c_str());
      return 2;
    }
    std::vector<fs::path> steps;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0) steps.push_back(e.path());
    std::sort(steps.begin(), steps.end());
    for (const fs::path& step : steps) {
      if (!fs::is_directory(step / "worker-0")) {
        std::fprintf(stderr, "gradient_packing: %s has no worker-0/ (not written by tg-train --save_gradients)\n",
                     step.c_str());
        return 2;
      }
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(step / "worker-0")) files.push_back(e.path().filename());
      std::sort(files.begin(), files.end());
      header(dir + " " + step.filename().string(), replicas);
      Totals total;
      uint32_t id = 0;
      for (const fs::path& f : files) {
        std::vector<std::vector<float>> workers;
        for (uint32_t w = 0; w < replicas; ++w) {
          const fs::path p = step / ("worker-" + std::to_string(w)) / f;
          if (!fs::exists(p)) break;
          workers.push_back(terngrad::tools::read_tensor(p.string(), terngrad::tools::TensorFormat::kNpy).data);
        }
        if (workers.size() != replicas) {
          std::fprintf(stderr, "%s: %zu workers' gradients, --replicas=%u\n", (step / f).c_str(), workers.size(),
                       replicas);
          return 1;
        }
        const Totals t = measure(workers, id++);
        print_row(f.stem().string(), t);
        if (t.elements >= min_elements) total.add(t);
      }
      print_row("**total (>= " + std::to_string(static_cast<int>(min_elements)) + " elements)**", total);
      grand[fs::path(dir).filename().string()].add(total);
    }
  }
  if (arg(argc, argv, "--alexnet", "0") == "1") {
    // AlexNet's shapes, synthetic values: Student-t with 3 degrees of freedom
    // (heavier tails than a Gaussian, as real fc gradients), a different
    // draw per replica.
    auto model = terngrad::train::make_model("alexnet", {1000, -1, -1}, 1);
    header("AlexNet shapes, synthetic Student-t(3) gradients", replicas);
    Totals total;
    uint32_t id = 0;
    for (const auto& param : model->params().params) {
      const size_t n = param.value.data.size();
      std::vector<std::vector<float>> workers(replicas, std::vector<float>(n));
      for (uint32_t w = 0; w < replicas; ++w) {
        std::mt19937 rng(1000 * id + w);
        std::student_t_distribution<float> d(3.0f);
        for (auto& v : workers[w]) v = 1e-3f * d(rng);
      }
      const Totals t = measure(workers, id++);
      print_row(param.name, t);
      if (t.elements >= min_elements) total.add(t);
    }
    print_row("**total (>= 1000 elements)**", total);
    grand["alexnet-synthetic"].add(total);
  }
  std::printf("\n### Totals over every saved step\n\n| set | elements | 2bit | base3 | entropy | sum bit_width(2R) | "
              "sum entropy | sum saved |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& [name, t] : grand) print_row(name, t);
  return 0;
}
