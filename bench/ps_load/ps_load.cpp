// ps_load_bench: a load test of the parameter server. R simulated replicas
// (threads, each with its own WorkerClient) push a real model's shards
// (AlexNet by default: 61M parameters, TernGrad with the paper's settings,
// fp32 for the logits and variables below 9217 elements, placed by the real
// placement code) to P ps tasks, each a process of its own, for a number of
// sync steps (and optionally async ones, on fresh ps processes). It checks
// two things:
//
//   memory  each ps's VmRSS is sampled over time and after every step, and
//           its VmHWM (peak) read at the end; both are reported against the
//           shards it holds (fp32 and payload bytes) and against what it must
//           buffer: one step's pushes (replicas x payload) plus the kept sums
//           (keep_steps x one step's sums), over its own RSS before Init
//           (the baseline, same run). Growth: RSS after the last step
//           against RSS after step 5 (or the last, for shorter runs).
//   liveness  every step must complete within --step_timeout_s; otherwise
//           the tool names the step, the replicas still in it and each ps's
//           global step, kills the ps processes and exits 3.
//
// Progress (step, s/step, payload MB/s, ps RSS, ETA) goes to stderr; a
// summary to stdout; everything to a JSON file written atomically (--out).
// Exit status: 0 ok, 1 a replica or ps failed, 2 bad flags, 3 a step stalled,
// 4 RSS grew by more than --max_growth (when given).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "load_model.h"
#include "proc_memory.h"
#include "ps_process.h"
#include "replica_loop.h"
#include "step_board.h"
#include "terngrad/base/json.h"
#include "terngrad/comm/ps_status.h"
#include "terngrad/comm/worker_client.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/base/atomic_file.h"

namespace {

namespace tb = terngrad::bench;
namespace tc = terngrad::comm;
using terngrad::json::Json;
using Clock = std::chrono::steady_clock;

constexpr const char* kUsage =
    "usage: ps_load_bench [--replicas=32] [--num_ps=2] [--steps=20] [--model=alexnet] [--keep_steps=8] [flags]\n";

struct Options {
  int replicas = 32;
  int num_ps = 2;
  int64_t steps = 20;
  int64_t async_steps = 0;
  std::string model = "alexnet";
  int keep_steps = 8;
  std::string codec = "terngrad";
  double clip = 2.5;
  int64_t size_to_binarize = 9217;
  bool quantize_logits = false;
  int64_t min_shard_bytes = 256 * 1024;
  int64_t max_shard_bytes = 256 * 1024;
  double step_timeout_s = 300;
  int sample_ms = 100;
  double max_growth = 0;  // 0: report growth, do not fail on it
  std::string out = "ps_load.json";
};

void print_help() {
  std::printf(
      "%s\n"
      "Load test of the parameter server: simulated replicas push a model's shards to ps processes;\n"
      "each ps's RSS (sampled, after every step, and VmHWM) is reported against its shard and buffer\n"
      "sizes, and a step that does not complete within --step_timeout_s fails the run (exit 3).\n\n"
      "  --replicas=N          simulated replicas, threads with a WorkerClient each (32)\n"
      "  --num_ps=N            ps tasks, one process each (2)\n"
      "  --steps=N             sync steps (20)\n"
      "  --async_steps=N       then N async rounds (pull values, push) on fresh ps processes (0: none)\n"
      "  --model=NAME          lenet | cifarnet | alexnet (alexnet: 1000 classes, 61M parameters)\n"
      "  --keep_steps=N        the ps's kept sync steps for late pullers (8, ServerOptions::keep_steps)\n"
      "  --codec=NAME          terngrad | fp16 | fp32: the codec of the large variables (terngrad)\n"
      "  --clip=C              TernGrad clip factor (2.5)\n"
      "  --size_to_binarize=N  variables below N elements stay fp32 (9217, the paper's AlexNet setting)\n"
      "  --quantize_logits=B   ternarize the logits too (false)\n"
      "  --min_shard_bytes=N   placement: shard at least this (262144)\n"
      "  --max_shard_bytes=N   placement: shards at most this, 0 = no cap (262144)\n"
      "  --step_timeout_s=S    a step not complete after S seconds is a stall (300)\n"
      "  --sample_ms=MS        RSS sampling period (100)\n"
      "  --max_growth=F        exit 4 when a ps's RSS after the last step exceeds RSS after step 5 by more\n"
      "                        than this fraction (0: report only)\n"
      "  --out=PATH            JSON result, written atomically (ps_load.json)\n",
      kUsage);
}

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "ps_load_bench: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

// --key=value flags from a table; unknown flags and bad values are usage errors.
class Flags {
 public:
  void add(const std::string& name, std::function<bool(const std::string&)> set) { setters_[name] = std::move(set); }
  void parse(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.rfind("--", 0) != 0) usage_error("unexpected argument " + a);
      const size_t eq = a.find('=');
      const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      if (eq == std::string::npos) usage_error("--" + name + " needs a value (--" + name + "=...)");
      auto it = setters_.find(name);
      if (it == setters_.end()) usage_error("unknown option --" + name);
      if (!it->second(a.substr(eq + 1))) usage_error("bad value for --" + name + ": " + a.substr(eq + 1));
    }
  }

 private:
  std::map<std::string, std::function<bool(const std::string&)>> setters_;
};

