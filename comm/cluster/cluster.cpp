#include "terngrad/comm/cluster.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>
#include <map>
#include <stdexcept>

#include "terngrad/base/json.h"

namespace terngrad::comm {

namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

std::vector<HostPort>& list_of(ClusterSpec& s, TaskType t) {
  switch (t) {
    case TaskType::kPs: return s.ps;
    case TaskType::kChief: return s.chief;
    case TaskType::kWorker: return s.worker;
    case TaskType::kEvaluator: return s.evaluator;
  }
  bad("unknown task type");
}

const std::vector<HostPort>& list_of(const ClusterSpec& s, TaskType t) {
  return list_of(const_cast<ClusterSpec&>(s), t);
}

TaskType parse_task_type(const std::string& name, const std::string& what) {
  if (name == "ps") return TaskType::kPs;
  if (name == "chief") return TaskType::kChief;
  if (name == "worker") return TaskType::kWorker;
  if (name == "evaluator") return TaskType::kEvaluator;
  bad(what + ": unknown role \"" + name + "\" (expected ps, chief, worker or evaluator)");
}

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const size_t end = comma == std::string::npos ? s.size() : comma;
    out.push_back(s.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace

const char* task_type_name(TaskType t) {
  switch (t) {
    case TaskType::kPs: return "ps";
    case TaskType::kChief: return "chief";
    case TaskType::kWorker: return "worker";
    case TaskType::kEvaluator: return "evaluator";
  }
  return "?";
}

std::string HostPort::str() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}

HostPort parse_host_port(std::string_view text, const std::string& what) {
  const std::string t(text);
  const auto fail = [&](const std::string& why) {
    bad(what + ": \"" + t + "\" is not a host:port address (" + why + ")");
  };
  HostPort hp;
  std::string_view rest;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) fail("missing ']'");
    hp.host = std::string(text.substr(1, close - 1));
    rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') fail("missing ':port'");
    rest.remove_prefix(1);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) fail("missing ':port'");
    hp.host = std::string(text.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) fail("IPv6 hosts go in brackets, e.g. [::1]:2222");
    rest = text.substr(colon + 1);
  }
  if (hp.host.empty()) fail("empty host");
  for (char c : hp.host)
    if (std::isspace(static_cast<unsigned char>(c)) || c == '/' || c == ',') fail("bad character in host");
  int port = 0;
  const auto r = std::from_chars(rest.data(), rest.data() + rest.size(), port);
  if (rest.empty() || r.ec != std::errc() || r.ptr != rest.data() + rest.size() || port < 1 || port > 65535)
    fail("port must be a number in 1..65535");
  hp.port = port;
  return hp;
}

int ClusterSpec::replica() const {
  const int chiefs = static_cast<int>(chief.size());
  if (task_type == TaskType::kChief) return task_index;
  if (task_type == TaskType::kWorker) return chiefs + task_index;
  return -1;
}

const HostPort& ClusterSpec::replica_address(int r) const {
  if (r < 0 || r >= num_replicas()) bad("replica " + std::to_string(r) + " does not exist");
  return r < static_cast<int>(chief.size()) ? chief[r] : worker[r - chief.size()];
}

const HostPort& ClusterSpec::own_address() const {
  const auto& list = list_of(*this, task_type);
  if (task_index < 0 || task_index >= static_cast<int>(list.size()))
    bad(task_name() + " has no address in the cluster");
  return list[task_index];
}

std::string ClusterSpec::task_name() const {
  return std::string(task_type_name(task_type)) + " " + std::to_string(task_index);
}

std::vector<std::string> ClusterSpec::ps_addresses() const {
  std::vector<std::string> out;
  for (const auto& p : ps) out.push_back(p.str());
  return out;
}

void validate_cluster(const ClusterSpec& s) {
  if (s.ps.empty()) bad("the cluster has no ps task: at least one parameter server is needed");
  if (s.num_replicas() == 0) bad("the cluster has no chief and no worker: nothing would train");
  if (s.chief.size() > 1) bad("the cluster has " + std::to_string(s.chief.size()) + " chiefs; at most one");
  if (s.evaluator.size() > 1)
    bad("the cluster has " + std::to_string(s.evaluator.size()) + " evaluators; at most one");
  const auto& list = list_of(s, s.task_type);
  const bool evaluator_outside = s.task_type == TaskType::kEvaluator && list.empty() && s.task_index == 0;
  if (!evaluator_outside && (s.task_index < 0 || s.task_index >= static_cast<int>(list.size())))
    bad("task index " + std::to_string(s.task_index) + " is out of range: the cluster has " +
        std::to_string(list.size()) + " " + task_type_name(s.task_type) + " task(s)");
  std::map<std::string, std::string> seen;
  for (TaskType t : {TaskType::kPs, TaskType::kChief, TaskType::kWorker, TaskType::kEvaluator}) {
    const auto& l = list_of(s, t);
    for (size_t i = 0; i < l.size(); ++i) {
      std::string key = l[i].host + ":" + std::to_string(l[i].port);
      std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
      const std::string who = std::string(task_type_name(t)) + " " + std::to_string(i);
      const auto [it, fresh] = seen.emplace(key, who);
      if (!fresh) bad("address " + l[i].str() + " is used by both " + it->second + " and " + who);
    }
  }
}

