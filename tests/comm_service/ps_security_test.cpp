// The ps tried as an outsider would try it: an ordinary gRPC client built
// from parameter_server.proto, choosing its own metadata. With a cluster
// secret, a caller without a role's token is refused every call and learns
// nothing; a replica cannot act as another, and only the chief may Init,
// Checkpoint or Shutdown. Without a secret, calls are still bound to the
// session a replica registered with. Reads do not change what another
// replica gets; a duplicate push is not counted twice; a refused or retried
// Init leaves a running ps alone, and a restarted chief ends the run with
// what to do. TLS: a plaintext client cannot talk to a TLS ps. A pushed
// payload's length is its codec's: exactly payload_bytes for fixed-size
// codecs, 1 to payload_bytes for variable-size ones.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "parameter_server.grpc.pb.h"
#include "terngrad/comm/credentials.h"
#include "terngrad/comm/errors.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/link_probe.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/ps_server.h"
#include "terngrad/comm/ps_status.h"
#include "terngrad/comm/worker_client.h"

#include "serving_ps.h"
#include "varsize_test_codec.h"

namespace tc = terngrad::comm;
namespace rpc = terngrad::comm::rpc;
namespace fs = std::filesystem;
using grpc::StatusCode;

namespace {

constexpr uint64_t kElements = 64;
constexpr uint64_t kFingerprint = 42;

// One ps task serving in a thread.
struct PsTask : terngrad::testing::ServingPs {
  PsTask(int replicas, std::optional<tc::ClusterSecret> secret, tc::UpdateHandler* handler = nullptr,
         tc::TlsOptions tls = {})
      : ServingPs(options(replicas, secret, tls), handler) {}
  static tc::ServerOptions options(int replicas, std::optional<tc::ClusterSecret> secret, tc::TlsOptions tls) {
    tc::ServerOptions o = terngrad::testing::test_server_options(replicas);
    o.peer_timeout_s = 20;
    o.startup_timeout_s = 20;
    o.poll_s = 0.3;
    o.secret = secret;
    o.tls = tls;
    return o;
  }
};

std::string fp32_payload(float value) {
  auto codec = tc::make_codec("fp32");
  std::vector<float> g(kElements, value);
  std::string out(codec->payload_bytes(kElements), '\0');
  std::vector<tc::ElementRange> slices = {{0, kElements}};
  std::vector<std::span<uint8_t>> outs = {{reinterpret_cast<uint8_t*>(out.data()), out.size()}};
  codec->encode_slices(g, tc::EncodeContext{}, slices, outs);
  return out;
}

std::vector<uint8_t> fp32_sum(std::vector<std::string> payloads) {
  auto codec = tc::make_codec("fp32");
  std::vector<std::span<const uint8_t>> views;
  for (const auto& p : payloads) views.emplace_back(reinterpret_cast<const uint8_t*>(p.data()), p.size());
  std::vector<uint8_t> out;
  codec->aggregate(views, kElements, out);
  return out;
}

// A raw caller: the metadata it sends is its own choice.
struct RawCaller {
  std::unique_ptr<rpc::ParameterServer::Stub> stub;
  std::string session, token;
  RawCaller(const std::string& address, std::string s, std::string t = "")
      : stub(rpc::ParameterServer::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))),
        session(std::move(s)),
        token(std::move(t)) {}

  void prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (!session.empty()) ctx.AddMetadata(tc::kSessionMetadataKey, session);
    if (!token.empty()) ctx.AddMetadata(tc::kAuthMetadataKey, token);
  }

  // Variable "w" in `shards` shards of kElements each.
  grpc::Status init(uint32_t replica, uint32_t total, bool sync = true, uint64_t fingerprint = kFingerprint,
                    const std::string& codec = "fp32", rpc::InitReply* out = nullptr, uint32_t shards = 1) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::InitReply own;
    rpc::InitReply& reply = out ? *out : own;
    auto w = stub->Init(&ctx, &reply);
    rpc::InitChunk c;
    rpc::InitHeader* h = c.mutable_header();
    h->set_replica(replica);
    rpc::Variable* v = h->add_variables();
    v->set_name("w");
    v->set_size(kElements * shards);
    v->set_codec(codec);
    for (uint32_t i = 0; i < shards; ++i) {
      rpc::Shard* s = h->add_shards();
      s->set_variable(0);
      s->set_begin(i * kElements);
      s->set_count(kElements);
    }
    h->set_fingerprint(fingerprint);
    h->set_sync(sync);
    h->set_total_replicas(total);
    h->set_replicas_to_aggregate(total);
    w->Write(c);
    w->WritesDone();
    return w->Finish();
  }
  grpc::Status register_as(uint32_t replica, rpc::RegisterReply* reply = nullptr) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::RegisterRequest req;
    req.set_replica(replica);
    req.set_fingerprint(kFingerprint);
    req.set_label("test:" + std::to_string(replica));
    rpc::RegisterReply r;
    return stub->Register(&ctx, req, reply ? reply : &r);
  }
  grpc::Status push(uint32_t replica, int64_t step, const std::string& payload, rpc::PushReply* reply = nullptr,
                    uint32_t shard = 0) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::PushReply r;
    auto w = stub->Push(&ctx, reply ? reply : &r);
    rpc::PushChunk c;
    c.mutable_header()->set_replica(replica);
    c.mutable_header()->set_step(step);
    c.mutable_header()->add_shards(shard);
    w->Write(c);
    rpc::PushChunk p;
    p.mutable_payload()->set_shard(shard);
    p.mutable_payload()->set_offset(0);
    p.mutable_payload()->set_total_bytes(payload.size());
    p.mutable_payload()->set_data(payload);
    w->Write(p);
    w->WritesDone();
    return w->Finish();
  }
  // A whole (non-streamed) pull of step's sum into *sum; ready in *ready.
  grpc::Status pull(uint32_t replica, int64_t step, std::vector<uint8_t>* sum = nullptr, bool* ready = nullptr) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::PullRequest req;
    req.set_replica(replica);
    req.set_step(step);
    auto r = stub->Pull(&ctx, req);
    rpc::PullChunk c;
    std::vector<uint8_t> got;
    bool is_ready = false;
    while (r->Read(&c)) {
      if (c.has_header()) is_ready = c.header().ready();
      if (c.has_payload()) got.insert(got.end(), c.payload().data().begin(), c.payload().data().end());
    }
    if (sum) *sum = got;
    if (ready) *ready = is_ready;
    return r->Finish();
  }
  grpc::Status scales(uint32_t replica) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::ScalesRequest req;
    req.set_replica(replica);
    req.add_scales(1.0f);
    rpc::ScalesReply reply;
    return stub->ExchangeScales(&ctx, req, &reply);
  }
  grpc::Status presums(uint32_t replica) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::PresumRequest req;
    req.set_replica(replica);
    req.add_values(1.0f);
    rpc::PresumReply reply;
    return stub->ExchangePresums(&ctx, req, &reply);
  }
  grpc::Status heartbeat(uint32_t replica, rpc::HeartbeatReply* reply = nullptr, bool done = false) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::HeartbeatRequest req;
    req.set_replica(replica);
    req.set_done(done);
    rpc::HeartbeatReply r;
    return stub->Heartbeat(&ctx, req, reply ? reply : &r);
  }
  grpc::Status status(rpc::StatusReply* reply = nullptr) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::StatusReply r;
    return stub->Status(&ctx, rpc::StatusRequest{}, reply ? reply : &r);
  }
  grpc::Status checkpoint(uint32_t replica) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::CheckpointRequest req;
    req.set_replica(replica);
    auto r = stub->Checkpoint(&ctx, req);
    rpc::TensorChunk t;
    while (r->Read(&t)) {
    }
    return r->Finish();
  }
  grpc::Status shutdown(uint32_t replica, bool ok) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::ShutdownRequest req;
    req.set_replica(replica);
    req.set_ok(ok);
    req.set_reason("a stranger says so");
    rpc::ShutdownReply reply;
    return stub->Shutdown(&ctx, req, &reply);
  }
  grpc::Status probe(uint32_t replica, size_t send = 16, uint32_t back = 16, std::string* got = nullptr) {
    grpc::ClientContext ctx;
    prepare(ctx);
    rpc::ProbeRequest req;
    req.set_replica(replica);
    req.mutable_data()->assign(send, 'x');
    req.set_reply_bytes(back);
    rpc::ProbeReply reply;
    const grpc::Status s = stub->Probe(&ctx, req, &reply);
    if (got) *got = reply.data();
    return s;
  }
};

