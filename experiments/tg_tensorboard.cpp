// tg-tensorboard RUN_DIR...: writes a TensorBoard event file into each run
// directory from its metrics.jsonl / eval.jsonl, for `tensorboard --logdir`.
#include <cstdio>
#include <exception>

#include "tensorboard_events.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s RUN_DIR...\n", argv[0]);
    return 2;
  }
  int failed = 0;
  for (int i = 1; i < argc; ++i) {
    try {
      const int n = terngrad::experiments::write_events_from_metrics(argv[i]);
      std::printf("%s: %d scalars\n", argv[i], n);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tg-tensorboard: %s\n", e.what());
      ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}
