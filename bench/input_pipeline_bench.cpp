// Is the trainer input-bound on ImageNet-like data? The streaming loader's
// images/s (read + JPEG decode + preprocessing, per net's style, at 1 and 2
// threads) on a generated folder of realistic JPEGs, against the training
// step's examples/s (forward + backward) of each 224x224 net (AlexNet,
// GoogLeNet, VGG-A) measured in the same run on the same machine.
//
//   ./bench/input_pipeline_bench [--images=240] [--step_batch=8] [--steps=3]
//   ./bench/input_pipeline_bench --write_folder=DIR [--images=N]
//       writes DIR/train/class*/ (N images) and DIR/validation/class*/ (N/4)
//       for a smoke run of tg-train --dataset_name=imagenet --data_format=folder.
//
// The JPEGs are 500x375 (ImageNet's most common size), quality 90, made of a
// smooth gradient plus per-pixel noise, so they cost about what photographs
// cost to decode (pure gradients decode unrealistically fast).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "terngrad/train/image_codec.h"
#include "terngrad/train/image_folder.h"
#include "terngrad/train/imagenet_preprocess.h"
#include "terngrad/train/models.h"
#include "terngrad/train/streaming_loader.h"

namespace tt = terngrad::train;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

std::string str_flag(int argc, char** argv, const char* name) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
  return "";
}

int64_t flag(int argc, char** argv, const char* name, int64_t def) {
  const std::string prefix = std::string("--") + name + "=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) {
      const char* v = argv[i] + prefix.size();
      char* end = nullptr;
      const long long x = std::strtoll(v, &end, 10);
      if (end == v || *end != '\0' || x < 1) {
        std::fprintf(stderr, "input_pipeline_bench: --%s=%s: expected a positive integer\n", name, v);
        std::exit(2);
      }
      return x;
    }
  return def;
}

