// The ps tasks as child processes (ps_process.h).
#include "ps_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "sgd_handler.h"
#include "terngrad/comm/ps_server.h"

extern char** environ;

namespace terngrad::bench {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

int serve_ps(const PsChildOptions& o) {
  // Die with the load generator, whatever way it ends.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() == 1) return 1;  // it is already gone
  comm::ServerOptions so;
  so.task_index = o.task_index;
  so.keep_steps = o.keep_steps;
  so.peer_timeout_s = o.peer_timeout_s;
  so.startup_timeout_s = o.startup_timeout_s;
  so.verbose = false;  // 32 replicas' joins are noise; failures still reach stderr below
  SgdHandler sgd(o.async_learning_rate);
  try {
    comm::ParameterServer server("127.0.0.1:0", so, &sgd);
    std::printf("PORT %d\n", server.port());
    std::fflush(stdout);
    server.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps %d: %s\n", o.task_index, e.what());
    return 1;
  }
  return 0;
}

std::vector<std::string> ps_child_args(const PsChildOptions& o) {
  char lr[32];
  std::snprintf(lr, sizeof lr, "%.9g", o.async_learning_rate);
  return {"--task_index=" + std::to_string(o.task_index), "--keep_steps=" + std::to_string(o.keep_steps),
          "--peer_timeout_s=" + std::to_string(o.peer_timeout_s),
          "--startup_timeout_s=" + std::to_string(o.startup_timeout_s), std::string("--async_learning_rate=") + lr};
}

PsProcess start_ps(const std::string& exe, const PsChildOptions& o, double timeout_s) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("ps: pipe: ") + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);  // dup2 clears CLOEXEC on the copy
  std::vector<std::string> args = {exe, "--serve_ps"};
  for (auto& a : ps_child_args(o)) args.push_back(a);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  PsProcess p;
  const int rc = posix_spawn(&p.pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    throw std::runtime_error("ps " + std::to_string(o.task_index) + ": cannot start " + exe + ": " + std::strerror(rc));
  }
  // Read "PORT <n>\n" (a few bytes; the child writes nothing else on stdout).
  std::string got;
  const auto t0 = Clock::now();
  while (got.find('\n') == std::string::npos) {
    const double left = timeout_s - since(t0);
    pollfd pfd{fds[0], POLLIN, 0};
    const int ready = left > 0 ? ::poll(&pfd, 1, static_cast<int>(left * 1000) + 1) : 0;
    if (ready < 0 && errno == EINTR) continue;
    char buf[64];
    const ssize_t n = ready > 0 ? ::read(fds[0], buf, sizeof buf) : -1;
    if (n <= 0) {
      ::close(fds[0]);
      kill_ps(p);
      throw std::runtime_error("ps " + std::to_string(o.task_index) + " (pid " + std::to_string(p.pid) + ") " +
                               (ready == 0 ? "did not report its port within " + std::to_string(timeout_s) + " s"
                                           : "exited before reporting its port (its stderr says why)"));
    }
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (std::sscanf(got.c_str(), "PORT %d", &p.port) != 1 || p.port <= 0) {
    kill_ps(p);
    throw std::runtime_error("ps " + std::to_string(o.task_index) + " wrote \"" + got + "\" instead of its port");
  }
  return p;
}

int wait_ps(const PsProcess& p, double timeout_s) {
  const auto t0 = Clock::now();
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(p.pid, &status, WNOHANG);
    if (r == p.pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0) return -1;
    if (since(t0) > timeout_s) {
      kill_ps(p);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void kill_ps(const PsProcess& p) {
  if (p.pid <= 0) return;
  ::kill(p.pid, SIGKILL);
  int status = 0;
  ::waitpid(p.pid, &status, 0);
}

}  // namespace terngrad::bench
