#include "emulated_network.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <strings.h>
#include <thread>

#include "terngrad/base/json.h"

namespace terngrad::experiments {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kNetnsDir = "/run/netns";
// Every ip/tc command finishes in milliseconds; one that hangs (a wedged
// netlink socket) must not hang the launcher or its cleanup.
constexpr double kCommandTimeoutSecs = 10;
// How long killed processes get to leave a namespace before it is deleted.
constexpr double kKillWaitSecs = 5;

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// ip and tc live in /usr/sbin, which a non-root PATH often lacks.
std::string find_tool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::string p = path;
    for (size_t at = 0; at <= p.size();) {
      const size_t end = std::min(p.find(':', at), p.size());
      if (end > at) dirs.push_back(p.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const char* d : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) dirs.emplace_back(d);
  for (const auto& d : dirs) {
    const std::string f = d + "/" + name;
    if (::access(f.c_str(), X_OK) == 0) return f;
  }
  throw NetworkError(name + " not found (Debian package iproute2)");
}

struct ToolResult {
  int status = -1;  // waitpid status
  bool timed_out = false;
  std::string out, err;
};

// Runs argv (argv[0] a tool name found by find_tool) with no shell, capturing
// stdout and stderr, killed after kCommandTimeoutSecs.
ToolResult run_tool(std::vector<std::string> argv) {
  argv[0] = find_tool(argv[0]);
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw NetworkError("pipe: " + std::string(std::strerror(errno)));
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]), ::close(out_pipe[1]);
    throw NetworkError("pipe: " + std::string(std::strerror(errno)));
  }
  std::vector<char*> cargs;
  for (auto& a : argv) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) {
    for (int fd : {out_pipe[0], out_pipe[1], err_pipe[0], err_pipe[1]}) ::close(fd);
    throw NetworkError("fork for " + join(argv) + ": " + std::strerror(errno));
  }
  if (pid == 0) {
    // Its own process group: a Ctrl-C at the terminal (which the launcher
    // turns into cleanup) must not kill the `ip netns del` doing that cleanup.
    ::setpgid(0, 0);
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::execv(cargs[0], cargs.data());
    std::fprintf(stderr, "exec %s: %s\n", cargs[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  ToolResult r;
  const auto deadline = Clock::now() + std::chrono::duration<double>(kCommandTimeoutSecs);
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      r.timed_out = true;
      break;
    }
    const int n = ::poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  if (r.timed_out) ::kill(pid, SIGKILL);
  // Output closed: the tool has exited or is about to; wait, bounded.
  while (true) {
    const pid_t w = ::waitpid(pid, &r.status, r.timed_out ? 0 : WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) break;
    if (Clock::now() > deadline) {
      r.timed_out = true;
      ::kill(pid, SIGKILL);
      continue;
    }
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return r;
}

std::string describe(const std::vector<std::string>& argv, const ToolResult& r) {
  std::string what = "`" + join(argv) + "` ";
  if (r.timed_out) what += "did not finish in " + std::to_string(static_cast<int>(kCommandTimeoutSecs)) + " s";
  else if (WIFEXITED(r.status)) what += "failed with exit status " + std::to_string(WEXITSTATUS(r.status));
  else if (WIFSIGNALED(r.status)) what += std::string("was killed by signal ") + strsignal(WTERMSIG(r.status));
  else what += "failed";
  std::string err = r.err;
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  if (!err.empty()) what += ": " + err;
  return what;
}

bool succeeded(const ToolResult& r) { return !r.timed_out && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0; }

// Runs argv and throws NetworkError naming the command and its stderr unless it succeeded.
std::string check(const std::vector<std::string>& argv) {
  const ToolResult r = run_tool(argv);
  if (!succeeded(r)) throw NetworkError(describe(argv, r));
  return r.out;
}

// Removes one namespace; problems go to stderr (cleanup must go on).
bool delete_netns(const std::string& name) {
  const std::vector<std::string> argv = {"ip", "netns", "del", name};
  try {
    const ToolResult r = run_tool(argv);
    if (succeeded(r)) return true;
    std::fprintf(stderr, "emulated network: cannot remove namespace %s: %s\n", name.c_str(), describe(argv, r).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "emulated network: cannot remove namespace %s: %s\n", name.c_str(), e.what());
  }
  return false;
}

// SIGKILLs every process in the namespaces and waits (bounded) until none is
// left: a namespace deleted under a live process lives on, unnamed, with its
// addresses and links, until that process ends.
void kill_processes_in(const std::vector<std::string>& namespaces) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(kKillWaitSecs);
  while (true) {
    std::vector<pid_t> left;
    for (const auto& ns : namespaces)
      for (pid_t p : EmulatedNetwork::processes_in(ns)) left.push_back(p);
    if (left.empty()) return;
    if (Clock::now() > deadline) {
      std::string pids;
      for (pid_t p : left) pids += " " + std::to_string(p);
      std::fprintf(stderr, "emulated network: processes still inside after %.0f s:%s\n", kKillWaitSecs, pids.c_str());
      return;
    }
    for (pid_t p : left) ::kill(p, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<std::string> list_netns() {
  std::vector<std::string> names;
  DIR* d = ::opendir(kNetnsDir);
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

// "<prefix>-<pid>-..." -> pid; 0 when the name is not ours.
pid_t owner_of(const std::string& prefix, const std::string& name) {
  const std::string head = prefix + "-";
  if (name.rfind(head, 0) != 0) return 0;
  size_t at = head.size(), end = at;
  while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
  if (end == at || end - at > 9 || end >= name.size() || name[end] != '-') return 0;
  return static_cast<pid_t>(std::stol(name.substr(at, end - at)));
}

}  // namespace

uint64_t parse_link_rate(const std::string& flag, const std::string& text) {
  uint64_t bps = 0;
  const std::string why = link_rate_problem(text, &bps);
  if (!why.empty()) throw std::invalid_argument("--" + flag + "=" + text + ": " + why);
  return bps;
}

TbfParams tbf_params(uint64_t rate_bps) {
  const uint64_t bytes_per_ms = rate_bps / 8 / 1000;
  TbfParams p;
  // The bucket covers the watchdog's wake-up delay (about a millisecond):
  // smaller and tbf idles between tokens at 10 Gbit/s (64 KiB got 3.2 Gbit/s);
  // at low rates a big bucket would let whole messages past unshaped.
  p.burst_bytes = std::max<uint64_t>(4096, bytes_per_ms);
  // A GSO packet of n frames counts n headers more than its data (about 66
  // bytes each): 10% of room covers them; 64 KiB is the stack's own limit.
  p.gso_max_bytes = std::min<uint64_t>(65536, p.burst_bytes * 9 / 10);
  // 10 ms of queue: 512 KiB at 1 Gbit/s (4 ms) lost ~10% to drops.
  p.limit_bytes = p.burst_bytes + std::max<uint64_t>(8192, 10 * bytes_per_ms);
  return p;
}

std::string missing_network_privileges() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    std::string missing;
    if (!(caps >> 12 & 1)) missing += "CAP_NET_ADMIN";
    if (!(caps >> 21 & 1)) missing += std::string(missing.empty() ? "" : " and ") + "CAP_SYS_ADMIN";
    if (missing.empty()) return "";
    return "emulated links need root (CAP_NET_ADMIN and CAP_SYS_ADMIN, to create network namespaces, veth pairs "
           "and tc qdiscs); this process lacks " + missing;
  }
  return "cannot read CapEff from /proc/self/status";
}

std::string host_tcp_congestion() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  if (!(f >> name)) return "";
  return name;
}

EmulatedNetwork::EmulatedNetwork(std::string prefix, std::string tcp_congestion)
    : prefix_(std::move(prefix)), tcp_congestion_(std::move(tcp_congestion)) {
  if (tcp_congestion_.size() > 15 || !std::all_of(tcp_congestion_.begin(), tcp_congestion_.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
      }))
    throw std::invalid_argument("TCP congestion control \"" + tcp_congestion_ +
                                "\": 1 to 15 lowercase letters, digits or '_' (cubic, reno, bbr, ...)");
  const std::string why = missing_network_privileges();
  if (!why.empty()) throw NetworkPrivilegeError(why);
  for (const auto& n : sweep_leftovers(prefix_))
    std::fprintf(stderr, "emulated network: removed %s, left by a process that no longer runs\n", n.c_str());
  hub_ = prefix_ + "-" + std::to_string(::getpid()) + "-hub";
  try {
    check({"ip", "netns", "add", hub_});
  } catch (const NetworkError& e) {
    // The capabilities are there, yet the kernel or a sandbox refuses.
    throw NetworkPrivilegeError(std::string("cannot create a network namespace: ") + e.what());
  }
  made_.push_back(hub_);
  try {
    check({"ip", "-n", hub_, "link", "set", "lo", "up"});
    check({"ip", "-n", hub_, "link", "add", "br0", "type", "bridge"});
    check({"ip", "-n", hub_, "link", "set", "br0", "up"});
  } catch (...) {
    teardown();  // a constructor that throws gets no destructor
    throw;
  }
}

