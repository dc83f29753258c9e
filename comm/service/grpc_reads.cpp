#include "terngrad/comm/grpc_reads.h"

#include <cstdlib>

#include "terngrad/comm/credentials.h"

namespace terngrad::comm {

bool crosses_a_network(const ClusterSpec& cluster) {
  for (const auto* job : {&cluster.ps, &cluster.chief, &cluster.worker, &cluster.evaluator})
    for (const HostPort& task : *job)
      if (!is_loopback_address(task.str())) return true;
  return false;
}

std::string read_whole_grpc_frames() {
  setenv("GRPC_EXPERIMENTS", kWholeFrameReadExperiments, /*overwrite=*/0);
  const char* now = std::getenv("GRPC_EXPERIMENTS");
  return now != nullptr ? now : "";
}

}  // namespace terngrad::comm
