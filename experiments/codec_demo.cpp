// tg-codec-demo: the README's main job until the trainer lands (issue 3).
//
// Trains a small MLP (784-500-10) on Fashion-MNIST for a few fp32 steps so
// that its gradients are real, then has 4 virtual workers each compute the
// gradient of their own batch and send it through the TernGrad codec with
// scale sharing, exactly as a parameter server would aggregate it. Prints
// what went over the "wire" (elements, scale, bytes, ratio), how close the
// ternary average is to the fp32 average, and codec throughput next to a
// memcpy of the same tensor measured in the same run.
#include <zlib.h>

#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "terngrad/quantize/codec.h"

namespace tq = terngrad::quantize;
using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

namespace {

// Minimal IDX (.gz) reader for the first `limit` items; the trainer's loader
// (train/) replaces it.
std::vector<uint8_t> read_idx(const std::string& path, uint32_t want_magic, size_t item_bytes, size_t limit) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(path + ": cannot open (install dataset-fashion-mnist or pass --data_dir)");
  auto read_exact = [&](void* dst, size_t len) {
    if (gzread(f, dst, static_cast<unsigned>(len)) != static_cast<int>(len)) {
      gzclose(f);
      throw std::runtime_error(path + ": truncated IDX file");
    }
  };
  uint8_t head[4];
  read_exact(head, 4);
  const uint32_t magic = (uint32_t{head[0]} << 24) | (uint32_t{head[1]} << 16) | (uint32_t{head[2]} << 8) | head[3];
  if (magic != want_magic) {
    gzclose(f);
    throw std::runtime_error(path + ": IDX magic " + std::to_string(magic) + ", expected " + std::to_string(want_magic));
  }
  const int dims = head[3];
  uint32_t count = 0;
  for (int d = 0; d < dims; ++d) {
    uint8_t b[4];
    read_exact(b, 4);
    const uint32_t v = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    if (d == 0) count = v;
  }
  const size_t n = std::min<size_t>(count, limit);
  std::vector<uint8_t> data(n * item_bytes);
  read_exact(data.data(), data.size());
  gzclose(f);
  return data;
}

struct Mlp {
  Mat w1, w2;               // 784x500, 500x10
  Eigen::RowVectorXf b1, b2;
};

struct Grads {
  Mat w1, w2;
  Eigen::RowVectorXf b1, b2;
  float loss = 0;
};

Grads gradient(const Mlp& m, const Mat& x, const std::vector<int>& y) {
  const Mat h_pre = (x * m.w1).rowwise() + m.b1;
  const Mat h = h_pre.cwiseMax(0.0f);
  Mat logits = (h * m.w2).rowwise() + m.b2;
  Grads g;
  const float inv_b = 1.0f / static_cast<float>(x.rows());
  for (Eigen::Index r = 0; r < logits.rows(); ++r) {  // softmax cross-entropy
    const float mx = logits.row(r).maxCoeff();
    logits.row(r) = (logits.row(r).array() - mx).exp().matrix();
    const float z = logits.row(r).sum();
    logits.row(r) /= z;
    g.loss -= std::log(std::max(logits(r, y[r]), 1e-30f)) * inv_b;
    logits(r, y[r]) -= 1.0f;
  }
  const Mat dlogits = logits * inv_b;
  g.w2 = h.transpose() * dlogits;
  g.b2 = dlogits.colwise().sum();
  const Mat dh = (dlogits * m.w2.transpose()).cwiseProduct((h_pre.array() > 0.0f).cast<float>().matrix());
  g.w1 = x.transpose() * dh;
  g.b1 = dh.colwise().sum();
  const float wd = 5e-4f;  // TernGrad ternarizes the gradient with weight decay included
  g.w1 += wd * m.w1;
  g.w2 += wd * m.w2;
  return g;
}

