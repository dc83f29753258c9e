// Child processes a test starts, signals and must not leave behind: each
// runs one command with its output in its own log file; the test polls them
// (never blocks on one), and the destructor SIGKILLs and reaps whatever still
// runs, so a failing or crashing test leaves no process behind.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace terngrad::testing {

class ProcessGroup {
 public:
  using Clock = std::chrono::steady_clock;

  struct Child {
    pid_t pid = -1;
    std::string log;
    bool running = false;
    int exit_code = -1;  // -1 while running, or when ended by a signal
    int signal = 0;      // the signal that ended it, if one did
    Clock::time_point started, ended;
  };

  ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ~ProcessGroup() { kill_all(); }

  // Starts args[0] with args, the extra environment variables env, stdout and
  // stderr to log (truncated). `name` must not be running already.
  void start(const std::string& name, const std::vector<std::string>& args,
             const std::map<std::string, std::string>& env, const std::string& log) {
    if (children_.count(name) && children_[name].running) throw std::logic_error(name + " is already running");
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed: " + std::string(std::strerror(errno)));
    if (pid == 0) {
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        ::close(fd);
      }
      for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
      std::vector<char*> argv;
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      std::fprintf(stderr, "exec %s failed: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    Child c;
    c.pid = pid;
    c.log = log;
    c.running = true;
    c.started = Clock::now();
    children_[name] = c;
  }

  // Reaps whatever has ended (never blocks).
  void poll() {
    for (auto& [name, c] : children_) {
      if (!c.running) continue;
      int st = 0;
      if (waitpid(c.pid, &st, WNOHANG) != c.pid) continue;
      c.running = false;
      c.ended = Clock::now();
      if (WIFEXITED(st)) c.exit_code = WEXITSTATUS(st);
      if (WIFSIGNALED(st)) c.signal = WTERMSIG(st);
    }
  }

  bool running(const std::string& name) {
    poll();
    return children_.at(name).running;
  }

  void signal(const std::string& name, int sig) {
    Child& c = children_.at(name);
    if (c.running) ::kill(c.pid, sig);
  }

  // SIGKILL and reap `name`, waiting at most 10 s for the kernel to reap it.
  void kill_and_reap(const std::string& name) {
    signal(name, SIGKILL);
    const auto t0 = Clock::now();
    while (running(name) && Clock::now() - t0 < std::chrono::seconds(10))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  // Polls until every child in `names` (all when empty) has ended or
  // `seconds` passed; returns the names still running.
  std::vector<std::string> wait_all(double seconds, std::vector<std::string> names = {}) {
    if (names.empty())
      for (const auto& [name, c] : children_) names.push_back(name);
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    for (;;) {
      poll();
      std::vector<std::string> left;
      for (const auto& n : names)
        if (children_.at(n).running) left.push_back(n);
      if (left.empty() || Clock::now() >= deadline) return left;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  const Child& child(const std::string& name) const { return children_.at(name); }

  std::string log(const std::string& name) const {
    std::ifstream f(children_.at(name).log);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }

  // Every child's name, state and log, for a failing assertion's message.
  std::string describe() const {
    std::string out;
    for (const auto& [name, c] : children_) {
      out += "--- " + name + " (pid " + std::to_string(c.pid) + "): " +
             (c.running ? std::string("running")
                        : c.signal ? "killed by signal " + std::to_string(c.signal) : "exit " + std::to_string(c.exit_code)) +
             "\n" + log(name);
    }
    return out;
  }

  // SIGKILL (which ends a stopped child too) and reap every child still running.
  void kill_all() {
    for (auto& [name, c] : children_) {
      if (!c.running) continue;
      ::kill(c.pid, SIGKILL);
      int st = 0;
      waitpid(c.pid, &st, 0);  // SIGKILL cannot be caught: this returns promptly
      c.running = false;
      c.ended = Clock::now();
      c.signal = SIGKILL;
    }
  }

 private:
  std::map<std::string, Child> children_;
};

}  // namespace terngrad::testing
