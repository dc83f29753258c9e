// tg-train: one training run of the virtual-worker trainer (train/trainer.h).
//
//   tg-train --net=lenet --num_nodes=4 --grad_bits=2 --max_steps=2000 --train_dir=/tmp/run
//
// Prints progress to stderr and a summary to stdout; with --train_dir it also
// writes metrics.jsonl, checkpoints (resumed automatically), model.safetensors
// and result.json. Exit status: 0 ok, 1 runtime error, 2 bad flags.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "result_json.h"
#include "terngrad/train/trainer.h"

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
  try {
    tt::parse_train_flags(args, cfg);
    tt::validate(cfg);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-train: %s\n", e.what());
    return 2;
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