template <class T>
std::function<bool(const std::string&)> number(T& out) {
  return [&out](const std::string& s) {
    std::istringstream in(s);
    T v{};
    if (!(in >> v) || !in.eof()) return false;
    out = v;
    return true;
  };
}
std::function<bool(const std::string&)> boolean(bool& out) {
  return [&out](const std::string& s) {
    if (s != "true" && s != "false" && s != "1" && s != "0") return false;
    out = s == "true" || s == "1";
    return true;
  };
}
std::function<bool(const std::string&)> text(std::string& out) {
  return [&out](const std::string& s) {
    out = s;
    return !s.empty();
  };
}

std::string cpu_model() { return terngrad::quantize::cpu_model_name(); }
bool cpu_flag(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

double mb(uint64_t b) { return b / 1e6; }
std::string fmt_time(double s) {
  char buf[32];
  if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else std::snprintf(buf, sizeof buf, "%.1fs", s);
  return buf;
}

std::string fmt_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%gs", s);
  return buf;
}

// What one phase (sync, async) measured.
struct PhaseResult {
  std::string mode;
  int64_t steps = 0;
  double seconds = 0;
  std::vector<double> step_seconds;         // [step]
  uint64_t payload_moved = 0;               // every replica's payload bytes pushed + pulled
  std::vector<uint64_t> baseline_rss;       // [ps] before Init
  std::vector<std::vector<uint64_t>> rss_after_step;  // [ps][step]
  std::vector<uint64_t> hwm;                // [ps] VmHWM after the last step
  std::vector<uint64_t> max_sampled;        // [ps]
  std::vector<uint64_t> sum_bytes;          // [ps] one step's sums (sync)
  std::vector<tb::RssSampler::Sample> samples;
  std::string status = "ok";                // ok | failed | stalled
  std::string error;
};

// Everything a failure path needs to leave a record and no processes behind.
struct Run {
  Options opt;
  std::string command;
  Json config, model_json;
  std::vector<PhaseResult> phases;
};

