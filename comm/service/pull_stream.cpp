// The ps's Pull replies without copies (pull_stream.h).
#include "pull_stream.h"

#include <google/protobuf/descriptor.h>

#include <stdexcept>
#include <string>

#include "chunks.h"

namespace terngrad::comm::detail {

namespace {

void append_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A length-delimited field's key (wire type 2).
uint64_t bytes_key(int field) { return (static_cast<uint64_t>(field) << 3) | 2; }

void release_owner(void* owner) { delete static_cast<std::shared_ptr<const void>*>(owner); }

}  // namespace

grpc::ByteBuffer frame_shard_chunk(ShardBytes kind, uint32_t shard, uint64_t offset, uint64_t total,
                                   std::span<const uint8_t> piece, const std::shared_ptr<const void>& owner) {
  // The chunk's fields but data, as protobuf writes them. Protobuf writes
  // fields in the order of their numbers, and data has the highest number in
  // both messages, so data's key, length and bytes follow them on the wire.
  std::string fields;
  int data_field = 0, part_field = 0;
  if (kind == ShardBytes::kSum) {
    rpc::PayloadChunk c;
    c.set_shard(shard);
    c.set_offset(offset);
    c.set_total_bytes(total);
    fields = c.SerializeAsString();
    data_field = rpc::PayloadChunk::kDataFieldNumber;
    part_field = rpc::PullChunk::kPayloadFieldNumber;
  } else {
    rpc::TensorChunk c;
    c.set_shard(shard);
    c.set_offset(offset);
    c.set_total_bytes(total);
    fields = c.SerializeAsString();
    data_field = rpc::TensorChunk::kDataFieldNumber;
    part_field = rpc::PullChunk::kValuesFieldNumber;
  }
  std::string data_head;  // proto3 leaves an empty bytes field out
  if (!piece.empty()) {
    append_varint(data_head, bytes_key(data_field));
    append_varint(data_head, piece.size());
  }
  std::string head;
  append_varint(head, bytes_key(part_field));
  append_varint(head, fields.size() + data_head.size() + piece.size());
  head += fields;
  head += data_head;
  if (piece.empty()) {
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  grpc::Slice slices[2] = {
      grpc::Slice(head),
      grpc::Slice(const_cast<uint8_t*>(piece.data()), piece.size(), release_owner,
                  new std::shared_ptr<const void>(owner)),
  };
  return grpc::ByteBuffer(slices, 2);
}

bool PullStream::write(const rpc::PullChunk& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  if (!grpc::SerializationTraits<rpc::PullChunk>::Serialize(message, &buffer, &own).ok()) return false;
  return streamer_->Write(buffer);
}

bool PullStream::write_shard(ShardBytes kind, uint32_t shard, std::span<const uint8_t> bytes,
                             const std::shared_ptr<const void>& owner) {
  return for_each_chunk(bytes, [&](uint64_t offset, std::span<const uint8_t> piece) {
    return streamer_->Write(frame_shard_chunk(kind, shard, offset, bytes.size(), piece, owner));
  });
}

int pull_method_index() {
  // The generated service adds its methods in the order of the proto's
  // service, which is the descriptor's.
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(rpc::ParameterServer::service_full_name());
  const google::protobuf::MethodDescriptor* pull = service ? service->FindMethodByName("Pull") : nullptr;
  if (pull == nullptr) throw std::logic_error("no ParameterServer.Pull in the generated descriptors");
  return pull->index();
}

}  // namespace terngrad::comm::detail
