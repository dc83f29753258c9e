// tg-tensorboard RUN_DIR...: writes a TensorBoard event file into each run
// directory from its metrics.jsonl / eval.jsonl, for `tensorboard --logdir`.
#include <cstdio>
#include <exception>
#include <string_view>

#include "tensorboard_events.h"

namespace {
const char* kUsage = "usage: tg-tensorboard RUN_DIR...\n";
const char* kHelp =
    "Writes a TensorBoard event file into each run directory from its metrics.jsonl and eval.jsonl\n"
    "(then: tensorboard --logdir RUN_DIR). Exit status: 0 all written, 1 a run failed, 2 usage error.\n";
}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s%s", kUsage, kHelp);
      return 0;
    }
    // No options exist: a leading '-' is a mistake, not a directory to write into.
    if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "tg-tensorboard: unknown option %s\n%s", argv[i], kUsage);
      return 2;
    }
  }
  if (argc < 2) {
    std::fprintf(stderr, "tg-tensorboard: no run directory given\n%s", kUsage);
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