double seconds_of(auto&& fn, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--data_dir=", 0) == 0) {
      data_dir = a.substr(11);
    } else {
      std::fprintf(stderr, "usage: tg-codec-demo [--data_dir=DIR]\nunknown argument: %s\n", a.c_str());
      return 2;
    }
  }
  constexpr int kWorkers = 4, kBatch = 64, kWarmupSteps = 30;
  constexpr size_t kImages = kBatch * kWorkers * (kWarmupSteps + 1);
  try {
    const auto pixels = read_idx(data_dir + "/train-images-idx3-ubyte.gz", 0x00000803, 784, kImages);
    const auto labels = read_idx(data_dir + "/train-labels-idx1-ubyte.gz", 0x00000801, 1, kImages);
    auto batch = [&](size_t first, Mat& x, std::vector<int>& y) {
      x.resize(kBatch, 784);
      y.resize(kBatch);
      for (int r = 0; r < kBatch; ++r) {
        for (int c = 0; c < 784; ++c) x(r, c) = (pixels[(first + r) * 784 + c] / 255.0f - 0.5f) * 2.0f;
        y[r] = labels[first + r];
      }
    };

    std::mt19937 gen(1);
    std::normal_distribution<float> n1(0.0f, 0.05f), n2(0.0f, 0.0767f);
    Mlp m{Mat(784, 500), Mat(500, 10), Eigen::RowVectorXf::Zero(500), Eigen::RowVectorXf::Zero(10)};
    for (Eigen::Index i = 0; i < m.w1.size(); ++i) m.w1.data()[i] = n1(gen);
    for (Eigen::Index i = 0; i < m.w2.size(); ++i) m.w2.data()[i] = n2(gen);

    Mat x;
    std::vector<int> y;
    float loss = 0;
    for (int s = 0; s < kWarmupSteps; ++s) {  // plain fp32 SGD so the gradients are mid-training ones
      batch(static_cast<size_t>(s) * kBatch * kWorkers, x, y);
      Grads g = gradient(m, x, y);
      loss = g.loss;
      m.w1 -= 0.05f * g.w1;
      m.b1 -= 0.05f * g.b1;
      m.w2 -= 0.05f * g.w2;
      m.b2 -= 0.05f * g.b2;
    }
    std::printf("tg-codec-demo: 784-500-10 MLP on Fashion-MNIST (%s), %d fp32 warm-up steps, loss %.3f\n",
                data_dir.c_str(), kWarmupSteps, loss);
    std::printf("%d workers x batch %d; each gradient goes through TernGrad (clip 2.5, shared scale)\n\n",
                kWorkers, kBatch);

    std::vector<Grads> grads;
    for (int w = 0; w < kWorkers; ++w) {
      batch(static_cast<size_t>(kWarmupSteps) * kBatch * kWorkers + w * kBatch, x, y);
      grads.push_back(gradient(m, x, y));
    }
    struct Tensor {
      const char* name;
      std::vector<std::span<const float>> per_worker;
    };
    std::vector<Tensor> tensors(4);
    tensors[0].name = "fc1/weights";
    tensors[1].name = "fc1/biases";
    tensors[2].name = "fc2/weights";
    tensors[3].name = "fc2/biases";
    for (const Grads& g : grads) {
      tensors[0].per_worker.emplace_back(g.w1.data(), g.w1.size());
      tensors[1].per_worker.emplace_back(g.b1.data(), g.b1.size());
      tensors[2].per_worker.emplace_back(g.w2.data(), g.w2.size());
      tensors[3].per_worker.emplace_back(g.b2.data(), g.b2.size());
    }

    std::printf("%-12s %9s %11s %11s %11s %8s %8s %9s\n", "tensor", "elements", "scale", "bytes fp32",
                "bytes tern", "ratio", "zeros", "cos(avg)");
    size_t total_in = 0, total_out = 0;
    for (uint32_t t = 0; t < tensors.size(); ++t) {
      const Tensor& T = tensors[t];
      const size_t n = T.per_worker[0].size();
      float shared = 0;  // scale sharing: max of the workers' own scales
      std::vector<tq::TensorStats> stats;
      for (auto g : T.per_worker) {
        stats.push_back(tq::compute_stats(g));
        shared = std::max(shared, tq::local_scale(stats.back(), 2.5f));
      }
      std::vector<std::vector<uint8_t>> payloads;
      for (int w = 0; w < kWorkers; ++w) {
        tq::EncodeParams p;
        p.seed = 1234 + w;
        p.step = kWarmupSteps;
        p.tensor_id = t;
        p.shared_scale = shared;
        payloads.emplace_back(tq::max_encoded_bytes(n));
        tq::encode_with_stats(T.per_worker[w], stats[w], p, payloads.back());
      }
      std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
      std::vector<int16_t> counts(n);
      const float s = tq::sum_shared(views, counts);
      double dot = 0, na = 0, nb = 0;
      size_t zeros = 0;
      for (size_t i = 0; i < n; ++i) {
        double exact = 0;
        for (auto g : T.per_worker) exact += g[i];
        const double tern = static_cast<double>(s) * counts[i];
        dot += exact * tern;
        na += exact * exact;
        nb += tern * tern;
        for (const auto& p : payloads) zeros += ((p[tq::kHeaderBytes + i / 4] >> (2 * (i % 4))) & 3u) == 0;
      }
      const size_t in = n * sizeof(float), out = payloads[0].size();
      total_in += in;
      total_out += out;
      std::printf("%-12s %9zu %11.4g %11zu %11zu %7.1fx %7.1f%% %9.4f\n", T.name, n, s, in, out,
                  static_cast<double>(in) / out, 100.0 * zeros / (n * kWorkers),
                  nb > 0 ? dot / std::sqrt(na * nb) : 1.0);
    }
    std::printf("%-12s %9s %11s %11zu %11zu %7.1fx   (per worker per step)\n\n", "total", "", "", total_in,
                total_out, static_cast<double>(total_in) / total_out);

    // Throughput on the largest gradient, against memcpy of the same tensor.
    const auto g = tensors[0].per_worker[0];
    const size_t n = g.size();
    std::vector<uint8_t> payload(tq::max_encoded_bytes(n));
    std::vector<float> out(n), copy(n);
    const int reps = 200;
    const double t_copy = seconds_of([&] { std::memcpy(copy.data(), g.data(), n * sizeof(float)); }, reps);
    const double t_enc = seconds_of([&] { tq::encode(g, {}, payload); }, reps);
    const double t_dec = seconds_of([&] { tq::decode(payload, out); }, reps);
    const double t_acc = seconds_of([&] { tq::decode_accumulate(payload, out); }, reps);
    std::printf("throughput on fc1/weights (%zu elements, best of %d):\n", n, reps);
    std::printf("  memcpy            %7.2f GB/s\n", 8.0 * n / t_copy / 1e9);
    std::printf("  encode            %7.2f Gelem/s  (%.2f GB of fp32 in per s, %.2fx memcpy time)\n", n / t_enc / 1e9,
                4.0 * n / t_enc / 1e9, t_enc / t_copy);
    std::printf("  decode            %7.2f Gelem/s  (%.2fx memcpy time)\n", n / t_dec / 1e9, t_dec / t_copy);
    std::printf("  decode-accumulate %7.2f Gelem/s  (%.2fx memcpy time)\n", n / t_acc / 1e9, t_acc / t_copy);
    std::printf("full codec benchmarks: build/bench/codec_cpu_bench (see bench/RESULTS.md)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-codec-demo: %s\n", e.what());
    return 1;
  }
  return 0;
}
