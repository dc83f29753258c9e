// link_probe.h: the chief's timed exchanges of filler with a ps.
#include "terngrad/comm/link_probe.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>

#include "chunks.h"
#include "parameter_server.grpc.pb.h"
#include "terngrad/comm/errors.h"
#include "tls_credentials.h"

namespace terngrad::comm {

namespace {

using Clock = std::chrono::steady_clock;

class Prober {
 public:
  Prober(const std::string& address, const ProbeOptions& o) : address_(address), o_(o), until_(deadline_of(o)) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(detail::kMaxMessageBytes);
    args.SetMaxSendMessageSize(detail::kMaxMessageBytes);
    detail::add_tls_channel_arguments(o.tls, args);
    stub_ = rpc::ParameterServer::NewStub(grpc::CreateCustomChannel(address, detail::channel_credentials(o.tls), args));
  }

  // One call: `send` bytes up, `back` bytes down; its wall time.
  double call(uint32_t send, uint32_t back) {
    rpc::ProbeRequest req;
    req.set_replica(0);
    req.mutable_data()->assign(send, '\x5a');
    req.set_reply_bytes(back);
    grpc::ClientContext ctx;
    if (o_.credential) ctx.AddMetadata(kAuthMetadataKey, o_.credential->call_token());
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(until_ - Clock::now()));
    rpc::ProbeReply reply;
    const auto t0 = Clock::now();
    const grpc::Status s = stub_->Probe(&ctx, req, &reply);
    const double took = std::chrono::duration<double>(Clock::now() - t0).count();
    if (!s.ok())
      throw PeerError("link probe of " + address_ + ": " + s.error_message() + " (status " +
                      std::to_string(static_cast<int>(s.error_code())) + ")");
    if (reply.data().size() != back)
      throw PeerError("link probe of " + address_ + ": asked for " + std::to_string(back) + " bytes, got " +
                      std::to_string(reply.data().size()));
    return took;
  }

  // Filler one way until min_seconds or max_bytes; bytes per second after
  // the empty round trip of each call is taken off.
  double rate(bool up, double rtt, uint64_t& bytes) {
    const uint32_t m = o_.message_bytes;
    double busy = 0;
    const auto t0 = Clock::now();
    int calls = 0;
    while (calls < 2 || (std::chrono::duration<double>(Clock::now() - t0).count() < o_.min_seconds &&
                         bytes + m <= o_.max_bytes)) {
      busy += std::max(0.0, call(up ? m : 0, up ? 0 : m) - rtt);
      bytes += m;
      ++calls;
    }
    return static_cast<double>(bytes) / std::max(busy, 1e-9);
  }

  // `calls` messages up on this thread and as many down on another, at
  // once over the one connection; the wall time of both.
  double both_ways(int calls) {
    const uint32_t m = o_.message_bytes;
    std::exception_ptr down_failed;
    const auto t0 = Clock::now();
    std::thread down([&] {
      try {
        for (int i = 0; i < calls; ++i) call(0, m);
      } catch (...) {
        down_failed = std::current_exception();
      }
    });
    try {
      for (int i = 0; i < calls; ++i) call(m, 0);
    } catch (...) {
      down.join();
      throw;
    }
    down.join();
    if (down_failed) std::rethrow_exception(down_failed);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }

 private:
  static Clock::time_point deadline_of(const ProbeOptions& o) {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  }
  std::string address_;
  const ProbeOptions& o_;
  Clock::time_point until_;
  std::unique_ptr<rpc::ParameterServer::Stub> stub_;
};

}  // namespace

LinkMeasurement probe_link(const std::string& address, const ProbeOptions& o) {
  if (o.message_bytes < 1024 || o.message_bytes > detail::kMaxProbeBytes || o.latency_calls < 1 ||
      !(o.timeout_s > 0) || !(o.min_seconds >= 0) || o.max_bytes < 2 * uint64_t{o.message_bytes})
    throw std::invalid_argument("probe_link: message_bytes " + std::to_string(o.message_bytes) + " (1 KiB to 4 MiB), " +
                                std::to_string(o.latency_calls) + " latency calls (from 1), timeout " +
                                std::to_string(o.timeout_s) + " s, max_bytes " + std::to_string(o.max_bytes) +
                                " (two messages at least)");
  const auto t0 = Clock::now();
  Prober p(address, o);
  LinkMeasurement m;
  p.call(0, 0);  // connects (TLS, HTTP/2 settings): not a round trip of the link
  m.rtt_s = 1e30;
  for (int i = 0; i < o.latency_calls; ++i) m.rtt_s = std::min(m.rtt_s, p.call(0, 0));
  m.up_bytes_per_s = p.rate(true, m.rtt_s, m.up_bytes);
  m.down_bytes_per_s = p.rate(false, m.rtt_s, m.down_bytes);
  // Both ways at once, as many messages each way as the up phase sent (its
  // duration again, about).
  const int calls = static_cast<int>(m.up_bytes / o.message_bytes);
  const double alone = calls * (o.message_bytes / std::min(m.up_bytes_per_s, m.down_bytes_per_s) + m.rtt_s);
  m.two_way_factor = std::clamp(p.both_ways(calls) / std::max(alone, 1e-9), 1.0, 2.0);
  m.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return m;
}

}  // namespace terngrad::comm
