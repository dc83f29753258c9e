// tg-experiment: runs ExperimentConfigs (paper_configs/*.pbtxt), alone or as
// a grid (codec x workers x seeds), and reports them.
//
//   tg-experiment check CONFIG...                    parse, validate, show the runs
//   tg-experiment run CONFIG... [--workers=2,4,8] [--seeds=1,2,3] [--link_rates=100mbit,1gbit] [--steps=N]
//                     [--device=cpu|gpu] [--out=runs]
//   tg-experiment report RUN_DIR... --out=DIR        tables (md, csv) and PNG plots
//
// Each grid point runs in <out>/<name>/w<workers>/seed<seed>/ (with emulated
// links, <out>/<name>/link-<rate>/w<workers>/seed<seed>/), which holds
// config.pbtxt (the grid point's full config, overrides applied), run.json,
// metrics.jsonl, checkpoints, result.json, a TensorBoard event file and, for
// LOCAL_CLUSTER runs, logs/. A grid started again skips the points that have
// a result.json and resumes the others from their last checkpoint; a run
// directory holding a different config is an error, never overwritten.
// Exit status: 0 ok, 1 a run failed, 2 bad command line or config.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "emulated_network.h"
#include "experiment_config.h"
#include "result_json.h"
#include "tensorboard_events.h"
#include "terngrad/base/json.h"
#include "terngrad/base/atomic_file.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/trainer.h"

namespace {

namespace fs = std::filesystem;
namespace tx = terngrad::experiments;
namespace tt = terngrad::train;

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

const char kUsage[] =
    "usage:\n"
    "  tg-experiment check CONFIG...\n"
    "  tg-experiment run CONFIG... [--workers=2,4,8] [--seeds=1,2,3] [--link_rates=100mbit,1gbit] [--steps=N]\n"
    "                    [--device=cpu|gpu] [--out=DIR]\n"
    "  tg-experiment report RUN_DIR... --out=DIR [--title=TEXT]\n"
    "CONFIG: an ExperimentConfig in protobuf text (experiments/config/experiment_config.proto).\n"
    "--workers, --seeds: the grid (default: the config's cluster.num_workers and seeds);\n"
    "--link_rates: emulated links (LOCAL_CLUSTER configs; tc rates; needs root), one grid point per\n"
    "  rate (default: the config's cluster.link_rate);\n"
    "--steps: shorter runs than the config's (recorded in each run's config.pbtxt);\n"
    "--device: run on the CPU or the GPU whatever the config says (recorded likewise);\n"
    "--out: where run directories go (default runs).\n";

template <typename T>
std::vector<T> parse_list(const std::string& flag, const std::string& v) {
  std::vector<T> out;
  std::stringstream in(v);
  std::string item;
  while (std::getline(in, item, ',')) {
    char* end = nullptr;
    const long long x = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || x < 1) throw UsageError(flag + "=" + v + ": expected positive integers, comma-separated");
    out.push_back(static_cast<T>(x));
  }
  if (out.empty()) throw UsageError(flag + "=: empty list");
  return out;
}

std::vector<std::string> parse_link_rates(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream in(v);
  std::string item;
  while (std::getline(in, item, ',')) {
    const std::string why = tx::link_rate_problem(item);
    if (!why.empty()) throw UsageError("--link_rates=" + v + ": \"" + item + "\": " + why);
    if (std::find(out.begin(), out.end(), item) != out.end())
      throw UsageError("--link_rates=" + v + ": \"" + item + "\" twice");
    out.push_back(item);
  }
  if (out.empty()) throw UsageError("--link_rates=: empty list");
  return out;
}

