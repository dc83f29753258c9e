#include "ps_request_script.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>

#include "parameter_server.grpc.pb.h"
#include "ps_in_process.h"
#include "terngrad/comm/credentials.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/ps_server.h"

namespace terngrad::testing {

namespace {

namespace rpc = terngrad::comm::rpc;
namespace tc = terngrad::comm;

// Append only: seeds name calls by number.
enum Call : uint8_t { kInit, kRegister, kScales, kPush, kPull, kHeartbeat, kStatus, kCheckpoint, kShutdown, kProbe, kCalls };

// The run's secret (fixed: scripts name tokens by role, not by bytes).
tc::ClusterSecret script_secret() {
  return tc::ClusterSecret::from_hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", "script");
}

// An update rule with one optimizer slot, so async Init and Checkpoint carry slots.
struct ScriptHandler : tc::UpdateHandler {
  std::vector<std::vector<float>> momentum;
  void init_shard(size_t shard, const tc::ShardView& view) override {
    if (momentum.size() <= shard) momentum.resize(shard + 1);
    momentum[shard].assign(view.count, 0.0f);
  }
  void apply(size_t shard, int64_t, std::span<float> values, std::span<const float> grad) override {
    std::vector<float>& m = momentum.at(shard);
    for (size_t i = 0; i < values.size() && i < m.size(); ++i) {
      m[i] = 0.9f * m[i] + grad[i];
      values[i] -= 0.01f * m[i];
    }
  }
  std::vector<std::pair<std::string, std::span<float>>> slots(size_t shard) override {
    return {{"Momentum", std::span<float>(momentum.at(shard))}};
  }
};

// Reads the script front to back; anything short reads as empty.
struct Reader {
  std::span<const uint8_t> data;
  uint8_t byte() {
    if (data.empty()) return 0;
    const uint8_t b = data[0];
    data = data.subspan(1);
    return b;
  }
  std::string piece() {
    size_t len = byte();
    len |= size_t{byte()} << 8;
    len = std::min(len, data.size());
    std::string out(reinterpret_cast<const char*>(data.data()), len);
    data = data.subspan(len);
    return out;
  }
};

// What an Init asks the ps to hold, in elements: the harness leaves out Inits
// beyond a small model. A chief may ask a ps for any model that fits its
// memory; that allocation is by design, and a fuzzer's memory limit would
// flag it as a crash.
bool plausible(const rpc::InitHeader& h) {
  uint64_t elements = 0;
  for (const rpc::Variable& v : h.variables()) elements += std::min<uint64_t>(v.size(), uint64_t{1} << 30);
  return elements <= (uint64_t{1} << 20) && h.total_replicas() <= 64;
}

struct Script {
  bool secret = false, async = false;
  int replicas = 1;
};

class Caller {
 public:
  Caller(rpc::ParameterServer::Stub& stub, uint8_t who, const tc::ClusterSecret& secret) : stub_(stub) {
    static const char* sessions[] = {"", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
                                     "cccccccccccccccccccccccccccccccc"};
    session_ = sessions[(who >> 2) & 3];
    switch (who & 3) {
      case 1: token_ = tc::Credential{tc::Role::replica_role(0), secret.key_for(tc::Role::replica_role(0))}.call_token(); break;
      case 2: token_ = tc::Credential{tc::Role::replica_role(1), secret.key_for(tc::Role::replica_role(1))}.call_token(); break;
      case 3: token_ = tc::Credential{tc::Role::observer(), secret.key_for(tc::Role::observer())}.call_token(); break;
      default: break;
    }
  }
  // A short deadline: long polls answer "not ready" at once (a streamed
  // pull waits until 200 ms before the deadline).
  void prepare(grpc::ClientContext& ctx) const {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    if (!session_.empty()) ctx.AddMetadata(tc::kSessionMetadataKey, session_);
    if (!token_.empty()) ctx.AddMetadata(tc::kAuthMetadataKey, token_);
  }

