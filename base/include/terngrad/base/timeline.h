// A process's timeline of what its threads did, for finding where a step's
// time goes (the ps link's idle gaps, issue 35): spans and instants on the
// steady clock, written as Chrome trace JSON (ui.perfetto.dev,
// chrome://tracing). Off unless start() was called: then every call below
// costs one relaxed atomic load. The clock is CLOCK_MONOTONIC, one clock for
// every process on a machine (network namespaces do not change it), so the
// files of a cluster's tasks merge into one timeline (merge_files).
//
// Names and thread names must be string literals (or live as long as the
// process): events keep the pointer. At most kMaxEvents events are kept;
// later ones are counted as dropped (written in the file's metadata).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace terngrad::timeline {

inline constexpr size_t kMaxEvents = 2'000'000;

// Starts recording; process_name labels this process's rows. A second call
// renames the process and keeps the events recorded so far.
void start(const std::string& process_name);
bool recording();
// Microseconds on the steady clock (CLOCK_MONOTONIC).
int64_t now_us();

// What the calling thread did from begin_us to end_us; arg < 0: none.
void complete(const char* name, int64_t begin_us, int64_t end_us, int64_t arg = -1);
// A moment: a sum's arrival, a push's acknowledgement.
void instant(const char* name, int64_t arg = -1);
// The calling thread's row label ("compute", "push sender").
void name_thread(const char* name);

// A span from construction to destruction on the calling thread.
class Span {
 public:
  explicit Span(const char* name, int64_t arg = -1) : name_(name), arg_(arg), begin_(recording() ? now_us() : -1) {}
  ~Span() {
    if (begin_ >= 0) complete(name_, begin_, now_us(), arg_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  int64_t arg_;
  int64_t begin_;
};

// Writes what was recorded to path as Chrome trace JSON, atomically (a
// temporary file renamed over path). Throws std::runtime_error naming the
// path when it cannot be written. Recording goes on.
void write(const std::string& path);

// One timeline from several trace files (this process's kind, or any Chrome
// trace JSON with a "traceEvents" array) plus counter rows: every event of
// every file, in one file written atomically. Throws std::runtime_error
// naming the file that is missing or not a trace.
struct Counter {
  std::string name;               // the row ("ps link in, Mbit/s")
  std::vector<int64_t> t_us;      // steady-clock microseconds
  std::vector<double> values;     // [i] from t_us[i]
};
void merge_files(const std::vector<std::string>& inputs, const std::vector<Counter>& counters,
                 const std::string& output);

}  // namespace terngrad::timeline