std::string token_of(const tc::ClusterSecret& s, const tc::Role& role) {
  return tc::Credential{role, s.key_for(role)}.call_token();
}

// The chief initializes a 2-replica sync run and both replicas register
// (the chief's Register waits for the worker's).
void start_run(RawCaller& chief, RawCaller& worker) {
  ASSERT_TRUE(chief.init(0, 2).ok());
  std::thread reg([&] { EXPECT_TRUE(chief.register_as(0).ok()); });
  ASSERT_TRUE(worker.register_as(1).ok());
  reg.join();
}

// Every call of the service, made by `who`, posing as `replica`: the status codes.
std::vector<std::pair<std::string, grpc::Status>> every_call(RawCaller& who, uint32_t replica) {
  std::vector<std::pair<std::string, grpc::Status>> out;
  out.emplace_back("Init", who.init(replica, 2));
  out.emplace_back("Register", who.register_as(replica));
  out.emplace_back("ExchangeScales", who.scales(replica));
  out.emplace_back("ExchangePresums", who.presums(replica));
  out.emplace_back("Push", who.push(replica, 0, fp32_payload(1000.0f)));
  out.emplace_back("Pull", who.pull(replica, 0));
  out.emplace_back("Heartbeat", who.heartbeat(replica, nullptr, true));
  out.emplace_back("Checkpoint", who.checkpoint(replica));
  out.emplace_back("Probe", who.probe(replica));
  out.emplace_back("Shutdown", who.shutdown(replica, true));
  return out;
}

}  // namespace