Json phase_json(const PhaseResult& p, const tb::LoadModel& m, const Options& o) {
  Json j;
  j["mode"] = p.mode;
  j["status"] = p.status;
  if (!p.error.empty()) j["error"] = p.error;
  j["steps"] = p.steps;
  j["seconds"] = p.seconds;
  j["step_seconds"] = p.step_seconds;
  double worst = 0;
  for (double s : p.step_seconds) worst = std::max(worst, s);
  j["max_step_seconds"] = worst;
  j["payload_bytes_moved"] = p.payload_moved;
  j["payload_MBps"] = p.seconds > 0 ? mb(p.payload_moved) / p.seconds : 0;
  Json ps = Json::array();
  for (size_t i = 0; i < p.baseline_rss.size(); ++i) {
    const auto& share = m.per_ps[i];
    Json q;
    q["task"] = i;
    q["shards"] = share.shards;
    q["elements"] = share.elements;
    q["fp32_bytes"] = share.fp32_bytes;
    q["payload_bytes_per_replica"] = share.payload_bytes;
    const uint64_t pushes = static_cast<uint64_t>(o.replicas) * share.payload_bytes;
    q["push_buffer_bytes"] = pushes;  // one step's pushes of every replica
    q["baseline_rss"] = p.baseline_rss[i];
    q["rss_after_step"] = p.rss_after_step[i];
    q["max_sampled_rss"] = i < p.max_sampled.size() ? p.max_sampled[i] : 0;
    q["vm_hwm"] = i < p.hwm.size() ? p.hwm[i] : 0;
    const uint64_t hwm = i < p.hwm.size() ? p.hwm[i] : 0;
    const uint64_t above = hwm > p.baseline_rss[i] ? hwm - p.baseline_rss[i] : 0;
    q["peak_above_baseline"] = above;
    q["peak_over_fp32_bytes"] = share.fp32_bytes ? static_cast<double>(hwm) / share.fp32_bytes : 0;
    q["peak_over_payload_bytes"] = share.payload_bytes ? static_cast<double>(hwm) / share.payload_bytes : 0;
    if (p.mode == "sync" && i < p.sum_bytes.size()) {
      const uint64_t kept = static_cast<uint64_t>(o.keep_steps) * p.sum_bytes[i];
      q["sum_bytes_per_step"] = p.sum_bytes[i];
      q["kept_sums_bytes"] = kept;  // keep_steps x one step's sums: the ring's worst case
      q["buffer_bound_bytes"] = pushes + kept;
      q["peak_above_baseline_over_buffer_bound"] = pushes + kept ? static_cast<double>(above) / (pushes + kept) : 0;
    }
    const auto& after = p.rss_after_step[i];
    if (!after.empty()) {
      const size_t ref = std::min<size_t>(5, after.size()) - 1;
      q["growth_reference_step"] = ref + 1;
      q["rss_growth_last_over_reference"] = after[ref] ? static_cast<double>(after.back()) / after[ref] : 0;
    }
    ps.push_back(q);
  }
  j["ps"] = ps;
  Json t = Json::array(), rss = Json::array();
  for (size_t i = 0; i < p.baseline_rss.size(); ++i) rss.push_back(Json::array());
  for (const auto& s : p.samples) {
    t.push_back(s.t);
    for (size_t i = 0; i < s.rss.size() && i < rss.size(); ++i) rss[i].push_back(s.rss[i]);
  }
  j["rss_samples"] = {{"t", t}, {"rss", rss}};
  return j;
}

