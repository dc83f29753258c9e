// The ps's Push intake: one push's shards and chunks, assembled and checked
// whole before the ps keeps any of it.
//
// Owns: which shards a push carries (every shard of the ps, or one bucket's
// in a sync run), the range of its step-time report, the assembly of its
// chunks (their bytes taken over, not copied), each payload's length against
// its codec, and the codec's check of the payload on receipt together with
// the form the codec keeps of it (GradientCodec::validate_for_server).
// Never: who the caller is (the gRPC adaptor, ps_server.cpp, authorizes it
// first), the step's state or sums, the ps's lock: the shards and their
// codecs are fixed once Init has run. gRPC-free: the chunks come from a
// callback, and a refusal is its message (the ps answers INVALID_ARGUMENT).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "init_intake.h"
#include "parameter_server.pb.h"

namespace terngrad::comm::detail {

// An accepted push: the ps-local shards it carries and, for each, the bytes
// the ps keeps (the payload, or its codec's kept form).
struct PushIntake {
  std::vector<uint32_t> ids;
  std::vector<std::string> payloads;  // [i]: shard ids[i]'s
  uint64_t received = 0;              // payload bytes that arrived
};

// Checks header h (its caller already authorized) against the ps's shards,
// then reads the payload chunks (next(chunk) returns false at the stream's
// end) and checks every payload. who names the push in messages ("worker 1
// step 12"). Fills out and returns nothing when the push is acceptable,
// otherwise the first refusal's message ("Push from <who>...").
std::optional<std::string> take_push(const rpc::PushHeader& h, const std::vector<IntakeShard>& shards, bool sync,
                                     const std::string& who, const std::function<bool(rpc::PushChunk&)>& next,
                                     PushIntake& out);

}  // namespace terngrad::comm::detail
