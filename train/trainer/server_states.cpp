// A sync cluster's server states between the ps tasks and the chief's
// checkpoints (server_states.h).
#include "server_states.h"

#include <cstdio>

namespace terngrad::train::detail {

bool keeps_server_states(const TrainingSession& s) {
  for (size_t v = 0; v < s.num_variables(); ++v)
    if (s.codec(0, v).aggregate_keeps_state()) return true;
  return false;
}

void fetch_server_states(TrainingSession& s, comm::WorkerClient& client, int64_t summed_step) {
  const comm::Layout& layout = client.layout();
  std::vector<std::vector<uint8_t>> states = client.fetch_server_states(summed_step);
  s.server_states().clear();
  for (size_t i = 0; i < layout.shards.size(); ++i) {
    const comm::ShardSpec& sh = layout.shards[i];
    if (!states[i].empty()) s.server_state(sh.variable, sh.begin, sh.count) = std::move(states[i]);
  }
}

std::vector<std::vector<uint8_t>> server_states_for_init(TrainingSession& s, const comm::Layout& layout,
                                                         int64_t restored_step) {
  std::vector<std::vector<uint8_t>> out(layout.shards.size());
  for (size_t i = 0; i < layout.shards.size(); ++i) {
    const comm::ShardSpec& sh = layout.shards[i];
    if (!s.codec(0, sh.variable).aggregate_keeps_state()) continue;
    auto it = s.server_states().find(TrainingSession::server_state_name(sh.variable, sh.begin, sh.count));
    if (it != s.server_states().end()) {
      out[i] = it->second;
    } else if (restored_step > 0 && !s.server_states().empty()) {  // none at all: a new plan's fresh start
      std::fprintf(stderr,
                   "warning: %s [%llu, +%llu): the checkpoint of step %lld holds no server state for this shard "
                   "(another placement?); its server residual starts at zero\n",
                   layout.variables[sh.variable].name.c_str(), static_cast<unsigned long long>(sh.begin),
                   static_cast<unsigned long long>(sh.count), static_cast<long long>(restored_step));
    }
  }
  return out;
}

}  // namespace terngrad::train::detail
