// The ParameterServer service's methods (ps_methods.h).
#include "ps_methods.h"

#include <google/protobuf/descriptor.h>

#include <map>
#include <mutex>
#include <stdexcept>

#include "parameter_server.grpc.pb.h"

namespace terngrad::comm::detail {

namespace {

const google::protobuf::MethodDescriptor& method_of(const std::string& method) {
  const google::protobuf::ServiceDescriptor* service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(rpc::ParameterServer::service_full_name());
  const google::protobuf::MethodDescriptor* m = service ? service->FindMethodByName(method) : nullptr;
  if (m == nullptr) throw std::logic_error("no ParameterServer." + method + " in the generated descriptors");
  return *m;
}

}  // namespace

int parameter_server_method_index(const std::string& method) {
  // The generated Service adds its methods in the order of the proto's
  // service, which is the descriptor's.
  return method_of(method).index();
}

const char* parameter_server_method_path(const std::string& method) {
  static std::mutex mu;
  static std::map<std::string, std::string> paths;  // grpc's RpcMethod keeps the pointer
  std::lock_guard<std::mutex> lock(mu);
  auto at = paths.find(method);
  if (at == paths.end()) {
    const google::protobuf::MethodDescriptor& m = method_of(method);
    at = paths.emplace(method, "/" + m.service()->full_name() + "/" + m.name()).first;
  }
  return at->second.c_str();
}

}  // namespace terngrad::comm::detail