void write_result(const Run& run, const tb::LoadModel* m, const std::string& status, const std::string& error) {
  Json j;
  j["tool"] = "ps_load_bench";
  j["date"] = utc_now();
  j["command"] = run.command;
  j["status"] = status;
  if (!error.empty()) j["error"] = error;
  j["cpu"] = cpu_model();
  j["cpu_flags"] = {{"avx2", cpu_flag("avx2")}, {"avx512f", cpu_flag("avx512f")}};
  j["simd_level"] = terngrad::quantize::simd_level_name(terngrad::quantize::cpu_simd_level());
  j["config"] = run.config;
  j["model"] = run.model_json;
  Json phases = Json::array();
  if (m)
    for (const auto& p : run.phases) phases.push_back(phase_json(p, *m, run.opt));
  j["phases"] = phases;
  try {
    terngrad::base::write_file_atomically(run.opt.out, terngrad::json::dump_pretty(j) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_load_bench: cannot write %s: %s\n", run.opt.out.c_str(), e.what());
  }
}

// One phase: fresh ps processes, R replicas for `steps` steps, the watchdog.
// On a stall or a failure it records what it knows, kills the ps processes,
// writes the JSON and ends the process (threads blocked in gRPC calls cannot
// be joined).
void run_phase(Run& run, const tb::LoadModel& m, bool sync, int64_t steps) {
  const Options& o = run.opt;
  run.phases.emplace_back();
  PhaseResult& res = run.phases.back();
  res.mode = sync ? "sync" : "async";
  res.steps = steps;
  std::vector<tb::PsProcess> ps;
  auto die = [&](const std::string& status, const std::string& why, int code) {
    res.status = status;
    res.error = why;
    for (const auto& p : ps) tb::kill_ps(p);
    std::fprintf(stderr, "\nps_load_bench: %s phase %s: %s\n", res.mode.c_str(), status.c_str(), why.c_str());
    write_result(run, &m, status, why);
    std::fflush(stderr);
    std::_Exit(code);
  };

  tb::PsChildOptions co;
  co.keep_steps = o.keep_steps;
  co.peer_timeout_s = o.step_timeout_s + 60;  // the watchdog below speaks first
  co.startup_timeout_s = 600;
  for (int i = 0; i < o.num_ps; ++i) {
    co.task_index = i;
    try {
      ps.push_back(tb::start_ps("/proc/self/exe", co, 60));
    } catch (const std::exception& e) {
      die("failed", e.what(), 1);
    }
  }
  std::vector<std::string> addresses;
  std::vector<pid_t> pids;
  for (const auto& p : ps) {
    addresses.push_back(p.address());
    pids.push_back(p.pid);
    const auto mem = tb::read_proc_memory(p.pid);
    res.baseline_rss.push_back(mem ? mem->rss : 0);
  }
  res.rss_after_step.assign(o.num_ps, {});
  tb::RssSampler sampler(pids, std::chrono::milliseconds(o.sample_ms));

  tc::ClientOptions cop;
  cop.peer_timeout_s = o.step_timeout_s + 60;
  std::vector<std::unique_ptr<tc::WorkerClient>> clients;
  for (int r = 0; r < o.replicas; ++r)
    clients.push_back(std::make_unique<tc::WorkerClient>(addresses, m.layout, r, sync, o.replicas, o.replicas, cop));

  // Joining: the chief initializes the ps (async: with zero values), everyone registers.
  std::vector<std::vector<float>> zeros;
  tc::WorkerClient::InitTensors init;
  if (!sync) {
    for (const auto& v : m.layout.variables) zeros.emplace_back(v.size, 0.0f);
    for (const auto& z : zeros) init.values.emplace_back(z);
  }
  tb::StepBoard board(o.replicas);
  std::vector<uint64_t> sum_bytes_by_shard;
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int r = 0; r < o.replicas; ++r)
    threads.emplace_back([&, r] {
      try {
        clients[r]->join(0, r == 0 && !sync ? &init : nullptr);
      } catch (const std::exception& e) {
        board.failed(r, std::string("join: ") + e.what());
        return;
      }
      if (sync) tb::run_sync_replica(r, *clients[r], m, steps, board, r == 0 ? &sum_bytes_by_shard : nullptr);
      else tb::run_async_replica(r, *clients[r], m, steps, board);
    });

  // The watchdog: bounded by steps x step_timeout (each wait is bounded, and
  // every round either sees progress or moves towards the timeout).
  auto traffic = [&] {
    uint64_t b = 0;
    for (const auto& c : clients) {
      const tc::Traffic t = c->traffic();
      b += t.payload_sent + t.payload_received;
    }
    return b;
  };
  int64_t complete = 0;
  auto last_progress = Clock::now();  // step 1's time includes joining (Init, 32 registrations)
  uint64_t bytes_at_last = traffic();
  while (complete < steps) {
    // Wake at the timeout at the latest, so a step is never given more than it.
    const double left = o.step_timeout_s - std::chrono::duration<double>(Clock::now() - last_progress).count();
    const tb::StepBoard::View v =
        board.wait_beyond(complete, std::chrono::duration<double>(std::clamp(left, 0.001, 1.0)));
    if (!v.error.empty()) die("failed", v.error, 1);
    if (v.complete > complete) {
      const auto now = Clock::now();
      const double dt = std::chrono::duration<double>(now - last_progress).count();
      const uint64_t bytes = traffic();
      for (int64_t k = complete; k < v.complete; ++k) res.step_seconds.push_back(dt / (v.complete - complete));
      for (int i = 0; i < o.num_ps; ++i) {
        const auto mem = tb::read_proc_memory(ps[i].pid);
        for (int64_t k = complete; k < v.complete; ++k) res.rss_after_step[i].push_back(mem ? mem->rss : 0);
      }
      complete = v.complete;
      const double mbps = dt > 0 ? mb(bytes - bytes_at_last) / dt : 0;
      double mean = 0;
      for (double s : res.step_seconds) mean += s;
      mean /= res.step_seconds.size();
      std::string rss;
      for (int i = 0; i < o.num_ps; ++i)
        rss += (i ? " / " : "") + std::to_string(res.rss_after_step[i].back() >> 20);
      std::fprintf(stderr, "[%s] step %lld/%lld  %.2f s/step  %.0f MB/s payload  ps RSS %s MiB  ETA %s\n",
                   res.mode.c_str(), static_cast<long long>(complete), static_cast<long long>(steps), dt, mbps,
                   rss.c_str(), fmt_time(mean * (steps - complete)).c_str());
      last_progress = now;
      bytes_at_last = bytes;
      continue;
    }
    const double stalled = std::chrono::duration<double>(Clock::now() - last_progress).count();
    if (stalled > o.step_timeout_s) {
      std::string who;
      for (size_t i = 0; i < v.behind.size() && i < 16; ++i) who += (i ? ", " : "") + std::to_string(v.behind[i]);
      if (v.behind.size() > 16) who += ", ... (" + std::to_string(v.behind.size()) + " in all)";
      std::string where;
      for (int i = 0; i < o.num_ps; ++i) {
        const auto st = tc::query_ps_status(addresses[i], 2.0);
        where += "; ps " + std::to_string(i) + " " +
                 (st ? "at global step " + std::to_string(st->global_step) + " (" + st->phase + ")" : "does not answer");
      }
      die("stalled",
          std::string(complete == 0 ? "joining or step 0" : "step " + std::to_string(complete) + " (0-based)") +
              " did not complete within --step_timeout_s=" + fmt_seconds(o.step_timeout_s) +
              ": replicas still in it: " + who + where,
          3);
    }
  }
  res.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  res.payload_moved = traffic();
  for (auto& t : threads) t.join();
  // The peak, before the run ends (the processes exit after the chief's
  // finish). The sampler stops first, so no sample postdates it.
  sampler.stop();
  for (const auto& p : ps) {
    const auto mem = tb::read_proc_memory(p.pid);
    res.hwm.push_back(mem ? mem->hwm : 0);
  }
  res.samples = sampler.samples();
  res.max_sampled = sampler.max_rss();
  if (sync) {
    res.sum_bytes.assign(o.num_ps, 0);
    for (size_t s = 0; s < sum_bytes_by_shard.size(); ++s) res.sum_bytes[m.layout.shards[s].ps] += sum_bytes_by_shard[s];
  }
  // Workers first, then the chief, which ends the run on every ps.
  for (int r = o.replicas - 1; r >= 0; --r) clients[r]->finish(true);
  clients.clear();
  for (size_t i = 0; i < ps.size(); ++i) {
    const int status = tb::wait_ps(ps[i], 30);
    if (status != 0)
      die("failed", "ps " + std::to_string(i) + " ended with status " + std::to_string(status) +
                        (status < 0 ? " (killed: it did not exit within 30 s of the chief's finish)" : ""), 1);
  }
}

