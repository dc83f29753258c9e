// Chunk messages framed around slices (wire_chunks.h).
#include "wire_chunks.h"

#include <string>

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

grpc::ByteBuffer frame_chunk(int part_field, const google::protobuf::MessageLite& fields, int data_field,
                             grpc::Slice data) {
  const std::string before = fields.SerializeAsString();
  std::string data_head;  // proto3 leaves an empty bytes field out
  if (data.size() > 0) {
    append_varint(data_head, bytes_key(data_field));
    append_varint(data_head, data.size());
  }
  std::string head;
  append_varint(head, bytes_key(part_field));
  append_varint(head, before.size() + data_head.size() + data.size());
  head += before;
  head += data_head;
  if (data.size() == 0) {
    grpc::Slice only(head);
    return grpc::ByteBuffer(&only, 1);
  }
  grpc::Slice slices[2] = {grpc::Slice(head), std::move(data)};
  return grpc::ByteBuffer(slices, 2);
}

grpc::Slice borrowed_slice(std::span<const uint8_t> bytes, const std::shared_ptr<const void>& owner) {
  if (bytes.empty()) return grpc::Slice();
  return grpc::Slice(const_cast<uint8_t*>(bytes.data()), bytes.size(), release_owner,
                     new std::shared_ptr<const void>(owner));
}

}  // namespace terngrad::comm::detail
