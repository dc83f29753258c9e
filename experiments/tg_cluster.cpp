// tg-cluster: a whole distributed run on this machine from one command.
//
//   tg-cluster --num_ps=2 --num_workers=3 --evaluator=true --
//       --net=lenet --grad_bits=2 --max_steps=2000 --train_dir=/tmp/run
//
// Starts the ps tasks, the chief, the workers and (optionally) an evaluator
// as tg-train processes on free loopback ports, each with its TF_CONFIG, and
// waits for them. The chief's progress is shown; every task's output goes to
// <log_dir>/<task>.log. When a task fails, the launcher names it, shows the
// end of its log, stops the others and exits 1. The replicas are the chief
// and the workers (num_workers counts the workers besides the chief), so
// --num_workers=1 trains with 2 replicas. Flags after "--" go to every task.
//
// With --link_rate every task runs in its own network namespace behind a
// shaped link instead (emulated_network.h): tasks listen on 10.77.0.N, their
// links are shaped in both directions with tc tbf, and the bytes each task
// sent and received go to <log_dir>/link_stats.json. Everything made for the
// run (namespaces, links, processes) is removed when it ends, fails or is
// interrupted; a launcher killed with SIGKILL leaves namespaces that the next
// run removes. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).
//
// Every run gets its own cluster secret (comm/credentials.h), made here and
// kept in <log_dir>/secrets (mode 0700): the ps tasks get the secret, the
// chief, each worker and the evaluator only their own role's key, each as
// --secret_file (never on a command line). Tasks started with the user's own
// --secret_file or TG_CLUSTER_SECRET keep that instead.
//
// Exit status: 0 every task succeeded, 1 a task failed, 2 bad flags (or,
// with --link_rate, no privileges to create network namespaces).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <algorithm>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "emulated_network.h"
#include "link_sampler.h"
#include "terngrad/base/json.h"
#include "terngrad/base/timeline.h"
#include "terngrad/comm/credentials.h"
#include "terngrad/base/atomic_file.h"

namespace {

namespace tx = terngrad::experiments;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_interrupted = 0;
void on_signal(int) { g_interrupted = 1; }

struct Options {
  int num_ps = 1;
  int num_workers = 1;
  bool chief = true;
  bool evaluator = false;
  std::string host = "127.0.0.1";
  bool host_given = false;
  std::string log_dir;
  std::string tg_train;
  double timeout_secs = 0;      // 0: none
  std::string kill_task;        // fault injection: "worker:1"
  double kill_after_secs = 0;
  // Soak runs: a task of kill_types (seeded) killed every kill_every_min..max seconds.
  double kill_every_min = 0, kill_every_max = 0;
  uint64_t kill_seed = 1;
  std::vector<std::string> kill_types;
  int restart_failed = 0;       // a failed task is started again up to this many times
  int replica_threads = 0;      // 0: cores / replicas
  std::string link_rate, ps_link_rate;  // as given (tc syntax); "" = loopback, no namespaces
  uint64_t link_rate_bps = 0, ps_link_rate_bps = 0;
  // Every link re-shaped at these seconds after the start (a link that degrades mid-run).
  std::vector<std::pair<double, uint64_t>> link_rate_changes;
  // The emulated network's TCP congestion control; "host": the machine's default.
  std::string tcp_congestion = tx::EmulatedNetwork::kDefaultTcpCongestion;
  std::vector<std::string> train_flags;
  bool trace = false;  // every task's timeline, merged with the ps links' into <log_dir>/trace.json
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "tg-cluster: %s\nusage: tg-cluster [launcher flags] -- [tg-train flags] (tg-cluster --help lists them)\n",
               msg.c_str());
  std::exit(2);
}

const char* kHelp =
    "usage: tg-cluster [launcher flags] -- [tg-train flags]\n"
    "  --num_ps=N            parameter servers (default 1)\n"
    "  --num_workers=N       workers besides the chief (default 1)\n"
    "  --chief=BOOL          a separate chief task (default true; false: worker 0 is the chief)\n"
    "  --evaluator=BOOL      an evaluator task watching --train_dir (default false)\n"
    "  --host=ADDR           address every task listens on (default 127.0.0.1)\n"
    "  --log_dir=DIR         task logs (default <train_dir>/logs, else a new temporary folder)\n"
    "  --tg_train=PATH       the tg-train binary (default: next to tg-cluster)\n"
    "  --replica_threads=N   OpenMP threads per replica (default cores / replicas, at least 1)\n"
    "  --timeout_secs=S      stop everything and fail after S seconds (default: none)\n"
    "  --kill_task=TYPE:I --kill_after_secs=S   fault injection: SIGKILL that task after S seconds\n"
    "  --kill_every_secs=A:B --kill_seed=S --kill_types=chief,worker   soak runs: SIGKILL a random running\n"
    "                        task of those types every A to B seconds (seeded); with --restart_failed\n"
    "  --restart_failed=N    start a task that failed (or was killed) again, up to N times, after\n"
    "                        0.5 s, 1 s, 2 s, ... (a pod's restart policy); its log goes on\n"
    "  --link_rate=RATE      emulated links: every task in its own network namespace on a bridge, its\n"
    "                        link shaped to RATE each way (tc syntax: 500kbit, 100mbit, 1gbit, 10gbit);\n"
    "                        byte counts in <log_dir>/link_stats.json; needs root\n"
    "  --ps_link_rate=RATE   the ps tasks' links at another rate (default --link_rate)\n"
    "  --tcp_congestion=NAME every task's TCP congestion control on the emulated network (default cubic,\n"
    "                        Linux's own; host = this machine's default, which may be BBR: on these\n"
    "                        veth links BBR sent a flow sharing a 1 Gbit/s link at about 610 Mbit/s)\n"
    "  --trace=BOOL          every task writes its timeline (tg-train --trace_file); merged, with the\n"
    "                        ps links' rates on emulated links, into <log_dir>/trace.json (ui.perfetto.dev)\n"
    "  --link_rate_changes=SECS:RATE[,SECS:RATE...]   every link (ps too) re-shaped to RATE each way\n"
    "                        SECS after the start: a link that degrades or recovers mid-run\n";