TEST(PsSecurity, WithASecretAStrangerIsRefusedEveryCallAndLearnsNothing) {
  const tc::ClusterSecret secret = tc::ClusterSecret::generate();
  PsTask ps(2, secret);
  // Replicas 0 and 1 start a run; a stranger without a token, and one with
  // another run's token, try everything in between.
  RawCaller chief(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(0)));
  RawCaller worker(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(1)));
  ASSERT_NO_FATAL_FAILURE(start_run(chief, worker));
  RawCaller nobody(ps.address(), tc::new_session_id());
  RawCaller other_run(ps.address(), tc::new_session_id(),
                      token_of(tc::ClusterSecret::generate(), tc::Role::replica_role(0)));
  for (RawCaller* stranger : {&nobody, &other_run}) {
    for (uint32_t as : {0u, 1u}) {
      for (const auto& [call, s] : every_call(*stranger, as)) {
        EXPECT_EQ(s.error_code(), StatusCode::UNAUTHENTICATED) << call << " as " << as << ": " << s.error_message();
        // Nothing about the run: no fingerprint, label, phase, step or replica names.
        for (const char* secret_word : {"42", "test:", "worker", "running", "step", "replica"})
          EXPECT_EQ(s.error_message().find(secret_word), std::string::npos) << call << ": " << s.error_message();
      }
    }
    EXPECT_EQ(stranger->status().error_code(), StatusCode::UNAUTHENTICATED);
  }
  EXPECT_FALSE(tc::query_ps_status(ps.address(), 5).has_value());
  // The run is untouched: one step with exactly the replicas' payloads.
  const std::string p0 = fp32_payload(1.0f), p1 = fp32_payload(2.0f);
  ASSERT_TRUE(chief.push(0, 0, p0).ok());
  ASSERT_TRUE(worker.push(1, 0, p1).ok());
  std::vector<uint8_t> sum;
  bool ready = false;
  ASSERT_TRUE(chief.pull(0, 0, &sum, &ready).ok());
  EXPECT_TRUE(ready);
  EXPECT_EQ(sum, fp32_sum({p0, p1}));
  rpc::StatusReply st;
  ASSERT_TRUE(worker.status(&st).ok());
  EXPECT_EQ(st.phase(), "running");
  EXPECT_EQ(st.global_step(), 1);
}

TEST(PsSecurity, AReplicaCannotActAsAnotherAndOnlyTheChiefControlsTheRun) {
  const tc::ClusterSecret secret = tc::ClusterSecret::generate();
  PsTask ps(2, secret);
  RawCaller chief(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(0)));
  RawCaller worker(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(1)));
  RawCaller observer(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::observer()));
  EXPECT_EQ(worker.init(0, 2).error_code(), StatusCode::PERMISSION_DENIED);  // replica 1's token claiming 0
  EXPECT_EQ(worker.init(1, 2).error_code(), StatusCode::PERMISSION_DENIED);
  ASSERT_NO_FATAL_FAILURE(start_run(chief, worker));
  // Replica 1 posing as the chief, and the observer as anyone: refused.
  for (const auto& [call, s] : every_call(worker, 0))
    EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << call << ": " << s.error_message();
  for (uint32_t as : {0u, 1u})
    for (const auto& [call, s] : every_call(observer, as))
      EXPECT_EQ(s.error_code(), StatusCode::PERMISSION_DENIED) << call << " as " << as << ": " << s.error_message();
  EXPECT_TRUE(observer.status().ok());  // what evaluators may do
  tc::Credential watcher{tc::Role::observer(), secret.key_for(tc::Role::observer())};
  EXPECT_TRUE(tc::query_ps_status(ps.address(), 5, watcher).has_value());
  // The replicas' own step is exactly theirs.
  const std::string p0 = fp32_payload(3.0f), p1 = fp32_payload(-1.0f);
  ASSERT_TRUE(worker.push(1, 0, p1).ok());
  ASSERT_TRUE(chief.push(0, 0, p0).ok());
  std::vector<uint8_t> sum;
  ASSERT_TRUE(worker.pull(1, 0, &sum).ok());
  EXPECT_EQ(sum, fp32_sum({p0, p1}));
  rpc::HeartbeatReply hb;
  ASSERT_TRUE(worker.heartbeat(1, &hb).ok());
  EXPECT_FALSE(hb.finished());
  EXPECT_TRUE(hb.failure().empty());
}

