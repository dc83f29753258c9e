// Chunk messages framed by hand (comm/service/wire_chunks.h): the ps's Pull
// replies and the replica's Push payloads are protobuf's bytes for the same
// PullChunk and PushChunk; the ps's data is not copied and its owner lives
// exactly as long as gRPC holds the bytes; the method index the ps installs
// its handler at is the generated Pull's, and the path a replica opens its
// Push on is the generated Push's.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "chunks.h"
#include "ps_methods.h"
#include "push_writer.h"
#include "pull_stream.h"

namespace {

namespace rpc = terngrad::comm::rpc;
namespace detail = terngrad::comm::detail;

std::string flat(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// One chunk of a buffer of 1.5 chunks: zero fields (left out by proto3), a
// whole chunk, the tail, one byte, nothing.
struct Case {
  uint32_t shard;
  uint64_t offset;
  size_t size;
};
constexpr size_t kBufferBytes = 3 * detail::kChunkBytes / 2;
const Case kCases[] = {{0, 0, detail::kChunkBytes},
                       {3, detail::kChunkBytes, kBufferBytes - detail::kChunkBytes},
                       {70000, 5, 1},
                       {1, 0, 0}};

void set_payload(rpc::PayloadChunk* p, const Case& c, std::span<const uint8_t> piece) {
  p->set_shard(c.shard);
  p->set_offset(c.offset);
  p->set_total_bytes(kBufferBytes);
  p->set_data(piece.data(), piece.size());
}

std::vector<uint8_t> bytes_of(size_t n) {
  std::vector<uint8_t> v(n);
  std::iota(v.begin(), v.end(), uint8_t{7});
  return v;
}

TEST(PullStream, ASumsChunkIsProtobufsBytes) {
  const std::vector<uint8_t> buf = bytes_of(kBufferBytes);
  auto owner = std::make_shared<int>(0);
  for (const Case& c : kCases) {
    const std::span<const uint8_t> piece(buf.data() + c.offset, c.size);
    rpc::PullChunk expected;
    rpc::PayloadChunk* p = expected.mutable_payload();
    set_payload(p, c, piece);
    const std::string wire =
        flat(detail::frame_shard_chunk(detail::ShardBytes::kSum, c.shard, c.offset, buf.size(), piece, owner));
    EXPECT_EQ(wire, expected.SerializeAsString()) << "shard " << c.shard << " offset " << c.offset;
    rpc::PullChunk parsed;
    ASSERT_TRUE(parsed.ParseFromString(wire));
    EXPECT_EQ(parsed.payload().data(), p->data());
    EXPECT_EQ(parsed.payload().total_bytes(), buf.size());
  }
}

TEST(PullStream, AValuesChunkIsProtobufsBytes) {
  const std::vector<uint8_t> buf = bytes_of(4 * 1000);
  auto owner = std::make_shared<int>(0);
  for (uint32_t shard : {0u, 2u, 300u}) {
    rpc::PullChunk expected;
    rpc::TensorChunk* t = expected.mutable_values();
    t->set_shard(shard);
    t->set_offset(0);
    t->set_total_bytes(buf.size());
    t->set_data(buf.data(), buf.size());
    EXPECT_EQ(flat(detail::frame_shard_chunk(detail::ShardBytes::kValues, shard, 0, buf.size(), buf, owner)),
              expected.SerializeAsString())
        << "shard " << shard;
  }
}

TEST(PushWriter, APayloadChunkIsProtobufsBytes) {
  const std::vector<uint8_t> buf = bytes_of(kBufferBytes);
  for (const Case& c : kCases) {
    const std::span<const uint8_t> piece(buf.data() + c.offset, c.size);
    rpc::PushChunk expected;
    set_payload(expected.mutable_payload(), c, piece);
    EXPECT_EQ(flat(detail::push_payload_chunk(c.shard, c.offset, buf.size(), piece)), expected.SerializeAsString())
        << "shard " << c.shard << " offset " << c.offset;
  }
}

// The data slice points into the owner's buffer, and the owner is kept
// until the last copy of the message (gRPC's) is gone.
TEST(PullStream, TheDataIsNotCopiedAndItsOwnerLivesWithTheMessage) {
  auto owner = std::make_shared<std::vector<uint8_t>>(bytes_of(4096));
  std::weak_ptr<std::vector<uint8_t>> watch = owner;
  const uint8_t* data = owner->data();
  {
    grpc::ByteBuffer message =
        detail::frame_shard_chunk(detail::ShardBytes::kSum, 1, 0, owner->size(), *owner, owner);
    grpc::ByteBuffer copy(message);  // what gRPC's Write takes: a reference, not the bytes
    owner.reset();
    EXPECT_FALSE(watch.expired()) << "the owner went while the message still points into it";
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(copy.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(slices[1].begin(), data) << "the data was copied";
  }
  EXPECT_TRUE(watch.expired()) << "the owner outlived every copy of the message";
}

// The generated service's handler at the index the ps replaces is the
// generated Pull's (a server-streaming PullRequest -> PullChunk handler).
TEST(PsMethods, TheMethodIndexIsPulls) {
  struct Generated : rpc::ParameterServer::Service {
    grpc::internal::MethodHandler* handler(int i) { return GetHandler(i); }
  } service;
  using PullHandler = grpc::internal::ServerStreamingHandler<rpc::ParameterServer::Service, rpc::PullRequest,
                                                              rpc::PullChunk>;
  EXPECT_NE(dynamic_cast<PullHandler*>(service.handler(detail::parameter_server_method_index("Pull"))), nullptr);
}

TEST(PsMethods, PathsAreTheGeneratedOnesAndUnknownNamesAreRefused) {
  EXPECT_STREQ(detail::parameter_server_method_path("Push"), "/terngrad.comm.rpc.ParameterServer/Push");
  EXPECT_EQ(detail::parameter_server_method_path("Push"), detail::parameter_server_method_path("Push"))
      << "a path must stay at one address (gRPC keeps the pointer)";
  EXPECT_THROW(detail::parameter_server_method_path("Pusher"), std::logic_error);
  EXPECT_THROW(detail::parameter_server_method_index("Pusher"), std::logic_error);
}

}  // namespace