// A flag's comma-separated list, empty entries kept (each is then refused by name).
std::vector<std::string> comma_list(const std::string& v) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= v.size();) {
    const size_t end = std::min(v.find(',', at), v.size());
    out.push_back(v.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

std::string value_of(const std::string& arg, const std::string& name) {
  const std::string prefix = "--" + name + "=";
  return arg.rfind(prefix, 0) == 0 ? arg.substr(prefix.size()) : std::string("\x01");
}

int to_int(const std::string& flag, const std::string& v, int lo) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || x < lo || x > 4096) usage_error("--" + flag + "=" + v + ": expected an integer >= " + std::to_string(lo));
  return static_cast<int>(x);
}

double to_double(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= 0)) usage_error("--" + flag + "=" + v + ": expected a number >= 0");
  return x;
}

uint64_t to_rate(const std::string& flag, const std::string& v) {
  try {
    return tx::parse_link_rate(flag, v);
  } catch (const std::invalid_argument& e) {
    usage_error(e.what());
  }
}

bool to_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  usage_error("--" + flag + "=" + v + ": expected true or false");
}

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "--help" || a == "-h") {
      std::printf("%s", kHelp);
      std::exit(0);
    }
    std::string v;
    if ((v = value_of(a, "num_ps")) != "\x01") o.num_ps = to_int("num_ps", v, 1);
    else if ((v = value_of(a, "num_workers")) != "\x01") o.num_workers = to_int("num_workers", v, 0);
    else if ((v = value_of(a, "chief")) != "\x01") o.chief = to_bool("chief", v);
    else if ((v = value_of(a, "evaluator")) != "\x01") o.evaluator = to_bool("evaluator", v);
    else if ((v = value_of(a, "trace")) != "\x01") o.trace = to_bool("trace", v);
    else if ((v = value_of(a, "host")) != "\x01") o.host = v, o.host_given = true;
    else if ((v = value_of(a, "log_dir")) != "\x01") o.log_dir = v;
    else if ((v = value_of(a, "tg_train")) != "\x01") o.tg_train = v;
    else if ((v = value_of(a, "timeout_secs")) != "\x01") o.timeout_secs = to_double("timeout_secs", v);
    else if ((v = value_of(a, "kill_task")) != "\x01") o.kill_task = v;
    else if ((v = value_of(a, "kill_after_secs")) != "\x01") o.kill_after_secs = to_double("kill_after_secs", v);
    else if ((v = value_of(a, "restart_failed")) != "\x01") o.restart_failed = to_int("restart_failed", v, 0);
    else if ((v = value_of(a, "kill_every_secs")) != "\x01") {
      const size_t colon = v.find(':');
      if (colon == std::string::npos) usage_error("--kill_every_secs=" + v + ": expected MIN:MAX seconds");
      o.kill_every_min = to_double("kill_every_secs", v.substr(0, colon));
      o.kill_every_max = to_double("kill_every_secs", v.substr(colon + 1));
      if (!(o.kill_every_min > 0) || o.kill_every_max < o.kill_every_min)
        usage_error("--kill_every_secs=" + v + ": expected 0 < MIN <= MAX");
    } else if ((v = value_of(a, "kill_seed")) != "\x01") o.kill_seed = static_cast<uint64_t>(to_int("kill_seed", v, 0));
    else if ((v = value_of(a, "kill_types")) != "\x01") {
      for (const std::string& type : comma_list(v)) {
        if (type != "ps" && type != "chief" && type != "worker" && type != "evaluator")
          usage_error("--kill_types=" + v + ": \"" + type + "\" is not ps, chief, worker or evaluator");
        o.kill_types.push_back(type);
      }
    }
    else if ((v = value_of(a, "replica_threads")) != "\x01") o.replica_threads = to_int("replica_threads", v, 1);
    else if ((v = value_of(a, "link_rate")) != "\x01") o.link_rate = v, o.link_rate_bps = to_rate("link_rate", v);
    else if ((v = value_of(a, "ps_link_rate")) != "\x01")
      o.ps_link_rate = v, o.ps_link_rate_bps = to_rate("ps_link_rate", v);
    else if ((v = value_of(a, "tcp_congestion")) != "\x01") {
      if (v.empty()) usage_error("--tcp_congestion=: name an algorithm (cubic, reno, bbr) or host");
      o.tcp_congestion = v;
    }
    else if ((v = value_of(a, "link_rate_changes")) != "\x01") {
      if (const std::string why = terngrad::comm::rate_schedule_problem<double>(v, &o.link_rate_changes); !why.empty())
        usage_error("--link_rate_changes=" + v + ": " + why);
    }
    else usage_error("unknown launcher flag " + a + " (tg-train flags go after \"--\")");
  }
  for (; i < argc; ++i) o.train_flags.emplace_back(argv[i]);
  if (o.kill_every_min > 0 && o.kill_types.empty()) o.kill_types = {"chief", "worker"};
  if (!o.chief && o.num_workers == 0) usage_error("no chief and no workers: nothing would train");
  if (!o.ps_link_rate.empty() && o.link_rate.empty())
    usage_error("--ps_link_rate=" + o.ps_link_rate + " needs --link_rate (the rate of the other tasks' links)");
  if (o.ps_link_rate.empty()) o.ps_link_rate = o.link_rate, o.ps_link_rate_bps = o.link_rate_bps;
  // On loopback every task runs the machine's default ("host").
  if (o.tcp_congestion != tx::EmulatedNetwork::kDefaultTcpCongestion && o.tcp_congestion != "host" &&
      o.link_rate.empty())
    usage_error("--tcp_congestion=" + o.tcp_congestion + " needs --link_rate (it sets the emulated network's TCP)");
  if (!o.link_rate_changes.empty() && o.link_rate.empty())
    usage_error("--link_rate_changes needs --link_rate (emulated links to re-shape)");
  if (!o.link_rate.empty() && o.host_given)
    usage_error("--host=" + o.host + " with --link_rate: every task gets its own address (10.77.0.N) there");
  for (const auto& f : o.train_flags)
    for (const char* owned : {"--job_name", "--task_id", "--ps_hosts", "--worker_hosts", "--chief_host", "--evaluator_host"})
      if (f.rfind(owned, 0) == 0) usage_error(f + ": the launcher sets the cluster itself");
  return o;
}