ClusterSpec parse_tf_config(std::string_view text) {
  json::Json root;
  try {
    root = json::parse_strict(text);
  } catch (const std::exception& e) {
    bad(std::string("TF_CONFIG is not valid JSON: ") + e.what());
  }
  if (!root.is_object()) bad("TF_CONFIG must be a JSON object with \"cluster\" and \"task\"");
  ClusterSpec s;
  const json::Json *cluster = nullptr, *task = nullptr;
  for (const auto& [k, v] : root.items()) {
    if (k == "cluster") cluster = &v;
    else if (k == "task") task = &v;
    else if (k != "environment" && k != "rpc_layer") bad("TF_CONFIG: unknown field \"" + k + "\"");
  }
  if (!cluster || !cluster->is_object()) bad("TF_CONFIG.cluster: missing or not an object");
  if (!task || !task->is_object()) bad("TF_CONFIG.task: missing or not an object");
  for (const auto& [role, hosts] : cluster->items()) {
    const std::string field = "TF_CONFIG.cluster." + role;
    const TaskType t = parse_task_type(role, "TF_CONFIG.cluster");
    if (!hosts.is_array()) bad(field + ": not an array of \"host:port\" strings");
    auto& list = list_of(s, t);
    if (!list.empty()) bad(field + ": listed twice");
    for (size_t i = 0; i < hosts.size(); ++i) {
      const std::string what = field + "[" + std::to_string(i) + "]";
      if (!hosts[i].is_string()) bad(what + ": not a string");
      list.push_back(parse_host_port(hosts[i].get<std::string>(), what));
    }
  }
  bool have_type = false, have_index = false;
  for (const auto& [k, v] : task->items()) {
    if (k == "type") {
      if (!v.is_string()) bad("TF_CONFIG.task.type: not a string");
      s.task_type = parse_task_type(v.get<std::string>(), "TF_CONFIG.task.type");
      have_type = true;
    } else if (k == "index") {
      if (!v.is_number()) bad("TF_CONFIG.task.index: not a number");
      const bool valid = v.is_number_integer() && v.get<int64_t>() >= 0 &&
                         v.get<int64_t>() <= std::numeric_limits<int>::max();
      if (!valid) bad("TF_CONFIG.task.index: " + v.dump() + " is not a non-negative integer");
      s.task_index = static_cast<int>(v.get<int64_t>());
      have_index = true;
    } else if (k != "trial" && k != "cloud") {
      bad("TF_CONFIG.task: unknown field \"" + k + "\"");
    }
  }
  if (!have_type) bad("TF_CONFIG.task.type: missing");
  if (!have_index) s.task_index = 0;
  validate_cluster(s);
  return s;
}

ClusterSpec cluster_from_flags(const std::string& job_name, int task_id, const std::string& ps_hosts,
                               const std::string& worker_hosts, const std::string& chief_host,
                               const std::string& evaluator_host) {
  ClusterSpec s;
  s.task_type = parse_task_type(job_name, "--job_name");
  s.task_index = task_id;
  const auto add = [](std::vector<HostPort>& list, const std::string& csv, const std::string& flag) {
    if (csv.empty()) return;
    const auto parts = split_commas(csv);
    for (size_t i = 0; i < parts.size(); ++i)
      list.push_back(parse_host_port(parts[i], flag + " entry " + std::to_string(i)));
  };
  add(s.ps, ps_hosts, "--ps_hosts");
  add(s.worker, worker_hosts, "--worker_hosts");
  add(s.chief, chief_host, "--chief_host");
  add(s.evaluator, evaluator_host, "--evaluator_host");
  if (task_id < 0) bad("--task_id must be >= 0, got " + std::to_string(task_id));
  validate_cluster(s);
  return s;
}

}  // namespace terngrad::comm
