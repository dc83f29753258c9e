// The ps's Push intake (push_intake.h): each step of the check is one
// function, in the order the push's parts arrive.
#include "push_intake.h"

#include <exception>

#include "terngrad/comm/step_times.h"

namespace terngrad::comm::detail {

namespace {

// The shards a push carries, and slot[shard] = its index in ids (-1: not carried).
std::optional<std::string> carried_shards(const rpc::PushHeader& h, size_t shard_count, bool sync,
                                          const std::string& from, std::vector<uint32_t>& ids, std::vector<int>& slot) {
  slot.assign(shard_count, -1);
  if (h.shards_size() == 0) {
    for (uint32_t s = 0; s < shard_count; ++s) ids.push_back(s);
  } else {
    if (!sync) return from + ": an async push carries every shard, not a bucket";
    for (uint32_t s : h.shards()) {
      if (s >= shard_count)
        return from + ": bucket names shard " + std::to_string(s) + " of this ps's " + std::to_string(shard_count);
      if (slot[s] >= 0) return from + ": bucket names shard " + std::to_string(s) + " twice";
      slot[s] = static_cast<int>(ids.size());
      ids.push_back(s);
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) slot[ids[i]] = static_cast<int>(i);
  return std::nullopt;
}

std::optional<std::string> check_step_times(const rpc::PushHeader& h, const std::string& from) {
  if (h.step_ms_size() != 0 && h.step_ms_size() != static_cast<int>(kStepTimeFields))
    return from + ": " + std::to_string(h.step_ms_size()) + " step times, expected 0 or " + std::to_string(kStepTimeFields);
  for (float t : h.step_ms())
    if (!(t >= 0 && t <= 1e7)) return from + ": step time " + std::to_string(t) + " ms is not in [0, 1e7]";
  return std::nullopt;
}

// One payload's length: exact for a fixed-size codec; for a variable-size
// one, any length it can write (1 to the capacity: take() refused more),
// all of it received.
std::optional<std::string> check_length(const StringReassembly& part, const IntakeShard& shard, uint32_t s,
                                        uint64_t expect, const std::string& from) {
  if (shard.codec->variable_size()) {
    const uint64_t got = part.filled();
    if (!part.complete() || got == 0 || got > expect)
      return from + ": shard " + std::to_string(s) + " has " + std::to_string(got) +
             (part.started() && !part.complete()
                  ? " of the " + std::to_string(part.bytes().size()) + " announced"
                  : std::string()) +
             " payload bytes; its variable-size codec writes 1 to " + std::to_string(expect);
  } else if (!part.complete() || part.bytes().size() != expect) {
    return from + ": shard " + std::to_string(s) + " has " + std::to_string(part.filled()) + " of the " +
           std::to_string(expect) + " payload bytes its codec writes";
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> take_push(const rpc::PushHeader& h, const std::vector<IntakeShard>& shards, bool sync,
                                     const std::string& who, const std::function<bool(rpc::PushChunk&)>& next,
                                     PushIntake& out) {
  const std::string from = "Push from " + who;
  // Payload bytes per shard: exact for fixed-size codecs, the most a
  // variable-size codec writes (its header says how long; the codec's
  // check below holds it to the bytes received).
  std::vector<uint64_t> expect;
  for (const IntakeShard& s : shards) expect.push_back(s.codec->payload_bytes(s.view.count));
  std::vector<int> slot;
  if (auto e = carried_shards(h, shards.size(), sync, from, out.ids, slot)) return e;
  if (auto e = check_step_times(h, from)) return e;
  std::vector<StringReassembly> parts(out.ids.size());
  rpc::PushChunk chunk;
  while (next(chunk)) {
    if (!chunk.has_payload()) return from + ": a second header";
    rpc::PayloadChunk& p = *chunk.mutable_payload();
    if (p.shard() >= shards.size() || slot[p.shard()] < 0)
      return from + ": shard " + std::to_string(p.shard()) +
             (p.shard() >= shards.size() ? " is unknown" : " is not in its bucket");
    // The chunk's bytes are taken over, not copied (chunks.h).
    const std::string err = parts[slot[p.shard()]].take(p.offset(), p.total_bytes(), std::move(*p.mutable_data()), expect[p.shard()]);
    if (!err.empty()) return from + ", shard " + std::to_string(p.shard()) + ": " + err;
  }
  // The whole request is checked before anything of it is kept.
  std::vector<std::vector<uint8_t>> kept(out.ids.size());
  for (size_t i = 0; i < out.ids.size(); ++i) {
    const uint32_t s = out.ids[i];
    if (auto e = check_length(parts[i], shards[s], s, expect[s], from)) return e;
    out.received += parts[i].bytes().size();
    try {
      kept[i] = shards[s].codec->validate_for_server(as_bytes(parts[i].bytes()), shards[s].view.count);
    } catch (const std::exception& e) {
      return from + ": shard " + std::to_string(s) + " (" + shards[s].view.name + "): malformed payload: " + e.what();
    }
  }
  // What the codecs keep in place of a payload (an entropy-coded push as its
  // 2-bit codes, decoded once above): after every shard has passed.
  for (size_t i = 0; i < out.ids.size(); ++i) {
    if (!kept[i].empty()) parts[i].bytes().assign(kept[i].begin(), kept[i].end());
    out.payloads.push_back(std::move(parts[i].bytes()));
  }
  return std::nullopt;
}

}  // namespace terngrad::comm::detail