struct Options {
  std::vector<std::string> configs;  // or run dirs (report)
  std::vector<int> workers;
  std::vector<uint64_t> seeds;
  std::vector<std::string> link_rates;
  int64_t steps = 0;
  std::string device;  // "" = the config's
  std::string out = "runs";
  std::string title;
};

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  for (const auto& a : args) {
    auto value = [&a](const char* name) -> const char* {
      const std::string p = std::string("--") + name + "=";
      return a.rfind(p, 0) == 0 ? a.c_str() + p.size() : nullptr;
    };
    if (const char* v = value("workers")) o.workers = parse_list<int>("--workers", v);
    else if (const char* v = value("seeds")) o.seeds = parse_list<uint64_t>("--seeds", v);
    else if (const char* v = value("link_rates")) o.link_rates = parse_link_rates(v);
    else if (const char* v = value("steps")) {
      const auto steps = parse_list<int64_t>("--steps", v);
      if (steps.size() != 1) throw UsageError(std::string("--steps=") + v + ": one number of steps for every run");
      o.steps = steps[0];
    }
    else if (const char* v = value("device")) {
      o.device = v;
      if (o.device != "cpu" && o.device != "gpu") throw UsageError(std::string("--device=") + v + ": cpu or gpu");
    }
    else if (const char* v = value("out")) o.out = v;
    else if (const char* v = value("title")) o.title = v;
    else if (a.rfind("--", 0) == 0) throw UsageError("unknown flag " + a);
    else o.configs.push_back(a);
  }
  if (o.configs.empty()) throw UsageError("nothing to do: name at least one config (or run directory)");
  return o;
}

// One run of the grid.
struct GridPoint {
  tx::ExperimentConfig cfg;  // workers, seed and steps applied
  std::string source;        // the config file
  std::vector<std::string> flags;
  int64_t steps = 0;
  int64_t examples = 0;      // training examples the run processes
  fs::path dir;
};

