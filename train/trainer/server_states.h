// Private: a sync cluster's server states (server_ef() residuals) between
// the ps tasks, which hold them, and the chief's checkpoints, which keep
// them. In-process runs keep them in the session directly (trainer.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "session.h"
#include "terngrad/comm/worker_client.h"

namespace terngrad::train::detail {

// Whether any variable's codec keeps a server state (only then is there
// anything to fetch or send).
bool keeps_server_states(const TrainingSession& s);

// Chief: the states as the sum of `summed_step` left them, fetched from
// every ps into the session (for the checkpoint save() writes next).
void fetch_server_states(TrainingSession& s, comm::WorkerClient& client, int64_t summed_step);

// Chief, resuming: [layout shard] the session's restored states, for the
// ps tasks' Init. A stateful shard without one starts fresh, with a warning.
std::vector<std::vector<uint8_t>> server_states_for_init(TrainingSession& s, const comm::Layout& layout,
                                                         int64_t restored_step);

}  // namespace terngrad::train::detail