// `count` distinct free TCP ports on host: all bound at once, then released
// (each task binds its own moments later). Holding them together keeps the
// kernel from handing one port out twice: a port released and asked for
// again can come back, and two tasks then share an address.
std::vector<int> free_ports(const std::string& host, size_t count) {
  std::vector<int> fds, ports;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  sockaddr_in a{};
  a.sin_family = AF_INET;
  if (inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) usage_error("--host=" + host + ": not an IPv4 address");
  for (size_t i = 0; i < count; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) {
      close_all();
      usage_error("cannot create a socket to find a free port");
    }
    fds.push_back(fd);
    sockaddr_in any = a;
    any.sin_port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&any), sizeof any) != 0) {
      close_all();
      usage_error("cannot bind " + host + ":0");
    }
    socklen_t len = sizeof any;
    getsockname(fd, reinterpret_cast<sockaddr*>(&any), &len);
    ports.push_back(ntohs(any.sin_port));
  }
  close_all();
  return ports;
}

struct Task {
  Task(std::string t, int i) : type(std::move(t)), index(i) {}
  std::string type;
  int index = 0;
  std::string name() const { return type + " " + std::to_string(index); }
  std::string file() const { return type + "-" + std::to_string(index) + ".log"; }
  std::string trace_file() const { return "trace-" + type + "-" + std::to_string(index) + ".json"; }
  std::string secret_file;  // --secret_file it is started with ("": the user's own secret)
  std::string address;
  pid_t pid = -1;
  int status = -1;  // exit status once reaped
  bool running = false;
  Clock::time_point started;
  double seconds = 0;      // wall time it ran, every start added up
  double cpu_seconds = 0;  // user + system CPU time, every start added up
  double peak_rss_mib = 0; // the largest resident set of any start (its children's included)
  int restarts = 0;                             // times started again (--restart_failed)
  std::optional<Clock::time_point> restart_at;  // when it is to be started again
};

// The addresses of the tasks of one type, as TF_CONFIG lists them.
terngrad::json::Json addresses_of(const std::vector<Task>& tasks, const std::string& type) {
  terngrad::json::Json list = terngrad::json::Json::array();
  for (const Task& t : tasks)
    if (t.type == type) list.push_back(t.address);
  return list;
}

std::string tail_of(const fs::path& file, int lines) {
  std::ifstream in(file);
  std::vector<std::string> all;
  for (std::string l; std::getline(in, l);) all.push_back(l);
  std::string out;
  for (size_t i = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0; i < all.size(); ++i)
    out += "    " + all[i] + "\n";
  return out;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "ended oddly";
}

// Reaps task t when it has ended (options WNOHANG), or waits for it to end
// (options 0): true when reaped. Keeps its status, and adds its run's wall
// and CPU time (its children's included) to the task's, and its peak memory.
bool reap(Task& t, int options) {
  int st = 0;
  rusage ru{};
  if (::wait4(t.pid, &st, options, &ru) != t.pid) return false;
  t.running = false;
  t.status = st;
  t.seconds += std::chrono::duration<double>(Clock::now() - t.started).count();
  const auto secs = [](const timeval& v) { return static_cast<double>(v.tv_sec) + 1e-6 * static_cast<double>(v.tv_usec); };
  t.cpu_seconds += secs(ru.ru_utime) + secs(ru.ru_stime);
  t.peak_rss_mib = std::max(t.peak_rss_mib, static_cast<double>(ru.ru_maxrss) / 1024.0);  // KiB on Linux
  return true;
}