tt::Image photo_like(int64_t h, int64_t w, uint32_t seed) {
  tt::Image img{h, w, 3, std::vector<uint8_t>(static_cast<size_t>(h * w * 3))};
  uint32_t s = seed * 2654435761u + 7;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) {
        s = s * 1664525u + 1013904223u;
        const double smooth = 128 + 60 * std::sin(0.013 * x * (c + 1) + seed) + 50 * std::cos(0.021 * y + c);
        const int v = static_cast<int>(smooth) + static_cast<int>(s >> 27) - 16;  // +-16 noise
        img.pixels[static_cast<size_t>((y * w + x) * 3 + c)] = static_cast<uint8_t>(std::clamp(v, 0, 255));
      }
  return img;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, model = "?", isa = "";
  while (std::getline(f, line)) {
    if (model == "?" && line.rfind("model name", 0) == 0) model = line.substr(line.find(':') + 2);
    if (line.rfind("flags", 0) == 0) {
      isa = line.find(" avx512f") != std::string::npos ? "AVX-512" : line.find(" avx2") != std::string::npos ? "AVX2" : "no AVX2";
      break;
    }
  }
  return model + " (" + isa + ")";
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t images = flag(argc, argv, "images", 240);
  const int64_t ab = flag(argc, argv, "step_batch", 8);
  const int64_t asteps = flag(argc, argv, "steps", 3);
  const std::string write_to = str_flag(argc, argv, "write_folder");
  auto write_folder = [](const fs::path& dir, int64_t n, uint32_t salt) {
    int64_t bytes = 0;
    for (int64_t i = 0; i < n; ++i) {
      const fs::path p = dir / ("class" + std::to_string(i % 10)) / ("img" + std::to_string(i) + ".JPEG");
      fs::create_directories(p.parent_path());
      const auto jpg = tt::encode_jpeg(photo_like(375, 500, static_cast<uint32_t>(i) + salt), 90);
      bytes += static_cast<int64_t>(jpg.size());
      std::ofstream(p, std::ios::binary)
          .write(reinterpret_cast<const char*>(jpg.data()), static_cast<std::streamsize>(jpg.size()));
    }
    return bytes;
  };
  if (!write_to.empty()) {
    write_folder(fs::path(write_to) / "train", images, 0);
    write_folder(fs::path(write_to) / "validation", std::max<int64_t>(images / 4, 10), 1u << 20);
    std::printf("wrote %s/train and %s/validation\n", write_to.c_str(), write_to.c_str());
    return 0;
  }
  const fs::path dir = fs::temp_directory_path() / ("tg_input_bench_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const int64_t bytes = write_folder(dir, images, 0);
  auto src = std::make_shared<tt::ImageFolderSource>(dir.string());
  std::printf("CPU: %s, %d hardware threads\n", cpu_model().c_str(), static_cast<int>(std::thread::hardware_concurrency()));
  std::printf("data: %s, %.0f KB per JPEG (500x375, q90)\n\n", src->describe().c_str(), bytes / 1024.0 / images);
  std::printf("%-10s %-6s %8s %10s %12s\n", "style", "mode", "threads", "images/s", "ms/image/thr");

  // The parts of one example in the calling thread: read + decode, then
  // each style's preprocessing of the decoded image.
  {
    const int64_t reps = std::min<int64_t>(images, 100);
    auto t0 = Clock::now();
    tt::Image img;
    for (int64_t i = 0; i < reps; ++i) img = tt::decode_example(src->read(i), 3);
    const double decode_ms = 1000 * std::chrono::duration<double>(Clock::now() - t0).count() / reps;
    std::printf("%-10s %-6s %8s %10.1f %12.2f\n", "(read+decode only)", "", "1", 1000 / decode_ms, decode_ms);
    std::vector<float> out(224 * 224 * 3);
    for (tt::ImageStyle style : {tt::ImageStyle::kAlexNet, tt::ImageStyle::kVgg, tt::ImageStyle::kInception}) {
      t0 = Clock::now();
      for (int64_t i = 0; i < reps; ++i) tt::preprocess_image(img, {style, true}, static_cast<uint64_t>(i), out.data());
      const double ms = 1000 * std::chrono::duration<double>(Clock::now() - t0).count() / reps;
      std::printf("%-10s %-6s %8s %10.1f %12.2f\n", tt::image_style_name(style), "(preprocess only)", "1", 1000 / ms, ms);
    }
  }

  const int64_t batch = 16, batches = std::max<int64_t>(images / batch, 2);
  for (tt::ImageStyle style : {tt::ImageStyle::kAlexNet, tt::ImageStyle::kVgg, tt::ImageStyle::kInception})
    for (int threads : {1, 2}) {
      tt::StreamOptions o;
      o.preprocess = {style, true};
      o.batch_size = batch;
      o.threads = threads;
      o.prefetch = 2;
      o.num_classes = 10;
      tt::Tensor x;
      std::vector<int32_t> labels;
      const auto t0 = Clock::now();
      double busy = 0;
      {
        tt::StreamingLoader l(src, tt::ShardedSampler(src->size(), 1, 0, 1), o, 0,
                              [](int64_t k) { return static_cast<uint64_t>(k) * 7919u; });
        for (int64_t k = 0; k < batches; ++k) l.next(x, labels);
        busy = l.stats().busy_s;
      }
      const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
      const double n = static_cast<double>(batches * batch);
      std::printf("%-10s %-6s %8d %10.1f %12.2f\n", tt::image_style_name(style), "train", threads, n / secs,
                  1000 * busy / n);
    }

  // Each 224x224 net's forward + backward on fixed 224x224x3 inputs (the
  // step's compute; the codec and optimizer add a little more), to set
  // against its preprocessing style's loader rate above.
  for (const char* net : {"alexnet", "googlenet", "vgg_a"}) {
    tt::ModelOptions mo;
    mo.num_classes = 1000;
    auto model = tt::make_model(net, mo, 1);
    tt::Model::Workspace ws = model->make_workspace();
    tt::GradSet grads = model->make_grads();
    tt::Tensor x({ab, 224, 224, 3}, 0.0f);
    for (size_t i = 0; i < x.data.size(); ++i) x.data[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1;
    std::vector<int32_t> labels(static_cast<size_t>(ab));
    for (int64_t i = 0; i < ab; ++i) labels[static_cast<size_t>(i)] = static_cast<int32_t>(i * 37 % 1000);
    tt::ForwardContext ctx;
    ctx.training = true;
    model->forward_backward(ws, x, labels, grads, ctx);  // warm-up: allocations, first touches
    const auto t0 = Clock::now();
    for (int64_t s = 0; s < asteps; ++s) {
      ctx.dropout_seed = static_cast<uint64_t>(s);
      model->forward_backward(ws, x, labels, grads, ctx);
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("%s%-9s forward+backward (%s style), batch %lld, %d OpenMP threads: %.1f examples/s (%.2f s/step)\n",
                std::strcmp(net, "alexnet") == 0 ? "\n" : "", net, tt::image_style_name(tt::image_style_for_net(net)),
                static_cast<long long>(ab), omp_get_max_threads(), static_cast<double>(asteps * ab) / secs,
                secs / static_cast<double>(asteps));
  }
  fs::remove_all(dir);
  return 0;
}
