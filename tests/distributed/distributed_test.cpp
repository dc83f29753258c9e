// Multi-process runs on loopback through the real binaries (tg-train,
// tg-cluster): a sync run with 1 ps and 2 workers trains exactly the weights
// of the in-process trainer with 2 virtual workers (GoogLeNet's batch norm
// state included: the chief's is worker 0's); two ps tasks with sharded
// variables give the same weights as one; a distributed run resumes from the
// chief's checkpoint bit for bit; async training converges; a killed worker
// is reported by name and nobody hangs; bad TF_CONFIG values are refused.
// --device=gpu: a 1-ps 2-worker GPU cluster trains the in-process GPU
// trainer's weights (needs a device), and GPU clusters that cannot run
// (no device, async) fail at once with a message naming why.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <sstream>
#include <string>

#include "terngrad/base/json.h"
#include "terngrad/train/safetensors.h"

#include "run_command.h"
#ifdef TG_TEST_CUDA
#include "terngrad/train/cuda/context.h"
#endif

namespace fs = std::filesystem;

namespace {

// Why GPU runs cannot happen here, or "" when they can.
std::string why_no_gpu() {
#ifdef TG_TEST_CUDA
  if (terngrad::train::cuda::gpu_available()) return "";
  return "no CUDA device: " + terngrad::train::cuda::gpu_unavailable_reason();
#else
  return "this build has no CUDA backend";
#endif
}

using terngrad::testing::Proc;
Proc run(const std::string& cmd) { return terngrad::testing::run_command(cmd); }
std::string train_bin() { return terngrad::testing::program_path("TG_TRAIN_BIN", TG_TRAIN_BIN); }
std::string cluster_bin() { return terngrad::testing::program_path("TG_CLUSTER_BIN", TG_CLUSTER_BIN); }

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_distributed_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // Small LeNet runs on synthetic data; one thread per process so the gradient
  // math is the same as inside the in-process trainer's worker loop.
  static std::string model_flags(int steps, const std::string& extra = "") {
    return "--net=lenet --dataset_name=synthetic --synthetic_examples=512 --batch_size=8 --max_steps=" +
           std::to_string(steps) + " --moving_average_decay=0.99 --quiet=true --threads=1 " + extra;
  }

  // Async runs of hundreds of steps. At the default learning rate (0.01,
  // momentum 0.9) a gradient two pushes stale (about 8% of pushes with two
  // replicas on a loaded 2-core machine, since the next pull leaves with the
  // push) now and then throws the converged LeNet off: loss 0.004 at step 40,
  // 85 at step 70, chance at the end, in 1 of 6 runs under load (CI saw it
  // twice, once as "training diverged"). At 0.005 the worst loss after step 40
  // was 0.68 in 6 runs, and every run ended at top-1 1.0. These tests check
  // restarts, not where async SGD's stable learning rates end.
  static constexpr const char* kLongAsync = "--sync_replicas=false --initial_learning_rate=0.005";

  Proc in_process(const std::string& name, int workers, const std::string& flags) {
    return run(train_bin() + " " + flags + " --num_nodes=" + std::to_string(workers) +
               " --train_dir=" + (dir_ / name).string());
  }

  Proc cluster(const std::string& name, const std::string& launcher, const std::string& flags) {
    return run(cluster_bin() + " --replica_threads=1 " + launcher + " -- " + flags +
               " --peer_timeout_secs=10 --startup_timeout_secs=30 --train_dir=" + (dir_ / name).string());
  }

  std::map<std::string, terngrad::train::Tensor> weights(const std::string& name) {
    return terngrad::train::read_safetensors((dir_ / name / "model.safetensors").string()).tensors;
  }

  void expect_same_weights(const std::string& a, const std::string& b) {
    const auto wa = weights(a), wb = weights(b);
    ASSERT_EQ(wa.size(), 8u);
    ASSERT_EQ(wb.size(), wa.size());
    for (const auto& [name, t] : wa) EXPECT_EQ(t.data, wb.at(name).data) << a << " vs " << b << ": " << name;
  }

  fs::path dir_;
};

TEST_F(Distributed, SyncOnePsTwoWorkersTrainTheInProcessWeightsBitForBit) {
  // Overlapped (the default: buckets pushed during backward, sums streamed
  // shard by shard) and one push + one pull per step after backward, with
  // and without capped shards: the same bits.
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"--grad_bits=2", "2"},
      {"--grad_bits=32", "32"},
      {"--grad_bits=2 --overlap_comm=false", "2-sequential"},
      {"--grad_bits=32 --overlap_comm=false --max_shard_bytes=0", "32-sequential-whole"},
  };
  for (const auto& [codec, tag] : runs) {
    SCOPED_TRACE(codec);
    const std::string flags = model_flags(12, codec);
    const Proc a = in_process("inproc" + tag, 2, flags);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    // Worker 0 is the chief: replicas 0 and 1, as virtual workers 0 and 1.
    const Proc b = cluster("cluster" + tag, "--num_ps=1 --chief=false --num_workers=2", flags);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    expect_same_weights("inproc" + tag, "cluster" + tag);
  }
}

