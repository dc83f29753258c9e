#include "terngrad/comm/ps_status.h"

#include <grpcpp/grpcpp.h>

#include "parameter_server.grpc.pb.h"
#include "tls_credentials.h"

namespace terngrad::comm {

std::optional<PsStatus> query_ps_status(const std::string& address, double timeout_s,
                                        const std::optional<Credential>& credential, const TlsOptions& tls) {
  grpc::ChannelArguments args;
  detail::add_tls_channel_arguments(tls, args);
  auto stub = rpc::ParameterServer::NewStub(grpc::CreateCustomChannel(address, detail::channel_credentials(tls), args));
  grpc::ClientContext ctx;
  if (credential) ctx.AddMetadata(kAuthMetadataKey, credential->call_token());
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                                          std::chrono::duration<double>(timeout_s)));
  rpc::StatusReply reply;
  if (!stub->Status(&ctx, rpc::StatusRequest{}, &reply).ok()) return std::nullopt;
  PsStatus s;
  s.phase = reply.phase();
  s.global_step = reply.global_step();
  s.run_epoch = reply.run_epoch();
  s.failure = reply.failure();
  s.stale_pushes = reply.stale_pushes();
  s.duplicate_pushes = reply.duplicate_pushes();
  s.bytes_received = reply.bytes_received();
  s.bytes_sent = reply.bytes_sent();
  s.total_replicas = static_cast<int>(reply.total_replicas());
  for (const auto& r : reply.replicas()) s.registered += r.registered();
  for (const auto& v : reply.variables()) s.variables.emplace_back(v.name(), v.codec());
  return s;
}

}  // namespace terngrad::comm
