// Cluster configuration from TF_CONFIG and from the scripts' flags: replica
// numbering, and every misconfiguration refused with a message naming it.
#include <gtest/gtest.h>

#include <string>

#include "terngrad/comm/cluster.h"

namespace tc = terngrad::comm;

namespace {

std::string error_of(const std::string& tf_config) {
  try {
    tc::parse_tf_config(tf_config);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_REFUSED(json, fragment)                                                    \
  do {                                                                                    \
    const std::string msg_ = error_of(json);                                              \
    EXPECT_NE(msg_.find(fragment), std::string::npos) << "message: \"" << msg_ << "\""; \
  } while (0)

TEST(TfConfig, ChiefWorkersPsEvaluator) {
  const auto c = tc::parse_tf_config(R"({"cluster": {"chief": ["10.0.0.1:2222"],
      "worker": ["10.0.0.2:2222", "10.0.0.3:2222"], "ps": ["10.0.0.4:2222", "[::1]:2223"],
      "evaluator": ["10.0.0.5:2222"]}, "task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(c.num_replicas(), 3);
  EXPECT_EQ(c.replica(), 2);  // the chief is replica 0, worker i is i + 1
  EXPECT_FALSE(c.is_chief());
  EXPECT_EQ(c.replica_address(0).str(), "10.0.0.1:2222");
  EXPECT_EQ(c.ps[1].host, "::1");
  EXPECT_EQ(c.ps[1].str(), "[::1]:2223");
  EXPECT_EQ(c.own_address().str(), "10.0.0.3:2222");
  EXPECT_EQ(c.task_name(), "worker 1");
}

TEST(TfConfig, WithoutAChiefWorkerZeroIsReplicaZero) {
  const auto c = tc::parse_tf_config(
      R"({"cluster": {"worker": ["h:1", "h:2"], "ps": ["h:3"]}, "task": {"type": "worker", "index": 0}})");
  EXPECT_TRUE(c.is_chief());
  const auto ps = tc::parse_tf_config(R"({"cluster": {"worker": ["h:1"], "ps": ["h:3"]}, "task": {"type": "ps"}})");
  EXPECT_EQ(ps.replica(), -1);
  // tf.estimator's evaluator is not listed in the cluster.
  const auto ev =
      tc::parse_tf_config(R"({"cluster": {"worker": ["h:1"], "ps": ["h:3"]}, "task": {"type": "evaluator", "index": 0}})");
  EXPECT_EQ(ev.task_type, tc::TaskType::kEvaluator);
}

TEST(TfConfig, MisconfigurationsAreRefusedByName) {
  EXPECT_REFUSED("not json", "not valid JSON");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:1"]}, "task": {"type": "worker", "index": 0}})", "no ps task");
  EXPECT_REFUSED(R"({"cluster": {"ps": ["h:1"]}, "task": {"type": "ps", "index": 0}})", "no chief and no worker");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker", "index": 3}})",
                 "task index 3 is out of range: the cluster has 1 worker");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:1", "H:1"], "ps": ["h:2"]}, "task": {"type": "worker", "index": 0}})",
                 "used by both worker 0 and worker 1");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h"], "ps": ["h:2"]}, "task": {"type": "worker", "index": 0}})",
                 "TF_CONFIG.cluster.worker[0]: \"h\" is not a host:port address");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:99999"], "ps": ["h:2"]}, "task": {"type": "worker"}})",
                 "port must be a number in 1..65535");
  EXPECT_REFUSED(R"({"cluster": {"master": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker"}})",
                 "unknown role \"master\"");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "boss", "index": 0}})",
                 "TF_CONFIG.task.type: unknown role \"boss\"");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"index": 0}})", "task.type: missing");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker", "index": -1}})",
                 "not a non-negative integer");
  EXPECT_REFUSED(R"({"cluster": {"chief": ["a:1", "b:1"], "ps": ["h:2"]}, "task": {"type": "chief"}})", "2 chiefs");
  EXPECT_REFUSED(R"({"cluster": {"worker": "h:1", "ps": ["h:2"]}, "task": {"type": "worker"}})", "not an array");
  EXPECT_REFUSED(R"({"cluster": {"worker": ["h:1"], "ps": ["h:2"]}, "task": {"type": "worker"}, "x": 1})",
                 "unknown field \"x\"");
}

TEST(ClusterFlags, TheScriptsFlags) {
  const auto c = tc::cluster_from_flags("worker", 1, "ps0:2222,ps1:2222", "w0:2222,w1:2222");
  EXPECT_EQ(c.ps.size(), 2u);
  EXPECT_EQ(c.replica(), 1);
  EXPECT_EQ(c.ps_addresses()[1], "ps1:2222");
  EXPECT_THROW(tc::cluster_from_flags("worker", 2, "ps0:2222", "w0:2222,w1:2222"), std::invalid_argument);
  EXPECT_THROW(tc::cluster_from_flags("worker", 0, "", "w0:2222"), std::invalid_argument);
  EXPECT_THROW(tc::cluster_from_flags("worker", 0, "ps0:2222,", "w0:2222"), std::invalid_argument);
  EXPECT_THROW(tc::cluster_from_flags("driver", 0, "ps0:2222", "w0:2222"), std::invalid_argument);
}

}  // namespace