void stop_all(std::vector<Task>& tasks) {
  for (Task& t : tasks)
    if (t.running) ::kill(t.pid, SIGTERM);
  const auto until = Clock::now() + std::chrono::seconds(3);
  for (Task& t : tasks) {
    while (t.running && Clock::now() < until)
      if (!reap(t, WNOHANG)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (t.running) {
      ::kill(t.pid, SIGKILL);
      reap(t, 0);
    }
  }
}

// Each task has its own namespace and address, so every one can take the
// same port (TensorFlow's customary one).
constexpr int kEmulatedPort = 2222;

// "ps0", "worker3": the task's host name on the emulated network.
std::string host_name(const Task& t) { return t.type + std::to_string(t.index); }

std::string megabytes(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB", bytes / 1e6);
  return buf;
}

// The step count of the chief's summary line ("..., 150 steps, grad_bits
// ..."), 0 if it has none (a failed run).
int64_t summary_steps(const Options& o, const std::string& shown) {
  std::ifstream in(fs::path(o.log_dir) / shown);
  std::string line;
  int64_t steps = 0;
  while (std::getline(in, line)) {
    const size_t at = line.find(" steps, grad_bits ");
    if (at == std::string::npos) continue;
    const size_t begin = line.find_last_of(' ', at - 1);
    steps = std::atoll(line.substr(begin + 1, at - begin - 1).c_str());
  }
  return steps;
}

// The ps links' idle time (link_sampler.h) into link_stats.json's "ps_link_idle"
// and one line: per step when the chief's summary says how many ran.
void add_link_idle(terngrad::json::Json& j, const tx::LinkIdleReport& r, int64_t steps) {
  double in_idle = 0, out_idle = 0, in_unused = 0, out_unused = 0;
  terngrad::json::Json links = terngrad::json::Json::array();
  for (const tx::LinkIdle& l : r.links) {
    links.push_back({{"interface", l.interface},
                     {"in_idle_seconds", l.in_idle_s},
                     {"out_idle_seconds", l.out_idle_s},
                     {"in_unused_fraction", l.in_unused},
                     {"out_unused_fraction", l.out_unused},
                     {"in_bytes", l.in_bytes},
                     {"out_bytes", l.out_bytes}});
    in_idle += l.in_idle_s / r.links.size(), out_idle += l.out_idle_s / r.links.size();
    in_unused += l.in_unused / r.links.size(), out_unused += l.out_unused / r.links.size();
  }
  j["ps_link_idle"] = {{"window_seconds", r.window_s}, {"period_seconds", r.period_s}, {"samples", r.samples},
                       {"steps", steps},        {"links", links}};
  if (r.window_s <= 0) return;
  std::string per_step;
  if (steps > 0) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "; per step of %.1f ms: in %.1f ms, out %.1f ms idle", 1e3 * r.window_s / steps,
                  1e3 * in_idle / steps, 1e3 * out_idle / steps);
    per_step = buf;
    j["ps_link_idle"]["step_ms"] = 1e3 * r.window_s / steps;
    j["ps_link_idle"]["in_idle_ms_per_step"] = 1e3 * in_idle / steps;
    j["ps_link_idle"]["out_idle_ms_per_step"] = 1e3 * out_idle / steps;
  }
  std::fprintf(stderr,
               "tg-cluster: ps links over the %.1f s they were busy: idle (under 5%% of the rate) in %.1f%%, out "
               "%.1f%%; capacity unused in %.1f%%, out %.1f%%%s\n",
               r.window_s, 100 * in_idle / r.window_s, 100 * out_idle / r.window_s, 100 * in_unused,
               100 * out_unused, per_step.c_str());
}

// <log_dir>/link_stats.json: the rates, the run's wall time and each task's
// interface counters (frames with their headers, so a little above the
// payload the trainer counts), the ps links' idle time, and the one-line
// summary of the ps links.
void write_link_stats(const Options& o, const std::vector<Task>& tasks, const tx::EmulatedNetwork& net,
                      double wall_seconds, const std::string& outcome, const tx::LinkIdleReport* idle,
                      int64_t steps) {
  terngrad::json::Json j;
  j["link_rate"] = o.link_rate;
  j["link_rate_bps"] = o.link_rate_bps;
  j["ps_link_rate"] = o.ps_link_rate;
  j["ps_link_rate_bps"] = o.ps_link_rate_bps;
  // What the tasks' TCP ran: the pinned algorithm, or the machine's default.
  j["tcp_congestion"] = net.tcp_congestion().empty() ? tx::host_tcp_congestion() : net.tcp_congestion();
  j["wall_seconds"] = wall_seconds;
  j["outcome"] = outcome;
  j["tasks"] = terngrad::json::Json::array();
  uint64_t ps_tx = 0, ps_rx = 0;
  int ps_count = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const tx::EmulatedNetwork::Host& h = net.hosts().at(i);
    const tx::LinkCounters c = net.counters(h);
    if (tasks[i].type == "ps") ps_tx += c.tx_bytes, ps_rx += c.rx_bytes, ++ps_count;
    j["tasks"].push_back({{"task", tasks[i].type + "-" + std::to_string(tasks[i].index)},
                          {"address", h.address},
                          {"link_rate_bps", h.rate_bps},
                          {"tx_bytes", c.tx_bytes},
                          {"rx_bytes", c.rx_bytes}});
  }
  if (idle) add_link_idle(j, *idle, steps);
  const fs::path path = fs::path(o.log_dir) / "link_stats.json";
  terngrad::base::write_file_atomically(path.string(), terngrad::json::dump_pretty(j) + "\n");
  const double secs = std::max(wall_seconds, 1e-9);
  std::fprintf(stderr,
               "tg-cluster: ps links (%s each way): %d ps sent %s and received %s in %.1f s "
               "(%.1f / %.1f Mbit/s per ps link on average); %s\n",
               o.ps_link_rate.c_str(), ps_count, megabytes(ps_tx).c_str(), megabytes(ps_rx).c_str(), wall_seconds,
               ps_tx * 8 / secs / 1e6 / std::max(ps_count, 1), ps_rx * 8 / secs / 1e6 / std::max(ps_count, 1),
               path.c_str());
}

