// Runs a shell command as the tests that drive our programs need it: its exit
// status, everything it printed (stdout and stderr) and how long it took.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace terngrad::testing {

struct Proc {
  int exit_code = -1;  // -1: could not start, or killed by a signal
  std::string output;  // stdout and stderr, interleaved
  double seconds = 0;
};

inline Proc run_command(const std::string& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  Proc r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int st = pclose(p);
  r.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

// A program a test drives: the path in the environment variable `env_name`
// when set (scripts/gpu_kit.sh runs the tests from an unpacked archive, where
// the build tree's paths do not exist), else `build_tree_path`.
inline std::string program_path(const char* env_name, const char* build_tree_path) {
  const char* v = std::getenv(env_name);
  return v && *v ? v : build_tree_path;
}

}  // namespace terngrad::testing
