// tg-experiment driven as a user would: a grid of two codecs x two seeds on
// synthetic data writes complete run directories (config copy, run.json,
// metrics, TensorBoard events, result); run again it skips finished points;
// a run directory holding another config is refused; a run that lost its
// result resumes from its checkpoint instead of starting over; LOCAL_CLUSTER
// runs the same config as ps and worker processes; report makes the tables.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "run_command.h"

namespace fs = std::filesystem;

namespace {

using terngrad::testing::Proc;
Proc run(const std::string& cmd) { return terngrad::testing::run_command(cmd); }

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

std::string config(const std::string& name, const std::string& codec, const std::string& mode = "IN_PROCESS") {
  return "name: \"" + name + "\"\n"
         "model { net: LENET }\n"
         "dataset { name: \"synthetic\" format: SYNTHETIC synthetic_examples: 256 }\n"
         "cluster { mode: " + mode + " num_workers: 2 }\n"
         "training { total_batch: 16 steps: 12 }\n"
         "optimizer { type: MOMENTUM learning_rate: 0.01 }\n"
         "evaluation { interval_steps: 6 save_interval_steps: 6 log_every_n_steps: 2 max_examples: 64 }\n"
         "codec { name: \"" + codec + "\" }\n"
         "seeds: [1, 2]\n";
}

class TgExperiment : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_experiment_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write(dir_ / "fp32.pbtxt", config("syn-fp32", "fp32"));
    write(dir_ / "terngrad.pbtxt", config("syn-terngrad", "terngrad"));
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }
  fs::path dir_;
};

}  // namespace

TEST_F(TgExperiment, GridWritesCompleteRunDirectoriesAndSkipsThemAfterwards) {
  Proc p = run("OMP_NUM_THREADS=1 " + std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " " +
               (dir_ / "terngrad.pbtxt").string() + " --out=" + (dir_ / "runs").string());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("4 runs, 4 to do"), std::string::npos) << p.output;
  for (const char* name : {"syn-fp32", "syn-terngrad"}) {
    for (const char* seed : {"seed1", "seed2"}) {
      const fs::path run_dir = dir_ / "runs" / name / "w2" / seed;
      SCOPED_TRACE(run_dir.string());
      for (const char* f : {"config.pbtxt", "run.json", "metrics.jsonl", "result.json", "checkpoint"})
        EXPECT_TRUE(fs::exists(run_dir / f)) << f;
      int events = 0;
      for (const auto& e : fs::directory_iterator(run_dir))
        events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0 && fs::file_size(e.path()) > 0;
      EXPECT_EQ(events, 1);
      const std::string run_json = slurp(run_dir / "run.json");
      EXPECT_NE(run_json.find(std::string("\"experiment\": \"") + name + "\""), std::string::npos) << run_json;
      EXPECT_NE(run_json.find("\"workers\": 2"), std::string::npos) << run_json;
      EXPECT_NE(run_json.find(std::string("\"seed\": ") + (seed + 4)), std::string::npos) << run_json;
      EXPECT_NE(slurp(run_dir / "config.pbtxt").find("seeds: " + std::string(seed + 4)), std::string::npos);
      EXPECT_NE(slurp(run_dir / "result.json").find("\"steps\": 12"), std::string::npos);
    }
  }
  // TernGrad sends about 16x fewer bytes than fp32 (variables below 1 element: none stay fp32).
  const std::string tern = slurp(dir_ / "runs/syn-terngrad/w2/seed1/result.json");
  EXPECT_NE(tern.find("\"grad_bits\": 2"), std::string::npos) << tern;

  const auto before = fs::last_write_time(dir_ / "runs/syn-fp32/w2/seed1/result.json");
  p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " " +
          (dir_ / "terngrad.pbtxt").string() + " --out=" + (dir_ / "runs").string());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("4 runs, 0 to do"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("finished before, skipped"), std::string::npos) << p.output;
  EXPECT_EQ(fs::last_write_time(dir_ / "runs/syn-fp32/w2/seed1/result.json"), before);

  // The same name with another config must not reuse (or overwrite) the runs.
  std::string changed = config("syn-fp32", "fp32");
  changed.replace(changed.find("learning_rate: 0.01"), 19, "learning_rate: 0.02");
  write(dir_ / "fp32.pbtxt", changed);
  p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " --out=" +
          (dir_ / "runs").string());
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("holds a different config"), std::string::npos) << p.output;

  // Tables and plots from the run directories.
  p = run(std::string(TG_EXPERIMENT_BIN) + " report " + (dir_ / "runs").string() + " --out=" +
          (dir_ / "report").string());
  if (p.exit_code == 77 || p.output.find("matplotlib") != std::string::npos) GTEST_SKIP() << p.output;
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const std::string md = slurp(dir_ / "report/results.md");
  EXPECT_NE(md.find("terngrad"), std::string::npos) << md;
  EXPECT_TRUE(fs::exists(dir_ / "report/results.csv"));
}

