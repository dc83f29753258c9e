#include "terngrad/base/timeline.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include "terngrad/base/atomic_file.h"
#include "terngrad/base/json.h"

namespace terngrad::timeline {

namespace {

struct Event {
  const char* name;
  int64_t ts_us;
  int64_t dur_us;  // < 0: an instant
  int64_t arg;
  uint32_t tid;
};

struct Recorder {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::string process;
  std::vector<Event> events;
  uint64_t dropped = 0;
  std::unordered_map<uint32_t, const char*> thread_names;
};

Recorder& recorder() {
  static Recorder* r = new Recorder;  // never destroyed: threads may record during exit
  return *r;
}

uint32_t this_thread_id() {
  static std::atomic<uint32_t> next{1};
  thread_local const uint32_t id = next.fetch_add(1);
  return id;
}

void record(const Event& e) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  if (r.events.size() >= kMaxEvents) {
    ++r.dropped;
    return;
  }
  r.events.push_back(e);
}

}  // namespace

void start(const std::string& process_name) {
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  r.process = process_name;
  if (r.events.capacity() == 0) r.events.reserve(1 << 16);
  r.on.store(true, std::memory_order_relaxed);
}

bool recording() { return recorder().on.load(std::memory_order_relaxed); }

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void complete(const char* name, int64_t begin_us, int64_t end_us, int64_t arg) {
  if (!recording()) return;
  record({name, begin_us, std::max<int64_t>(0, end_us - begin_us), arg, this_thread_id()});
}

void instant(const char* name, int64_t arg) {
  if (!recording()) return;
  record({name, now_us(), -1, arg, this_thread_id()});
}

void name_thread(const char* name) {
  if (!recording()) return;
  Recorder& r = recorder();
  std::lock_guard<std::mutex> lk(r.mu);
  r.thread_names[this_thread_id()] = name;
}

void write(const std::string& path) {
  Recorder& r = recorder();
  std::ostringstream out;
  {
    std::lock_guard<std::mutex> lk(r.mu);
    const int pid = ::getpid();
    out << "{\"traceEvents\":[\n";
    out << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << pid << ",\"tid\":0,\"args\":{\"name\":"
        << json::dump_line(json::Json(r.process)) << "}}";
    for (const auto& [tid, name] : r.thread_names)
      out << ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << pid << ",\"tid\":" << tid
          << ",\"args\":{\"name\":" << json::dump_line(json::Json(name)) << "}}";
    for (const Event& e : r.events) {
      out << ",\n{\"name\":" << json::dump_line(json::Json(e.name)) << ",\"pid\":" << pid << ",\"tid\":" << e.tid
          << ",\"ts\":" << e.ts_us;
      if (e.dur_us >= 0)
        out << ",\"ph\":\"X\",\"dur\":" << e.dur_us;
      else
        out << ",\"ph\":\"i\",\"s\":\"t\"";
      if (e.arg >= 0) out << ",\"args\":{\"n\":" << e.arg << "}";
      out << "}";
    }
    out << "\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"clock\":\"CLOCK_MONOTONIC\",\"dropped_events\":"
        << r.dropped << "}}\n";
  }
  base::write_file_atomically(path, out.str());
}

void merge_files(const std::vector<std::string>& inputs, const std::vector<Counter>& counters,
                 const std::string& output) {
  json::Json merged = json::Json::object();
  json::Json& events = merged["traceEvents"] = json::Json::array();
  for (const std::string& in : inputs) {
    std::ifstream f(in, std::ios::binary);
    if (!f) throw std::runtime_error("timeline: cannot read " + in);
    std::stringstream text;
    text << f.rdbuf();
    json::Json t;
    try {
      t = json::parse_strict(text.str());
    } catch (const std::exception& e) {
      throw std::runtime_error("timeline: " + in + " is not JSON: " + e.what());
    }
    if (!t.is_object() || !t.contains("traceEvents") || !t["traceEvents"].is_array())
      throw std::runtime_error("timeline: " + in + " has no \"traceEvents\" array");
    for (auto& e : t["traceEvents"]) events.push_back(std::move(e));
  }
  const int pid = 1 << 30;  // no process of this machine has it
  if (!counters.empty())
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", "links"}}}});
  for (const Counter& c : counters) {
    if (c.t_us.size() != c.values.size())
      throw std::runtime_error("timeline: counter \"" + c.name + "\" has " + std::to_string(c.t_us.size()) +
                               " times for " + std::to_string(c.values.size()) + " values");
    for (size_t i = 0; i < c.t_us.size(); ++i)
      events.push_back({{"ph", "C"}, {"name", c.name}, {"pid", pid}, {"tid", 0}, {"ts", c.t_us[i]},
                        {"args", {{"value", c.values[i]}}}});
  }
  merged["displayTimeUnit"] = "ms";
  base::write_file_atomically(output, json::dump_line(merged) + "\n");
}

}  // namespace terngrad::timeline
