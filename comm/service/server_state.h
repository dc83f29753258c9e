// Private: how a shard's server state (a codec's aggregate state, e.g. the
// server_ef() residual) travels between the chief and a sync ps: as
// TensorChunks of this slot, in Init (a resumed run's states) and in
// Checkpoint (the states after a step's sum, for the chief's checkpoint).
#pragma once

#include <cstdint>

namespace terngrad::comm::detail {

inline constexpr char kServerStateSlot[] = "server_state";

// No codec's server state of a shard is larger: 8 bytes per element and a
// header. Chunks claiming more are refused before anything is allocated.
inline uint64_t max_server_state_bytes(uint64_t elements) { return 64 + 8 * elements; }

}  // namespace terngrad::comm::detail
