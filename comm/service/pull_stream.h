// Private: how the ps writes a Pull's replies. Each chunk of a step's sum (or
// of an async run's values) goes out without being copied (wire_chunks.h): a
// slice that points into the ps's buffer and keeps it alive (a shared owner)
// until gRPC has written it. Through the generated ServerWriter<PullChunk>,
// every replica's stream copied every byte twice, into the message
// (set_data) and then into gRPC's buffer (serialization): at 4 replicas,
// 40 MB of copies per LeNet step. Replicas read PullChunk messages as before.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <span>

#include "parameter_server.grpc.pb.h"

namespace terngrad::comm::detail {

enum class ShardBytes {
  kSum,     // PullChunk.payload (PayloadChunk): a sync step's aggregate payload
  kValues,  // PullChunk.values (TensorChunk): an async run's float32 values
};

// One chunk of a shard as a serialized PullChunk whose data is `piece`
// itself (not copied); owner is kept until gRPC lets go of the bytes.
// piece: at most kChunkBytes (chunks.h), within a buffer of total bytes at
// offset.
grpc::ByteBuffer frame_shard_chunk(ShardBytes kind, uint32_t shard, uint64_t offset, uint64_t total,
                                   std::span<const uint8_t> piece, const std::shared_ptr<const void>& owner);

// The ps's end of one Pull call, as the split-streaming handler gives it:
// the request is read once, then any number of replies written.
using PullStreamer = grpc::ServerSplitStreamer<rpc::PullRequest, grpc::ByteBuffer>;

class PullStream {
 public:
  explicit PullStream(PullStreamer* streamer) : streamer_(streamer) {}
  // A message as protobuf serializes it (headers: small).
  bool write(const rpc::PullChunk& message);
  // A whole shard, chunk by chunk (for_each_chunk), each framed by
  // frame_shard_chunk. False once the caller went away.
  bool write_shard(ShardBytes kind, uint32_t shard, std::span<const uint8_t> bytes,
                   const std::shared_ptr<const void>& owner);

 private:
  PullStreamer* streamer_;
};

}  // namespace terngrad::comm::detail