EmulatedNetwork::~EmulatedNetwork() { teardown(); }

const EmulatedNetwork::Host& EmulatedNetwork::add_host(const std::string& name, uint64_t rate_bps) {
  if (name.empty() || name.size() > 12 ||
      !std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); }))
    throw std::invalid_argument("host name \"" + name + "\": 1 to 12 letters and digits");
  if (hosts_.size() >= 253) throw std::invalid_argument("at most 253 hosts on one emulated network (a /24)");
  for (const Host& h : hosts_)
    if (h.name == name) throw std::invalid_argument("host name \"" + name + "\" used twice");
  Host h;
  h.name = name;
  h.netns = prefix_ + "-" + std::to_string(::getpid()) + "-" + name;
  h.address = "10.77.0." + std::to_string(hosts_.size() + 1);
  h.rate_bps = rate_bps;
  h.hub_if = "h-" + name;
  check({"ip", "netns", "add", h.netns});
  made_.push_back(h.netns);
  check({"ip", "-n", h.netns, "link", "set", "lo", "up"});
  // Both ends made at once, each in its namespace: the root namespace never
  // holds one, so no name there can clash.
  check({"ip", "-n", hub_, "link", "add", h.hub_if, "type", "veth", "peer", "name", "eth0", "netns", h.netns});
  check({"ip", "-n", hub_, "link", "set", h.hub_if, "master", "br0"});
  check({"ip", "-n", hub_, "link", "set", h.hub_if, "up"});
  check({"ip", "-n", h.netns, "addr", "add", h.address + "/24", "dev", "eth0"});
  check({"ip", "-n", h.netns, "link", "set", "eth0", "up"});
  if (!tcp_congestion_.empty())  // the subnet's route as the kernel made it, with the algorithm
    check({"ip", "-n", h.netns, "route", "replace", "10.77.0.0/24", "dev", "eth0", "proto", "kernel", "scope", "link",
           "src", h.address, "congctl", tcp_congestion_});
  shape(h, rate_bps, "add");
  hosts_.push_back(h);
  return hosts_.back();
}