int serve_ps_main(int argc, char** argv) {
  tb::PsChildOptions o;
  Flags f;
  f.add("task_index", number(o.task_index));
  f.add("keep_steps", number(o.keep_steps));
  f.add("peer_timeout_s", number(o.peer_timeout_s));
  f.add("startup_timeout_s", number(o.startup_timeout_s));
  f.add("async_learning_rate", number(o.async_learning_rate));
  f.parse(argc, argv, 2);
  return tb::serve_ps(o);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--serve_ps") return serve_ps_main(argc, argv);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--help" || std::string(argv[i]) == "-h") {
      print_help();
      return 0;
    }
  Run run;
  Options& o = run.opt;
  Flags f;
  f.add("replicas", number(o.replicas));
  f.add("num_ps", number(o.num_ps));
  f.add("steps", number(o.steps));
  f.add("async_steps", number(o.async_steps));
  f.add("model", text(o.model));
  f.add("keep_steps", number(o.keep_steps));
  f.add("codec", text(o.codec));
  f.add("clip", number(o.clip));
  f.add("size_to_binarize", number(o.size_to_binarize));
  f.add("quantize_logits", boolean(o.quantize_logits));
  f.add("min_shard_bytes", number(o.min_shard_bytes));
  f.add("max_shard_bytes", number(o.max_shard_bytes));
  f.add("step_timeout_s", number(o.step_timeout_s));
  f.add("sample_ms", number(o.sample_ms));
  f.add("max_growth", number(o.max_growth));
  f.add("out", text(o.out));
  f.parse(argc, argv, 1);
  if (o.replicas < 1 || o.replicas > 1024) usage_error("--replicas must be in [1, 1024]");
  if (o.num_ps < 1 || o.num_ps > 64) usage_error("--num_ps must be in [1, 64]");
  if (o.steps < 1) usage_error("--steps must be >= 1");
  if (o.async_steps < 0) usage_error("--async_steps must be >= 0");
  if (o.keep_steps < 1) usage_error("--keep_steps must be >= 1");
  if (o.model != "lenet" && o.model != "cifarnet" && o.model != "alexnet")
    usage_error("--model must be lenet, cifarnet or alexnet");
  if (o.codec != "terngrad" && o.codec != "fp16" && o.codec != "fp32") usage_error("--codec must be terngrad, fp16 or fp32");
  if (!(o.step_timeout_s > 0)) usage_error("--step_timeout_s must be > 0");
  if (o.sample_ms < 1) usage_error("--sample_ms must be >= 1");
  if (o.min_shard_bytes < 256 || (o.max_shard_bytes != 0 && o.max_shard_bytes < 1024))
    usage_error("--min_shard_bytes must be >= 256 and --max_shard_bytes 0 or >= 1024");
  for (int i = 0; i < argc; ++i) run.command += (i ? " " : "") + std::string(argv[i]);

  tb::LoadModelOptions mo;
  mo.net = o.model;
  char spec[96];
  std::snprintf(spec, sizeof spec, "terngrad:clip=%g,share_scale=1", o.clip);
  mo.codec = o.codec == "terngrad" ? spec : o.codec;
  mo.size_to_binarize = o.size_to_binarize;
  mo.quantize_logits = o.quantize_logits;
  mo.num_ps = o.num_ps;
  mo.replicas = o.replicas;
  mo.placement.min_shard_bytes = static_cast<uint64_t>(o.min_shard_bytes);
  mo.placement.max_shard_bytes = static_cast<uint64_t>(o.max_shard_bytes);
  run.config = {{"replicas", o.replicas},     {"num_ps", o.num_ps},
                {"steps", o.steps},           {"async_steps", o.async_steps},
                {"model", o.model},           {"keep_steps", o.keep_steps},
                {"codec", mo.codec},          {"size_to_binarize", o.size_to_binarize},
                {"quantize_logits", o.quantize_logits}, {"min_shard_bytes", o.min_shard_bytes},
                {"max_shard_bytes", o.max_shard_bytes}, {"step_timeout_s", o.step_timeout_s},
                {"sample_ms", o.sample_ms}};

  std::fprintf(stderr, "ps_load_bench: encoding %s payloads for %d replicas...\n", o.model.c_str(), o.replicas);
  const auto t_model = Clock::now();
  tb::LoadModel m;
  try {
    m = tb::build_load_model(mo);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_load_bench: %s\n", e.what());
    return 1;
  }
  uint64_t fp32_total = 0, ternary_vars = 0;
  for (const auto& share : m.per_ps) fp32_total += share.fp32_bytes;
  for (const auto& v : m.layout.variables) ternary_vars += v.codec != "fp32";
  run.model_json = {{"net", o.model},
                    {"parameters", m.parameters},
                    {"variables", m.layout.variables.size()},
                    {"variables_compressed", ternary_vars},
                    {"shards", m.layout.shards.size()},
                    {"fp32_bytes", fp32_total},
                    {"payload_bytes_per_replica", m.payload_bytes_per_replica},
                    {"encode_seconds", std::chrono::duration<double>(Clock::now() - t_model).count()}};
  std::fprintf(stderr, "ps_load_bench: %llu parameters, %zu variables (%llu compressed), %zu shards over %d ps; "
               "%.1f MB payload per replica and step (fp32 %.1f MB)\n",
               static_cast<unsigned long long>(m.parameters), m.layout.variables.size(),
               static_cast<unsigned long long>(ternary_vars), m.layout.shards.size(), o.num_ps,
               mb(m.payload_bytes_per_replica), mb(fp32_total));

  run_phase(run, m, true, o.steps);
  if (o.async_steps > 0) run_phase(run, m, false, o.async_steps);

  // Summary.
  int exit_code = 0;
  std::string verdict;
  std::printf("\nps_load_bench: %s, %d replicas, %d ps, keep_steps %d\n", o.model.c_str(), o.replicas, o.num_ps,
              o.keep_steps);
  for (const auto& p : run.phases) {
    double worst = 0;
    for (double s : p.step_seconds) worst = std::max(worst, s);
    std::printf("%s: %lld steps in %.1f s (slowest step %.2f s), %.0f MB/s payload (all replicas, both ways)\n",
                p.mode.c_str(), static_cast<long long>(p.steps), p.seconds, worst,
                p.seconds > 0 ? mb(p.payload_moved) / p.seconds : 0);
    for (int i = 0; i < o.num_ps; ++i) {
      const auto& share = m.per_ps[i];
      const uint64_t pushes = static_cast<uint64_t>(o.replicas) * share.payload_bytes;
      const uint64_t hwm = p.hwm[i], base = p.baseline_rss[i];
      const auto& after = p.rss_after_step[i];
      const size_t ref = std::min<size_t>(5, after.size()) - 1;
      const double growth = after[ref] ? static_cast<double>(after.back()) / after[ref] : 0;
      std::printf("  ps %d: shards %.1f MB fp32, %.2f MB payload/replica; peak RSS (VmHWM) %.1f MB = %.2fx fp32 shards, "
                  "baseline %.1f MB\n",
                  i, mb(share.fp32_bytes), mb(share.payload_bytes), mb(hwm),
                  share.fp32_bytes ? static_cast<double>(hwm) / share.fp32_bytes : 0, mb(base));
      if (p.mode == "sync") {
        const uint64_t kept = static_cast<uint64_t>(o.keep_steps) * p.sum_bytes[i];
        std::printf("        buffers: pushes %d x %.2f = %.1f MB, sums %.1f MB/step (x%d kept = %.1f MB); "
                    "peak above baseline %.1f MB = %.2fx (pushes + kept sums)\n",
                    o.replicas, mb(share.payload_bytes), mb(pushes), mb(p.sum_bytes[i]), o.keep_steps, mb(kept),
                    mb(hwm - std::min(hwm, base)),
                    pushes + kept ? static_cast<double>(hwm - std::min(hwm, base)) / (pushes + kept) : 0);
      }
      std::printf("        RSS after step %zu: %.1f MB, after step %zu: %.1f MB (x%.3f)\n", ref + 1, mb(after[ref]),
                  after.size(), mb(after.back()), growth);
      if (o.max_growth > 0 && growth > 1 + o.max_growth) {
        exit_code = 4;
        verdict += "ps " + std::to_string(i) + " " + p.mode + " RSS grew x" + std::to_string(growth) + "; ";
      }
    }
  }
  write_result(run, &m, exit_code == 0 ? "ok" : "rss_growth", verdict);
  std::printf("result: %s\n", o.out.c_str());
  if (exit_code) std::fprintf(stderr, "ps_load_bench: %s\n", verdict.c_str());
  return exit_code;
}
