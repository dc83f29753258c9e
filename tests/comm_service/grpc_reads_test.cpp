// read_whole_grpc_frames(): the experiments it asks gRPC for, a user's
// GRPC_EXPERIMENTS (even an empty one) left as it was; and which clusters
// cross a network (tg-train asks for whole frames only there).
#include "terngrad/comm/grpc_reads.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

namespace {

using terngrad::comm::ClusterSpec;
using terngrad::comm::crosses_a_network;
using terngrad::comm::kWholeFrameReadExperiments;
using terngrad::comm::read_whole_grpc_frames;

// Restores GRPC_EXPERIMENTS as the test found it.
class GrpcReads : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("GRPC_EXPERIMENTS")) saved_ = v;
  }
  void TearDown() override {
    if (saved_)
      setenv("GRPC_EXPERIMENTS", saved_->c_str(), 1);
    else
      unsetenv("GRPC_EXPERIMENTS");
  }

 private:
  std::optional<std::string> saved_;
};

TEST_F(GrpcReads, AsksForWholeFramesWhenTheUserSaidNothing) {
  unsetenv("GRPC_EXPERIMENTS");
  EXPECT_EQ(read_whole_grpc_frames(), kWholeFrameReadExperiments);
  ASSERT_NE(std::getenv("GRPC_EXPERIMENTS"), nullptr);
  EXPECT_STREQ(std::getenv("GRPC_EXPERIMENTS"), "tcp_frame_size_tuning,tcp_rcv_lowat");
  EXPECT_EQ(read_whole_grpc_frames(), kWholeFrameReadExperiments);  // again: the same
}

TEST_F(GrpcReads, KeepsTheUsersList) {
  setenv("GRPC_EXPERIMENTS", "tcp_read_chunks", 1);
  EXPECT_EQ(read_whole_grpc_frames(), "tcp_read_chunks");
  EXPECT_STREQ(std::getenv("GRPC_EXPERIMENTS"), "tcp_read_chunks");
}

TEST_F(GrpcReads, KeepsAnEmptyListWhichTurnsThemOff) {
  setenv("GRPC_EXPERIMENTS", "", 1);
  EXPECT_EQ(read_whole_grpc_frames(), "");
  ASSERT_NE(std::getenv("GRPC_EXPERIMENTS"), nullptr);
  EXPECT_STREQ(std::getenv("GRPC_EXPERIMENTS"), "");
}

ClusterSpec cluster(const std::string& ps_host, const std::string& worker_host) {
  ClusterSpec c;
  c.ps = {{ps_host, 2222}};
  c.chief = {{"127.0.0.1", 2223}};
  c.worker = {{worker_host, 2224}};
  return c;
}

TEST(GrpcReadsOver, ANetworkWhenAnyTaskIsNotOnLoopback) {
  EXPECT_FALSE(crosses_a_network(cluster("127.0.0.1", "localhost")));
  EXPECT_FALSE(crosses_a_network(cluster("::1", "127.0.0.2")));
  EXPECT_TRUE(crosses_a_network(cluster("10.77.0.1", "127.0.0.1")));  // tg-cluster's shaped links
  EXPECT_TRUE(crosses_a_network(cluster("127.0.0.1", "worker-0.example")));
  ClusterSpec with_evaluator = cluster("localhost", "localhost");
  with_evaluator.evaluator = {{"fd00::5", 2225}};
  EXPECT_TRUE(crosses_a_network(with_evaluator));
}

}  // namespace
