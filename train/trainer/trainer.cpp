#include "terngrad/train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "terngrad/comm/gradient_codec.h"
#include "terngrad/train/checkpoint.h"
#include "terngrad/train/datasets.h"
#include "terngrad/train/input_pipeline.h"
#include "terngrad/train/loss.h"
#include "terngrad/train/lr_schedule.h"
#include "terngrad/train/metrics.h"
#include "terngrad/train/models.h"
#include "terngrad/train/moving_average.h"
#include "terngrad/train/optimizer.h"
#include "terngrad/train/safetensors.h"

namespace terngrad::train {

namespace {

using Clock = std::chrono::steady_clock;

// Counter-based seeds: every random stream of the run (augmentation, dropout,
// codec) is a pure function of (run seed, step, worker, purpose), so a resumed
// run draws exactly what the uninterrupted run would have drawn.
uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t stream_seed(uint64_t seed, int64_t step, int worker, uint64_t purpose) {
  return mix(mix(mix(seed, purpose), static_cast<uint64_t>(step)), static_cast<uint64_t>(worker));
}
enum Purpose : uint64_t { kAugment = 1, kDropout = 2, kCodec = 3, kSampler = 4 };

struct DataSetup {
  Dataset train, test;
  Preprocess train_pre, eval_pre;
};

DataSetup load_data(const TrainConfig& cfg, std::string& dataset) {
  if (dataset.empty()) dataset = cfg.net == "lenet" ? "mnist" : cfg.net == "cifarnet" ? "cifar10" : "synthetic";
  DataSetup d;
  if (dataset == "mnist") {
    if (cfg.net != "lenet") throw std::invalid_argument("--dataset_name=mnist (28x28x1) fits only --net=lenet");
    d.train = load_idx_dir(cfg.data_dir, true);
    d.test = load_idx_dir(cfg.data_dir, false);
    d.train_pre = d.eval_pre = Preprocess::kLeNet;
  } else if (dataset == "cifar10") {
    if (cfg.net != "cifarnet") throw std::invalid_argument("--dataset_name=cifar10 (32x32x3 cropped to 24x24) fits only --net=cifarnet");
    d.train = load_cifar10(cfg.data_dir, true);
    d.test = load_cifar10(cfg.data_dir, false);
    d.train_pre = Preprocess::kCifarTrain;
    d.eval_pre = Preprocess::kCifarEval;
  } else {  // synthetic: the net's input size, learnable class structure
    const int64_t side = cfg.net == "lenet" ? 28 : cfg.net == "cifarnet" ? 24 : 224;
    const int64_t ch = cfg.net == "lenet" ? 1 : 3;
    const int classes = cfg.num_classes > 0 ? cfg.num_classes : (cfg.net == "alexnet" ? 1000 : 10);
    d.train = make_synthetic(cfg.synthetic_examples, side, side, ch, classes, cfg.seed);
    d.test = make_synthetic(std::max<int64_t>(cfg.synthetic_examples / 4, 1), side, side, ch, classes, cfg.seed + 1);
    d.train_pre = d.eval_pre = Preprocess::kStandardize;
  }
  return d;
}

// Which codec each variable travels with: TernGrad for large enough
// variables (and the logits only with quantize_logits), fp32 otherwise.
std::vector<std::string> codec_plan(const TrainConfig& cfg, const ParamSet& params) {
  std::string compressed = cfg.codec;
  if (compressed.empty()) {
    if (cfg.grad_bits == 32) {
      compressed = "fp32";
    } else {
      char buf[96];
      std::snprintf(buf, sizeof buf, "terngrad:clip=%g,share_scale=%d", cfg.clip_factor, cfg.share_scale ? 1 : 0);
      compressed = buf;
    }
  }
  std::vector<std::string> plan;
  for (const Param& p : params.params) {
    const bool small = p.value.size() < cfg.size_to_binarize;
    const bool logits_kept = p.is_logits && !cfg.quantize_logits;
    plan.push_back(small || logits_kept ? "fp32" : compressed);
  }
  return plan;
}

struct EvalResult {
  double top1 = 0, top5 = 0;
  int64_t examples = 0;
};

EvalResult evaluate(const Model& model, const Dataset& test, Preprocess pre, const TrainConfig& cfg) {
  const int64_t total = cfg.max_eval_examples > 0 ? std::min(cfg.max_eval_examples, test.count) : test.count;
  const int64_t batches = (total + cfg.eval_batch_size - 1) / cfg.eval_batch_size;
  int64_t top1 = 0, top5 = 0;
#pragma omp parallel reduction(+ : top1, top5)
  {
    Model::Workspace ws = model.make_workspace();
    Tensor x;
    std::vector<int32_t> labels;
    std::vector<int64_t> idx;
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t first = b * cfg.eval_batch_size, n = std::min(cfg.eval_batch_size, total - first);
      idx.resize(n);
      for (int64_t i = 0; i < n; ++i) idx[i] = first + i;
      fill_batch(test, idx, pre, 0, x, labels);
      int64_t c1 = 0, c5 = 0;
      topk_correct(model.predict(ws, x), labels, c1, c5);
      top1 += c1;
      top5 += c5;
    }
  }
  EvalResult r;
  r.examples = total;
  r.top1 = total ? static_cast<double>(top1) / total : 0;
  r.top5 = total ? static_cast<double>(top5) / total : 0;
  return r;
}

}  // namespace

