// Reading, checking and applying an ExperimentConfig (experiment_config.proto).
//
// A config turns into the flags of one tg-train run per grid point (workers,
// seed), so the in-process trainer, tg-train and tg-cluster all see the same
// TrainConfig and its checks stay in one place (train_config.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "experiment_config.pb.h"

namespace terngrad::experiments {

// Parses protobuf text. Syntax errors and unknown fields throw
// std::invalid_argument "source:line:column: message"; invalid values throw
// "source: field.path: message (got value)".
ExperimentConfig parse_experiment_config(const std::string& text, const std::string& source);
ExperimentConfig load_experiment_config(const std::string& path);

// Value checks that do not depend on the grid point (names the field).
void validate_experiment(const ExperimentConfig& cfg, const std::string& source);

// The config of one grid point: cluster.num_workers = workers, seeds = {seed},
// and, when steps_override > 0, training.steps = steps_override (replacing
// epochs). Throws when the total batch does not divide among the workers.
ExperimentConfig at_grid_point(const ExperimentConfig& cfg, int workers, uint64_t seed, int64_t steps_override,
                               const std::string& source);

// The grid point's config at another link rate (tg-experiment --link_rates):
// cluster.link_rate = rate, validated (LOCAL_CLUSTER only).
ExperimentConfig at_link_rate(const ExperimentConfig& point, const std::string& rate, const std::string& source);

// Examples in the training set the config names (reads the dataset's headers
// only for IDX; CIFAR-10 batches from their sizes; synthetic from the config).
int64_t training_set_size(const ExperimentConfig& cfg);

// Training steps of a grid-point config (epochs converted at the total batch).
int64_t training_steps(const ExperimentConfig& point, int64_t train_examples);

// tg-train flags for a grid-point config (without --train_dir and the
// cluster role, which the driver adds).
std::vector<std::string> train_flags(const ExperimentConfig& point, int64_t train_examples);

// The codec's short name for tables and directory names: fp32, terngrad, fp16...
std::string codec_label(const ExperimentConfig& cfg);

std::string to_text(const ExperimentConfig& cfg);

}  // namespace terngrad::experiments
