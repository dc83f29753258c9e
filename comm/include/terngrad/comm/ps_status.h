// One look at a parameter server's state, for evaluators, launchers and tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "terngrad/comm/credentials.h"
#include "terngrad/comm/tls.h"

namespace terngrad::comm {

struct PsStatus {
  std::string phase;  // waiting_init | running | finished | failed
  int64_t global_step = 0;
  uint64_t run_epoch = 0;  // the last rewind this ps took (0: none)
  std::string failure;
  uint64_t stale_pushes = 0, duplicate_pushes = 0;
  uint64_t bytes_received = 0, bytes_sent = 0;  // payload bytes
  int registered = 0, total_replicas = 0;
  // The run's variables as (name, codec spec), from the chief's Init; empty before it.
  std::vector<std::pair<std::string, std::string>> variables;
};

// nullopt when the ps does not answer within timeout_s (or refuses the
// credential: a ps with a secret answers only callers that prove a role).
std::optional<PsStatus> query_ps_status(const std::string& address, double timeout_s,
                                        const std::optional<Credential>& credential = std::nullopt,
                                        const TlsOptions& tls = {});

}  // namespace terngrad::comm
