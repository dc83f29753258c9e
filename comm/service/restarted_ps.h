// A ps that restarted is empty: it waits for the chief's Init, and once
// initialized it knows no replica until each registers again. These are its
// answers to a replica that had joined its predecessor, and how the replica
// tells them from any other refusal (worker_client.cpp), so that an async
// run refills the ps and goes on (WorkerClient::set_ps_refill) where it used
// to end.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string>

namespace terngrad::comm::detail {

inline constexpr const char* kBeforeInit = " before Init";
inline constexpr const char* kNotRegistered = " has not registered with this ps";

// What a ps waiting for Init answers `call` (Push, Pull, ...).
inline grpc::Status before_init(const char* call) {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, std::string(call) + kBeforeInit);
}

// Whether a refusal says the ps does not know this run or this replica: the
// answer of a ps that restarted, to a replica that joined its predecessor.
inline bool says_ps_restarted(const grpc::Status& s) {
  if (s.error_code() != grpc::StatusCode::FAILED_PRECONDITION) return false;
  const std::string& m = s.error_message();
  const std::string before = kBeforeInit;
  return (m.size() >= before.size() && m.compare(m.size() - before.size(), before.size(), before) == 0) ||
         m.find(kNotRegistered) != std::string::npos;
}

}  // namespace terngrad::comm::detail
