// Private: a message that carries one chunk of a large buffer (a payload,
// a sum, values), framed by hand around a gRPC slice of the bytes. Built the
// usual way, the bytes are copied into the protobuf message (set_data) and
// then again into gRPC's buffer (serialization); framed here, they are
// copied once into a slice (copied_slice), or not at all (borrowed_slice:
// the slice points into the caller's buffer and holds its owner until gRPC
// lets go of it).
//
// The bytes on the wire are exactly protobuf's for the same message
// (tests/comm_service/wire_chunks_test.cpp checks), so the receiving end
// parses the generated message as ever.
#pragma once

#include <google/protobuf/message_lite.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

namespace terngrad::comm::detail {

// The serialized outer message whose field part_field (a oneof member) is a
// chunk message: `fields` (the chunk's fields, data left empty) followed by
// field data_field holding `data`. data_field must be the chunk message's
// highest field number, as protobuf writes fields in number order.
grpc::ByteBuffer frame_chunk(int part_field, const google::protobuf::MessageLite& fields, int data_field,
                             grpc::Slice data);

// A whole message serialized the usual way (the small ones: headers, a
// stream's last message), or nothing if protobuf refuses it.
template <class Message>
std::optional<grpc::ByteBuffer> serialized(const Message& message) {
  grpc::ByteBuffer buffer;
  bool own = false;
  if (!grpc::SerializationTraits<Message>::Serialize(message, &buffer, &own).ok()) return std::nullopt;
  return buffer;
}

// The bytes, not copied; owner is kept alive as long as gRPC holds them.
grpc::Slice borrowed_slice(std::span<const uint8_t> bytes, const std::shared_ptr<const void>& owner);
// A copy of the bytes, for a buffer the caller may change once the write returns.
inline grpc::Slice copied_slice(std::span<const uint8_t> bytes) { return grpc::Slice(bytes.data(), bytes.size()); }

}  // namespace terngrad::comm::detail
