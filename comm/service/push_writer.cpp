// The replica's Push call with payloads copied once (push_writer.h).
#include "push_writer.h"

#include "chunks.h"
#include "ps_methods.h"
#include "wire_chunks.h"

namespace terngrad::comm::detail {

PushWriter::PushWriter(grpc::ChannelInterface* channel, grpc::ClientContext* ctx, rpc::PushReply* reply) {
  static const grpc::internal::RpcMethod push(parameter_server_method_path("Push"),
                                              grpc::internal::RpcMethod::CLIENT_STREAMING);
  writer_.reset(grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(channel, push, ctx, reply));
}

bool PushWriter::write(const grpc::ByteBuffer& buffer) {
  message_bytes_ += buffer.Length();
  return writer_->Write(buffer);
}

bool PushWriter::write(const rpc::PushChunk& message) {
  const std::optional<grpc::ByteBuffer> buffer = serialized(message);
  return buffer && write(*buffer);
}

grpc::ByteBuffer push_payload_chunk(uint32_t shard, uint64_t offset, uint64_t total, std::span<const uint8_t> piece) {
  rpc::PayloadChunk fields;
  fields.set_shard(shard);
  fields.set_offset(offset);
  fields.set_total_bytes(total);
  return frame_chunk(rpc::PushChunk::kPayloadFieldNumber, fields, rpc::PayloadChunk::kDataFieldNumber,
                     copied_slice(piece));
}

bool PushWriter::write_payload(uint32_t shard, std::span<const uint8_t> bytes) {
  return for_each_chunk(bytes, [&](uint64_t offset, std::span<const uint8_t> piece) {
    return write(push_payload_chunk(shard, offset, bytes.size(), piece));
  });
}

}  // namespace terngrad::comm::detail
