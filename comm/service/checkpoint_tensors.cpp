// What a ps hands the chief at Checkpoint (checkpoint_tensors.h).
#include "checkpoint_tensors.h"

#include "chunks.h"
#include "server_state.h"

namespace terngrad::comm::detail {

std::optional<std::vector<CheckpointTensor>> sync_checkpoint(const SyncSteps& steps, int64_t step, size_t shards) {
  const std::vector<std::vector<uint8_t>>* states = steps.server_states_after(step);
  if (states == nullptr) return std::nullopt;
  std::vector<CheckpointTensor> out;
  for (size_t s = 0; s < shards; ++s)
    if (!(*states)[s].empty()) out.push_back({static_cast<uint32_t>(s), kServerStateSlot, (*states)[s]});
  return out;
}

std::vector<CheckpointTensor> async_checkpoint(const AsyncUpdates& updates, UpdateHandler& handler, size_t shards) {
  auto copy = [](std::span<const float> f) {
    const auto* b = reinterpret_cast<const uint8_t*>(f.data());
    return std::vector<uint8_t>(b, b + f.size_bytes());
  };
  std::vector<CheckpointTensor> out;
  for (size_t s = 0; s < shards; ++s) {
    out.push_back({static_cast<uint32_t>(s), "", copy(updates.values(s))});
    for (auto& [name, span] : handler.slots(s)) out.push_back({static_cast<uint32_t>(s), name, copy(span)});
  }
  return out;
}

bool stream_checkpoint(const std::vector<CheckpointTensor>& tensors,
                       const std::function<bool(uint32_t, const std::string&, uint64_t, uint64_t,
                                                std::span<const uint8_t>)>& write) {
  for (const CheckpointTensor& t : tensors) {
    const bool ok = for_each_chunk(std::span<const uint8_t>(t.bytes), [&](uint64_t off, std::span<const uint8_t> piece) {
      return write(t.shard, t.slot, off, t.bytes.size(), piece);
    });
    if (!ok) return false;
  }
  return true;
}

}  // namespace terngrad::comm::detail