void EmulatedNetwork::shape(const Host& h, uint64_t rate_bps, const char* verb) {
  const TbfParams t = tbf_params(rate_bps);
  const std::vector<std::string> tbf = {"root", "tbf", "rate", std::to_string(rate_bps) + "bit",
                                        "burst", std::to_string(t.burst_bytes), "limit", std::to_string(t.limit_bytes)};
  std::vector<std::string> up = {"tc", "-n", h.netns, "qdisc", verb, "dev", "eth0"};  // what the task sends
  up.insert(up.end(), tbf.begin(), tbf.end());
  check(up);
  std::vector<std::string> down = {"tc", "-n", hub_, "qdisc", verb, "dev", h.hub_if};  // what it receives
  down.insert(down.end(), tbf.begin(), tbf.end());
  check(down);
  // The task's TCP builds no GSO packet its bucket cannot hold (TbfParams);
  // what it receives was built by its peers' stacks, each capped by its own.
  check({"ip", "-n", h.netns, "link", "set", "dev", "eth0", "gso_max_size", std::to_string(t.gso_max_bytes)});
}

void EmulatedNetwork::set_rate(size_t i, uint64_t rate_bps) {
  Host& h = hosts_.at(i);
  shape(h, rate_bps, "replace");
  h.rate_bps = rate_bps;
}

