// Private: the replica's end of one Push call. Payload chunks are framed
// around one copy of their bytes (wire_chunks.h), where the generated
// ClientWriter<PushChunk> made two (into the message, then into gRPC's
// buffer). Not a borrowed slice: the caller's payload buffers are reused
// once a push returns, and gRPC may hold a written slice past the call's end
// (a connection's pending write). The ps reads PushChunk messages as before.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <span>

#include "parameter_server.grpc.pb.h"

namespace terngrad::comm::detail {

// One chunk of a shard's payload as a serialized PushChunk (a copy of piece).
grpc::ByteBuffer push_payload_chunk(uint32_t shard, uint64_t offset, uint64_t total, std::span<const uint8_t> piece);

class PushWriter {
 public:
  // Opens a Push call on channel, as the generated Stub::Push does.
  PushWriter(grpc::ChannelInterface* channel, grpc::ClientContext* ctx, rpc::PushReply* reply);

  // False once the call is over (then Finish says why).
  bool write(const rpc::PushChunk& message);
  // One shard's payload, chunk by chunk (for_each_chunk).
  bool write_payload(uint32_t shard, std::span<const uint8_t> bytes);
  bool WritesDone() { return writer_->WritesDone(); }
  grpc::Status Finish() { return writer_->Finish(); }

  // The serialized messages written so far, in bytes.
  uint64_t message_bytes() const { return message_bytes_; }

 private:
  bool write(const grpc::ByteBuffer& buffer);

  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer_;
  uint64_t message_bytes_ = 0;
};

}  // namespace terngrad::comm::detail
