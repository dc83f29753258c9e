// Private to ps_load_bench: what the simulated replicas push. A real model's
// variables (train/model: their names and sizes), each with the codec the
// trainer would give it (the run's codec, or fp32 for variables below
// size_to_binarize and for the logits unless quantize_logits: session.cpp's
// codec_plan rule), placed and sharded over the ps tasks by the real
// placement code, and every replica's payload for every shard, encoded once.
//
// The gradient is synthetic (bench_common.h's model of one), the same for
// every replica; each replica encodes it with its own seed, as replicas
// draw independent randomness, so the payloads differ in their ternary
// draws while the shared scale is the same (the max of equal local scales).
// Payloads are reused every step: the ps validates and sums them as it would
// fresh ones, and the load test measures the ps, not the encoder.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/placement.h"

namespace terngrad::bench {

struct LoadModelOptions {
  std::string net = "alexnet";  // lenet | cifarnet | alexnet | googlenet | vgg_a
  int num_classes = 0;          // 0: ImageNet's 1000 for the 224x224 nets, 10 otherwise
  std::string codec = "terngrad:clip=2.5,share_scale=1";
  int64_t size_to_binarize = 9217;  // the paper's AlexNet setting: every bias stays fp32
  bool quantize_logits = false;
  int num_ps = 2;
  int replicas = 32;
  comm::PlacementOptions placement;  // the trainer's defaults: 256 KiB min and max shard
  uint64_t seed = 1;
};

struct LoadModel {
  comm::Layout layout;
  std::vector<std::unique_ptr<comm::GradientCodec>> codecs;   // [variable]
  std::vector<float> local_scales;                            // [variable] (0 where no scale is shared)
  bool wants_scales = false;                                  // some codec shares scales
  std::vector<std::vector<std::vector<uint8_t>>> payloads;    // [replica][shard]
  uint64_t parameters = 0;
  uint64_t payload_bytes_per_replica = 0;

  // Per ps: elements held, their fp32 bytes, one replica's payload bytes.
  struct PsShare {
    uint64_t shards = 0, elements = 0, fp32_bytes = 0, payload_bytes = 0;
  };
  std::vector<PsShare> per_ps;
};

// Throws std::invalid_argument for an unknown net or codec.
LoadModel build_load_model(const LoadModelOptions& o);

}  // namespace terngrad::bench