TEST_F(TgExperiment, ARunThatLostItsResultResumesFromItsCheckpoint) {
  const std::string cmd = std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "terngrad.pbtxt").string() +
                          " --seeds=1 --out=" + (dir_ / "runs").string();
  ASSERT_EQ(run(cmd).exit_code, 0);
  const fs::path run_dir = dir_ / "runs/syn-terngrad/w2/seed1";
  const std::string metrics = slurp(run_dir / "metrics.jsonl");
  fs::remove(run_dir / "result.json");  // as if the process died after its last checkpoint
  const Proc p = run(cmd);
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find("1 runs, 1 to do"), std::string::npos) << p.output;
  EXPECT_TRUE(fs::exists(run_dir / "result.json"));
  // No training step ran again: the train lines are the first run's.
  const std::string again = slurp(run_dir / "metrics.jsonl");
  auto train_lines = [](const std::string& s) {
    size_t n = 0;
    for (size_t at = s.find("\"event\":\"train\""); at != std::string::npos; at = s.find("\"event\":\"train\"", at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(train_lines(again), train_lines(metrics));
}

TEST_F(TgExperiment, BadConfigsAndFlagsAreRefusedBeforeAnythingRuns) {
  write(dir_ / "bad.pbtxt", config("bad", "terngrad") + "optimiser { learning_rate: 1 }\n");
  Proc p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " " +
               (dir_ / "bad.pbtxt").string() + " --out=" + (dir_ / "runs").string());
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("bad.pbtxt:10:"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("optimiser"), std::string::npos) << p.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs"));  // the valid config did not start either
  p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " --workers=3");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("training.total_batch"), std::string::npos) << p.output;
  p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " --wrokers=2");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("unknown flag --wrokers=2"), std::string::npos) << p.output;
  p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " --link_rates=1gbit,fast");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("--link_rates=1gbit,fast: \"fast\": expected a rate"), std::string::npos) << p.output;
  // Emulated links join processes: an IN_PROCESS config cannot take a rate.
  p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "fp32.pbtxt").string() + " --link_rates=1gbit");
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("cluster.link_rate: emulated links join task processes"), std::string::npos) << p.output;
  EXPECT_FALSE(fs::exists(dir_ / "runs"));
}

// --link_rates sweeps the rate like --workers and --seeds: one run directory
// per rate, link-<rate>/ above w<workers>/.
TEST_F(TgExperiment, LinkRatesAreAGridDimension) {
  write(dir_ / "cluster.pbtxt", config("syn-cluster", "fp32", "LOCAL_CLUSTER"));
  const Proc p = run(std::string(TG_EXPERIMENT_BIN) + " check " + (dir_ / "cluster.pbtxt").string() +
                     " --link_rates=100mbit,1gbit --seeds=1 --out=" + (dir_ / "runs").string());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  EXPECT_NE(p.output.find((dir_ / "runs/syn-cluster/link-100mbit/w2/seed1").string()), std::string::npos) << p.output;
  EXPECT_NE(p.output.find((dir_ / "runs/syn-cluster/link-1gbit/w2/seed1").string()), std::string::npos) << p.output;
  EXPECT_EQ(p.output.find("link_rate"), std::string::npos) << "no tg-train flag: tg-cluster takes it\n" << p.output;
}

TEST_F(TgExperiment, LocalClusterModeRunsPsAndWorkerProcesses) {
  write(dir_ / "cluster.pbtxt", config("syn-cluster", "terngrad", "LOCAL_CLUSTER"));
  const Proc p = run(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "cluster.pbtxt").string() +
                     " --seeds=1 --out=" + (dir_ / "runs").string());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  const fs::path run_dir = dir_ / "runs/syn-cluster/w2/seed1";
  EXPECT_TRUE(fs::exists(run_dir / "result.json"));
  EXPECT_TRUE(fs::exists(run_dir / "logs"));
  EXPECT_NE(slurp(run_dir / "run.json").find("\"mode\": \"local_cluster\""), std::string::npos);
  EXPECT_NE(slurp(run_dir / "result.json").find("\"steps\": 12"), std::string::npos);
}
