// Private (tests and fuzzing): a channel to a ParameterServer's service
// within this process, no socket involved. The server must have been made
// with the address "" (ps_server.h) or any other; the channel outlives
// neither it nor its run().
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "terngrad/comm/ps_server.h"

namespace terngrad::comm::detail {

std::shared_ptr<grpc::Channel> in_process_channel(ParameterServer& ps);

}  // namespace terngrad::comm::detail