std::vector<GridPoint> plan(const Options& o) {
  std::vector<GridPoint> points;
  for (const auto& path : o.configs) {
    const tx::ExperimentConfig cfg = tx::load_experiment_config(path);
    std::vector<int> workers = o.workers;
    if (workers.empty()) workers.push_back(cfg.cluster().num_workers());
    std::vector<uint64_t> seeds = o.seeds;
    if (seeds.empty()) seeds.assign(cfg.seeds().begin(), cfg.seeds().end());
    // The training set's size converts epochs to steps; read it once per config.
    const bool needs_size = !cfg.training().has_steps() || cfg.optimizer().decay().has_decay_epochs();
    const int64_t train_examples = needs_size ? tx::training_set_size(cfg) : 0;
    // "" = no emulated links (the config's default).
    std::vector<std::string> links = o.link_rates;
    if (links.empty()) links.push_back(cfg.cluster().link_rate());
    for (const std::string& link : links) {
      for (int w : workers) {
        for (uint64_t s : seeds) {
          GridPoint p;
          p.source = path;
          p.cfg = tx::at_grid_point(cfg, w, s, o.steps, path);
          if (!o.link_rates.empty()) p.cfg = tx::at_link_rate(p.cfg, link, path);
          if (o.device == "gpu") p.cfg.mutable_cluster()->set_device(tx::Cluster::GPU);
          if (o.device == "cpu") {  // one device: a GPU count means nothing there
            p.cfg.mutable_cluster()->set_device(tx::Cluster::CPU);
            p.cfg.mutable_cluster()->clear_num_gpus();
          }
          p.flags = tx::train_flags(p.cfg, train_examples);
          p.steps = tx::training_steps(p.cfg, train_examples);
          tt::TrainConfig check;
          try {
            tt::parse_train_flags(p.flags, check);
            tt::validate(check);
          } catch (const std::exception& e) {
            throw std::invalid_argument(path + " (workers " + std::to_string(w) + ", seed " + std::to_string(s) +
                                        "): " + e.what());
          }
          p.examples = p.steps * check.batch_size * w;
          p.dir = fs::path(o.out) / cfg.name();
          if (!link.empty()) p.dir /= "link-" + link;
          p.dir = p.dir / ("w" + std::to_string(w)) / ("seed" + std::to_string(s));
          points.push_back(std::move(p));
        }
      }
    }
  }
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (points[i].dir == points[j].dir)
        throw std::invalid_argument(points[i].dir.string() + ": two grid points share this run directory (" +
                                    points[j].source + " and " + points[i].source + " have the same name?)");
  return points;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string run_json(const GridPoint& p) {
  const tx::ExperimentConfig& c = p.cfg;
  terngrad::json::Json j;
  j["experiment"] = c.name();
  j["codec"] = tx::codec_label(c);
  j["workers"] = c.cluster().num_workers();
  j["seed"] = c.seeds(0);
  j["steps"] = p.steps;
  j["net"] = p.flags.at(0).substr(6);  // --net=...
  j["dataset"] = c.dataset().name();
  j["mode"] = c.cluster().mode() == tx::Cluster::LOCAL_CLUSTER ? "local_cluster" : "in_process";
  j["config_file"] = p.source;
  if (!c.cluster().link_rate().empty()) {
    j["link_rate"] = c.cluster().link_rate();
    j["ps_link_rate"] = c.cluster().ps_link_rate().empty() ? c.cluster().link_rate() : c.cluster().ps_link_rate();
  }
  for (const auto& r : c.paper()) {
    if (r.workers() != c.cluster().num_workers()) continue;
    j["paper_table"] = r.table();
    if (r.has_top1()) j["paper_top1"] = r.top1();
    if (r.has_top5()) j["paper_top5"] = r.top5();
  }
  j["tg_train_flags"] = p.flags;
  return terngrad::json::dump_pretty(j) + "\n";
}

// execv's argument vector over args (which must outlive it).
std::vector<char*> argv_of(std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return argv;
}

// The tg-cluster next to this program (the build tree and the install both
// put them side by side).
std::string sibling_program(const char* name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return name;
  return (self.parent_path() / name).string();
}

int run_local_cluster(const GridPoint& p) {
  const tx::Cluster& c = p.cfg.cluster();
  std::vector<std::string> args = {sibling_program("tg-cluster"), "--num_ps=" + std::to_string(c.num_ps()),
                                   // tg-cluster counts the workers besides the chief
                                   "--num_workers=" + std::to_string(c.num_workers() - 1),
                                   std::string("--evaluator=") + (c.evaluator() ? "true" : "false")};
  if (!c.link_rate().empty()) args.push_back("--link_rate=" + c.link_rate());
  if (!c.ps_link_rate().empty()) args.push_back("--ps_link_rate=" + c.ps_link_rate());
  args.push_back("--");
  args.insert(args.end(), p.flags.begin(), p.flags.end());
  args.push_back("--train_dir=" + p.dir.string());
  std::vector<char*> argv = argv_of(args);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed for tg-cluster");
  if (pid == 0) {
    execv(argv[0], argv.data());
    std::fprintf(stderr, "tg-experiment: cannot start %s\n", argv[0]);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void run_point(const GridPoint& p) {
  if (p.cfg.cluster().mode() == tx::Cluster::LOCAL_CLUSTER) {
    const int rc = run_local_cluster(p);
    if (rc != 0) throw std::runtime_error("tg-cluster exited with status " + std::to_string(rc) + " (logs in " +
                                          (p.dir / "logs").string() + ")");
    if (!fs::exists(p.dir / "result.json"))
      throw std::runtime_error((p.dir / "result.json").string() + ": the chief wrote no result");
  } else {
    tt::TrainConfig cfg;
    tt::parse_train_flags(p.flags, cfg);
    cfg.train_dir = p.dir.string();
    const tt::TrainResult r = tt::run_training(cfg);
    tx::write_result_json((p.dir / "result.json").string(), cfg, r);
    std::printf("%s\n", tx::result_summary(cfg, r).c_str());
  }
  tx::write_events_from_metrics(p.dir.string());
}

std::string hms(double s) {
  char buf[32];
  const long t = static_cast<long>(s + 0.5);
  std::snprintf(buf, sizeof buf, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
  return buf;
}

int cmd_run(const Options& o) {
  const std::vector<GridPoint> points = plan(o);
  int64_t examples_left = 0, done = 0;
  std::vector<bool> finished(points.size());
  for (size_t i = 0; i < points.size(); ++i) {
    const GridPoint& p = points[i];
    const fs::path cfg_file = p.dir / "config.pbtxt";
    if (fs::exists(cfg_file) && read_file(cfg_file) != tx::to_text(p.cfg))
      throw std::invalid_argument(cfg_file.string() + " holds a different config than " + p.source +
                                  " at this grid point; use another --out or remove the directory");
    finished[i] = fs::exists(p.dir / "result.json") && fs::exists(cfg_file);
    if (!finished[i]) examples_left += p.examples;
  }
  std::fprintf(stderr, "tg-experiment: %zu runs, %zu to do, into %s\n", points.size(),
               points.size() - std::count(finished.begin(), finished.end(), true), o.out.c_str());
  const auto start = std::chrono::steady_clock::now();
  int64_t examples_done = 0;
  for (size_t i = 0; i < points.size(); ++i) {
    const GridPoint& p = points[i];
    const std::string link = p.cfg.cluster().link_rate();
    const std::string what = p.cfg.name() + (link.empty() ? "" : " link " + link) + " w" +
                             std::to_string(p.cfg.cluster().num_workers()) + " seed" + std::to_string(p.cfg.seeds(0));
    if (finished[i]) {
      std::fprintf(stderr, "[%zu/%zu] %s: finished before, skipped (%s)\n", i + 1, points.size(), what.c_str(),
                   p.dir.c_str());
      continue;
    }
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string eta = "unknown";
    if (examples_done > 0) eta = hms(elapsed / examples_done * (examples_left - examples_done));
    std::fprintf(stderr, "[%zu/%zu] %s: %lld steps, %s (grid ETA %s)\n", i + 1, points.size(), what.c_str(),
                 (long long)p.steps, p.dir.c_str(), eta.c_str());
    fs::create_directories(p.dir);
    terngrad::base::write_file_atomically((p.dir / "config.pbtxt").string(), tx::to_text(p.cfg));
    terngrad::base::write_file_atomically((p.dir / "run.json").string(), run_json(p));
    try {
      run_point(p);
    } catch (const std::exception& e) {
      throw std::runtime_error(what + " (" + p.dir.string() + "): " + e.what());
    }
    examples_done += p.examples;
    ++done;
  }
  std::fprintf(stderr, "tg-experiment: %lld runs done in %s; tables: tg-experiment report %s --out=DIR\n",
               (long long)done,
               hms(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()).c_str(),
               o.out.c_str());
  return 0;
}

int cmd_check(const Options& o) {
  for (const GridPoint& p : plan(o)) {
    std::printf("%s -> %s\n  tg-train", p.source.c_str(), p.dir.c_str());
    for (const auto& f : p.flags) std::printf(" %s", f.c_str());
    std::printf("\n");
  }
  return 0;
}

int cmd_report(const Options& o) {
  if (o.out == "runs") throw UsageError("report needs --out=DIR for the tables and plots");
  // The source tree's script while building; the installed copy after install.
  std::string script = TG_REPORT_SCRIPT;
  if (!fs::exists(script)) script = (fs::path(sibling_program("")).parent_path().parent_path() / "share/terngrad/tg_report.py").string();
  std::vector<std::string> args = {TG_REPORT_PYTHON, script};
  args.insert(args.end(), o.configs.begin(), o.configs.end());
  args.push_back("--out");
  args.push_back(o.out);
  if (!o.title.empty()) {
    args.push_back("--title");
    args.push_back(o.title);
  }
  std::vector<char*> argv = argv_of(args);
  std::fflush(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "tg-experiment: cannot run %s %s (Debian: python3-matplotlib)\n", TG_REPORT_PYTHON, script.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "tg-experiment: no command given\n%s", kUsage);
    return 2;
  }
  if (std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::string cmd = argv[1];
  for (int i = 2; i < argc; ++i) {
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
  }
  Options o;
  try {
    o = parse_options(std::vector<std::string>(argv + 2, argv + argc));
    if (cmd == "check") return cmd_check(o);
    if (cmd == "report") return cmd_report(o);
    if (cmd != "run") throw UsageError("unknown command \"" + cmd + "\"");
    return cmd_run(o);  // plans (checks every config and grid point) before anything runs
  } catch (const UsageError& e) {
    std::fprintf(stderr, "tg-experiment: %s\n%s", e.what(), kUsage);
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "tg-experiment: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-experiment: %s\n", e.what());
    return 1;
  }
}
