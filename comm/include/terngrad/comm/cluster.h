// Who is who in a distributed run: the cluster's tasks by role, and which of
// them this process is. Read from the TF_CONFIG environment variable (as
// Kubernetes' TFJob and tf.distribute set it) or from the TernGrad scripts'
// flags (--job_name, --task_id, --ps_hosts, --worker_hosts).
//
// Replicas are the training processes: the chief (if the cluster has one) is
// replica 0 and worker i is replica i + 1; without a chief, worker 0 is
// replica 0 and acts as the chief (the TF 1.x convention of the TernGrad
// scripts). Parameter servers and the evaluator are not replicas.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace terngrad::comm {

enum class TaskType { kPs, kChief, kWorker, kEvaluator };
const char* task_type_name(TaskType t);  // "ps", "chief", "worker", "evaluator"

struct HostPort {
  std::string host;  // name, IPv4, or IPv6 without brackets
  int port = 0;
  std::string str() const;  // "host:port", "[v6]:port"
};

// "host:port" or "[v6]:port"; port 1..65535. Throws std::invalid_argument
// naming `what` and the text.
HostPort parse_host_port(std::string_view text, const std::string& what);

struct ClusterSpec {
  std::vector<HostPort> ps, chief, worker, evaluator;
  TaskType task_type = TaskType::kWorker;
  int task_index = 0;

  int num_replicas() const { return static_cast<int>(chief.size() + worker.size()); }
  // This task's replica index, -1 for a ps or the evaluator.
  int replica() const;
  bool is_chief() const { return replica() == 0; }
  // The address of replica r (the chief's or a worker's).
  const HostPort& replica_address(int r) const;
  // This task's own address ("ps 1", "worker 0"...) and its name for messages.
  const HostPort& own_address() const;
  std::string task_name() const;  // e.g. "worker 2"
  std::vector<std::string> ps_addresses() const;
};

// Parses TF_CONFIG's JSON: {"cluster": {"chief": [...], "worker": [...],
// "ps": [...], "evaluator": [...]}, "task": {"type": "worker", "index": 0}}.
// An evaluator task may be absent from "cluster" (tf.estimator's rule).
// Throws std::invalid_argument naming the field and value; validates.
ClusterSpec parse_tf_config(std::string_view json);

// From the scripts' flags: comma-separated host lists; job_name is ps,
// worker, chief or evaluator. Validates.
ClusterSpec cluster_from_flags(const std::string& job_name, int task_id, const std::string& ps_hosts,
                               const std::string& worker_hosts, const std::string& chief_host = "",
                               const std::string& evaluator_host = "");

// At least one ps and one replica, at most one chief and one evaluator, the
// task's index in range, no address used twice. std::invalid_argument otherwise.
void validate_cluster(const ClusterSpec& spec);

}  // namespace terngrad::comm