// The chief's link probe (--codec=auto): it measures, before and during the
// run, asks for at most 4 MiB each way, and changes nothing; Status then
// tells every replica the codecs the chief's Init set.
TEST(PsSecurity, TheChiefsLinkProbeIsBoundedAndChangesNothing) {
  const tc::ClusterSecret secret = tc::ClusterSecret::generate();
  PsTask ps(2, secret);
  RawCaller chief(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(0)));
  RawCaller worker(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(1)));
  std::string got;
  ASSERT_TRUE(chief.probe(0, 1000, 3000, &got).ok());  // before Init
  EXPECT_EQ(got, std::string(3000, '\0'));
  rpc::StatusReply st;
  ASSERT_TRUE(worker.status(&st).ok());
  EXPECT_EQ(st.phase(), "waiting_init");
  EXPECT_EQ(st.variables_size(), 0);
  for (auto [send, back] : {std::pair<size_t, uint32_t>{(4u << 20) + 1, 0}, {0, (4u << 20) + 1}}) {
    const grpc::Status s = chief.probe(0, send, back);
    EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << send << " " << back;
    EXPECT_NE(s.error_message().find("at most 4194304"), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(worker.probe(1).error_code(), StatusCode::PERMISSION_DENIED);
  const tc::Credential chief_key{tc::Role::replica_role(0), secret.key_for(tc::Role::replica_role(0))};
  tc::ProbeOptions o;
  o.credential = chief_key;
  o.min_seconds = 0.01;
  o.max_bytes = 4u << 20;
  o.message_bytes = 1u << 20;
  const tc::LinkMeasurement m = tc::probe_link(ps.address(), o);
  EXPECT_GT(m.up_bytes_per_s, 1e6);  // loopback
  EXPECT_GT(m.down_bytes_per_s, 1e6);
  EXPECT_GE(m.up_bytes, 2u << 20);
  EXPECT_LE(m.up_bytes, 4u << 20);
  EXPECT_GE(m.down_bytes, 2u << 20);
  EXPECT_GT(m.rtt_s, 0.0);
  EXPECT_GE(m.two_way_factor, 1.0);  // both ways at once: within [1, 2] by construction
  EXPECT_LE(m.two_way_factor, 2.0);
  tc::ProbeOptions as_worker = o;
  as_worker.credential = tc::Credential{tc::Role::replica_role(1), secret.key_for(tc::Role::replica_role(1))};
  EXPECT_THROW(tc::probe_link(ps.address(), as_worker), tc::PeerError);
  tc::ProbeOptions bad = o;
  bad.message_bytes = (4u << 20) + 1;
  EXPECT_THROW(tc::probe_link(ps.address(), bad), std::invalid_argument);
  // During the run: a probe leaves the step alone, and Status names the codecs.
  ASSERT_NO_FATAL_FAILURE(start_run(chief, worker));
  ASSERT_TRUE(chief.probe(0, 1u << 20, 1u << 20).ok());
  ASSERT_TRUE(worker.status(&st).ok());
  EXPECT_EQ(st.phase(), "running");
  EXPECT_EQ(st.global_step(), 0);
  ASSERT_EQ(st.variables_size(), 1);
  EXPECT_EQ(st.variables(0).name(), "w");
  EXPECT_EQ(st.variables(0).codec(), "fp32");
  const auto seen = tc::query_ps_status(ps.address(), 5, chief_key);
  ASSERT_TRUE(seen.has_value());
  ASSERT_EQ(seen->variables.size(), 1u);
  EXPECT_EQ(seen->variables[0], (std::pair<std::string, std::string>{"w", "fp32"}));
}

// With a rejoin window (--rejoin_window_steps: keep_pulled_steps) a new
// chief process's Init of a running sync run changes nothing: it is told to
// register and catch up, its Register replaces the old session, and the
// old process's calls are refused from then on.
TEST(PsSecurity, WithARejoinWindowARestartedSyncChiefIsToldToCatchUp) {
  const tc::ClusterSecret secret = tc::ClusterSecret::generate();
  tc::ServerOptions o = PsTask::options(2, secret, {});
  o.keep_pulled_steps = true;
  terngrad::testing::ServingPs ps(o, nullptr);
  RawCaller chief(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(0)));
  RawCaller worker(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(1)));
  ASSERT_NO_FATAL_FAILURE(start_run(chief, worker));
  const std::string p0 = fp32_payload(1.0f), p1 = fp32_payload(2.0f);
  ASSERT_TRUE(chief.push(0, 0, p0).ok());
  ASSERT_TRUE(worker.push(1, 0, p1).ok());
  std::vector<uint8_t> sum;
  ASSERT_TRUE(worker.pull(1, 0, &sum).ok());
  ASSERT_TRUE(chief.pull(0, 0, &sum).ok());  // every replica pulled step 0: it stays (the window)
  RawCaller restarted(ps.address(), tc::new_session_id(), token_of(secret, tc::Role::replica_role(0)));
  rpc::InitReply reply;
  ASSERT_TRUE(restarted.init(0, 2, true, kFingerprint, "fp32", &reply).ok());
  EXPECT_TRUE(reply.already_running());
  EXPECT_EQ(reply.global_step(), 1);
  EXPECT_EQ(restarted.init(0, 2, true, kFingerprint + 1).error_code(), StatusCode::FAILED_PRECONDITION);
  ASSERT_TRUE(restarted.register_as(0).ok());
  std::vector<uint8_t> again;
  ASSERT_TRUE(restarted.pull(0, 0, &again).ok());  // the kept step it catches up through
  EXPECT_EQ(again, fp32_sum({p0, p1}));
  EXPECT_EQ(chief.push(0, 1, p0).error_code(), StatusCode::PERMISSION_DENIED);  // the old process
  rpc::StatusReply st;
  ASSERT_TRUE(worker.status(&st).ok());
  EXPECT_EQ(st.phase(), "running");
}

