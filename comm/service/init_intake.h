// The ps's Init intake: an Init call's layout and tensors, read and checked
// whole before the ps changes anything.
//
// Owns: the checks of what the chief sends at Init (replica counts, the
// variables, the shards and their codecs, the multi-round codecs'
// pre-rounds, an async run's values and slots, a resumed sync run's server
// states, each checked by its codec). Never: the caller's authority (the
// gRPC adaptor, ps_server.cpp, proves the caller is the chief first), the
// ps's lock or state, a push. gRPC-free: the chunks come from a callback
// and a refusal is a code and a message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chunks.h"
#include "parameter_server.pb.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/ps_server.h"

namespace terngrad::comm::detail {

// One shard the ps will serve: where it lies and its codec.
struct IntakeShard {
  ShardView view;
  std::unique_ptr<GradientCodec> codec;
};

// Everything an accepted Init carries, ready for the ps to take.
struct InitPlan {
  rpc::InitHeader header;
  std::vector<IntakeShard> shards;
  std::vector<std::vector<uint64_t>> presum_floats;  // [variable][pre-round]: floats summed
  // [shard]: the tensors that followed the header, by slot name. Async: ""
  // (the values) and the update rule's slots, each a whole shard of float32;
  // sync: at most the server state (kServerStateSlot) of a resumed run.
  std::vector<std::vector<std::string>> slot_names;
  std::vector<std::vector<Reassembly>> slot_bytes;
  std::vector<std::vector<uint8_t>> server_states;  // sync: [shard], empty = a fresh state
};

// Why an Init is refused: the status code the ps answers with, and the
// message (it starts with "Init: ").
struct InitRefusal {
  enum class Code { kInvalidArgument, kFailedPrecondition };
  Code code;
  std::string message;
};

// What the ps can do: an async run needs its update rule.
struct InitLimits {
  uint32_t max_replicas = 0;
  bool has_update_rule = false;
};

// Checks plan.header (already read and its caller authorized), then reads
// the tensors that follow (next(chunk) returns false at the stream's end)
// and checks them. Fills the rest of plan and returns nothing when the
// whole Init is acceptable; otherwise the first refusal, plan unusable.
std::optional<InitRefusal> take_init(InitPlan& plan, const std::function<bool(rpc::InitChunk&)>& next,
                                     const InitLimits& limits);

}  // namespace terngrad::comm::detail
