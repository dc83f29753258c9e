// Run metrics: a JSON Lines log (one object per line, flushed per line, so a
// crash loses at most the line being written) and a console progress line.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>

#include "terngrad/base/json_fwd.h"

namespace terngrad::train {

// One flat JSON object, built field by field in insertion order (a key added
// again keeps its place and takes the new value). Non-finite doubles (which
// JSON cannot represent) become null. The JSON library stays out of this
// header: only jsonl_writer.cpp sees it.
class JsonObject {
 public:
  JsonObject();
  ~JsonObject();
  JsonObject(JsonObject&&) noexcept;
  JsonObject& operator=(JsonObject&&) noexcept;

  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const std::string& value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, double value);
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  JsonObject& add(std::string_view key, T value) {
    if constexpr (std::is_signed_v<T>) return add_int(key, static_cast<int64_t>(value));
    else return add_uint(key, static_cast<uint64_t>(value));
  }
  JsonObject& add_null(std::string_view key);
  // A nested value given as JSON text (an object the trainer built, e.g.
  // --codec=auto's decision); std::runtime_error if it is not JSON.
  JsonObject& add_json(std::string_view key, std::string_view json_text);

  // One line of compact JSON.
  std::string str() const;

 private:
  JsonObject& add_int(std::string_view key, int64_t value);
  JsonObject& add_uint(std::string_view key, uint64_t value);
  std::unique_ptr<json::Json> fields_;
};

// Appends (append = true, what a resumed run does) or truncates, one object
// per line. If an earlier run died mid-line, a newline is written first so
// the torn line stays on its own. Thread-safe. Errors name the path.
class JsonlWriter {
 public:
  explicit JsonlWriter(std::string path, bool append = true);
  ~JsonlWriter();
  JsonlWriter(const JsonlWriter&) = delete;
  JsonlWriter& operator=(const JsonlWriter&) = delete;

  void write(const JsonObject& o);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
  std::mutex mu_;
};

// "45s", "3m07s", "2h05m".
std::string format_duration(double seconds);

// Console progress: "step 120/1000  loss 0.4312  1234 ex/s  ETA 1m23s".
// Rates count only the steps this process ran (a resumed run starts
// mid-way). Prints at most every min_interval_s (and always the last step);
// on a terminal the line is redrawn in place, otherwise one line per print.
class Progress {
 public:
  Progress(int64_t total_steps, int64_t examples_per_step, bool quiet = false, std::FILE* out = stderr,
           double min_interval_s = 1.0);
  // After finishing `step` steps (1-based count) with this step's loss.
  void update(int64_t step, double loss);
  void finish();  // ends an in-place line

  static std::string format(int64_t step, int64_t total, double loss, double examples_per_sec, double eta_s);

 private:
  using Clock = std::chrono::steady_clock;
  int64_t total_, per_step_;
  bool quiet_, tty_;
  std::FILE* out_;
  double interval_;
  Clock::time_point start_, last_print_;
  int64_t first_step_ = -1;
  bool printed_ = false, dirty_ = false;
};

}  // namespace terngrad::train
