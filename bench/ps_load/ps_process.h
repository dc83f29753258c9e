// Private to ps_load_bench: the ps tasks as processes of their own, so that
// each one's memory is the kernel's count for exactly one parameter server
// (not the load generator's buffers beside it).
//
// The parent starts this same executable again with --serve_ps (posix_spawn
// of /proc/self/exe: a fresh process, no copy of the parent's memory); the
// child listens on a free loopback port and writes "PORT <n>" on its stdout,
// a pipe the parent reads. The child dies with the parent (PR_SET_PDEATHSIG),
// so a load test that is killed leaves no ps behind.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace terngrad::bench {

struct PsChildOptions {
  int task_index = 0;
  int keep_steps = 8;
  double peer_timeout_s = 120;
  double startup_timeout_s = 300;
  float async_learning_rate = 0.01f;  // the async phase's plain SGD on the ps
};

// The child's side: serves one ps task until the chief ends the run. Returns
// the process's exit status (0 finished, 1 the run failed; the reason is on
// stderr).
int serve_ps(const PsChildOptions& o);

// The command-line flags serve_ps's main reads back (after "--serve_ps").
std::vector<std::string> ps_child_args(const PsChildOptions& o);

struct PsProcess {
  pid_t pid = -1;
  int port = 0;
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

// Starts `exe --serve_ps <args>` and waits up to timeout_s for its port.
// Throws std::runtime_error naming what went wrong (spawn failed, the child
// exited, no port in time); a child that did start is killed first.
PsProcess start_ps(const std::string& exe, const PsChildOptions& o, double timeout_s);

// Waits up to timeout_s for the process to exit; returns its exit status,
// or -1 after killing it (SIGKILL) when it did not exit in time.
int wait_ps(const PsProcess& p, double timeout_s);

// SIGKILL and reap (for failure paths).
void kill_ps(const PsProcess& p);

}  // namespace terngrad::bench