// A fresh cluster secret for this run: the ps tasks' file holds it, every
// other task's file only its own role's key.
void hand_out_secrets(const Options& o, std::vector<Task>& tasks) {
  namespace tc = terngrad::comm;
  const fs::path dir = fs::path(o.log_dir) / "secrets";
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all, fs::perm_options::replace);
  const tc::ClusterSecret secret = tc::ClusterSecret::generate();
  const std::string ps_file = (dir / "cluster.secret").string();
  tc::write_secret_file(ps_file, tc::cluster_secret_line(secret));
  for (Task& t : tasks) {
    if (t.type == "ps") {
      t.secret_file = ps_file;
      continue;
    }
    tc::Role role = tc::Role::observer();
    if (t.type == "chief") role = tc::Role::replica_role(0);
    if (t.type == "worker") role = tc::Role::replica_role(static_cast<uint32_t>(t.index + (o.chief ? 1 : 0)));
    t.secret_file = (dir / (role.name() + ".key")).string();
    tc::write_secret_file(t.secret_file, tc::role_key_line({role, secret.key_for(role)}));
  }
}

// The folder of the tasks' logs: --log_dir, else <train_dir>/logs, else a
// fresh folder in /tmp.
void choose_log_dir(Options& o) {
  std::string train_dir;
  for (const auto& f : o.train_flags)
    if (f.rfind("--train_dir=", 0) == 0) train_dir = f.substr(12);
  if (o.evaluator && train_dir.empty()) usage_error("--evaluator=true needs --train_dir among the tg-train flags");
  if (o.log_dir.empty()) {
    if (!train_dir.empty()) {
      o.log_dir = train_dir + "/logs";
    } else {
      char tmpl[] = "/tmp/tg-cluster-XXXXXX";
      if (!mkdtemp(tmpl)) usage_error("cannot create a log folder in /tmp");
      o.log_dir = tmpl;
    }
  }
  fs::create_directories(o.log_dir);
}

// Every task of the run, with a free loopback port each (on emulated links
// the network gives the addresses).
std::vector<Task> plan_tasks(const Options& o) {
  std::vector<Task> tasks;
  for (int i = 0; i < o.num_ps; ++i) tasks.emplace_back("ps", i);
  if (o.chief) tasks.emplace_back("chief", 0);
  for (int i = 0; i < o.num_workers; ++i) tasks.emplace_back("worker", i);
  if (o.evaluator) tasks.emplace_back("evaluator", 0);
  if (!o.link_rate.empty() && tasks.size() > 253)
    usage_error("--link_rate: " + std::to_string(tasks.size()) + " tasks; one emulated network holds at most 253");
  if (o.link_rate.empty()) {
    const std::vector<int> ports = free_ports(o.host, tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) tasks[i].address = o.host + ":" + std::to_string(ports[i]);
  }
  return tasks;
}

bool has_flag(const Options& o, const char* prefix) {
  for (const auto& f : o.train_flags)
    if (f.rfind(prefix, 0) == 0) return true;
  return false;
}

// The emulated network, one host per task: 0, or the exit status to end with.
int set_up_network(const Options& o, std::vector<Task>& tasks, std::optional<tx::EmulatedNetwork>& net) {
  // A closed terminal must clean up too.
  signal(SIGHUP, on_signal);
  try {
    net.emplace("tgnet", o.tcp_congestion == "host" ? "" : o.tcp_congestion);
    for (Task& t : tasks) {
      const auto& h = net->add_host(host_name(t), t.type == "ps" ? o.ps_link_rate_bps : o.link_rate_bps);
      t.address = h.address + ":" + std::to_string(kEmulatedPort);
      if (g_interrupted) break;
    }
  } catch (const tx::NetworkPrivilegeError& e) {
    std::fprintf(stderr, "tg-cluster: --link_rate=%s: %s\n", o.link_rate.c_str(), e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "tg-cluster: --tcp_congestion=%s: %s\n", o.tcp_congestion.c_str(), e.what());
    return 2;
  } catch (const tx::NetworkError& e) {
    std::fprintf(stderr, "tg-cluster: cannot set up the emulated network: %s\n", e.what());
    return 1;
  }
  if (g_interrupted) {
    std::fprintf(stderr, "tg-cluster: interrupted while setting up the emulated network\n");
    return 1;
  }
  return 0;
}

// What starting a task needs besides the task.
struct Launch {
  const Options& o;
  const terngrad::json::Json& cluster;
  std::optional<tx::EmulatedNetwork>& net;
  int threads;
  bool user_threads;
};

