// What a ps hands the chief at Checkpoint: the tensors of its shards, cut
// out of the run's state while the ps's lock is held, then streamed without it.
//
// Owns: which tensors a checkpoint of this ps holds (a sync run: the server
// states the step's sums left, for codecs that keep one; an async run: each
// shard's values and the update rule's slots) and their chunking onto the
// stream. Never: who may ask (the gRPC adaptor, ps_server.cpp, lets only the
// chief's registered process), the lock, a push or a sum.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "async_updates.h"
#include "sync_steps.h"
#include "terngrad/comm/ps_server.h"

namespace terngrad::comm::detail {

struct CheckpointTensor {
  uint32_t shard;
  std::string slot;  // "" for an async shard's values, kServerStateSlot for a server state
  std::vector<uint8_t> bytes;
};

// A sync run: the non-empty server states as the sum of `step` left them;
// nullopt when the ps no longer (or never) kept that step's states.
std::optional<std::vector<CheckpointTensor>> sync_checkpoint(const SyncSteps& steps, int64_t step, size_t shards);

// An async run: every shard's values, then the update rule's slots.
std::vector<CheckpointTensor> async_checkpoint(const AsyncUpdates& updates, UpdateHandler& handler, size_t shards);

// Writes the tensors in chunks (write(shard, slot, offset, total, piece));
// false as soon as a write fails (the client went away).
bool stream_checkpoint(const std::vector<CheckpointTensor>& tensors,
                       const std::function<bool(uint32_t shard, const std::string& slot, uint64_t offset,
                                                uint64_t total, std::span<const uint8_t> piece)>& write);

}  // namespace terngrad::comm::detail