TEST(PsSecurity, WithoutASecretCallsAreStillBoundToTheRegisteredSession) {
  PsTask ps(2, std::nullopt);
  RawCaller chief(ps.address(), tc::new_session_id());
  RawCaller worker(ps.address(), tc::new_session_id());
  ASSERT_NO_FATAL_FAILURE(start_run(chief, worker));
  // Another process in replica 1's (or the chief's) name: its calls carry
  // another session, and a second Register of a live replica is refused.
  RawCaller impostor(ps.address(), tc::new_session_id());
  EXPECT_EQ(impostor.register_as(1).error_code(), StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(impostor.push(1, 0, fp32_payload(1e6f)).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(impostor.pull(1, 0).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(impostor.scales(1).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(impostor.heartbeat(1, nullptr, true).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(impostor.checkpoint(0).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(impostor.shutdown(0, true).error_code(), StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(impostor.shutdown(1, false).error_code(), StatusCode::PERMISSION_DENIED);
  RawCaller no_session(ps.address(), "");
  EXPECT_EQ(no_session.register_as(1).error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(no_session.push(1, 0, fp32_payload(1e6f)).error_code(), StatusCode::PERMISSION_DENIED);
  // The real step.
  const std::string p0 = fp32_payload(0.5f), p1 = fp32_payload(0.25f);
  ASSERT_TRUE(chief.push(0, 0, p0).ok());
  ASSERT_TRUE(worker.push(1, 0, p1).ok());
  std::vector<uint8_t> sum;
  ASSERT_TRUE(chief.pull(0, 0, &sum).ok());
  EXPECT_EQ(sum, fp32_sum({p0, p1}));
  rpc::StatusReply st;
  ASSERT_TRUE(chief.status(&st).ok());
  EXPECT_EQ(st.phase(), "running");
  EXPECT_EQ(st.duplicate_pushes(), 0u);
}

TEST(PsSecurity, ExtraPullsAndDuplicatePushesChangeNothingForOthers) {
  PsTask ps(2, std::nullopt);
  RawCaller chief(ps.address(), tc::new_session_id());
  RawCaller worker(ps.address(), tc::new_session_id());
  ASSERT_NO_FATAL_FAILURE(start_run(chief, worker));
  const std::string p0 = fp32_payload(1.5f), p1 = fp32_payload(-0.5f);
  rpc::PushReply reply;
  ASSERT_TRUE(chief.push(0, 0, p0, &reply).ok());
  EXPECT_EQ(reply.outcome(), rpc::PushReply::APPLIED);
  ASSERT_TRUE(chief.push(0, 0, p0, &reply).ok());  // a retry
  EXPECT_EQ(reply.outcome(), rpc::PushReply::DUPLICATE);
  ASSERT_TRUE(worker.push(1, 0, p1).ok());
  // The chief pulls step 0 four times (as many as there are replicas, and
  // more): replica 1's pull is still served, with the same sum.
  std::vector<uint8_t> first, again, theirs;
  ASSERT_TRUE(chief.pull(0, 0, &first).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(chief.pull(0, 0, &again).ok());
  EXPECT_EQ(again, first);
  const grpc::Status s = worker.pull(1, 0, &theirs);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(theirs, fp32_sum({p0, p1}));
  EXPECT_EQ(first, theirs);
  rpc::StatusReply st;
  ASSERT_TRUE(chief.status(&st).ok());
  EXPECT_EQ(st.duplicate_pushes(), 1u);
  EXPECT_EQ(st.global_step(), 1);
}

// ServerOptions::push_lead_bytes (comm/service/push_skew.h): the ps holds the
// reply to a push whose replica leads, by more than the limit (or twice the
// largest push), a replica whose push is still being read, and sends it once
// that read ends. The held push is summed as usual; a replica cannot hold
// its own reply, and the one behind is never held.
TEST(PsPushLead, AReplyWaitsWhileItsReplicaLeadsOneStillSendingThenLeaves) {
  tc::ServerOptions o = terngrad::testing::test_server_options(2);
  o.poll_s = 0.3;
  o.push_lead_bytes = 1;  // the limit is then twice the largest push: 2 shards
  terngrad::testing::ServingPs ps(o, nullptr);
  RawCaller chief(ps.address(), tc::new_session_id());
  RawCaller worker(ps.address(), tc::new_session_id());
  ASSERT_TRUE(chief.init(0, 2, true, kFingerprint, "fp32", nullptr, /*shards=*/4).ok());
  std::thread reg([&] { EXPECT_TRUE(chief.register_as(0).ok()); });
  ASSERT_TRUE(worker.register_as(1).ok());
  reg.join();

  // The worker's push of shard 0 begins: its header is in, its payload not yet.
  grpc::ClientContext slow_ctx;
  worker.prepare(slow_ctx);
  rpc::PushReply slow_reply;
  auto slow = worker.stub->Push(&slow_ctx, &slow_reply);
  rpc::PushChunk head;
  head.mutable_header()->set_replica(1);
  head.mutable_header()->set_step(0);
  head.mutable_header()->add_shards(0);
  ASSERT_TRUE(slow->Write(head));

  // The chief's first two shards are within the limit; its third leads by 3 pushes.
  const std::string p = fp32_payload(1.0f);
  rpc::PushReply reply;
  for (uint32_t sh = 0; sh < 2; ++sh) {
    const grpc::Status s = chief.push(0, 0, p, &reply, sh);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(reply.outcome(), rpc::PushReply::APPLIED);
  }
  rpc::PushReply held_reply;
  auto held = std::async(std::launch::async, [&] { return chief.push(0, 0, p, &held_reply, 2); });
  ASSERT_EQ(held.wait_for(std::chrono::milliseconds(400)), std::future_status::timeout)
      << "the chief leads a replica still sending by more than the limit: its reply waits";

  // The worker's push ends: the chief's reply leaves, well before the hold's bound (1 s).
  const auto released = std::chrono::steady_clock::now();
  rpc::PushChunk c;
  c.mutable_payload()->set_shard(0);
  c.mutable_payload()->set_offset(0);
  c.mutable_payload()->set_total_bytes(p.size());
  c.mutable_payload()->set_data(fp32_payload(3.0f));
  ASSERT_TRUE(slow->Write(c));
  slow->WritesDone();
  const grpc::Status slow_status = slow->Finish();
  ASSERT_TRUE(slow_status.ok()) << slow_status.error_message();
  EXPECT_EQ(slow_reply.outcome(), rpc::PushReply::APPLIED);
  ASSERT_EQ(held.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const grpc::Status s = held.get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(held_reply.outcome(), rpc::PushReply::APPLIED);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - released).count(), 0.5);

  // Nothing else changed: the sums are the pushes', and the step completes.
  ASSERT_TRUE(chief.push(0, 0, p, &reply, 3).ok());
  for (uint32_t sh = 1; sh < 4; ++sh) ASSERT_TRUE(worker.push(1, 0, fp32_payload(3.0f), &reply, sh).ok());
  rpc::StatusReply st;
  ASSERT_TRUE(chief.status(&st).ok());
  EXPECT_EQ(st.global_step(), 1);
}

namespace {
// An async update rule that counts how often the ps (re)initializes it
// (on the ps's threads; the test reads it: atomic).
struct CountingHandler : tc::UpdateHandler {
  std::atomic<int> inits{0};
  void init_shard(size_t, const tc::ShardView&) override { ++inits; }
  void apply(size_t, int64_t, std::span<float> values, std::span<const float> grad) override {
    for (size_t i = 0; i < values.size(); ++i) values[i] -= grad[i];
  }
  std::vector<std::pair<std::string, std::span<float>>> slots(size_t) override { return {}; }
};
}  // namespace

TEST(PsSecurity, ARefusedInitLeavesARunningPsAloneAndARestartedChiefEndsTheRunSayingWhatToDo) {
  CountingHandler handler;
  PsTask ps(1, std::nullopt, &handler);
  RawCaller chief(ps.address(), tc::new_session_id());
  ASSERT_TRUE(chief.init(0, 1, /*sync=*/false).ok());
  EXPECT_EQ(handler.inits.load(), 1);
  ASSERT_TRUE(chief.register_as(0).ok());
  ASSERT_TRUE(chief.init(0, 1, false).ok());  // the same process retrying: nothing changes
  const grpc::Status other = chief.init(0, 1, false, kFingerprint + 1);
  EXPECT_EQ(other.error_code(), StatusCode::FAILED_PRECONDITION) << other.error_message();
  EXPECT_EQ(handler.inits.load(), 1) << "a refused Init re-initialized the live update rule";
  rpc::StatusReply st;
  ASSERT_TRUE(chief.status(&st).ok());
  EXPECT_EQ(st.phase(), "running");
  // A new chief process of an async run: the ps holds the values, so the
  // run goes on; nothing is initialized again.
  RawCaller async_again(ps.address(), tc::new_session_id());
  rpc::InitReply reply;
  ASSERT_TRUE(async_again.init(0, 1, false, kFingerprint, "fp32", &reply).ok());
  EXPECT_TRUE(reply.already_running());
  EXPECT_EQ(handler.inits.load(), 1);
  ASSERT_TRUE(chief.status(&st).ok());
  EXPECT_EQ(st.phase(), "running");
}

// A new chief process of a sync run without a rejoin window: the run ends,
// and everyone hears why and what to do.
TEST(PsSecurity, ARestartedSyncChiefWithoutARejoinWindowEndsTheRunSayingWhatToDo) {
  PsTask ps(1, std::nullopt);
  RawCaller chief(ps.address(), tc::new_session_id());
  ASSERT_TRUE(chief.init(0, 1).ok());
  ASSERT_TRUE(chief.register_as(0).ok());
  RawCaller restarted(ps.address(), tc::new_session_id());
  const grpc::Status s = restarted.init(0, 1);
  EXPECT_EQ(s.error_code(), StatusCode::ABORTED);
  EXPECT_NE(s.error_message().find("the chief restarted"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("start the whole cluster again"), std::string::npos) << s.error_message();
  rpc::HeartbeatReply hb;
  ASSERT_TRUE(chief.heartbeat(0, &hb).ok());
  EXPECT_NE(hb.failure().find("the chief restarted"), std::string::npos) << hb.failure();
}

TEST(PsSecurity, RequestsAskingForTooMuchAreRefusedNotObeyed) {
  PsTask ps(1, std::nullopt);
  RawCaller chief(ps.address(), tc::new_session_id());
  const grpc::Status many = chief.init(0, tc::kMaxReplicas + 1);
  EXPECT_EQ(many.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(many.error_message().find("total_replicas"), std::string::npos) << many.error_message();
  // The ps still takes a sound Init.
  EXPECT_TRUE(chief.init(0, 1).ok());
}

TEST(PsSecurity, RefusedCallsAreLoggedWithThePeerAddressAndRateLimited) {
  const tc::ClusterSecret secret = tc::ClusterSecret::generate();
  PsTask ps(1, secret);
  RawCaller nobody(ps.address(), tc::new_session_id());
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 40; ++i) (void)nobody.heartbeat(0);
  const std::string log = ::testing::internal::GetCapturedStderr();
  size_t lines = 0;
  for (size_t at = log.find("refused Heartbeat from ipv4:127.0.0.1:"); at != std::string::npos;
       at = log.find("refused Heartbeat from ipv4:127.0.0.1:", at + 1))
    ++lines;
  EXPECT_GE(lines, 1u) << log;
  EXPECT_LE(lines, 10u) << "40 refusals in a burst should be rate-limited: " << log;
}

namespace {
// A CA and a certificate for 127.0.0.1 made with the openssl tool, or "" and
// the reason in *why.
fs::path make_certificates(std::string* why) {
  const fs::path dir = fs::temp_directory_path() / ("tg_tls_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string d = dir.string();
  const std::string cmd =
      "cd " + d + " && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=tg-test-ca "
      ">/dev/null 2>&1 && openssl req -newkey rsa:2048 -nodes -keyout ps.key -out ps.csr -subj /CN=ps >/dev/null 2>&1 && "
      "printf 'subjectAltName=IP:127.0.0.1,DNS:ps\\n' > ext.cnf && "
      "openssl x509 -req -in ps.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out ps.pem -days 2 -extfile ext.cnf "
      ">/dev/null 2>&1";
  if (std::system(cmd.c_str()) != 0) {
    *why = "the openssl tool could not make test certificates (is it installed?)";
    return {};
  }
  return dir;
}
}  // namespace

TEST(PsSecurity, ATlsPsServesTlsClientsAndRefusesPlaintext) {
  std::string why;
  const fs::path certs = make_certificates(&why);
  if (certs.empty()) GTEST_SKIP() << why;
  const tc::ClusterSecret secret = tc::ClusterSecret::generate();
  tc::TlsOptions server_tls;
  server_tls.cert_file = (certs / "ps.pem").string();
  server_tls.key_file = (certs / "ps.key").string();
  PsTask ps(1, secret, nullptr, server_tls);
  tc::TlsOptions client_tls;
  client_tls.ca_file = (certs / "ca.pem").string();
  const tc::Credential chief{tc::Role::replica_role(0), secret.key_for(tc::Role::replica_role(0))};
  // A plaintext client gets nothing; a TLS client with the CA runs a step.
  EXPECT_FALSE(tc::query_ps_status(ps.address(), 3, chief).has_value());
  ASSERT_TRUE(tc::query_ps_status(ps.address(), 5, chief, client_tls).has_value());
  const tc::Layout l = tc::place_variables({{"w", kElements, "fp32"}}, 1);
  tc::ClientOptions o;
  o.rpc_timeout_s = 5;
  o.peer_timeout_s = 10;
  o.credential = chief;
  o.tls = client_tls;
  tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, o);
  c.join(0);
  const std::string p = fp32_payload(2.0f);
  const std::vector<std::span<const uint8_t>> payloads = {{reinterpret_cast<const uint8_t*>(p.data()), p.size()}};
  c.push(0, 0.0f, payloads);
  std::vector<std::vector<uint8_t>> sums(1);
  c.pull_sums(0, sums);
  EXPECT_EQ(sums[0], fp32_sum({p}));
  c.finish(true);
  // A CA file that is not PEM is named before anything connects.
  tc::TlsOptions bad;
  bad.ca_file = (certs / "ext.cnf").string();
  try {
    tc::query_ps_status(ps.address(), 1, chief, bad);
    ADD_FAILURE() << "a non-PEM CA file was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("ext.cnf is not a PEM file"), std::string::npos) << e.what();
  }
  fs::remove_all(certs);
}

TEST(PsSecurity, APsOffLoopbackWithoutASecretWarnsLoudly) {
  // 10.255.255.1 is not this machine's: the ps warns, then cannot listen
  // (nothing is exposed by the test).
  tc::ServerOptions o;
  o.verbose = false;
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(tc::ParameterServer("10.255.255.1:0", o, nullptr), tc::PeerError);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("WARNING: listening on 10.255.255.1:0 WITHOUT a cluster secret"), std::string::npos) << log;
  o.secret = tc::ClusterSecret::generate();
  ::testing::internal::CaptureStderr();
  EXPECT_THROW(tc::ParameterServer("10.255.255.1:0", o, nullptr), tc::PeerError);
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("WARNING"), std::string::npos);
}

namespace {
// A 1-replica sync run of `codec` on a fresh ps, replica 0 registered.
void start_single(RawCaller& chief, const std::string& codec) {
  ASSERT_TRUE(chief.init(0, 1, true, kFingerprint, codec).ok());
  ASSERT_TRUE(chief.register_as(0).ok());
}

void expect_refused_saying(const grpc::Status& s, std::initializer_list<std::string> parts) {
  EXPECT_EQ(s.error_code(), StatusCode::INVALID_ARGUMENT) << s.error_message();
  for (const std::string& part : parts) EXPECT_NE(s.error_message().find(part), std::string::npos) << s.error_message();
}
}  // namespace

// A fixed-size codec's payload has exactly its size: one byte short or over
// is refused, naming the replica, shard, length and the size.
TEST(PsSecurity, AFixedSizePayloadOfAnotherLengthIsRefused) {
  PsTask ps(1, std::nullopt);
  RawCaller chief(ps.address(), tc::new_session_id());
  ASSERT_NO_FATAL_FAILURE(start_single(chief, "fp32"));
  const std::string p = fp32_payload(1.0f);  // 16 + 4 * 64 = 272 bytes
  expect_refused_saying(chief.push(0, 0, p.substr(0, p.size() - 1)),
                        {"worker 0", "shard 0 has 271 of the 272 payload bytes its codec writes"});
  expect_refused_saying(chief.push(0, 0, p + "x"), {"worker 0", "shard 0", "announces 273 bytes", "272"});
  rpc::PushReply reply;
  ASSERT_TRUE(chief.push(0, 0, p, &reply).ok());
  EXPECT_EQ(reply.outcome(), rpc::PushReply::APPLIED);
}

// A variable-size codec's payload may be shorter than the capacity (its
// header says how long, and the codec's validate() checks that); an empty
// one or one over the capacity is refused before the codec sees it.
TEST(PsSecurity, AVariableSizePayloadMayBeShorterButNotEmptyNorOverTheCapacity) {
  varsize_test::register_varsize_test_codec();
  PsTask ps(1, std::nullopt);
  RawCaller chief(ps.address(), tc::new_session_id());
  ASSERT_NO_FATAL_FAILURE(start_single(chief, varsize_test::kName));
  auto codec = tc::make_codec(varsize_test::kName);
  const uint64_t capacity = codec->payload_bytes(kElements);
  std::vector<float> g(kElements, 0.0f);
  g[3] = 1.5f, g[40] = -2.0f;
  std::string p(capacity, '\0');
  p.resize(codec->encode(g, {}, {reinterpret_cast<uint8_t*>(p.data()), p.size()}));
  ASSERT_LT(p.size(), capacity);

  expect_refused_saying(chief.push(0, 0, ""), {"worker 0", "shard 0 has 0 payload bytes",
                                               "variable-size codec writes 1 to " + std::to_string(capacity)});
  expect_refused_saying(chief.push(0, 0, std::string(capacity + 1, '\0')),
                        {"worker 0", "shard 0", "announces " + std::to_string(capacity + 1), std::to_string(capacity)});
  // Within the limits, the codec decides: a payload cut short is malformed.
  expect_refused_saying(chief.push(0, 0, p.substr(0, p.size() - 4)), {"worker 0", "shard 0", "malformed payload"});
  // A refused push changed nothing: the sound one is step 0's only payload.
  rpc::PushReply reply;
  ASSERT_TRUE(chief.push(0, 0, p, &reply).ok());
  EXPECT_EQ(reply.outcome(), rpc::PushReply::APPLIED);
  std::vector<uint8_t> sum;
  ASSERT_TRUE(chief.pull(0, 0, &sum).ok());
  const std::span<const uint8_t> views[1] = {{reinterpret_cast<const uint8_t*>(p.data()), p.size()}};
  std::vector<uint8_t> want;
  codec->aggregate(views, kElements, want);
  EXPECT_EQ(sum, want);
}
