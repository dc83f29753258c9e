// The ps's Pull replies without copies (pull_stream.h).
#include "pull_stream.h"

#include "chunks.h"
#include "wire_chunks.h"

namespace terngrad::comm::detail {

grpc::ByteBuffer frame_shard_chunk(ShardBytes kind, uint32_t shard, uint64_t offset, uint64_t total,
                                   std::span<const uint8_t> piece, const std::shared_ptr<const void>& owner) {
  if (kind == ShardBytes::kSum) {
    rpc::PayloadChunk c;
    c.set_shard(shard);
    c.set_offset(offset);
    c.set_total_bytes(total);
    return frame_chunk(rpc::PullChunk::kPayloadFieldNumber, c, rpc::PayloadChunk::kDataFieldNumber,
                       borrowed_slice(piece, owner));
  }
  rpc::TensorChunk c;
  c.set_shard(shard);
  c.set_offset(offset);
  c.set_total_bytes(total);
  return frame_chunk(rpc::PullChunk::kValuesFieldNumber, c, rpc::TensorChunk::kDataFieldNumber,
                     borrowed_slice(piece, owner));
}

bool PullStream::write(const rpc::PullChunk& message) {
  const std::optional<grpc::ByteBuffer> buffer = serialized(message);
  return buffer && streamer_->Write(*buffer);
}

bool PullStream::write_shard(ShardBytes kind, uint32_t shard, std::span<const uint8_t> bytes,
                             const std::shared_ptr<const void>& owner) {
  return for_each_chunk(bytes, [&](uint64_t offset, std::span<const uint8_t> piece) {
    return streamer_->Write(frame_shard_chunk(kind, shard, offset, bytes.size(), piece, owner));
  });
}

}  // namespace terngrad::comm::detail
