#include "result_json.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "terngrad/train/atomic_file.h"

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
                  r.examples_per_sec / std::max<double>(1, static_cast<double>(cfg.batch_size * cfg.num_nodes)),
                  r.wall_seconds);
    return buf;
  }
  std::snprintf(buf, sizeof buf,
                "%s, %d workers x batch %lld, %lld steps, grad_bits %d: test top-1 %.2f%% top-5 %.2f%%%s; "
                "%.0f bytes sent per worker per step (fp32 %.0f, %.1fx smaller); %.0f examples/s; %.0f s",
                cfg.net.c_str(), cfg.num_nodes, (long long)cfg.batch_size, (long long)r.steps, cfg.grad_bits,
                100 * r.top1, 100 * r.top5,
                r.ema_top1 >= 0 ? (" (EMA " + std::to_string(100 * r.ema_top1).substr(0, 5) + "%)").c_str() : "",
                r.bytes_sent_per_worker_step, r.fp32_bytes_per_worker_step,
                r.fp32_bytes_per_worker_step / r.bytes_sent_per_worker_step, r.examples_per_sec, r.wall_seconds);
  return buf;
}

void write_result_json(const std::string& path, const train::TrainConfig& cfg, const train::TrainResult& r) {
  char buf[4096];
  const int n = std::snprintf(buf, sizeof buf,
               "{\"net\": \"%s\", \"num_nodes\": %d, \"batch_size\": %lld, \"grad_bits\": %d, \"clip_factor\": %g, "
               "\"seed\": %llu, \"steps\": %lld, \"top1\": %.6f, \"top5\": %.6f, \"ema_top1\": %.6f, "
               "\"ema_top5\": %.6f, \"eval_examples\": %lld, \"final_loss\": %.6f, "
               "\"bytes_sent_per_worker_step\": %.1f, \"bytes_recv_per_worker_step\": %.1f, "
               "\"fp32_bytes_per_worker_step\": %.1f, \"wire_bytes_sent_per_worker_step\": %.1f, "
               "\"wire_bytes_recv_per_worker_step\": %.1f, \"stale_pushes\": %lld, "
               "\"examples_per_sec\": %.3f, \"wall_seconds\": %.3f, \"codecs\": \"%s\"}\n",
               cfg.net.c_str(), cfg.num_nodes, (long long)cfg.batch_size, cfg.grad_bits, cfg.clip_factor,
               (unsigned long long)cfg.seed, (long long)r.steps, r.top1, r.top5, r.ema_top1, r.ema_top5,
               (long long)r.eval_examples, r.final_loss, r.bytes_sent_per_worker_step, r.bytes_recv_per_worker_step,
               r.fp32_bytes_per_worker_step, r.wire_bytes_sent_per_worker_step, r.wire_bytes_recv_per_worker_step,
               (long long)r.stale_pushes, r.examples_per_sec, r.wall_seconds, r.codec_summary.c_str());
  if (n < 0 || n >= static_cast<int>(sizeof buf)) throw std::runtime_error(path + ": result too long to format");
  train::write_file_atomically(path, buf);
}

}  // namespace terngrad::experiments
