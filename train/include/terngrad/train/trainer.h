// The single-process trainer with N virtual workers (parameter localization).
//
// Every step, each virtual worker takes its own batch from its own disjoint
// shard, computes its gradient (weight decay included, as TernGrad
// ternarizes it), and encodes it with the run's gradient codec into the exact
// payload it would send. The payloads are decoded, summed in a fixed worker
// order and averaged; the update is then the same on every worker, so one
// copy of the weights stands for all of them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "terngrad/train/train_config.h"

namespace terngrad::train {

struct TrainResult {
  int64_t steps = 0;
  // Training examples the run processed: all its workers' (in-process), the
  // whole cluster's (distributed: global steps x examples_per_global_step).
  int64_t examples = 0;
  double final_loss = 0;          // last step's mean cross-entropy over workers
  double top1 = 0, top5 = 0;      // test accuracy of the raw weights, in [0, 1]
  double ema_top1 = -1, ema_top5 = -1;  // with the moving average (-1: no EMA)
  int64_t eval_examples = 0;
  double bytes_sent_per_worker_step = 0;  // encoded payload bytes one worker pushes per step
  double bytes_recv_per_worker_step = 0;  // payload bytes one worker receives (the others' payloads)
  double fp32_bytes_per_worker_step = 0;  // the same gradients as raw float32
  double wire_bytes_sent_per_worker_step = 0;  // distributed: serialized request bytes per step
  double wire_bytes_recv_per_worker_step = 0;  // distributed: serialized reply bytes per step
  int64_t stale_pushes = 0;                    // distributed sync: pushes dropped as stale (all ps)
  double examples_per_sec = 0;            // examples / train_seconds: the whole run's, never one replica's
  double train_seconds = 0;               // from the first step to the last (setup and final evaluation excluded)
  // Streamed datasets (imagenet): images the loaders delivered, the rate
  // their threads could deliver (images per busy thread-second x threads),
  // the seconds steps waited for input (about 0 = not input-bound) and
  // examples skipped as corrupt (--skip_corrupt_records).
  int64_t input_images = 0;
  double input_images_per_sec = 0;
  double input_wait_seconds = 0;
  int64_t skipped_examples = 0;
  double wall_seconds = 0;
  std::string codec_summary;              // e.g. "terngrad:clip=2.5 on 6 of 8 variables, fp32 on 2"
  std::string codec_choice;               // --codec=auto: the decision, one line of JSON; "" otherwise
  std::vector<std::string> codec_changes;  // --codec=auto: each new plan chosen during the run (its "step"), JSON
};

// Examples one global step processes over the whole run: every worker's
// batch in a sync step (backups included: they compute it too), one
// replica's batch in an async step (each push is a global step).
int64_t examples_per_global_step(const TrainConfig& cfg);

// Runs (or resumes, when cfg.train_dir holds a checkpoint) a training run.
// Throws std::runtime_error / std::invalid_argument with a clear message on
// bad configuration or data.
TrainResult run_training(const TrainConfig& cfg);

}  // namespace terngrad::train
