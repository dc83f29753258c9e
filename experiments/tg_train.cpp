// tg-train: one training run of the virtual-worker trainer (train/trainer.h).
//
//   tg-train --net=lenet --num_nodes=4 --grad_bits=2 --max_steps=2000 --train_dir=/tmp/run
//
// Prints progress to stderr and a summary to stdout; with --train_dir it also
// writes metrics.jsonl, checkpoints (resumed automatically), model.safetensors
// and result.json. Exit status: 0 ok, 1 runtime error (a dead or refusing
// peer included, named in the message), 2 bad flags or cluster.
//
// Distributed: the same flags plus a role (--job_name, --task_id, --ps_hosts,
// --worker_hosts, ...) or TF_CONFIG in the environment; see
// train/distributed.h and tg-cluster, which starts a whole cluster.
#include <absl/synchronization/mutex.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "result_json.h"
#include "terngrad/base/timeline.h"
#include "terngrad/comm/grpc_reads.h"
#include "terngrad/train/distributed.h"
#include "terngrad/train/trainer.h"

namespace {

// --retain_freed_memory (TrainConfig): glibc returns a freed block of 128 KiB
// or more to the kernel (munmap, or a trim of the heap's top), so a process
// that allocates a message buffer of a few MiB every step pays a page fault
// per 4 KiB to touch it again (an async LeNet ps spent a third of its CPU
// so). Fixed thresholds (which also stop glibc's own adjusting) keep such
// blocks for reuse. Blocks of 32 MiB or more (glibc's largest threshold) are
// still mapped and unmapped each time.
void retain_freed_memory() {
#ifdef __GLIBC__
  if (mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1 || mallopt(M_TRIM_THRESHOLD, 256 << 20) != 1)
    std::fprintf(stderr, "tg-train: --retain_freed_memory: mallopt refused the thresholds; running without\n");
#endif
}

// Debian builds Abseil without NDEBUG, so every absl::Mutex that gRPC takes
// also records lock order for Abseil's deadlock detector (GraphCycles): 1.4%
// of a LeNet ps's CPU went there. It is a debugging aid for Abseil's own
// users; this program's locks are std::mutex, which it never sees.
void skip_abseil_deadlock_detection() {
  if (const char* keep = std::getenv("TG_ABSL_DEADLOCK_DETECTION"); keep != nullptr && std::string(keep) == "1") return;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace

int main(int argc, char** argv) {
  namespace tt = terngrad::train;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      std::printf("%s", tt::train_flags_help().c_str());
      return 0;
    }
  }
  tt::TrainConfig cfg;
  std::optional<terngrad::comm::ClusterSpec> cluster;
  try {
    tt::parse_train_flags(args, cfg);
    tt::validate(cfg);
    cluster = tt::cluster_of(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-train: %s\nusage: tg-train [--flag=value ...] (tg-train --help lists the flags)\n", e.what());
    return 2;
  }
  if (cfg.retain_freed_memory) retain_freed_memory();
  skip_abseil_deadlock_detection();
  // Before any gRPC call; not over loopback, where it costs (terngrad/comm/grpc_reads.h).
  if (cluster && terngrad::comm::crosses_a_network(*cluster)) terngrad::comm::read_whole_grpc_frames();
  // --trace_file: the timeline is written however the run ends.
  struct TraceAtExit {
    std::string path;
    ~TraceAtExit() {
      if (path.empty()) return;
      try {
        terngrad::timeline::write(path);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tg-train: %s\n", e.what());
      }
    }
  } trace{cfg.trace_file};
  if (!cfg.trace_file.empty()) {
    terngrad::timeline::start(cluster ? cluster->task_name() : "tg-train");
    terngrad::timeline::name_thread("main");
  }
  if (cluster) {
    const std::string who = cluster->task_name();
    try {
      const tt::TrainResult r = tt::run_task(cfg, *cluster);
      if (cluster->is_chief()) {
        tt::TrainConfig shown = cfg;
        shown.num_nodes = cluster->num_replicas();
        std::printf("%s\n", terngrad::experiments::result_summary(shown, r).c_str());
        if (!cfg.train_dir.empty())
          terngrad::experiments::write_result_json(cfg.train_dir + "/result.json", shown, r);
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tg-train (%s): %s\n", who.c_str(), e.what());
      return 1;
    }
    return 0;
  }
  try {
    const tt::TrainResult r = tt::run_training(cfg);
    std::printf("%s\n", terngrad::experiments::result_summary(cfg, r).c_str());
    if (!cfg.train_dir.empty()) terngrad::experiments::write_result_json(cfg.train_dir + "/result.json", cfg, r);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-train: %s\n", e.what());
    return 1;
  }
  return 0;
}
