#include "result_json.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "terngrad/base/json.h"
#include "terngrad/base/atomic_file.h"

namespace terngrad::experiments {

std::string result_summary(const train::TrainConfig& cfg, const train::TrainResult& r) {
  char buf[512];
  if (cfg.comm_only) {  // a fixed gradient: no accuracy to report
    std::snprintf(buf, sizeof buf,
                  "%s communication only (compute %.0f ms), %d workers, %lld steps, grad_bits %d: %.0f bytes sent per "
                  "worker per step (fp32 %.0f, %.1fx smaller); %.3f steps/s; %.0f s",
                  cfg.net.c_str(), cfg.compute_ms, cfg.num_nodes, (long long)r.steps, cfg.grad_bits,
                  r.bytes_sent_per_worker_step, r.fp32_bytes_per_worker_step,
                  r.fp32_bytes_per_worker_step / r.bytes_sent_per_worker_step,
                  r.examples_per_sec / std::max<double>(1, static_cast<double>(train::examples_per_global_step(cfg))),
                  r.wall_seconds);
    return buf;
  }
  std::snprintf(buf, sizeof buf,
                "%s, %d workers x batch %lld, %lld steps, grad_bits %d: test top-1 %.2f%% top-5 %.2f%%%s; "
                "%.0f bytes sent per worker per step (fp32 %.0f, %.1fx smaller); %.0f examples/s (all workers); %.0f s",
                cfg.net.c_str(), cfg.num_nodes, (long long)cfg.batch_size, (long long)r.steps, cfg.grad_bits,
                100 * r.top1, 100 * r.top5,
                r.ema_top1 >= 0 ? (" (EMA " + std::to_string(100 * r.ema_top1).substr(0, 5) + "%)").c_str() : "",
                r.bytes_sent_per_worker_step, r.fp32_bytes_per_worker_step,
                r.fp32_bytes_per_worker_step / r.bytes_sent_per_worker_step, r.examples_per_sec, r.wall_seconds);
  return buf;
}

void write_result_json(const std::string& path, const train::TrainConfig& cfg, const train::TrainResult& r) {
  const json::Json result = {
      {"net", cfg.net},
      {"num_nodes", cfg.num_nodes},
      {"batch_size", cfg.batch_size},
      {"grad_bits", cfg.grad_bits},
      {"clip_factor", cfg.clip_factor},
      {"seed", cfg.seed},
      {"steps", r.steps},
      {"top1", r.top1},
      {"top5", r.top5},
      {"ema_top1", r.ema_top1},
      {"ema_top5", r.ema_top5},
      {"eval_examples", r.eval_examples},
      {"final_loss", r.final_loss},
      {"bytes_sent_per_worker_step", r.bytes_sent_per_worker_step},
      {"bytes_recv_per_worker_step", r.bytes_recv_per_worker_step},
      {"fp32_bytes_per_worker_step", r.fp32_bytes_per_worker_step},
      {"wire_bytes_sent_per_worker_step", r.wire_bytes_sent_per_worker_step},
      {"wire_bytes_recv_per_worker_step", r.wire_bytes_recv_per_worker_step},
      {"stale_pushes", r.stale_pushes},
      {"examples", r.examples},
      {"train_seconds", r.train_seconds},
      {"examples_per_sec", r.examples_per_sec},
      {"wall_seconds", r.wall_seconds},
      {"codecs", r.codec_summary},
  };
  json::Json out = result;
  if (!r.codec_choice.empty()) out["codec_choice"] = json::parse_strict(r.codec_choice);  // --codec=auto
  if (!r.codec_changes.empty()) {
    json::Json changes = json::Json::array();
    for (const std::string& c : r.codec_changes) changes.push_back(json::parse_strict(c));
    out["codec_changes"] = changes;
  }
  base::write_file_atomically(path, json::dump_pretty(out) + "\n");
}

}  // namespace terngrad::experiments
