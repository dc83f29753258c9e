// metrics.jsonl / eval.jsonl -> one TensorBoard event file (write_events_from_metrics).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tensorboard_events.h"
#include "terngrad/base/json.h"

namespace terngrad::experiments {
namespace {

namespace fs = std::filesystem;
namespace json = terngrad::json;

// Marks the event files this converter owns, so a re-run replaces its own
// file and never touches event files written by anything else.
constexpr const char* kOwnedSuffix = ".tg-metrics";

struct Scalar {
  std::string tag;
  int64_t step;
  double value;
};

const json::Json* member(const json::Json& obj, const std::string& key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

// A number field, or nullopt when absent or null (the writer turns NaN/Inf
// into null). Any other type is an error.
std::optional<double> number_field(const json::Json& obj, const std::string& key) {
  const json::Json* v = member(obj, key);
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (!v->is_number()) throw std::runtime_error("\"" + key + "\" is not a number");
  return v->get<double>();
}

int64_t step_field(const json::Json& obj) {
  const json::Json* v = member(obj, "step");
  if (v == nullptr) throw std::runtime_error("missing \"step\"");
  return static_cast<int64_t>(json::as_u64(*v, "\"step\""));
}

// Reads one JSONL file, appending its scalars. bytes_sent_cumulative carries
// the running total of bytes sent across train lines.
void read_jsonl(const fs::path& file, std::vector<Scalar>& out, double& bytes_sent_cumulative, int64_t& last_train_step) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::string line;
  for (int line_no = 1; std::getline(in, line); ++line_no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const json::Json obj = json::parse_strict(line);
      if (!obj.is_object()) throw std::runtime_error("not a JSON object");
      const json::Json* event = member(obj, "event");
      if (event == nullptr || !event->is_string()) throw std::runtime_error("missing \"event\" string");
      const auto add = [&](const char* key, const std::string& tag, int64_t step) {
        if (const auto v = number_field(obj, key)) out.push_back({tag, step, *v});
      };
      if (*event == "train") {
        const int64_t step = step_field(obj);
        add("loss", "train/loss", step);
        add("learning_rate", "train/learning_rate", step);
        add("examples_per_sec", "train/examples_per_sec", step);
        if (const auto sent = number_field(obj, "bytes_sent_per_worker")) {
          out.push_back({"comm/bytes_sent_per_worker", step, *sent});
          // Each line reports the per-step bytes over the steps since the
          // previous line; for a constant rate this is bytes * step.
          bytes_sent_cumulative += *sent * static_cast<double>(step - last_train_step);
          out.push_back({"comm/bytes_sent_per_worker_cumulative", step, bytes_sent_cumulative});
        }
        last_train_step = step;
      } else if (*event == "eval") {
        const int64_t step = step_field(obj);
        add("top1", "eval/top1", step);
        add("top5", "eval/top5", step);
        add("ema_top1", "eval/ema_top1", step);
        add("ema_top5", "eval/ema_top5", step);
      }
      // Other event kinds are for other readers; skipping them keeps old
      // converters working on newer logs.
    } catch (const std::exception& e) {
      throw std::runtime_error(file.string() + ":" + std::to_string(line_no) + ": " + e.what());
    }
  }
  if (in.bad()) throw std::runtime_error("cannot read " + file.string());
}

std::optional<fs::path> owned_event_file(const fs::path& run_dir) {
  for (const auto& entry : fs::directory_iterator(run_dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("events.out.tfevents.", 0) == 0 && name.size() > std::string(kOwnedSuffix).size() &&
        name.compare(name.size() - std::string(kOwnedSuffix).size(), std::string::npos, kOwnedSuffix) == 0)
      return entry.path();
  }
  return std::nullopt;
}

}  // namespace

int write_events_from_metrics(const std::string& run_dir_arg) {
  const fs::path run_dir(run_dir_arg);
  const fs::path metrics = run_dir / "metrics.jsonl", evals = run_dir / "eval.jsonl";
  const bool have_metrics = fs::exists(metrics), have_evals = fs::exists(evals);
  if (!have_metrics && !have_evals)
    throw std::runtime_error("no metrics.jsonl or eval.jsonl in " + run_dir.string());

  std::vector<Scalar> scalars;
  double bytes_cumulative = 0;
  int64_t last_train_step = 0;
  if (have_metrics) read_jsonl(metrics, scalars, bytes_cumulative, last_train_step);
  if (have_evals) read_jsonl(evals, scalars, bytes_cumulative, last_train_step);

  // Order by step; where an evaluation appears in both files keep the later
  // read (eval.jsonl), so TensorBoard never shows two points for one step.
  std::stable_sort(scalars.begin(), scalars.end(), [](const Scalar& a, const Scalar& b) {
    return a.step != b.step ? a.step < b.step : a.tag < b.tag;
  });
  std::vector<Scalar> unique;
  for (const Scalar& s : scalars) {
    if (!unique.empty() && unique.back().step == s.step && unique.back().tag == s.tag) {
      unique.back() = s;
    } else {
      unique.push_back(s);
    }
  }

  struct stat st {};
  const fs::path time_source = have_metrics ? metrics : evals;
  const double wall_time = stat(time_source.c_str(), &st) == 0
                               ? static_cast<double>(st.st_mtim.tv_sec) + 1e-9 * static_cast<double>(st.st_mtim.tv_nsec)
                               : unix_time_now();

  const std::optional<fs::path> previous = owned_event_file(run_dir);
  const fs::path target = previous ? *previous : run_dir / (event_file_name(wall_time) + kOwnedSuffix);
  // The temporary name has no "tfevents" in it, so a TensorBoard watching the
  // directory does not pick up the half-written file.
  const fs::path tmp = run_dir / (".tg-metrics-events.tmp." + std::to_string(::getpid()));
  try {
    EventWriter writer = EventWriter::to_path(tmp.string(), wall_time);
    for (const Scalar& s : unique) writer.scalar(s.tag, s.step, s.value, wall_time);
    writer.close();
    fs::rename(tmp, target);
  } catch (...) {
    std::error_code ignored;
    fs::remove(tmp, ignored);
    throw;
  }
  return static_cast<int>(unique.size());
}

}  // namespace terngrad::experiments
