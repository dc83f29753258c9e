// How a replica (WorkerClient) judges whether its ps is alive, against a
// stand-in ps whose answers the test controls: a ps that is only slow (its
// calls outlast their deadline but it answers heartbeats) is asked again, not
// called unreachable; a frozen ps (SIGSTOP: nothing answers, connections stay
// open) and a killed one (connections refused) end the replica's run within
// the peer timeout, far inside the rpc timeout, with a PeerError naming the
// ps, its address and how long it was silent, and the call that was waiting
// on it cancelled.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "parameter_server.grpc.pb.h"
#include "stand_in_server.h"
#include "terngrad/comm/errors.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/worker_client.h"

namespace tc = terngrad::comm;
namespace rpc = terngrad::comm::rpc;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Waits until ctx is cancelled or `seconds` pass (bounded: a test never hangs here).
void wait_cancelled(grpc::ServerContext* ctx, double seconds) {
  const auto t0 = Clock::now();
  while (!ctx->IsCancelled() && since(t0) < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// A ps that answers Register after `register_s` seconds for its first
// `slow_registers` calls (each outlasting the replica's deadline), and that
// can be frozen: then no call, heartbeats included, answers until cancelled.
class StandInPs final : public rpc::ParameterServer::Service {
 public:
  std::atomic<bool> frozen{false};
  std::atomic<int> slow_registers{0};
  std::atomic<double> register_s{0};  // set by the test, read on the server's threads
  std::atomic<int> registers{0}, heartbeats{0}, cancelled{0};

  grpc::Status Register(grpc::ServerContext* ctx, const rpc::RegisterRequest*, rpc::RegisterReply* reply) override {
    const int n = registers++;
    if (frozen) {
      wait_cancelled(ctx, 60);
      if (ctx->IsCancelled()) ++cancelled;
      return grpc::Status(grpc::StatusCode::CANCELLED, "frozen");
    }
    if (n < slow_registers) wait_cancelled(ctx, register_s);  // past the caller's deadline
    reply->set_ready(true);
    reply->set_global_step(42);
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const rpc::HeartbeatRequest*, rpc::HeartbeatReply*) override {
    if (frozen) {
      wait_cancelled(ctx, 60);
      return grpc::Status(grpc::StatusCode::CANCELLED, "frozen");
    }
    ++heartbeats;
    return grpc::Status::OK;
  }
};

struct Server : terngrad::testing::StandInServer<StandInPs> {
  void kill() {
    ps.frozen = false;
    shutdown();
  }
  ~Server() { kill(); }
};

tc::ClientOptions options(double rpc_timeout, double peer_timeout) {
  tc::ClientOptions o;
  o.rpc_timeout_s = rpc_timeout;
  o.peer_timeout_s = peer_timeout;
  o.heartbeat_s = 0.1;
  return o;
}

const tc::Layout& layout() {
  static const tc::Layout l = tc::place_variables({{"w", 64, "fp32"}}, 1);
  return l;
}

// Until the replica's heartbeats have reached the ps (bounded).
void wait_heard(const StandInPs& ps) {
  const auto t0 = Clock::now();
  while (ps.heartbeats < 2 && since(t0) < 10) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(ps.heartbeats, 2) << "no heartbeat reached the stand-in ps in 10 s";
}

TEST(PsLiveness, ASlowPsIsAskedAgainNotCalledUnreachable) {
  Server s;
  ASSERT_NE(s.port, 0);
  // Four Registers each outlast the 0.4 s deadline; together (1.6 s and
  // more) they outlast the 1 s peer timeout, while heartbeats answer.
  s.ps.slow_registers = 4;
  s.ps.register_s = 0.5;
  tc::WorkerClient c({s.address()}, layout(), 1, true, 2, 2, options(0.4, 1.0));  // replica 1: no Init
  const auto t0 = Clock::now();
  EXPECT_EQ(c.join(0), 42);
  EXPECT_GE(s.ps.registers, 5) << "the slow calls were asked again";
  EXPECT_GT(since(t0), 1.6) << "the slow calls together outlasted the peer timeout";
}

TEST(PsLiveness, AFrozenPsEndsTheRunWithinThePeerTimeoutNotTheRpcTimeout) {
  Server s;
  ASSERT_NE(s.port, 0);
  tc::WorkerClient c({s.address()}, layout(), 1, true, 2, 2, options(/*rpc_timeout=*/30, /*peer_timeout=*/1.0));
  wait_heard(s.ps);
  s.ps.frozen = true;  // as SIGSTOP: connections open, no answers
  const auto t0 = Clock::now();
  try {
    c.join(0);
    FAIL() << "join returned from a frozen ps";
  } catch (const tc::PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ps 0 at " + s.address()), std::string::npos) << what;
    EXPECT_NE(what.find("unreachable: silent for 1 s"), std::string::npos) << what;
  }
  EXPECT_LT(since(t0), 5.0) << "the 30 s rpc timeout must not be what ends the wait";
  // The waiting Register was cancelled, not left to its deadline (bounded poll).
  const auto t1 = Clock::now();
  while (s.ps.cancelled < 1 && since(t1) < 5) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_GE(s.ps.cancelled, 1);
}

TEST(PsLiveness, AKilledPsEndsTheRunWithinThePeerTimeout) {
  Server s;
  ASSERT_NE(s.port, 0);
  tc::WorkerClient c({s.address()}, layout(), 1, true, 2, 2, options(/*rpc_timeout=*/30, /*peer_timeout=*/1.0));
  wait_heard(s.ps);
  const std::string address = s.address();
  s.kill();  // as kill -9: the port refuses connections; the join below waits for it (wait_for_ready)
  const auto t0 = Clock::now();
  try {
    c.join(0);
    FAIL() << "join returned from a killed ps";
  } catch (const tc::PeerError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("ps 0 at " + address), std::string::npos) << what;
    EXPECT_NE(what.find("silent for"), std::string::npos) << what;
  }
  EXPECT_LT(since(t0), 5.0) << "the 30 s rpc timeout must not be what ends the wait";
}

}  // namespace
