// Where the variables live: whole small variables placed on the ps tasks
// round-robin or by size, large variables split into shards of at least a
// minimum size (as TensorFlow's MinSizePartitioner with
// replica_device_setter). Placement is a pure function of the variable
// sizes and the options, so every process computes the same layout, and the
// chief's fingerprint of it lets the ps refuse a worker started differently.
//
// Sharding never changes the training arithmetic: a codec encodes each shard
// as that slice of the whole variable (GradientCodec::encode_slices).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace terngrad::comm {

struct VariableSpec {
  std::string name;
  uint64_t size = 0;  // elements (float32)
  std::string codec;  // codec spec
  // One shard whatever its size: its codec's payload is not an element range
  // (GradientCodec::slices_whole_variable_only(), PowerSGD's factors).
  bool whole = false;
};

struct ShardSpec {
  uint32_t variable = 0;
  uint64_t begin = 0;  // first element; a multiple of kShardAlignment
  uint64_t count = 0;
  int ps = 0;          // ps task holding it
};

// Shard edges fall on multiples of this many elements (256 bytes).
inline constexpr uint64_t kShardAlignment = 64;

enum class PlacementStrategy { kRoundRobin, kBySize };

struct PlacementOptions {
  // A variable of B bytes splits into min(max_shards, B / min_shard_bytes)
  // shards (at least 1). TensorFlow's default min slice is 256 KiB.
  uint64_t min_shard_bytes = 256 * 1024;
  int max_shards = 0;  // 0 = the number of ps tasks
  // And into at least ceil(B / max_shard_bytes) shards (0 = no cap), past
  // max_shards: small shards travel and are summed one by one, so a sync
  // step's sums flow back while later shards are still arriving, and each
  // payload fits one message (no reassembly copy on the ps).
  uint64_t max_shard_bytes = 0;
  PlacementStrategy strategy = PlacementStrategy::kBySize;
};

// "round_robin" | "by_size"; std::invalid_argument otherwise.
PlacementStrategy parse_placement_strategy(const std::string& name);

struct Layout {
  std::vector<VariableSpec> variables;
  std::vector<ShardSpec> shards;  // every variable's shards, variable order, then element order
  int num_ps = 0;
  // Shards of variable v: indices into shards.
  std::vector<std::vector<size_t>> shards_of;
  // Shards held by ps p, in the order that ps numbers them.
  std::vector<std::vector<size_t>> shards_on;
};

// Places and shards the variables over num_ps tasks. Throws
// std::invalid_argument for num_ps < 1 or bad options.
Layout place_variables(std::vector<VariableSpec> variables, int num_ps, const PlacementOptions& options = {});

// FNV-1a of the layout and the run settings every process must agree on.
uint64_t layout_fingerprint(const Layout& layout, bool sync, int total_replicas, int replicas_to_aggregate);

// One line per ps: shards, elements and bytes (for logs).
std::string describe_layout(const Layout& layout);

}  // namespace terngrad::comm
