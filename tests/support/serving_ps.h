// A parameter server serving in a thread on a free loopback port, for the
// service's tests: stopped and joined when it goes out of scope; what run()
// threw is kept in `error`.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "terngrad/comm/ps_server.h"

namespace terngrad::testing {

struct ServingPs {
  std::unique_ptr<comm::ParameterServer> server;
  std::thread thread;
  std::string error;  // what run() threw

  ServingPs(const comm::ServerOptions& options, comm::UpdateHandler* handler)
      : server(std::make_unique<comm::ParameterServer>("127.0.0.1:0", options, handler)) {
    thread = std::thread([this] {
      try {
        server->run();
      } catch (const std::exception& e) {
        error = e.what();
      }
    });
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
  ~ServingPs() {
    server->stop(false, "test over");
    thread.join();
  }
  ServingPs(const ServingPs&) = delete;
  ServingPs& operator=(const ServingPs&) = delete;
};

// Options of a quiet test ps whose replicas are named "worker <r>".
inline comm::ServerOptions test_server_options(int replicas) {
  comm::ServerOptions o;
  o.verbose = false;
  for (int r = 0; r < replicas; ++r) o.replica_names.push_back("worker " + std::to_string(r));
  return o;
}

}  // namespace terngrad::testing
