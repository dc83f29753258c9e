// A gRPC server on a free loopback port serving one stand-in service whose
// answers a test controls (the replica's side tested against it).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

namespace terngrad::testing {

template <class Service>
struct StandInServer {
  Service ps;
  std::unique_ptr<grpc::Server> server;
  int port = 0;

  StandInServer() {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    b.RegisterService(&ps);
    server = b.BuildAndStart();
  }
  StandInServer(const StandInServer&) = delete;
  StandInServer& operator=(const StandInServer&) = delete;
  ~StandInServer() { shutdown(); }

  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
  // In-flight calls cancelled, the port closed.
  void shutdown() {
    if (!server) return;
    server->Shutdown(std::chrono::system_clock::now());
    server.reset();
  }
};

}  // namespace terngrad::testing
