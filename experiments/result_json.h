// Turning a finished run into a one-line summary and a result.json file.
#pragma once

#include <string>

#include "terngrad/train/train_config.h"
#include "terngrad/train/trainer.h"

namespace terngrad::experiments {

std::string result_summary(const train::TrainConfig& cfg, const train::TrainResult& r);

// Written atomically (temp file + rename).
void write_result_json(const std::string& path, const train::TrainConfig& cfg, const train::TrainResult& r);

}  // namespace terngrad::experiments
