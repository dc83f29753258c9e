// Experiment configs (experiments/config/experiment_config.h, the
// paper_configs/ format): parse_experiment_config(), then what tg-experiment
// does with an accepted config without touching files: every grid point's
// config, its tg-train flags, its label and its text form.
//
// Input: protobuf text.
#include <string>

#include "experiment_config.h"
#include "fuzz_input.h"
#include "outcome.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace te = terngrad::experiments;
  using namespace terngrad::fuzz;
  const std::string text(reinterpret_cast<const char*>(data), size);
  te::ExperimentConfig cfg;
  if (!accepts([&] { cfg = te::parse_experiment_config(text, "fuzz.pbtxt"); })) return 0;
  (void)te::codec_label(cfg);
  (void)te::to_text(cfg);
  // The grid's worker counts: the config's own and the paper rows'.
  std::vector<int> workers = {cfg.cluster().num_workers()};
  for (const auto& r : cfg.paper()) workers.push_back(r.workers());
  const int64_t examples = cfg.dataset().epoch_examples() > 0 ? cfg.dataset().epoch_examples()
                                                               : cfg.dataset().synthetic_examples();
  for (int w : workers) {
    te::ExperimentConfig point;
    if (!accepts([&] { point = te::at_grid_point(cfg, w, cfg.seeds(0), 0, "fuzz.pbtxt"); })) continue;
    accepts([&] { (void)te::train_flags(point, examples); });
  }
  return 0;
}