pid_t EmulatedNetwork::spawn(const Host& host, const std::vector<std::string>& argv,
                             const std::function<void()>& prepare_child) {
  if (argv.empty()) throw std::invalid_argument("spawn: empty argv");
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const std::string ns_path = std::string(kNetnsDir) + "/" + host.netns;
  const pid_t parent = ::getpid();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw NetworkError("fork for " + host.name + ": " + std::strerror(errno));
  if (pid != 0) return pid;
  // The child. Dies with the launcher, so a SIGKILLed launcher leaves no task
  // behind (and none that keeps a deleted namespace alive).
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
  prepare_child();
  const int fd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) {
    std::fprintf(stderr, "cannot join network namespace %s: %s\n", ns_path.c_str(), std::strerror(errno));
    ::_exit(127);
  }
  ::close(fd);
  ::execv(cargs[0], cargs.data());
  std::fprintf(stderr, "exec %s failed: %s\n", cargs[0], std::strerror(errno));
  ::_exit(127);
}

LinkCounters EmulatedNetwork::counters(const Host& host) const {
  const std::string out = check({"ip", "-n", host.netns, "-s", "-j", "link", "show", "dev", "eth0"});
  namespace json = terngrad::json;
  auto member = [](const json::Json& v, const std::string& key) -> const json::Json& {
    const auto it = v.is_object() ? v.find(key) : v.end();
    if (it == v.end()) throw NetworkError("ip -s -j link show: no \"" + key + "\" in its output");
    return *it;
  };
  try {
    const json::Json v = json::parse_strict(out);
    if (!v.is_array() || v.empty()) throw NetworkError("ip -s -j link show: an empty list");
    const json::Json& stats = member(v[0], "stats64");
    LinkCounters c;
    c.tx_bytes = json::as_u64(member(member(stats, "tx"), "bytes"), "tx bytes");
    c.rx_bytes = json::as_u64(member(member(stats, "rx"), "bytes"), "rx bytes");
    return c;
  } catch (const NetworkError&) {
    throw;
  } catch (const std::exception& e) {
    throw NetworkError(std::string("reading the counters of ") + host.netns + ": " + e.what());
  }
}

void EmulatedNetwork::teardown() {
  if (made_.empty()) return;
  kill_processes_in(made_);
  // Task namespaces first (each takes its veth pair, so the hub's ends go
  // too), the hub with its bridge last.
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) delete_netns(*it);
  made_.clear();
  hosts_.clear();
}

std::vector<std::string> EmulatedNetwork::namespaces_of(const std::string& prefix, pid_t pid) {
  std::vector<std::string> out;
  for (const auto& n : list_netns())
    if (owner_of(prefix, n) == pid) out.push_back(n);
  return out;
}

std::vector<std::string> EmulatedNetwork::sweep_leftovers(const std::string& prefix) {
  std::vector<std::string> stale;
  for (const auto& n : list_netns()) {
    const pid_t owner = owner_of(prefix, n);
    // EPERM: alive, someone else's. A reused pid keeps its leftovers until
    // that process ends too; never removing a live run's namespaces matters more.
    if (owner > 0 && ::kill(owner, 0) != 0 && errno == ESRCH) stale.push_back(n);
  }
  if (stale.empty()) return stale;
  kill_processes_in(stale);
  std::vector<std::string> removed;
  for (const auto& n : stale)
    if (delete_netns(n)) removed.push_back(n);
  return removed;
}

std::vector<pid_t> EmulatedNetwork::processes_in(const std::string& netns) {
  std::vector<pid_t> out;
  struct stat ns{};
  if (::stat((std::string(kNetnsDir) + "/" + netns).c_str(), &ns) != 0) return out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    struct stat st{};
    // Same nsfs inode = same namespace. Zombies have no namespace any more.
    if (::stat(("/proc/" + std::string(e->d_name) + "/ns/net").c_str(), &st) == 0 && st.st_ino == ns.st_ino &&
        st.st_dev == ns.st_dev)
      out.push_back(static_cast<pid_t>(pid));
  }
  ::closedir(d);
  return out;
}

}  // namespace terngrad::experiments
