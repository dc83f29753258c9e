// How an async replica (WorkerClient::begin_pull) takes the values a ps
// streams, against a stand-in ps whose chunks the test writes: a shard sent
// in one chunk is copied from the message straight into the weights, one
// sent in pieces goes through the reassembly, and a chunk for a shard that
// has already come whole is refused with the variable named (a ps's stream
// is input like any other).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "parameter_server.grpc.pb.h"
#include "stand_in_server.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/worker_client.h"

namespace tc = terngrad::comm;
namespace rpc = terngrad::comm::rpc;

namespace {

constexpr int64_t kStep = 7;

// Variable w: 64 values, then b: 8, each one shard on the one ps.
const tc::Layout& layout() {
  static const tc::Layout l = tc::place_variables({{"w", 64, "fp32"}, {"b", 8, "fp32"}}, 1);
  return l;
}

std::vector<float> ramp(size_t n, float from) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from + static_cast<float>(i);
  return v;
}

class StandInPs final : public rpc::ParameterServer::Service {
 public:
  bool duplicate_whole = false;  // send w's whole chunk twice

  grpc::Status Register(grpc::ServerContext*, const rpc::RegisterRequest*, rpc::RegisterReply* reply) override {
    reply->set_ready(true);
    reply->set_global_step(kStep);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const rpc::HeartbeatRequest*, rpc::HeartbeatReply*) override {
    return grpc::Status::OK;
  }
  grpc::Status Pull(grpc::ServerContext*, const rpc::PullRequest*, grpc::ServerWriter<rpc::PullChunk>* w) override {
    rpc::PullChunk head;
    head.mutable_header()->set_ready(true);
    head.mutable_header()->set_step(kStep);
    w->Write(head);
    const std::vector<float> wv = ramp(64, 1), bv = ramp(8, 100);
    auto chunk = [&](uint32_t shard, const std::vector<float>& v, size_t from, size_t count) {
      rpc::PullChunk c;
      rpc::TensorChunk* t = c.mutable_values();
      t->set_shard(shard);
      t->set_offset(4 * from);
      t->set_total_bytes(4 * v.size());
      t->set_data(reinterpret_cast<const char*>(v.data() + from), 4 * count);
      w->Write(c);
    };
    chunk(0, wv, 0, 64);  // whole
    if (duplicate_whole) chunk(0, wv, 0, 64);
    chunk(1, bv, 0, 3);  // in two pieces
    chunk(1, bv, 3, 5);
    return grpc::Status::OK;
  }
};

using Server = terngrad::testing::StandInServer<StandInPs>;

tc::ClientOptions options() {
  tc::ClientOptions o;
  o.rpc_timeout_s = 5;
  o.peer_timeout_s = 5;
  o.heartbeat_s = 0.1;
  return o;
}

}  // namespace

TEST(ValuesIntake, AWholeShardAndOneInPiecesBothLandExactly) {
  Server s;
  ASSERT_EQ(layout().shards.size(), 2u) << "the test wants w and b on a shard each";
  tc::WorkerClient c({s.address()}, layout(), 1, /*sync=*/false, 2, 2, options());
  ASSERT_EQ(c.join(0), kStep);
  std::vector<float> w(64, -1.0f), b(8, -1.0f);
  const std::span<float> values[] = {w, b};
  EXPECT_EQ(c.begin_pull(values), kStep);
  c.end_pull();
  EXPECT_EQ(w, ramp(64, 1));
  EXPECT_EQ(b, ramp(8, 100));
}

TEST(ValuesIntake, AChunkAfterTheWholeShardIsRefusedNamingTheVariable) {
  Server s;
  s.ps.duplicate_whole = true;
  tc::WorkerClient c({s.address()}, layout(), 1, /*sync=*/false, 2, 2, options());
  ASSERT_EQ(c.join(0), kStep);
  std::vector<float> w(64, -1.0f), b(8, -1.0f);
  const std::span<float> values[] = {w, b};
  try {
    c.begin_pull(values);
    c.end_pull();
    FAIL() << "a second chunk of a whole shard was taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("values for w after the whole shard"), std::string::npos) << e.what();
  }
}