// --trace: the tasks' timelines (a task that died before writing one is
// named and left out) and the ps links' rates, one file.
void merge_traces(const Options& o, const std::vector<Task>& tasks,
                  const std::vector<terngrad::timeline::Counter>& link_rates) {
  std::vector<std::string> inputs;
  for (const Task& t : tasks) {
    const fs::path p = fs::path(o.log_dir) / t.trace_file();
    if (fs::exists(p))
      inputs.push_back(p.string());
    else
      std::fprintf(stderr, "tg-cluster: %s wrote no timeline (%s)\n", t.name().c_str(), p.c_str());
  }
  const fs::path out = fs::path(o.log_dir) / "trace.json";
  try {
    terngrad::timeline::merge_files(inputs, link_rates, out.string());
    std::fprintf(stderr, "tg-cluster: timeline of %zu tasks in %s (open it in ui.perfetto.dev)\n", inputs.size(),
                 out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tg-cluster: the timeline was not merged: %s\n", e.what());
  }
}

// Starts task k (in its namespace on emulated links): "" or why it could
// not start. A restart appends to the task's log.
std::string start_task(const Launch& l, std::vector<Task>& tasks, size_t k) {
  const Options& o = l.o;
  Task& t = tasks[k];
  const std::string tf_config =
      terngrad::json::dump_line({{"cluster", l.cluster}, {"task", {{"type", t.type}, {"index", t.index}}}});
  std::vector<std::string> args = {o.tg_train};
  args.insert(args.end(), o.train_flags.begin(), o.train_flags.end());
  if (!l.user_threads) args.push_back("--threads=" + std::to_string(t.type == "ps" ? 1 : l.threads));
  if (!t.secret_file.empty()) args.push_back("--secret_file=" + t.secret_file);
  if (o.trace) args.push_back("--trace_file=" + (fs::path(o.log_dir) / t.trace_file()).string());
  const bool shows_progress = t.type == "chief" || (!o.chief && t.type == "worker" && t.index == 0);
  if (!shows_progress) args.push_back("--quiet=true");
  const fs::path log = fs::path(o.log_dir) / t.file();
  const int mode = O_WRONLY | O_CREAT | (t.restarts > 0 ? O_APPEND : O_TRUNC);
  // In the child, before exec: output to the task's log, its TF_CONFIG.
  auto prepare_child = [&log, &tf_config, mode] {
    const int fd = ::open(log.c_str(), mode, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
      ::close(fd);
    }
    setenv("TF_CONFIG", tf_config.c_str(), 1);
  };
  pid_t pid = -1;
  if (l.net) {
    try {
      pid = l.net->spawn(l.net->hosts().at(k), args, prepare_child);
    } catch (const std::exception& e) {
      return std::string("cannot start ") + t.name() + ": " + e.what();
    }
  } else {
    pid = fork();
    if (pid < 0) usage_error("fork failed");
    if (pid == 0) {
      prepare_child();
      std::vector<char*> cargs;
      for (auto& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv(cargs[0], cargs.data());
      std::fprintf(stderr, "exec %s failed: %s\n", cargs[0], std::strerror(errno));
      _exit(127);
    }
  }
  t.pid = pid;
  t.running = true;
  t.started = Clock::now();
  t.restart_at.reset();
  return "";
}

// Starts every task: "" or why one could not start.
std::string start_tasks(const Launch& l, std::vector<Task>& tasks) {
  for (size_t k = 0; k < tasks.size(); ++k)
    if (std::string why = start_task(l, tasks, k); !why.empty()) return why;
  return "";
}

// --restart_failed: whether the task that just ended badly is to be
// started again, and when (0.5 s, 1 s, 2 s, ... up to 8 s after its end).
bool schedule_restart(const Options& o, Task& t) {
  if (t.restarts >= o.restart_failed) return false;
  const double backoff = std::min(8.0, 0.5 * static_cast<double>(1 << std::min(t.restarts, 4)));
  t.restart_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(backoff));
  ++t.restarts;
  std::fprintf(stderr, "tg-cluster: %s %s; starting it again in %.1f s (restart %d of %d)\n", t.name().c_str(),
               describe_status(t.status).c_str(), backoff, t.restarts, o.restart_failed);
  return true;
}

// Prints what the log at `path` gained since the last call.
void show_new_output(std::ifstream& log, const fs::path& path) {
  if (!log.is_open()) log.open(path);
  if (!log.is_open()) return;
  log.clear();
  std::string chunk((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  if (!chunk.empty()) {
    std::fwrite(chunk.data(), 1, chunk.size(), stderr);
    std::fflush(stderr);
  }
}

// Reaps the tasks that ended: "" or the first failure, with its log's end.
// any_running: whether one still runs.
std::string reap_tasks(const Options& o, std::vector<Task>& tasks, bool& any_running) {
  std::string failure;
  any_running = false;
  for (Task& t : tasks) {
    if (!t.running) continue;
    if (reap(t, WNOHANG)) {
      const int st = t.status;
      const bool failed = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      if (failed && schedule_restart(o, t)) {
        any_running = true;  // it will be back
        continue;
      }
      if (failed && failure.empty())
        failure = t.name() + " (" + t.address + ") " + describe_status(st) + "; the end of " + t.file() + ":\n" +
                  tail_of(fs::path(o.log_dir) / t.file(), 6);
    } else {
      any_running = true;
    }
  }
  return failure;
}

// Fault injection (--kill_task): kills the named task and reaps it; the
// others go on, to show how they react.
void kill_named_task(const Options& o, std::vector<Task>& tasks) {
  for (Task& t : tasks)
    if (t.running && t.type + ":" + std::to_string(t.index) == o.kill_task) {
      std::fprintf(stderr, "tg-cluster: fault injection: killing %s (pid %d)\n", t.name().c_str(), t.pid);
      ::kill(t.pid, SIGKILL);
    }
  for (Task& t : tasks)
    if (t.type + ":" + std::to_string(t.index) == o.kill_task) {
      if (t.running) reap(t, 0);
      schedule_restart(o, t);
    }
}

// --kill_every_secs: SIGKILLs one running task of --kill_types, chosen by
// the seeded generator; returns the seconds until the next kill.
double kill_random_task(const Options& o, std::vector<Task>& tasks, std::mt19937_64& rng) {
  std::vector<size_t> eligible;
  for (size_t k = 0; k < tasks.size(); ++k)
    if (tasks[k].running && std::find(o.kill_types.begin(), o.kill_types.end(), tasks[k].type) != o.kill_types.end())
      eligible.push_back(k);
  if (!eligible.empty()) {
    Task& t = tasks[eligible[rng() % eligible.size()]];
    std::fprintf(stderr, "tg-cluster: fault injection: killing %s (pid %d)\n", t.name().c_str(), t.pid);
    ::kill(t.pid, SIGKILL);  // reaped (and restarted) by reap_tasks
  }
  return o.kill_every_min + (o.kill_every_max - o.kill_every_min) * std::uniform_real_distribution<double>(0, 1)(rng);
}

// Appends every running task's resident memory (VmRSS, kB) to
// <log_dir>/rss.jsonl: a soak run's ps must stay flat.
void log_rss(const Options& o, const std::vector<Task>& tasks, double elapsed) {
  terngrad::json::Json line = {{"seconds", elapsed}};
  for (const Task& t : tasks) {
    if (!t.running) continue;
    std::ifstream status("/proc/" + std::to_string(t.pid) + "/status");
    for (std::string l; std::getline(status, l);)
      if (l.rfind("VmRSS:", 0) == 0) line[t.name()] = std::strtoll(l.c_str() + 6, nullptr, 10);
  }
  std::ofstream(fs::path(o.log_dir) / "rss.jsonl", std::ios::app) << terngrad::json::dump_line(line) << "\n";
}

// Waits for the run to end, showing the progress task's log as it grows:
// "" when every task ended well, else why the run failed.
std::string watch_tasks(const Launch& l, std::vector<Task>& tasks, const std::string& shown) {
  const Options& o = l.o;
  std::ifstream progress_log;
  const auto start = Clock::now();
  bool killed_one = false;
  std::mt19937_64 rng(o.kill_seed);
  double next_kill = o.kill_every_min > 0 ? o.kill_every_min : -1, next_rss = 0;
  size_t link_changes_done = 0;
  for (;;) {
    show_new_output(progress_log, fs::path(o.log_dir) / shown);
    bool any_running = false;
    if (std::string failure = reap_tasks(o, tasks, any_running); !failure.empty()) return failure;
    for (size_t k = 0; k < tasks.size(); ++k) {
      if (!tasks[k].restart_at) continue;
      any_running = true;
      if (Clock::now() < *tasks[k].restart_at) continue;
      if (std::string why = start_task(l, tasks, k); !why.empty()) return why;
    }
    if (!any_running) return "";
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (!o.kill_task.empty() && !killed_one && elapsed >= o.kill_after_secs) {
      kill_named_task(o, tasks);
      killed_one = true;
    }
    if (next_kill >= 0 && elapsed >= next_kill) next_kill = elapsed + kill_random_task(o, tasks, rng);
    if (link_changes_done < o.link_rate_changes.size() && elapsed >= o.link_rate_changes[link_changes_done].first) {
      const uint64_t bps = o.link_rate_changes[link_changes_done++].second;
      try {
        for (size_t i = 0; i < l.net->hosts().size(); ++i) l.net->set_rate(i, bps);
      } catch (const tx::NetworkError& e) {
        return std::string("--link_rate_changes: ") + e.what();
      }
      std::fprintf(stderr, "tg-cluster: %.0f s: every link now %.0f Mbit/s each way (--link_rate_changes)\n", elapsed,
                   bps / 1e6);
    }
    if (next_kill >= 0 && elapsed >= next_rss) {  // soak runs: memory every 10 s
      log_rss(o, tasks, elapsed);
      next_rss = elapsed + 10;
    }
    if (g_interrupted) return "interrupted";
    if (o.timeout_secs > 0 && elapsed > o.timeout_secs)
      return "timed out after " + std::to_string(static_cast<int>(o.timeout_secs)) + " s";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

// After a failure: the others get a moment to notice on their own (their
// messages name the dead peer) before whoever is left is stopped.
void let_the_others_notice(std::vector<Task>& tasks) {
  const auto until = Clock::now() + std::chrono::seconds(6);
  for (bool any = true; any && Clock::now() < until && !g_interrupted;) {
    any = false;
    for (Task& t : tasks) {
      if (!t.running) continue;
      if (!reap(t, WNOHANG)) any = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The tasks' outcomes and the chief's summary line; the exit status.
int report(const Options& o, const std::vector<Task>& tasks, const std::string& failure, const std::string& shown) {
  std::fprintf(stderr, "\ntg-cluster: tasks\n");
  // CPU time beside wall time: on a machine the tasks share, where the
  // cores went (a ps at 0.9 cores is the step's bottleneck, say); and each
  // task's peak resident memory.
  for (const Task& t : tasks) {
    std::string what = t.pid < 0 ? "not started" : describe_status(t.status);
    if (t.pid >= 0 && t.seconds > 0) {
      char used[128];
      std::snprintf(used, sizeof used, "; ran %.1f s, CPU %.1f s (%.2f cores), peak RSS %.0f MiB", t.seconds,
                    t.cpu_seconds, t.cpu_seconds / t.seconds, t.peak_rss_mib);
      what += used;
    }
    std::fprintf(stderr, "  %-12s %-22s %s\n", t.name().c_str(), t.address.c_str(), what.c_str());
  }
  if (!failure.empty()) {
    std::fprintf(stderr, "tg-cluster: FAILED: %s", failure.c_str());
    if (failure.back() != '\n') std::fprintf(stderr, "\n");
    return 1;
  }
  // The chief's summary (its stdout went to its log).
  std::ifstream in(fs::path(o.log_dir) / shown);
  std::string last, line;
  while (std::getline(in, line))
    if (line.find(" steps, grad_bits ") != std::string::npos) last = line;
  if (!last.empty()) std::printf("%s\n", last.c_str());
  return 0;
}

int run(Options& o) {
  if (o.tg_train.empty()) o.tg_train = (fs::canonical("/proc/self/exe").parent_path() / "tg-train").string();
  if (!fs::exists(o.tg_train)) usage_error("tg-train not found at " + o.tg_train + " (use --tg_train=PATH)");
  choose_log_dir(o);
  std::vector<Task> tasks = plan_tasks(o);
  const int replicas = (o.chief ? 1 : 0) + o.num_workers;
  if (std::getenv("TG_CLUSTER_SECRET") == nullptr && !has_flag(o, "--secret_file=")) {
    try {
      hand_out_secrets(o, tasks);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tg-cluster: cannot write the run's secrets: %s\n", e.what());
      return 1;
    }
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = o.replica_threads > 0 ? o.replica_threads : std::max(1, cores / replicas);

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  // From here on every way out must pass through net's destructor (which
  // removes the namespaces): no std::exit, exceptions are caught in main.
  std::optional<tx::EmulatedNetwork> net;
  if (!o.link_rate.empty())
    if (const int status = set_up_network(o, tasks, net); status != 0) return status;

  terngrad::json::Json cluster = {{"ps", addresses_of(tasks, "ps")}, {"worker", addresses_of(tasks, "worker")}};
  if (o.chief) cluster["chief"] = addresses_of(tasks, "chief");
  if (o.evaluator) cluster["evaluator"] = addresses_of(tasks, "evaluator");
  std::fprintf(stderr, "tg-cluster: %d ps, %d replicas (%s), %s; logs in %s\n", o.num_ps, replicas,
               o.chief ? "chief + workers" : "worker 0 is the chief", o.evaluator ? "an evaluator" : "no evaluator",
               o.log_dir.c_str());
  if (net)
    std::fprintf(stderr, "tg-cluster: emulated links: %s each way (ps: %s), TCP %s, namespaces %s-*\n",
                 o.link_rate.c_str(), o.ps_link_rate.c_str(),
                 (net->tcp_congestion().empty() ? "host default " + tx::host_tcp_congestion() : net->tcp_congestion())
                     .c_str(),
                 net->hub().substr(0, net->hub().size() - 4).c_str());

  // The ps links' counters every millisecond: where they idle.
  std::optional<tx::LinkSampler> sampler;
  if (net) {
    std::vector<std::string> ps_links;
    for (size_t i = 0; i < tasks.size(); ++i)
      if (tasks[i].type == "ps") ps_links.push_back(net->hosts().at(i).hub_if);
    try {
      sampler.emplace(net->hub(), ps_links, o.ps_link_rate_bps);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tg-cluster: the ps links' idle time is not measured: %s\n", e.what());
    }
  }
  const auto run_start = Clock::now();
  const std::string shown = o.chief ? "chief-0.log" : "worker-0.log";
  const Launch launch{o, cluster, net, threads, has_flag(o, "--threads=")};
  std::string failure = start_tasks(launch, tasks);
  if (failure.empty()) failure = watch_tasks(launch, tasks, shown);
  if (!failure.empty() && failure != "interrupted") let_the_others_notice(tasks);
  // Tasks first: a namespace deleted under a live task would outlive the run.
  stop_all(tasks);
  std::vector<terngrad::timeline::Counter> link_rates;  // for --trace
  if (net) {
    const double wall = std::chrono::duration<double>(Clock::now() - run_start).count();
    try {
      std::optional<tx::LinkIdleReport> idle;
      if (sampler) {
        idle = sampler->stop();
        sampler->write_timeline_csv((fs::path(o.log_dir) / "ps_link_timeline.csv").string());
        if (o.trace) link_rates = sampler->timeline_counters();
      }
      write_link_stats(o, tasks, *net, wall, failure.empty() ? "ok" : failure.substr(0, failure.find('\n')),
                       idle ? &*idle : nullptr, summary_steps(o, shown));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tg-cluster: cannot write the link statistics: %s\n", e.what());
      if (failure.empty()) failure = std::string("link statistics: ") + e.what();
    }
    net.reset();  // namespaces, links and anything left in them
  }
  if (o.trace) merge_traces(o, tasks, link_rates);
  return report(o, tasks, failure, shown);
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    // Caught here so that the stack unwinds: the emulated network's
    // destructor removes the namespaces on the way.
    std::fprintf(stderr, "tg-cluster: %s\n", e.what());
    return 1;
  }
}