  template <class Chunk, class Reply, class Open>
  grpc::Status client_stream(const std::vector<std::string>& messages, Open open) {
    grpc::ClientContext ctx;
    prepare(ctx);
    Reply reply;
    auto w = open(ctx, reply);
    for (const std::string& m : messages) {
      Chunk c;
      if (!c.ParseFromString(m)) continue;
      if constexpr (std::is_same_v<Chunk, rpc::InitChunk>)
        if (c.has_header() && !plausible(c.header())) return grpc::Status(grpc::StatusCode::CANCELLED, "left out");
      if (!w->Write(c)) break;
    }
    w->WritesDone();
    return w->Finish();
  }

  template <class Request, class Chunk, class Open>
  grpc::Status server_stream(const std::string& message, Open open) {
    Request req;
    if (!req.ParseFromString(message)) return grpc::Status(grpc::StatusCode::CANCELLED, "unparsable");
    grpc::ClientContext ctx;
    prepare(ctx);
    auto r = open(ctx, req);
    Chunk c;
    for (int i = 0; i < 100000 && r->Read(&c); ++i) {
    }
    return r->Finish();
  }

  template <class Request, class Reply, class Call>
  grpc::Status unary(const std::string& message, Call call) {
    Request req;
    if (!req.ParseFromString(message)) return grpc::Status(grpc::StatusCode::CANCELLED, "unparsable");
    grpc::ClientContext ctx;
    prepare(ctx);
    Reply reply;
    return call(ctx, req, reply);
  }

  grpc::Status make(Call kind, Reader& in) {
    rpc::ParameterServer::Stub& s = stub_;
    if (kind == kInit || kind == kPush) {
      const size_t n = in.byte() % (kMaxStreamMessages + 1);
      std::vector<std::string> messages;
      for (size_t i = 0; i < n; ++i) messages.push_back(in.piece());
      if (kind == kInit)
        return client_stream<rpc::InitChunk, rpc::InitReply>(
            messages, [&](grpc::ClientContext& ctx, rpc::InitReply& reply) { return s.Init(&ctx, &reply); });
      return client_stream<rpc::PushChunk, rpc::PushReply>(
          messages, [&](grpc::ClientContext& ctx, rpc::PushReply& reply) { return s.Push(&ctx, &reply); });
    }
    const std::string m = in.piece();
    switch (kind) {
      case kRegister:
        return unary<rpc::RegisterRequest, rpc::RegisterReply>(
            m, [&](auto& ctx, auto& req, auto& reply) { return s.Register(&ctx, req, &reply); });
      case kScales:
        return unary<rpc::ScalesRequest, rpc::ScalesReply>(
            m, [&](auto& ctx, auto& req, auto& reply) { return s.ExchangeScales(&ctx, req, &reply); });
      case kPull:
        return server_stream<rpc::PullRequest, rpc::PullChunk>(m, [&](auto& ctx, auto& req) { return s.Pull(&ctx, req); });
      case kHeartbeat:
        return unary<rpc::HeartbeatRequest, rpc::HeartbeatReply>(
            m, [&](auto& ctx, auto& req, auto& reply) { return s.Heartbeat(&ctx, req, &reply); });
      case kStatus:
        return unary<rpc::StatusRequest, rpc::StatusReply>(
            m, [&](auto& ctx, auto& req, auto& reply) { return s.Status(&ctx, req, &reply); });
      case kCheckpoint:
        return server_stream<rpc::CheckpointRequest, rpc::TensorChunk>(
            m, [&](auto& ctx, auto& req) { return s.Checkpoint(&ctx, req); });
      case kProbe:
        return unary<rpc::ProbeRequest, rpc::ProbeReply>(
            m, [&](auto& ctx, auto& req, auto& reply) { return s.Probe(&ctx, req, &reply); });
      default:
        return unary<rpc::ShutdownRequest, rpc::ShutdownReply>(
            m, [&](auto& ctx, auto& req, auto& reply) { return s.Shutdown(&ctx, req, &reply); });
    }
  }

