#include "terngrad/comm/placement.h"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace terngrad::comm {

PlacementStrategy parse_placement_strategy(const std::string& name) {
  if (name == "round_robin") return PlacementStrategy::kRoundRobin;
  if (name == "by_size") return PlacementStrategy::kBySize;
  throw std::invalid_argument("placement strategy \"" + name + "\": expected round_robin or by_size");
}

Layout place_variables(std::vector<VariableSpec> variables, int num_ps, const PlacementOptions& options) {
  if (num_ps < 1) throw std::invalid_argument("placement needs at least one ps task, got " + std::to_string(num_ps));
  if (options.min_shard_bytes == 0) throw std::invalid_argument("placement: min_shard_bytes must be > 0");
  if (options.max_shards < 0) throw std::invalid_argument("placement: max_shards must be >= 0");
  const uint64_t max_shards = options.max_shards > 0 ? options.max_shards : static_cast<uint64_t>(num_ps);
  Layout l;
  l.num_ps = num_ps;
  l.variables = std::move(variables);
  l.shards_of.resize(l.variables.size());
  l.shards_on.resize(num_ps);
  std::vector<uint64_t> load(num_ps, 0);  // bytes per ps
  int next_ps = 0;
  for (size_t v = 0; v < l.variables.size(); ++v) {
    const uint64_t n = l.variables[v].size;
    const uint64_t bytes = 4 * n;
    // No shard below the minimum, none smaller than one alignment unit.
    uint64_t k = std::min(max_shards, std::max<uint64_t>(1, bytes / options.min_shard_bytes));
    if (options.max_shard_bytes > 0) k = std::max(k, (bytes + options.max_shard_bytes - 1) / options.max_shard_bytes);
    k = std::min(k, std::max<uint64_t>(1, n / kShardAlignment));
    if (l.variables[v].whole) k = 1;
    const uint64_t units = (n + kShardAlignment - 1) / kShardAlignment;
    for (uint64_t i = 0; i < k; ++i) {
      // Split the alignment units as evenly as possible; the last shard ends at n.
      const uint64_t b = std::min(n, units * i / k * kShardAlignment);
      const uint64_t e = i + 1 == k ? n : std::min(n, units * (i + 1) / k * kShardAlignment);
      int ps;
      if (options.strategy == PlacementStrategy::kRoundRobin) {
        ps = next_ps;
        next_ps = (next_ps + 1) % num_ps;
      } else {  // least-loaded ps; ties to the lowest index
        ps = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      }
      load[ps] += 4 * (e - b);
      l.shards_of[v].push_back(l.shards.size());
      l.shards_on[ps].push_back(l.shards.size());
      l.shards.push_back({static_cast<uint32_t>(v), b, e - b, ps});
    }
  }
  return l;
}

uint64_t layout_fingerprint(const Layout& l, bool sync, int total_replicas, int replicas_to_aggregate) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
    h ^= 0xff;  // field separator
    h *= 0x100000001b3ull;
  };
  mix(sync ? "sync" : "async");
  mix(std::to_string(total_replicas));
  mix(std::to_string(replicas_to_aggregate));
  mix(std::to_string(l.num_ps));
  for (const auto& v : l.variables) {
    mix(v.name);
    mix(std::to_string(v.size));
    mix(v.codec);
  }
  for (const auto& s : l.shards) mix(std::to_string(s.variable) + "/" + std::to_string(s.begin) + "/" +
                                     std::to_string(s.count) + "/" + std::to_string(s.ps));
  return h;
}

std::string describe_layout(const Layout& l) {
  std::string out;
  for (int p = 0; p < l.num_ps; ++p) {
    uint64_t elements = 0;
    for (size_t s : l.shards_on[p]) elements += l.shards[s].count;
    char buf[128];
    std::snprintf(buf, sizeof buf, "ps %d: %zu shards, %llu elements (%.1f MB fp32)\n", p, l.shards_on[p].size(),
                  static_cast<unsigned long long>(elements), 4e-6 * static_cast<double>(elements));
    out += buf;
  }
  return out;
}

}  // namespace terngrad::comm
