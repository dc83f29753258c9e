// Private: gRPC channel and server credentials from TlsOptions (tls.h).
// Every missing or unreadable file is an std::invalid_argument naming it and
// the option it came from, raised before anything listens or connects.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "terngrad/comm/tls.h"

namespace terngrad::comm::detail {

std::shared_ptr<grpc::ServerCredentials> server_credentials(const TlsOptions& tls);
std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const TlsOptions& tls);
// Channel arguments TLS needs (the server name override), added to args.
void add_tls_channel_arguments(const TlsOptions& tls, grpc::ChannelArguments& args);

}  // namespace terngrad::comm::detail