 private:
  rpc::ParameterServer::Stub& stub_;
  std::string session_, token_;
};

// Seed writing: the inverse of Reader.
struct Writer {
  std::vector<uint8_t> out;
  void byte(uint8_t b) { out.push_back(b); }
  void piece(const google::protobuf::Message& m) {
    const std::string s = m.SerializeAsString();
    byte(static_cast<uint8_t>(s.size() & 0xff));
    byte(static_cast<uint8_t>(s.size() >> 8));
    out.insert(out.end(), s.begin(), s.end());
  }
  void call(Call kind, uint8_t token, uint8_t session) { byte(kind), byte(static_cast<uint8_t>(token | session << 2)); }
};

}  // namespace

ScriptOutcome run_ps_request_script(std::span<const uint8_t> script) {
  ScriptOutcome outcome;
  Reader in{script};
  const uint8_t mode = in.byte();
  const tc::ClusterSecret secret = script_secret();
  tc::ServerOptions o;
  o.verbose = false;
  o.poll_s = 0.001;
  o.peer_timeout_s = 30;
  o.startup_timeout_s = 30;
  o.keep_steps = 2;
  if (mode & 1) o.secret = secret;
  ScriptHandler handler;
  tc::ParameterServer ps("", o, (mode & 2) ? &handler : nullptr);
  auto stub = rpc::ParameterServer::NewStub(tc::detail::in_process_channel(ps));
  while (!in.data.empty() && outcome.calls < kMaxCalls) {
    const Call kind = static_cast<Call>(in.byte() % kCalls);
    Caller caller(*stub, in.byte(), secret);
    const grpc::Status s = caller.make(kind, in);
    ++outcome.calls;
    outcome.refused += !s.ok();
  }
  // Still serving: the chief's Status answers.
  Caller chief(*stub, 1 | 1 << 2, secret);
  grpc::ClientContext ctx;
  chief.prepare(ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  rpc::StatusReply reply;
  const grpc::Status st = stub->Status(&ctx, rpc::StatusRequest{}, &reply);
  outcome.ps_alive = st.ok();
  if (!st.ok()) outcome.detail = "Status after the script: " + st.error_message();
  ps.stop(true, "");
  return outcome;
}

std::vector<uint8_t> make_seed_script(bool secret, bool async, bool server_ef) {
  if (async && server_ef) throw std::invalid_argument("make_seed_script: server_ef() needs a sync run");
  Writer w;
  w.byte(static_cast<uint8_t>((secret ? 1 : 0) | (async ? 2 : 0) | 4));
  const uint8_t chief = 1, worker = 2, observer = 3, A = 1, B = 2;
  const char* spec = server_ef ? "server_ef(fp16)" : "fp32";
  auto codec = tc::make_codec(spec);
  const uint64_t n = 8;
  // The chief's Init header: the one variable with `codec`, under `fingerprint`.
  const auto init_head = [&](const char* codec_spec, uint64_t fingerprint) {
    rpc::InitChunk head;
    rpc::InitHeader* h = head.mutable_header();
    h->set_replica(0);
    rpc::Variable* v = h->add_variables();
    v->set_name("w");
    v->set_size(n);
    v->set_codec(codec_spec);
    rpc::Shard* sh = h->add_shards();
    sh->set_variable(0);
    sh->set_count(n);
    h->set_fingerprint(fingerprint);
    h->set_sync(!async);
    h->set_total_replicas(2);
    h->set_replicas_to_aggregate(2);
    if (!async) h->set_checkpoint_interval_steps(1);  // the ps copies each step's states aside too
    return head;
  };
  const auto register_both = [&](uint64_t fingerprint) {
    for (uint32_t r = 0; r < 2; ++r) {
      w.call(kRegister, r == 0 ? chief : worker, r == 0 ? A : B);
      rpc::RegisterRequest req;
      req.set_replica(r);
      req.set_fingerprint(fingerprint);
      req.set_label("seed");
      w.piece(req);
    }
  };
  {
    w.call(kInit, chief, A);
    std::vector<rpc::InitChunk> chunks = {init_head(spec, 7)};
    if (async) {
      for (const char* slot : {"", "Momentum"}) {
        rpc::InitChunk t;
        t.mutable_tensor()->set_shard(0);
        t.mutable_tensor()->set_slot(slot);
        t.mutable_tensor()->set_total_bytes(4 * n);
        t.mutable_tensor()->set_data(std::string(4 * n, '\0'));
        chunks.push_back(t);
      }
    }
    if (server_ef) {  // a residual as a resumed run brings it: the codec's own state after one sum
      std::vector<std::string> payloads(2, std::string(codec->payload_bytes(n), '\0'));
      std::vector<std::span<const uint8_t>> views;
      for (uint32_t r = 0; r < 2; ++r) {
        const std::vector<float> g(n, 0.3f + 0.1f * r);
        std::vector<tc::ElementRange> slices = {{0, n}};
        std::vector<std::span<uint8_t>> outs = {{reinterpret_cast<uint8_t*>(payloads[r].data()), payloads[r].size()}};
        codec->encode_slices(g, tc::EncodeContext{}, slices, outs);
        views.emplace_back(reinterpret_cast<const uint8_t*>(payloads[r].data()), payloads[r].size());
      }
      std::vector<uint8_t> state, sum;
      codec->aggregate_step(views, n, tc::AggregateContext{}, state, sum);
      rpc::InitChunk t;
      t.mutable_tensor()->set_shard(0);
      t.mutable_tensor()->set_slot("server_state");
      t.mutable_tensor()->set_total_bytes(state.size());
      t.mutable_tensor()->set_data(std::string(state.begin(), state.end()));
      chunks.push_back(t);
    }
    w.byte(static_cast<uint8_t>(chunks.size()));
    for (const auto& c : chunks) w.piece(c);
  }
  register_both(7);
  {
    w.call(kScales, chief, A);
    rpc::ScalesRequest req;
    req.set_replica(0);
    req.add_scales(1.0f);
    w.piece(req);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    w.call(kPush, r == 0 ? chief : worker, r == 0 ? A : B);
    std::vector<float> g(n, 0.5f + r);
    std::string payload(codec->payload_bytes(n), '\0');
    std::vector<tc::ElementRange> slices = {{0, n}};
    std::vector<std::span<uint8_t>> outs = {{reinterpret_cast<uint8_t*>(payload.data()), payload.size()}};
    codec->encode_slices(g, tc::EncodeContext{}, slices, outs);
    rpc::PushChunk head, body;
    head.mutable_header()->set_replica(r);
    head.mutable_header()->set_step(0);
    body.mutable_payload()->set_shard(0);
    body.mutable_payload()->set_total_bytes(payload.size());
    body.mutable_payload()->set_data(payload);
    w.byte(2);
    w.piece(head);
    w.piece(body);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    w.call(kPull, r == 0 ? chief : worker, r == 0 ? A : B);
    rpc::PullRequest req;
    req.set_replica(r);
    req.set_step(0);
    req.set_stream(r == 1);
    w.piece(req);
  }
  {
    w.call(kHeartbeat, worker, B);
    rpc::HeartbeatRequest req;
    req.set_replica(1);
    req.set_done(true);
    w.piece(req);
    w.call(kStatus, observer, 0);
    w.piece(rpc::StatusRequest{});
    w.call(kCheckpoint, chief, A);
    rpc::CheckpointRequest ck;  // step 0: the step just summed
    w.piece(ck);
    w.call(kProbe, chief, A);
    rpc::ProbeRequest probe;
    probe.set_data("filler");
    probe.set_reply_bytes(64);
    w.piece(probe);
  }
  if (!async) {
    // --codec=auto chose again: a rewind to step 1 with another codec (so
    // another fingerprint), and both replicas register with it.
    w.call(kInit, chief, A);
    rpc::InitChunk head = init_head(server_ef ? "fp32" : "fp16", 8);
    head.mutable_header()->set_global_step(1);
    head.mutable_header()->set_rewind_id(1);
    head.mutable_header()->set_new_plan(true);
    w.byte(1);
    w.piece(head);
    register_both(8);
  }
  {
    w.call(kShutdown, chief, A);
    rpc::ShutdownRequest down;
    down.set_ok(true);
    w.piece(down);
  }
  return w.out;
}

}  // namespace terngrad::testing