// tg-cluster --trace=true: one timeline with every task's rows (the
// replicas' passes, pushes and sums, the ps's reads, sums and sends), and the
// same bits as a run without it. The traced run's replicas also compute at
// --compute_nice=10, and its ps holds the reply to any push more than two
// pushes ahead of a replica still sending (--push_lead_bytes=1), where the
// plain run's never does: both change when threads run, never what they compute.
TEST_F(Distributed, TracedRunWritesOneTimelineOfEveryTaskWithTheSameBits) {
  const std::string flags = model_flags(6, "--grad_bits=32");
  const Proc a = cluster("plain", "--num_ps=1 --chief=false --num_workers=2", flags + " --push_lead_bytes=0");
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const Proc b = cluster("traced", "--trace=true --num_ps=1 --chief=false --num_workers=2",
                         flags + " --compute_nice=10 --push_lead_bytes=1");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expect_same_weights("plain", "traced");
  EXPECT_FALSE(fs::exists(dir_ / "plain" / "logs" / "trace.json"));
  std::ifstream in(dir_ / "traced" / "logs" / "trace.json");
  ASSERT_TRUE(in) << b.output;
  std::stringstream text;
  text << in.rdbuf();
  const terngrad::json::Json t = terngrad::json::parse_strict(text.str());
  std::set<std::string> processes, events;
  for (const auto& e : t.at("traceEvents")) {
    if (e.at("name") == "process_name") processes.insert(e.at("args").at("name").get<std::string>());
    events.insert(e.at("name").get<std::string>());
  }
  EXPECT_EQ(processes, (std::set<std::string>{"ps 0", "worker 0", "worker 1"}));
  for (const char* name : {"forward", "backward", "push a bucket", "sum landed", "decode and apply a sum",
                           "ps: read a push", "ps: sum", "ps: send a sum"})
    EXPECT_TRUE(events.count(name)) << name;
}

// GoogLeNet's batch norm state in a cluster: every replica folds its own
// batch into its own copy; the chief is worker 0, so its checkpointed and
// exported moving statistics equal the in-process run's (folded from
// worker 0's batch), and so do the weights, bit for bit.
TEST_F(Distributed, BatchNormStateOfTheChiefIsWorker0s) {
  const std::string flags =
      "--net=googlenet --dataset_name=synthetic --synthetic_examples=8 --num_classes=10 --batch_size=1 "
      "--max_steps=2 --max_eval_examples=2 --eval_batch_size=2 --grad_bits=2 --quiet=true --threads=1";
  const Proc a = in_process("inproc", 2, flags);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const Proc b = cluster("cluster", "--num_ps=1 --chief=false --num_workers=2", flags);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto wa = weights("inproc"), wb = weights("cluster");
  ASSERT_EQ(wb.size(), wa.size());
  int moving = 0;
  for (const auto& [name, t] : wa) {
    moving += name.find("/moving_") != std::string::npos;
    EXPECT_EQ(t.data, wb.at(name).data) << name;
  }
  EXPECT_EQ(moving, 114);
}

// One cluster run per codec family against the in-process trainer, bit for
// bit: the codecs' payloads cross the ps and their sums come back as the
// in-process aggregate. Sparse codecs select per slice (a ps shard), so they
// are compared with variables sent whole (--max_shard_bytes=0); QSGD's
// buckets sit at absolute positions, so it is compared sharded.
TEST_F(Distributed, EveryCodecFamilyTrainsTheInProcessWeightsBitForBit) {
  const std::vector<std::pair<std::string, std::string>> runs = {
      {"--codec='ef(terngrad)'", "ef-terngrad"},
      // The ps keeps each entropy-coded push as its 2-bit codes and sums those.
      {"--codec='terngrad:pack=entropy'", "entropy"},
      {"--codec='qsgd:levels=7,bucket=512'", "qsgd"},
      {"--codec='sign:scale=mean'", "sign-mean"},
      {"--codec='sign:vote=sign' --initial_learning_rate=0.0001", "sign-vote"},
      {"--codec='ef(topk:ratio=0.05)' --max_shard_bytes=0", "ef-topk"},
      {"--codec='randomk:ratio=0.05,rescale=1' --max_shard_bytes=0", "randomk"},
      // The ps re-encodes each shard's sum with its own scale: whole variables
      // make its slices the in-process server's.
      {"--codec='ef(server_ef(terngrad))' --max_shard_bytes=0", "server-ef"},
      // A multi-round codec: P summed by ExchangePresums, Q by Push/Pull;
      // placement keeps each PowerSGD variable whole even when sharding.
      {"--codec='ef(powersgd:rank=2)' --min_shard_bytes=65536", "ef-powersgd"},
  };
  for (const auto& [codec, tag] : runs) {
    SCOPED_TRACE(codec);
    const std::string flags = model_flags(8, codec);
    const Proc a = in_process("inproc-" + tag, 2, flags);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    const Proc b = cluster("cluster-" + tag, "--num_ps=1 --chief=false --num_workers=2", flags);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    expect_same_weights("inproc-" + tag, "cluster-" + tag);
  }
}

TEST_F(Distributed, TwoPsTasksWithShardedVariablesEqualOne) {
  const std::string flags = model_flags(10, "--grad_bits=2 --min_shard_bytes=65536");
  const Proc one = cluster("one", "--num_ps=1 --num_workers=1", flags);
  ASSERT_EQ(one.exit_code, 0) << one.output;
  const Proc two = cluster("two", "--num_ps=2 --num_workers=1", flags);
  ASSERT_EQ(two.exit_code, 0) << two.output;
  // Both tasks hold shards (fc3/weights, 4.9 MB, is split over them).
  for (const char* ps : {"ps-0.log", "ps-1.log"}) {
    std::ifstream log(dir_ / "two" / "logs" / ps);
    const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("initialized: "), std::string::npos) << text;
    EXPECT_EQ(text.find("initialized: 0 shards"), std::string::npos) << text;
  }
  expect_same_weights("one", "two");
}