TrainResult run_training(const TrainConfig& cfg_in) {
  TrainConfig cfg = cfg_in;
  validate(cfg);
  if (cfg.threads > 0) omp_set_num_threads(cfg.threads);
  const auto t_start = Clock::now();

  std::string dataset = cfg.dataset;
  DataSetup data = load_data(cfg, dataset);
  ModelOptions mo;
  mo.num_classes = cfg.num_classes > 0 ? cfg.num_classes : data.train.num_classes;
  mo.weight_decay = cfg.weight_decay;
  mo.keep_prob = cfg.keep_prob;
  std::unique_ptr<Model> model = make_model(cfg.net, mo, cfg.seed);
  ParamSet& params = model->params();
  const int N = cfg.num_nodes;
  const size_t V = params.size();

  // Codecs: one instance per (worker, variable), as each worker owns its state.
  const std::vector<std::string> plan = codec_plan(cfg, params);
  std::vector<std::vector<std::unique_ptr<comm::GradientCodec>>> codecs(N);
  std::vector<std::vector<std::vector<uint8_t>>> payloads(N, std::vector<std::vector<uint8_t>>(V));
  double sent_per_step = 0, fp32_per_step = 0;
  for (int w = 0; w < N; ++w) {
    for (size_t v = 0; v < V; ++v) {
      codecs[w].push_back(comm::make_codec(plan[v]));
      payloads[w][v].resize(codecs[w][v]->payload_bytes(params.params[v].value.size()));
      if (w == 0) {
        sent_per_step += payloads[w][v].size();
        fp32_per_step += 4.0 * params.params[v].value.size();
      }
    }
  }

  OptimizerOptions oo;
  if (cfg.optimizer == "momentum") oo.momentum = cfg.momentum;
  auto optimizer = make_optimizer(cfg.optimizer, oo);
  optimizer->init(params);
  LrScheduleOptions so;
  so.initial = cfg.initial_learning_rate;
  so.decay_steps = cfg.decay_steps > 0 ? cfg.decay_steps : static_cast<double>(std::max<int64_t>(cfg.max_steps, 1));
  so.decay_rate = cfg.learning_rate_decay_factor;
  so.end = cfg.end_learning_rate;
  so.power = cfg.learning_rate_power;
  so.staircase = cfg.staircase;
  auto schedule = make_lr_schedule(cfg.learning_rate_decay_type, so);
  std::unique_ptr<ExponentialMovingAverage> ema;
  if (cfg.moving_average_decay > 0) ema = std::make_unique<ExponentialMovingAverage>(params, cfg.moving_average_decay);

  std::vector<ShardedSampler> samplers;
  for (int w = 0; w < N; ++w) samplers.emplace_back(data.train.count, N, w, stream_seed(cfg.seed, 0, w, kSampler));

  // Resume from the latest checkpoint, if the train dir has one.
  int64_t start_step = 0;
  if (!cfg.train_dir.empty()) {
    std::filesystem::create_directories(cfg.train_dir);
    if (auto ck = load_latest_checkpoint(cfg.train_dir)) {
      restore_params(params, ck->tensors);
      for (auto& [name, slot] : optimizer->slots()) {
        auto it = ck->tensors.find(name);
        if (it == ck->tensors.end()) throw std::runtime_error(ck->path + ": optimizer slot " + name + " missing");
        *slot = it->second;
      }
      if (ema) {
        for (auto& [name, shadow] : ema->shadows()) {
          auto it = ck->tensors.find(name);
          if (it != ck->tensors.end()) *shadow = it->second;
        }
      }
      optimizer->load_state(ck->blobs.at("optimizer_state"));
      const auto sampler_state = unpack_int64s(ck->blobs.at("samplers"), ck->path + " samplers");
      if (sampler_state.size() != 2 * static_cast<size_t>(N))
        throw std::runtime_error(ck->path + ": saved for a different --num_nodes");
      for (int w = 0; w < N; ++w) samplers[w].restore({sampler_state[2 * w], sampler_state[2 * w + 1]});
      start_step = ck->step;
      if (!cfg.quiet) std::fprintf(stderr, "resuming from %s at step %lld\n", ck->path.c_str(), (long long)start_step);
    }
  }
  std::unique_ptr<JsonlWriter> log;
  if (!cfg.train_dir.empty()) log = std::make_unique<JsonlWriter>(cfg.train_dir + "/metrics.jsonl", true);

  auto save = [&](int64_t step) {
    if (cfg.train_dir.empty()) return;
    std::map<std::string, Tensor> tensors;
    for (const Param& p : params.params) tensors[p.name] = p.value;
    for (auto& [name, slot] : optimizer->slots()) tensors[name] = *slot;
    if (ema)
      for (auto& [name, shadow] : ema->shadows()) tensors[name] = *shadow;
    std::vector<int64_t> s;
    for (auto& sm : samplers) {
      const auto st = sm.state();
      s.push_back(st.epoch);
      s.push_back(st.position);
    }
    std::map<std::string, std::vector<uint8_t>> blobs;
    blobs["samplers"] = pack_int64s(s);
    blobs["optimizer_state"] = optimizer->save_state();
    save_checkpoint(cfg.train_dir, step, tensors, blobs, 3);
  };

  // Per-worker state.
  std::vector<Model::Workspace> ws;
  std::vector<GradSet> grads;
  std::vector<Tensor> xs(N);
  std::vector<std::vector<int32_t>> labels(N);
  std::vector<std::vector<int64_t>> idx(N);
  for (int w = 0; w < N; ++w) {
    ws.push_back(model->make_workspace());
    grads.push_back(model->make_grads());
  }
  GradSet avg = model->make_grads();
  std::vector<float> losses(N);
  std::vector<std::vector<float>> local_scale(N, std::vector<float>(V, 0.0f));
  std::vector<float> shared(V, 0.0f);

  Progress progress(cfg.max_steps, cfg.batch_size * N, cfg.quiet);
  TrainResult result;
  result.fp32_bytes_per_worker_step = fp32_per_step;
  result.bytes_sent_per_worker_step = sent_per_step;
  result.bytes_recv_per_worker_step = sent_per_step * (N - 1);
  auto t_train = Clock::now();
  int64_t trained_examples = 0;

  auto run_eval = [&](int64_t step) {
    EvalResult raw = evaluate(*model, data.test, data.eval_pre, cfg);
    result.top1 = raw.top1;
    result.top5 = raw.top5;
    result.eval_examples = raw.examples;
    if (ema) {
      ema->swap(params);
      EvalResult e = evaluate(*model, data.test, data.eval_pre, cfg);
      ema->swap(params);
      result.ema_top1 = e.top1;
      result.ema_top5 = e.top5;
    }
    if (log) {
      JsonObject o;
      o.add("event", "eval").add("step", step).add("top1", raw.top1).add("top5", raw.top5)
          .add("examples", raw.examples);
      if (ema) o.add("ema_top1", result.ema_top1).add("ema_top5", result.ema_top5);
      log->write(o);
    }
    if (!cfg.quiet)
      std::fprintf(stderr, "step %lld: test top-1 %.2f%% top-5 %.2f%%%s\n", (long long)step, 100 * raw.top1,
                   100 * raw.top5,
                   ema ? (" (EMA top-1 " + std::to_string(100 * result.ema_top1).substr(0, 5) + "%)").c_str() : "");
  };

  for (int64_t step = start_step; step < cfg.max_steps; ++step) {
    // 1. Every worker: batch, gradient (+ weight decay), local scales.
#pragma omp parallel for schedule(dynamic, 1)
    for (int w = 0; w < N; ++w) {
      samplers[w].next_batch(cfg.batch_size, idx[w]);
      fill_batch(data.train, idx[w], data.train_pre, stream_seed(cfg.seed, step, w, kAugment), xs[w], labels[w]);
      ForwardContext ctx;
      ctx.training = true;
      ctx.dropout_seed = stream_seed(cfg.seed, step, w, kDropout);
      losses[w] = model->forward_backward(ws[w], xs[w], labels[w], grads[w], ctx);
      for (size_t v = 0; v < V; ++v) {
        const Param& p = params.params[v];
        if (p.weight_decay != 0.0f) {
          float* g = grads[w][v].ptr();
          const float* x = p.value.ptr();
          const float wd = p.weight_decay;
          for (int64_t i = 0; i < p.value.size(); ++i) g[i] += wd * x[i];
        }
        if (codecs[w][v]->wants_shared_scale()) local_scale[w][v] = codecs[w][v]->local_scale(grads[w][v].data);
      }
    }
    // 2. Scale sharing: the max over workers (what an all-reduce(max) gives).
    for (size_t v = 0; v < V; ++v) {
      shared[v] = 0.0f;
      for (int w = 0; w < N; ++w) shared[v] = std::max(shared[v], local_scale[w][v]);
    }
    // 3. Every worker encodes what it would send.
#pragma omp parallel for schedule(dynamic, 1)
    for (int w = 0; w < N; ++w) {
      for (size_t v = 0; v < V; ++v) {
        comm::EncodeContext ec;
        ec.tensor_id = static_cast<uint32_t>(v);
        ec.step = static_cast<uint32_t>(step);
        ec.seed = stream_seed(cfg.seed, 0, w, kCodec);
        if (codecs[w][v]->wants_shared_scale()) ec.shared_scale = shared[v];
        codecs[w][v]->encode(grads[w][v].data, ec, payloads[w][v]);
      }
    }
    // 4. Aggregate: decode-accumulate in worker order, average.
    const float inv_n = 1.0f / static_cast<float>(N);
#pragma omp parallel for schedule(dynamic, 1)
    for (size_t v = 0; v < V; ++v) {
      std::fill(avg[v].data.begin(), avg[v].data.end(), 0.0f);
      for (int w = 0; w < N; ++w) codecs[w][v]->decode_accumulate(payloads[w][v], avg[v].data);
      for (float& g : avg[v].data) g *= inv_n;
    }
    // 5. The same update on every worker's (identical) copy.
    const double lr = schedule->lr(step);
    optimizer->apply(params, avg, static_cast<float>(lr));
    if (ema) ema->update(params, step);

    double loss = 0;
    for (float l : losses) loss += l;
    loss /= N;
    if (!std::isfinite(loss))
      throw std::runtime_error("training diverged at step " + std::to_string(step) + ": loss is " +
                               std::to_string(loss) + " (lower --initial_learning_rate?)");
    result.final_loss = loss;
    trained_examples += cfg.batch_size * N;
    progress.update(step + 1, loss);
    if (log && cfg.log_every_n_steps > 0 && ((step + 1) % cfg.log_every_n_steps == 0 || step + 1 == cfg.max_steps)) {
      const double secs = std::chrono::duration<double>(Clock::now() - t_train).count();
      JsonObject o;
      o.add("event", "train").add("step", step + 1).add("loss", loss).add("learning_rate", lr)
          .add("examples_per_sec", secs > 0 ? trained_examples / secs : 0.0)
          .add("bytes_sent_per_worker", sent_per_step).add("bytes_recv_per_worker", sent_per_step * (N - 1));
      log->write(o);
    }
    if (cfg.eval_interval_steps > 0 && (step + 1) % cfg.eval_interval_steps == 0 && step + 1 < cfg.max_steps)
      run_eval(step + 1);
    if (cfg.save_interval_steps > 0 && (step + 1) % cfg.save_interval_steps == 0 && step + 1 < cfg.max_steps)
      save(step + 1);
  }
  const double train_secs = std::chrono::duration<double>(Clock::now() - t_train).count();
  progress.finish();
  result.steps = cfg.max_steps;
  result.examples = trained_examples;
  result.examples_per_sec = train_secs > 0 ? trained_examples / train_secs : 0;
  run_eval(cfg.max_steps);
  save(cfg.max_steps);
  if (!cfg.train_dir.empty()) {
    std::vector<std::pair<std::string, const Tensor*>> out;
    for (const Param& p : params.params) out.emplace_back(p.name, &p.value);
    export_safetensors(cfg.train_dir + "/model.safetensors", out,
                       {{"net", cfg.net}, {"steps", std::to_string(cfg.max_steps)}});
  }
  std::map<std::string, int> count;
  for (const auto& p : plan) ++count[p];
  for (const auto& [spec, k] : count)
    result.codec_summary += (result.codec_summary.empty() ? "" : ", ") + spec + " on " + std::to_string(k) + " of " +
                            std::to_string(V) + " variables";
  result.wall_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  return result;
}

}  // namespace terngrad::train