// With error feedback every replica's residuals are state: the worker that
// is not the chief keeps its own beside the chief's checkpoint. With
// server_ef() the ps's residuals are too: the chief fetches them into its
// checkpoint and hands them back to the ps when the run resumes.
TEST_F(Distributed, ResumesFromTheChiefsCheckpointBitForBit) {
  const std::pair<std::string, std::string> runs[] = {
      {"--grad_bits=2", ""},
      {"--codec='ef(terngrad)'", "-ef"},
      {"--codec='ef(server_ef(terngrad))' --max_shard_bytes=0", "-server-ef"},
      {"--codec='ef(powersgd:rank=2)'", "-ef-powersgd"},
  };
  for (const auto& [codec, tag] : runs) {
    SCOPED_TRACE(codec);
    const std::string base = codec + " --optimizer=adam --initial_learning_rate=0.001";
    const Proc straight = in_process("straight" + tag, 2, model_flags(12, base));
    ASSERT_EQ(straight.exit_code, 0) << straight.output;
    const Proc first = cluster("resumed" + tag, "--num_ps=1 --num_workers=1", model_flags(5, base));
    ASSERT_EQ(first.exit_code, 0) << first.output;
    const Proc second =
        cluster("resumed" + tag, "--num_ps=1 --num_workers=1 --evaluator=true", model_flags(12, base));
    ASSERT_EQ(second.exit_code, 0) << second.output;
    EXPECT_EQ(second.output.find("residual starts at zero"), std::string::npos) << second.output;
    expect_same_weights("straight" + tag, "resumed" + tag);
    std::ifstream eval(dir_ / ("resumed" + tag) / "eval.jsonl");
    const std::string text((std::istreambuf_iterator<char>(eval)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("\"step\":12"), std::string::npos) << "the evaluator saw the final checkpoint: " << text;
  }
}

TEST_F(Distributed, AsyncTrainingConverges) {
  const Proc r = cluster("async", "--num_ps=2 --num_workers=1",
                        model_flags(60, "--grad_bits=2 --sync_replicas=false --min_shard_bytes=65536"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(dir_ / "async" / "result.json");
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t at = json.find("\"top1\": ");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_GT(std::stod(json.substr(at + 8)), 0.5) << "10 classes: chance is 0.1; " << json;
}

// Async figures that tell the truth: two replicas pushing concurrently
// apply exactly --max_steps pushes (the ps drops those past the last step),
// and the chief reports the whole cluster's examples (one batch per global
// step), its rate over the training time, never one replica's.
// With a backup replica (--replicas_to_aggregate=2 of 3) the overlapped step
// learns a sum's count only at its end: it applies the whole update then,
// in the next step's forward pass, and still reports every step.
TEST_F(Distributed, SyncWithABackupReplicaReportsEveryStep) {
  const Proc r = cluster("backup", "--num_ps=1 --num_workers=2",
                         model_flags(12, "--grad_bits=32 --replicas_to_aggregate=2 --log_every_n_steps=1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(dir_ / "backup" / "result.json");
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(json.find("\"steps\": 12,"), std::string::npos) << json;
  std::ifstream metrics(dir_ / "backup" / "metrics.jsonl");
  std::vector<int> steps;
  for (std::string line; std::getline(metrics, line);)
    if (line.find("\"event\":\"train\"") != std::string::npos)
      steps.push_back(std::stoi(line.substr(line.find("\"step\":") + 7)));
  std::vector<int> every(12);
  std::iota(every.begin(), every.end(), 1);
  EXPECT_EQ(steps, every) << "a train line after every step";
}

TEST_F(Distributed, AsyncRunsExactlyMaxStepsAndReportsTheClustersRate) {
  const Proc r = cluster("async-count", "--num_ps=1 --num_workers=2",
                        model_flags(40, "--grad_bits=32 --sync_replicas=false"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(dir_ / "async-count" / "result.json");
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto number = [&](const std::string& key) {
    const size_t at = json.find("\"" + key + "\": ");
    EXPECT_NE(at, std::string::npos) << key << " in " << json;
    return at == std::string::npos ? -1.0 : std::stod(json.substr(at + key.size() + 4));
  };
  EXPECT_EQ(number("steps"), 40) << json;
  EXPECT_EQ(number("examples"), 40 * 8) << "one batch of 8 per global step: " << json;
  const double secs = number("train_seconds"), rate = number("examples_per_sec");
  ASSERT_GT(secs, 0) << json;
  EXPECT_NEAR(rate, 40 * 8 / secs, 1e-6 * rate) << json;
  EXPECT_LE(secs, number("wall_seconds")) << json;
}

// A run whose loss stops being finite ends with the chief's error on every
// task: no replica pushes that step's gradient (it would poison the ps's
// weights in an async run), and none crashes on the way out (the payloads
// and sums outlive the client's threads that read and write them).
TEST_F(Distributed, ADivergedRunEndsWithItsErrorAndNoPoisonedPushOrCrash) {
  for (const char* mode : {"--sync_replicas=true", "--sync_replicas=false"}) {
    SCOPED_TRACE(mode);
    const std::string name = std::string("diverged") + (mode[16] == 't' ? "-sync" : "-async");
    const Proc r = cluster(name, "--num_ps=1 --num_workers=2",
                           model_flags(400, std::string("--grad_bits=32 --initial_learning_rate=1e6 ") + mode));
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("training diverged"), std::string::npos) << r.output;
    for (const char* crash : {"Segmentation fault", "Aborted", "Bus error"})
      EXPECT_EQ(r.output.find(crash), std::string::npos) << "a task crashed: " << r.output;
    EXPECT_LT(r.seconds, 60) << r.output;
    std::ifstream log(dir_ / name / "logs" / "ps-0.log");
    const std::string ps_log((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
    EXPECT_EQ(ps_log.find("refused Push"), std::string::npos) << ps_log;
  }
}

TEST_F(Distributed, AKilledWorkerIsReportedAndNobodyHangs) {
  const Proc r = run(cluster_bin() +
                    " --replica_threads=1 --num_ps=1 --num_workers=2 --kill_task=worker:1 --kill_after_secs=4 -- " +
                    model_flags(1000000, "--grad_bits=2") + " --peer_timeout_secs=3 --train_dir=" +
                    (dir_ / "killed").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("worker 1 at 127.0.0.1:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("silent"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 45) << "the others must give up after the peer timeout";
  // The surviving worker names the problem in its own log too.
  std::ifstream log(dir_ / "killed" / "logs" / "worker-0.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("worker 1"), std::string::npos) << text;
}

TEST_F(Distributed, BadTfConfigIsRefusedWithAClearMessage) {
  struct Case {
    std::string tf_config, fragment;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}})", "no ps task"},
           {R"({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "worker", "index": 5}})",
            "task index 5 is out of range"},
           {R"({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 0}})",
            "used by both"},
           {R"({"cluster": {"worker": ["localhost"], "ps": ["127.0.0.1:2"]}, "task": {"type": "worker"}})",
            "is not a host:port address"},
           {R"({"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "task": {"type": "trainer"}})",
            "unknown role \"trainer\""},
           {R"({"cluster": )", "not valid JSON"}}) {
    std::string quoted = "'";
    for (char ch : c.tf_config) quoted += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    quoted += "'";
    const Proc r = run("TF_CONFIG=" + quoted + " " + train_bin() + " " + model_flags(1));
    EXPECT_EQ(r.exit_code, 2) << c.tf_config << "\n" << r.output;
    EXPECT_NE(r.output.find(c.fragment), std::string::npos) << c.tf_config << "\n" << r.output;
  }
  // Flags: an unparsable address.
  const Proc r = run(train_bin() + " --job_name=worker --ps_hosts=127.0.0.1:x --worker_hosts=127.0.0.1:1 " +
                    model_flags(1));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--ps_hosts entry 0"), std::string::npos) << r.output;
  // Flags and TF_CONFIG both: the flags win, and the task says so.
  const Proc both = run("TF_CONFIG='{\"cluster\": {}}' " + train_bin() +
                        " --job_name=worker --ps_hosts=127.0.0.1:x --worker_hosts=127.0.0.1:1 " + model_flags(1));
  EXPECT_NE(both.output.find("--job_name=worker is given, so TF_CONFIG in the environment is ignored"),
            std::string::npos) << both.output;
}

}  // namespace

namespace {

// GPU replicas against GPU runs: bit for bit unless a cuDNN kernel is
// nondeterministic between processes; the bound is the GPU-vs-CPU tests'
// (tests/train/cuda). Prints how many variables came out identical.
void expect_close_weights(const std::map<std::string, terngrad::train::Tensor>& wa,
                          const std::map<std::string, terngrad::train::Tensor>& wb, const std::string& what) {
  ASSERT_EQ(wa.size(), 8u);
  int identical = 0;
  for (const auto& [name, t] : wa) {
    const auto& u = wb.at(name).data;
    ASSERT_EQ(u.size(), t.data.size()) << name;
    double diff = 0, mag = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      diff = std::max(diff, std::abs(double(u[i]) - t.data[i]));
      mag = std::max(mag, std::abs(double(t.data[i])));
    }
    EXPECT_LE(diff, 2e-3 * std::max(1.0, mag)) << name;
    identical += u == t.data;
  }
  std::printf("[ gpu      ] %s: %d of 8 variables bit-identical\n", what.c_str(), identical);
}

// One GPU replica per process computes what one virtual worker of the
// in-process GPU trainer computes: same batch, gradient kernels, CUDA codec
// bytes (encoded per shard with the whole variable's statistics), the ps's
// exact integer sum decoded on the device, the same optimizer kernels.
// --codec=auto (issue 37): the chief decides, its Init carries the plan to
// the ps, and the other replicas adopt it from ps 0. At a link slow enough
// that the error-feedback codec wins on every variable (forced with
// --auto_link_rate), a cluster trains the bits of that codec named by hand;
// resumed with a fast link, it keeps its checkpoint's codecs (their residuals
// are its state). On loopback the chief probes the ps. Bad flags are named.
TEST_F(Distributed, AutoCodecEveryReplicaTrainsTheChiefsChoice) {
  // Whole variables per shard: server_ef() re-encodes each shard's sum with its own scale.
  const std::string costs = " --max_shard_bytes=0 --codec_costs=" + (dir_ / "codec_costs.json").string();
  const std::string chosen = "ef(server_ef(terngrad:clip=2.5,share_scale=1,round=nearest))";
  const Proc byhand = in_process("byhand", 2, model_flags(10, "--codec='" + chosen + "'" + costs));
  ASSERT_EQ(byhand.exit_code, 0) << byhand.output;
  const std::string launcher = "--num_ps=1 --num_workers=1";
  const Proc first = cluster("auto", launcher, model_flags(4, "--codec=auto --auto_link_rate=1mbit" + costs));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // tg-cluster's summary gives each task's wall and CPU time.
  EXPECT_NE(first.output.find("exited with status 0; ran "), std::string::npos) << first.output;
  EXPECT_NE(first.output.find(" cores)"), std::string::npos) << first.output;
  const auto choice_of = [&](const std::string& run) {
    std::ifstream f(dir_ / run / "result.json");
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const terngrad::json::Json r = terngrad::json::parse_strict(text);
    EXPECT_TRUE(r.contains("codec_choice")) << text;
    return r.value("codec_choice", terngrad::json::Json::object());
  };
  const terngrad::json::Json c = choice_of("auto");
  {  // also the first line of the chief's metrics.jsonl
    std::ifstream m(dir_ / "auto" / "metrics.jsonl");
    std::string first;
    std::getline(m, first);
    const terngrad::json::Json event = terngrad::json::parse_strict(first);
    EXPECT_EQ(event.at("event"), "codec_choice") << first;
    EXPECT_EQ(event.at("choice"), c) << first;
  }
  EXPECT_EQ(c.at("link").at("source"), "--auto_link_rate=1mbit");
  ASSERT_EQ(c.at("variables").size(), 8u);
  for (const auto& v : c.at("variables")) EXPECT_EQ(v.at("codec"), chosen) << v.dump();
  EXPECT_LT(c.at("estimate").at("total_ms").get<double>(),
            c.at("every_variable_one_candidate").at("fp32").at("total_ms").get<double>() / 10);
  const Proc second = cluster("auto", launcher, model_flags(10, "--codec=auto --auto_link_rate=100gbit" + costs));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(second.output.find("residual starts at zero"), std::string::npos) << second.output;
  EXPECT_TRUE(choice_of("auto").value("resumed_from_checkpoint", false));
  expect_same_weights("byhand", "auto");
  // A chief restarted before any checkpoint takes the plan the running ps
  // holds (deciding again could give another, which the ps would refuse).
  const Proc restarted = cluster("auto-restarted", launcher + " --kill_task=chief:0 --kill_after_secs=5 --restart_failed=1",
                                 model_flags(700, "--codec=auto --auto_link_rate=1mbit --save_interval_steps=5000 "
                                                  "--rejoin_window_steps=700" + costs));
  ASSERT_EQ(restarted.exit_code, 0) << restarted.output;
  EXPECT_TRUE(choice_of("auto-restarted").value("adopted_from_running_ps", false)) << restarted.output;
  // Loopback: the chief measures its link to the ps.
  const Proc probed = cluster("probed", launcher, model_flags(3, "--codec='auto(fp32,terngrad)'" + costs));
  ASSERT_EQ(probed.exit_code, 0) << probed.output;
  const terngrad::json::Json p = choice_of("probed");
  EXPECT_EQ(p.at("link").at("source").get<std::string>().rfind("probe of 1 ps", 0), 0u) << p.dump();
  EXPECT_GT(p.at("link").at("up_bytes_per_s").get<double>(), 1e6);
  EXPECT_EQ(p.at("candidates").size(), 2u);
  // Refused at start, by name.
  for (const auto& [flags, says] : std::vector<std::pair<std::string, std::string>>{
           {"--codec='auto(fp32,zstd)'", "candidate \"zstd\""},
           {"--codec=fp32 --auto_link_rate=1gbit", "is for --codec=auto"},
           {"--codec=auto --auto_link_rate=fast", "--auto_link_rate=fast"},
           {"--codec='auto(fp32,ef(server_ef(terngrad)))' --sync_replicas=false", "only a sync run forms"}}) {
    const Proc bad = in_process("bad", 1, model_flags(1, flags));
    EXPECT_NE(bad.exit_code, 0) << flags;
    EXPECT_NE(bad.output.find(says), std::string::npos) << flags << ": " << bad.output;
  }
}

// --codec=auto chooses again when the link moves (plan_recheck.h): with
// --auto_link_changes the re-check at each checkpoint sees 100 Gbit/s from
// step 4 (fp16 wins) and 1 Mbit/s again from step 6 (error-feedback TernGrad
// wins, its residuals and the ps's starting at zero). A cluster switches at
// those steps (the chief rewinds the ps with the new layout, the worker
// follows) and trains the in-process run's bits; so does a cluster stopped
// at step 5 and resumed to the end (its checkpoint holds the plan of step 4),
// and one of two ps and three replicas. Each switch is in result.json and
// metrics.jsonl.
TEST_F(Distributed, AutoCodecChoosesAgainWhenTheLinkMovesAndEveryReplicaSwitches) {
  const std::string flags = " --max_shard_bytes=0 --codec_costs=" + (dir_ / "codec_costs.json").string() +
                            " --codec=auto --auto_link_rate=1mbit --auto_link_changes=4:100gbit,6:1mbit "
                            "--save_interval_steps=2";
  const Proc a = in_process("inproc", 2, model_flags(10, flags));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string launcher = "--num_ps=1 --num_workers=1";
  const Proc b = cluster("cluster", launcher, model_flags(10, flags));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  expect_same_weights("inproc", "cluster");
  for (const std::string run : {"inproc", "cluster"}) {
    std::ifstream f(dir_ / run / "result.json");
    const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const terngrad::json::Json r = terngrad::json::parse_strict(text);
    ASSERT_TRUE(r.contains("codec_changes")) << run << ": " << text;
    const terngrad::json::Json& changes = r.at("codec_changes");
    ASSERT_EQ(changes.size(), 2u) << text;
    EXPECT_EQ(changes[0].at("step"), 4);
    EXPECT_EQ(changes[0].at("variables")[4].at("codec"), "fp16") << changes[0].dump();
    EXPECT_EQ(changes[1].at("step"), 6);
    EXPECT_EQ(changes[1].at("variables")[4].at("codec").get<std::string>().rfind("ef(server_ef(terngrad", 0), 0u);
    std::ifstream m(dir_ / run / "metrics.jsonl");
    int events = 0;
    for (std::string line; std::getline(m, line);)
      events += terngrad::json::parse_strict(line).value("event", "") == "codec_rechoice";
    EXPECT_EQ(events, 2) << run;
  }
  const Proc first = cluster("resumed", launcher, model_flags(5, flags));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const Proc second = cluster("resumed", launcher, model_flags(10, flags));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_EQ(second.output.find("residual starts at zero"), std::string::npos) << second.output;
  expect_same_weights("inproc", "resumed");
  // Two ps and three replicas (a chief and two workers), every variable
  // whole on one ps: both ps take each new plan's rewind.
  const std::string whole = flags + " --min_shard_bytes=100000000";
  const Proc three = in_process("inproc3", 3, model_flags(10, whole));
  ASSERT_EQ(three.exit_code, 0) << three.output;
  const Proc two_ps = cluster("two-ps", "--num_ps=2 --num_workers=2", model_flags(10, whole));
  ASSERT_EQ(two_ps.exit_code, 0) << two_ps.output;
  expect_same_weights("inproc3", "two-ps");
}

// --comm_only with error feedback: the scale shared each step is that of
// the fixed gradient plus this step's residual (it was kept from the first
// step, fell below the encoder's own, and the run failed at step 2).
TEST_F(Distributed, CommOnlyRunsErrorFeedbackCodecs) {
  const Proc r = cluster("comm-only-ef", "--num_ps=1 --num_workers=1",
                         model_flags(4, "--comm_only=true --codec='ef(server_ef(terngrad:round=nearest))'"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
}

// tg-cluster --restart_failed (issue 36): a killed task is started again
// after a back-off, as a pod's restart policy would. An async replica holds
// no weights of its own (it pulls them every step), so a restarted worker
// rejoins the running run, which ends with exactly --max_steps. A sync
// replica holds its own: with --rejoin_window_steps the ps keeps that many
// steps' sums, and the restarted worker catches up from the chief's latest
// checkpoint (its own codec state beside it) by running those steps again,
// so the run trains the uninterrupted run's weights bit for bit; without the
// window it says it cannot rejoin, and the run ends once the restarts are
// spent. A restarted chief rejoins the same way.
TEST_F(Distributed, RestartedAsyncReplicaRejoinsTheRun) {
  const std::string kill = "--num_ps=1 --num_workers=1 --kill_task=worker:0 --kill_after_secs=2 --restart_failed=2 ";
  const Proc async = cluster("restart-async", kill, model_flags(600, std::string(kLongAsync) + " --save_interval_steps=50"));
  ASSERT_EQ(async.exit_code, 0) << async.output;
  EXPECT_NE(async.output.find("worker 0 was killed by signal 9 (Killed); starting it again in 0.5 s (restart 1 of 2)"),
            std::string::npos) << async.output;
  std::ifstream f(dir_ / "restart-async" / "result.json");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(terngrad::json::parse_strict(text).at("steps"), 600) << text;
  // An async chief, too: the ps holds the values; its new process pulls them.
  const Proc async_chief = cluster("restart-async-chief", "--num_ps=1 --num_workers=1 --kill_task=chief:0 "
                                   "--kill_after_secs=3 --restart_failed=1 ",
                                   model_flags(600, std::string(kLongAsync) + " --save_interval_steps=50"));
  ASSERT_EQ(async_chief.exit_code, 0) << async_chief.output;
  EXPECT_NE(async_chief.output.find("chief 0 was killed by signal 9"), std::string::npos) << async_chief.output;
}

TEST_F(Distributed, RestartedWorkerRejoinsTheRun) {
  // Checkpoints 200 steps apart: the kill lands between two, or on one
  // (about 1 time in 100): where the worker had written its codec state
  // there, nothing to catch up; where it died between the chief's write
  // and its own, it resumes from the checkpoint before and catches up.
  const std::string sync_flags = "--codec='ef(terngrad)' --save_interval_steps=200";
  const Proc straight = in_process("straight", 2, model_flags(1000, sync_flags));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  // Killed well inside the training (not while the tasks start), so that it catches up.
  const std::string kill_later = "--num_ps=1 --num_workers=1 --kill_task=worker:0 --kill_after_secs=5 --restart_failed=2 ";
  const Proc rejoined = cluster("rejoined", kill_later, model_flags(1000, sync_flags + " --rejoin_window_steps=250"));
  ASSERT_EQ(rejoined.exit_code, 0) << rejoined.output;
  EXPECT_NE(rejoined.output.find("(restart 1 of 2)"), std::string::npos) << rejoined.output;
  std::ifstream wlog(dir_ / "rejoined" / "logs" / "worker-0.log");
  const std::string worker_log((std::istreambuf_iterator<char>(wlog)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(worker_log.find("caught up") != std::string::npos ||
              worker_log.find("nothing to catch up") != std::string::npos) << worker_log;
  expect_same_weights("straight", "rejoined");
  // The chief, too: its new process's Init changes nothing on the running ps
  // (it is told to register and catch up), and it finishes the run.
  const Proc chief = cluster("chief-rejoined", "--num_ps=1 --num_workers=1 --kill_task=chief:0 --kill_after_secs=5 "
                             "--restart_failed=1 ", model_flags(1000, sync_flags + " --rejoin_window_steps=250"));
  ASSERT_EQ(chief.exit_code, 0) << chief.output;
  EXPECT_NE(chief.output.find("chief 0 was killed by signal 9"), std::string::npos) << chief.output;
  EXPECT_NE(chief.output.find("caught up"), std::string::npos) << chief.output;
  expect_same_weights("straight", "chief-rejoined");

  // Without a rejoin window the restarted worker is refused. No checkpoint
  // before the kill here: with one every 200 steps the kill could land on it
  // (at about 40 steps/s, step 200 comes near the 5 s mark), and a worker
  // that restores the run's own step has nothing to catch up.
  const Proc refused = cluster("refused", kill_later, model_flags(1000, "--codec='ef(terngrad)' --save_interval_steps=5000"));
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("cannot rejoin a sync run in progress"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--rejoin_window_steps=0"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("(restart 2 of 2)"), std::string::npos) << refused.output;
}

// server_ef() with a backup replica (--replicas_to_aggregate=2 of 3) and a
// checkpoint every 20 steps: the run moves on without a slow or dead chief,
// so a checkpoint may ask the ps for the server states of a step it has
// already left behind, which it keeps aside at the checkpoint steps of the
// rejoin window (comm/service/sync_steps.h). The chief is killed and comes
// back while the two workers go on, catches up through the kept sums, and
// checkpoints to the end. (Instrumented once, 2026-11-28: after the rejoin
// the chief ran 5 to 26 steps behind the ps, and its checkpoints of steps
// 160 to 240 were served from those copies.)
TEST_F(Distributed, ServerEfChiefRestartsInARunWithABackupReplica) {
  const std::string flags =
      "--codec='ef(server_ef(terngrad:round=nearest))' --replicas_to_aggregate=2 --save_interval_steps=20 "
      "--rejoin_window_steps=400 --eval_interval_steps=0";
  const Proc r = cluster("server-ef-backup", "--num_ps=1 --num_workers=2 --kill_task=chief:0 --kill_after_secs=4 "
                                             "--restart_failed=1",
                         model_flags(600, flags));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chief 0 was killed by signal 9"), std::string::npos) << r.output;
  std::ifstream clog(dir_ / "server-ef-backup" / "logs" / "chief-0.log");
  const std::string chief_log((std::istreambuf_iterator<char>(clog)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(chief_log.find("caught up") != std::string::npos ||
              chief_log.find("nothing to catch up") != std::string::npos) << chief_log;
  std::ifstream f(dir_ / "server-ef-backup" / "result.json");
  const auto result =
      terngrad::json::parse_strict(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
  EXPECT_EQ(result.at("steps"), 600);
  EXPECT_GT(result.at("top1").get<double>(), 0.5) << "10 classes: chance is 0.1";
  EXPECT_TRUE(fs::exists(dir_ / "server-ef-backup" / "ckpt-600.tgck"));
}

// A ps that restarts (issue 36). Async: it comes back empty, refuses the
// replicas' calls ("before Init"), and the chief initializes it again with
// the values it last pulled and the slots of its last checkpoint; every
// replica registers with it again and retries the call. No other task
// restarts, the run ends with exactly --max_steps, and it trains about as
// well as an unfaulted run (what that ps applied between the chief's last
// pull and its death is lost). Sync: the step's pushes and sums are gone
// with it; the replicas say so and what to do.
TEST_F(Distributed, RestartedPsIsRefilledInAsyncRuns) {
  const std::string async_flags = std::string(kLongAsync) + " --save_interval_steps=100 --eval_interval_steps=0";
  const Proc straight = cluster("ps-straight", "--num_ps=2 --num_workers=1", model_flags(800, async_flags));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  for (int killed : {0, 1}) {
    const std::string name = "ps-restarted-" + std::to_string(killed);
    const Proc r = cluster(name, "--num_ps=2 --num_workers=1 --kill_task=ps:" + std::to_string(killed) +
                                     " --kill_after_secs=3 --restart_failed=1",
                           model_flags(800, async_flags));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string ps = "ps " + std::to_string(killed);
    EXPECT_NE(r.output.find(ps + " was killed by signal 9 (Killed); starting it again"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("chief 0 was"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("chief 0 exited with status 1"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("worker 0 exited with status 1"), std::string::npos) << r.output;
    std::ifstream clog(dir_ / name / "logs" / "chief-0.log");
    const std::string chief_log((std::istreambuf_iterator<char>(clog)), std::istreambuf_iterator<char>());
    EXPECT_NE(chief_log.find(ps + " at "), std::string::npos) << chief_log;
    EXPECT_NE(chief_log.find("initializing it again with this chief's values and slots"), std::string::npos)
        << chief_log;
    std::ifstream wlog(dir_ / name / "logs" / "worker-0.log");
    const std::string worker_log((std::istreambuf_iterator<char>(wlog)), std::istreambuf_iterator<char>());
    EXPECT_NE(worker_log.find("registering with it again"), std::string::npos) << worker_log;
    auto result = [&](const std::string& run) {
      std::ifstream f(dir_ / run / "result.json");
      return terngrad::json::parse_strict(std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()));
    };
    EXPECT_EQ(result(name).at("steps"), 800);
    EXPECT_NEAR(result(name).at("top1").get<double>(), result("ps-straight").at("top1").get<double>(), 0.02);
  }
  // Without a rewind (--ps_rejoin_window_secs=0) a sync run says why it ends.
  const Proc sync = cluster("ps-restarted-sync", "--num_ps=1 --num_workers=1 --kill_task=ps:0 --kill_after_secs=4 "
                                                 "--restart_failed=1",
                            model_flags(100000, "--save_interval_steps=100 --ps_rejoin_window_secs=0"));
  EXPECT_NE(sync.exit_code, 0) << sync.output;
  std::ifstream slog(dir_ / "ps-restarted-sync" / "logs" / "chief-0.log");
  const std::string sync_log((std::istreambuf_iterator<char>(slog)), std::istreambuf_iterator<char>());
  EXPECT_NE(sync_log.find("a sync run cannot refill it"), std::string::npos) << sync_log;
}

// A ps of a sync run that restarts (issue 36): it held only the step's
// pushes and sums, and the replicas may stand on either side of that step.
// The chief rewinds every ps (the restarted one and the one still running)
// to its latest checkpoint, every replica restores it and computes the steps
// since again: the run ends with the weights of an unfaulted run, bit for
// bit, error-feedback residuals and server states included.
TEST_F(Distributed, RestartedPsRewindsASyncRunToTheLatestCheckpoint) {
  // Checkpoints every 50 steps: the kill (at about step 150-250) lands after the first.
  const std::string flags = "--codec='ef(server_ef(terngrad))' --save_interval_steps=50 --eval_interval_steps=0";
  // The unfaulted run of the same layout (two ps: server_ef re-encodes each
  // shard's sum with its own scale, so the in-process trainer differs).
  const Proc straight = cluster("rewind-straight", "--num_ps=2 --num_workers=1", model_flags(700, flags));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  for (int killed : {0, 1}) {
    const std::string name = "rewound-" + std::to_string(killed);
    const Proc r = cluster(name, "--num_ps=2 --num_workers=1 --kill_task=ps:" + std::to_string(killed) +
                                     " --kill_after_secs=4 --restart_failed=1",
                           model_flags(700, flags));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("ps " + std::to_string(killed) + " was killed by signal 9 (Killed); starting it again"),
              std::string::npos) << r.output;
    for (const char* task : {"chief-0", "worker-0"}) {
      std::ifstream f(dir_ / name / "logs" / (std::string(task) + ".log"));
      const std::string log((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      EXPECT_NE(log.find("going back to the chief's latest checkpoint"), std::string::npos) << task << ": " << log;
      EXPECT_NE(log.find("the steps since are computed again"), std::string::npos) << task << ": " << log;
    }
    std::ifstream plog(dir_ / name / "logs" / ("ps-" + std::to_string(1 - killed) + ".log"));
    const std::string running_ps((std::istreambuf_iterator<char>(plog)), std::istreambuf_iterator<char>());
    EXPECT_NE(running_ps.find("rewound by the chief"), std::string::npos) << running_ps;
    expect_same_weights("rewind-straight", name);
  }
}

// The supervisor's and the rejoin window's flags: a bad value is refused
// by name before anything starts.
TEST_F(Distributed, RestartAndRejoinFlagsAreCheckedByName) {
  for (const auto& [launcher, says] : std::vector<std::pair<std::string, std::string>>{
           {"--kill_every_secs=5", "--kill_every_secs=5: expected MIN:MAX seconds"},
           {"--kill_every_secs=3:1", "--kill_every_secs=3:1: expected 0 < MIN <= MAX"},
           {"--kill_every_secs=1:2 --kill_types=chief,boss", "\"boss\" is not ps, chief, worker or evaluator"},
           {"--restart_failed=-1", "restart_failed"}}) {
    const Proc r = run(cluster_bin() + " " + launcher + " -- " + model_flags(1));
    EXPECT_NE(r.exit_code, 0) << launcher;
    EXPECT_NE(r.output.find(says), std::string::npos) << launcher << ": " << r.output;
  }
  const Proc bad = in_process("bad-window", 1, model_flags(1, "--rejoin_window_steps=-1"));
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("--rejoin_window_steps must be in [0, 100000], got -1"), std::string::npos) << bad.output;
  const Proc bad_ps = in_process("bad-ps-window", 1, model_flags(1, "--ps_rejoin_window_secs=-5"));
  EXPECT_NE(bad_ps.exit_code, 0);
  EXPECT_NE(bad_ps.output.find("--ps_rejoin_window_secs must be in [0, 86400]"), std::string::npos) << bad_ps.output;
}

TEST_F(Distributed, GpuClusterTrainsTheInProcessGpuWeights) {
  const std::string why = why_no_gpu();
  if (!why.empty()) GTEST_SKIP() << why << "; this GPU check needs a device (scripts/gpu_checks.sh)";
  // The last case shards fc3/weights over two ps tasks (per-shard encode and sums).
  for (const std::string codec : {"--grad_bits=2", "--grad_bits=32", "--grad_bits=2 --min_shard_bytes=65536"}) {
    SCOPED_TRACE(codec);
    const std::string ps = codec.find("min_shard") != std::string::npos ? "2" : "1";
    const std::string flags = model_flags(12, codec + " --device=gpu --moving_average_decay=0");
    const std::string tag = std::to_string(codec.size());
    const Proc a = in_process("gpu_inproc" + tag, 2, flags);
    ASSERT_EQ(a.exit_code, 0) << a.output;
    const Proc b = cluster("gpu_cluster" + tag, "--num_ps=" + ps + " --chief=false --num_workers=2", flags);
    ASSERT_EQ(b.exit_code, 0) << b.output;
    expect_close_weights(weights("gpu_inproc" + tag), weights("gpu_cluster" + tag), codec + " vs in-process GPU");
  }
}

// The chief checkpoints the device state in the CPU format (weights, Adam
// slots and step count, moving average) and a restarted GPU cluster resumes
// from it; the in-process GPU run of the same 12 steps is the reference.
TEST_F(Distributed, GpuClusterResumesFromTheChiefsCheckpoint) {
  const std::string why = why_no_gpu();
  if (!why.empty()) GTEST_SKIP() << why << "; this GPU check needs a device (scripts/gpu_checks.sh)";
  const std::string base =
      "--grad_bits=2 --optimizer=adam --initial_learning_rate=0.001 --device=gpu --log_every_n_steps=1";
  const Proc straight = in_process("gpu_straight", 2, model_flags(12, base));
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const Proc first = cluster("gpu_resumed", "--num_ps=1 --num_workers=1", model_flags(5, base));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const Proc second = cluster("gpu_resumed", "--num_ps=1 --num_workers=1", model_flags(12, base));
  ASSERT_EQ(second.exit_code, 0) << second.output;
  // Resumed, not restarted: the chief logged each of the 12 steps once.
  std::ifstream log(dir_ / "gpu_resumed" / "metrics.jsonl");
  std::map<int, int> logged;
  for (std::string line; std::getline(log, line);) {
    const size_t at = line.find("\"step\":");
    if (line.find("\"event\":\"train\"") != std::string::npos && at != std::string::npos)
      ++logged[std::stoi(line.substr(at + 7))];
  }
  EXPECT_EQ(logged.size(), 12u);
  for (const auto& [step, times] : logged) EXPECT_EQ(times, 1) << "step " << step << " logged " << times << " times";
  expect_close_weights(weights("gpu_straight"), weights("gpu_resumed"), "resumed GPU cluster vs in-process GPU");
}

// Asynchronous GPU replicas: pulled float32 values go up, the gradient and
// its TernGrad payload are computed on the device, packed bytes come down.
TEST_F(Distributed, GpuAsyncTrainingConverges) {
  const std::string why = why_no_gpu();
  if (!why.empty()) GTEST_SKIP() << why << "; this GPU check needs a device (scripts/gpu_checks.sh)";
  const Proc r = cluster("gpu_async", "--num_ps=2 --num_workers=1",
                         model_flags(60, "--grad_bits=2 --sync_replicas=false --min_shard_bytes=65536 --device=gpu"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(dir_ / "gpu_async" / "result.json");
  const std::string json((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t at = json.find("\"top1\": ");
  ASSERT_NE(at, std::string::npos) << json;
  EXPECT_GT(std::stod(json.substr(at + 8)), 0.5) << "10 classes: chance is 0.1; " << json;
}

// No hang and a message naming the cause: without a device (or without
// CUDA) every GPU replica, sync or async, fails at start. Never skipped
// (scripts/gpu_checks.sh counts skips as failures on a GPU machine).
TEST_F(Distributed, GpuClustersThatCannotRunFailAtOnceWithAMessage) {
  if (why_no_gpu().empty()) {
    std::cout << "[ note     ] a CUDA device is present: the no-device message is not reachable here\n";
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string mode : {"--sync_replicas=true", "--sync_replicas=false"}) {
    SCOPED_TRACE(mode);
    const Proc p = cluster("gpu_fail" + std::to_string(mode.size()), "--num_ps=1 --chief=false --num_workers=2",
                           model_flags(3, "--device=gpu " + mode));
    EXPECT_NE(p.exit_code, 0) << p.output;
    const bool named = p.output.find("no CUDA device") != std::string::npos ||
                       p.output.find("no CUDA backend") != std::string::npos;
    EXPECT_TRUE(named) << p.output;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(secs, 60.0) << "GPU clusters that cannot run took " << secs << " s to fail";
}

}  // namespace
