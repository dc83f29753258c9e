// --codec=auto for a run (auto_codec.h).
#include "auto_codec.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "terngrad/comm/errors.h"
#include "terngrad/comm/link_probe.h"
#include "terngrad/comm/link_rate.h"
#include "terngrad/comm/ps_status.h"
#include "terngrad/quantize/cpu_features.h"
#include "terngrad/base/atomic_file.h"

namespace terngrad::train::detail {

namespace {

// 2: costs timed at kLargeCalibration elements (format 1: at 2^21, which sat
// in a 32 MiB L3 and so understated the per-element cost of the variables
// far beyond it: AlexNet's fc6 is 37.7M elements).
constexpr const char* kCacheFormat = "terngrad codec costs 2";
// The two sizes the costs are timed at: a small one for the per-call part,
// and one whose working set (gradient, payloads, a server's sum and residual:
// about 100 MB of float32) lies beyond the L3 of most machines, as the large
// variables that decide the choice do.
constexpr uint64_t kSmallCalibration = uint64_t{1} << 14, kLargeCalibration = uint64_t{1} << 23;

// What a cached cost is valid for: the same CPU, kernels and threads.
struct Machine {
  std::string cpu = quantize::cpu_model_name();
  std::string simd = quantize::simd_level_name(quantize::cpu_simd_level());
  int threads = omp_get_max_threads();
  bool matches(const json::Json& e) const {
    return e.is_object() && text(e, "cpu") == cpu && text(e, "simd") == simd && e.contains("threads") &&
           e.at("threads").is_number_integer() && e.at("threads").get<int64_t>() == threads;
  }
  // A member that is a string, else "" (a cache written by hand may hold anything).
  static std::string text(const json::Json& e, const char* key) {
    return e.is_object() && e.contains(key) && e.at(key).is_string() ? e.at(key).get<std::string>() : "";
  }
};

json::Json linear_json(const comm::LinearCost& c) { return json::Json::array({c.fixed, c.per_element}); }

comm::LinearCost linear_of(const json::Json& e, const char* key) {
  const json::Json& v = e.at(key);
  if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number())
    throw std::runtime_error(std::string("\"") + key + "\" is not [fixed, per_element]");
  const comm::LinearCost c{v[0].get<double>(), v[1].get<double>()};
  if (!(c.fixed >= 0) || !(c.per_element >= 0) || !std::isfinite(c.fixed) || !std::isfinite(c.per_element))
    throw std::runtime_error(std::string("\"") + key + "\" holds a negative or non-finite cost");
  return c;
}

json::Json cost_json(const comm::CodecCost& c, const Machine& m) {
  char when[32] = "";
  const std::time_t now = std::time(nullptr);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return {{"cpu", m.cpu},
          {"simd", m.simd},
          {"threads", m.threads},
          {"spec", c.spec},
          {"encode_s", linear_json(c.encode_s)},
          {"sum2_s", linear_json(c.sum2_s)},
          {"decode_s", linear_json(c.decode_s)},
          {"down_bytes", linear_json(c.down_bytes)},
          {"measured", when}};
}

// The cache's entries; empty (with a warning) when it cannot be read.
json::Json read_cache(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return json::Json::array();
  std::stringstream text;
  text << f.rdbuf();
  try {
    const json::Json doc = json::parse_strict(text.str());
    if (Machine::text(doc, "format") != kCacheFormat || !doc.contains("entries") ||
        !doc.at("entries").is_array())
      throw std::runtime_error(std::string("not a \"") + kCacheFormat + "\" file");
    return doc.at("entries");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "warning: codec costs cache %s: %s; measuring again\n", path.c_str(), e.what());
    return json::Json::array();
  }
}

comm::CodecCost cost_of_entry(const json::Json& e) {
  comm::CodecCost c;
  c.spec = e.at("spec").get<std::string>();
  c.encode_s = linear_of(e, "encode_s");
  c.sum2_s = linear_of(e, "sum2_s");
  c.decode_s = linear_of(e, "decode_s");
  c.down_bytes = linear_of(e, "down_bytes");
  return c;
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string mb_per_s(double bytes_per_s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MB/s", bytes_per_s / 1e6);
  return buf;
}

std::string two_way_text(double factor) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", factor);
  return buf;
}

}  // namespace

std::optional<std::string> codec_costs_path(const TrainConfig& cfg) {
  if (cfg.codec_costs == "none") return std::nullopt;
  if (!cfg.codec_costs.empty()) return cfg.codec_costs;
  const auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v && *v ? v : "";
  };
  std::string dir = env("TG_CACHE_DIR");
  if (dir.empty() && !env("XDG_CACHE_HOME").empty()) dir = env("XDG_CACHE_HOME") + "/terngrad";
  if (dir.empty() && !env("HOME").empty()) dir = env("HOME") + "/.cache/terngrad";
  if (dir.empty()) return std::nullopt;
  return dir + "/codec_costs.json";
}

std::vector<comm::CodecCost> codec_costs(const TrainConfig& cfg, const std::vector<std::string>& specs,
                                         std::string* source) {
  const Machine m;
  const std::optional<std::string> path = codec_costs_path(cfg);
  json::Json entries = path ? read_cache(*path) : json::Json::array();
  std::vector<comm::CodecCost> out;
  bool measured = false;
  for (const std::string& spec : specs) {
    std::optional<comm::CodecCost> found;
    for (const json::Json& e : entries) {
      if (!m.matches(e) || Machine::text(e, "spec") != spec) continue;
      try {
        found = cost_of_entry(e);
      } catch (const std::exception& x) {
        std::fprintf(stderr, "warning: codec costs cache %s, %s: %s; measuring again\n", path->c_str(), spec.c_str(),
                     x.what());
      }
    }
    if (!found) {
      found = comm::measure_codec_cost(spec, kSmallCalibration, kLargeCalibration);
      measured = true;
      json::Json kept = json::Json::array();
      for (json::Json& e : entries)
        if (!(m.matches(e) && Machine::text(e, "spec") == spec)) kept.push_back(std::move(e));
      kept.push_back(cost_json(*found, m));
      entries = std::move(kept);
    }
    out.push_back(*found);
  }
  if (measured && path) {
    try {
      std::filesystem::create_directories(std::filesystem::path(*path).parent_path());
      const json::Json doc = {{"format", kCacheFormat}, {"entries", entries}};
      base::write_file_atomically(*path, json::dump_pretty(doc) + "\n");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "warning: codec costs cache %s not written: %s\n", path->c_str(), e.what());
    }
  }
  if (source)
    *source = (measured ? std::string("measured now") : std::string("cached")) + (path ? " (" + *path + ")" : "") +
              ", " + m.cpu + ", " + m.simd + ", " + std::to_string(m.threads) + " threads";
  return out;
}

std::optional<comm::LinkModel> link_from_flag(const TrainConfig& cfg) {
  if (cfg.auto_link_rate.empty()) return std::nullopt;
  uint64_t bps = 0;
  if (const std::string why = comm::link_rate_problem(cfg.auto_link_rate, &bps); !why.empty())
    throw std::invalid_argument("--auto_link_rate=" + cfg.auto_link_rate + ": " + why);
  return comm::LinkModel{bps / 8.0, bps / 8.0, 0};
}

comm::LinkModel probe_ps_links(const TrainConfig& cfg, const std::vector<std::string>& ps,
                               const std::optional<comm::Credential>& chief, const comm::TlsOptions& tls,
                               std::string* source) {
  comm::LinkModel link{1e30, 1e30, 0};
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t p = 0; p < ps.size(); ++p) {
    comm::ProbeOptions o;
    o.credential = chief;
    o.tls = tls;
    o.timeout_s = cfg.rpc_timeout_secs;
    std::string last;
    for (;;) {  // a ps may come up after its replicas
      try {
        const comm::LinkMeasurement m = comm::probe_link(ps[p], o);
        link.up_bytes_per_s = std::min(link.up_bytes_per_s, m.up_bytes_per_s);
        link.down_bytes_per_s = std::min(link.down_bytes_per_s, m.down_bytes_per_s);
        link.latency_s = std::max(link.latency_s, m.rtt_s);
        link.two_way = std::max(p == 0 ? 1.0 : link.two_way, m.two_way_factor);
        break;
      } catch (const comm::PeerError& e) {
        last = e.what();
      }
      if (seconds_since(t0) > cfg.startup_timeout_secs)
        throw comm::PeerError("--codec=auto: the chief could not probe ps " + std::to_string(p) + " at " + ps[p] +
                              " within --startup_timeout_secs=" + std::to_string(cfg.startup_timeout_secs) + ": " + last);
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  if (source) {
    char rtt[32];
    std::snprintf(rtt, sizeof rtt, "%.2f ms", link.latency_s * 1e3);
    *source = "probe of " + std::to_string(ps.size()) + " ps: up " + mb_per_s(link.up_bytes_per_s) + ", down " +
              mb_per_s(link.down_bytes_per_s) + ", round trip " + rtt + ", both ways at once x" +
              two_way_text(link.two_way) + " the slower one's time";
  }
  return link;
}

AutoDecision decide_and_set_plan(const TrainConfig& cfg, TrainingSession& s, int replicas, int num_ps,
                                 const comm::LinkModel& link, const std::string& link_source) {
  AutoDecision d = decide(cfg, s, replicas, num_ps, link, link_source);
  s.set_plan(d.choice.plan);
  return d;
}

AutoDecision decide(const TrainConfig& cfg, TrainingSession& s, int replicas, int num_ps, const comm::LinkModel& link,
                    const std::string& link_source) {
  AutoDecision d;
  d.candidates = comm::parse_auto_codec(cfg.codec, cfg.sync_replicas).candidates;
  d.link = link;
  d.link_source = link_source;
  d.replicas = replicas;
  d.num_ps = num_ps;
  d.costs = codec_costs(cfg, comm::specs_to_cost(d.candidates), &d.cost_source);
  comm::ChoiceInput in;
  for (const Param& p : s.params().params)
    in.variables.push_back({p.name, static_cast<uint64_t>(p.value.size()), travels_fp32(cfg, p)});
  in.candidates = d.candidates;
  in.costs = d.costs;
  in.link = link;
  in.replicas = replicas;
  in.num_ps = num_ps;
  d.choice = comm::choose_codecs(in);
  return d;
}

namespace {

// The plan a running ps's Status names, checked against this session's
// variables and this replica's candidates, set.
void set_plan_of(const TrainConfig& cfg, TrainingSession& s, const comm::PsStatus& st) {
  const std::vector<std::string> candidates = comm::parse_auto_codec(cfg.codec, cfg.sync_replicas).candidates;
  const std::vector<Param>& params = s.params().params;
  if (st.variables.size() != params.size())
    throw std::invalid_argument("--codec=auto: the chief's plan has " + std::to_string(st.variables.size()) +
                                " variables, this replica's model " + std::to_string(params.size()));
  std::vector<std::string> plan;
  for (size_t v = 0; v < params.size(); ++v) {
    const auto& [name, spec] = st.variables[v];
    if (name != params[v].name)
      throw std::invalid_argument("--codec=auto: the chief's variable " + std::to_string(v) + " is " + name +
                                  ", this replica's " + params[v].name);
    if (spec != "fp32" && std::find(candidates.begin(), candidates.end(), spec) == candidates.end())
      throw std::invalid_argument("--codec=auto: the chief chose " + spec + " for " + name + ", which is not one of " +
                                  "this replica's candidates (" + cfg.codec + ")");
    plan.push_back(spec);
  }
  s.set_plan(std::move(plan));
}

}  // namespace

void adopt_chiefs_plan(const TrainConfig& cfg, TrainingSession& s, const std::string& ps0,
                       const std::optional<comm::Credential>& credential, const comm::TlsOptions& tls) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const std::optional<comm::PsStatus> st = comm::query_ps_status(ps0, 2, credential, tls);
    if (st && st->phase == "failed") throw comm::PeerError("--codec=auto: the run failed before it began: " + st->failure);
    if (st && !st->variables.empty()) return set_plan_of(cfg, s, *st);
    if (seconds_since(t0) > cfg.startup_timeout_secs)
      throw comm::PeerError("--codec=auto: ps 0 at " + ps0 + " has not had the chief's choice of codecs (its Init) " +
                            "within --startup_timeout_secs=" + std::to_string(cfg.startup_timeout_secs));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

std::string describe(const AutoDecision& d, TrainingSession& s) {
  std::ostringstream os;
  char line[256];
  os << "--codec=auto: " << d.replicas << " replicas, " << d.num_ps << " ps; link: " << d.link_source
     << "; codec costs: " << d.cost_source << "\n";
  const std::vector<Param>& params = s.params().params;
  for (size_t v = 0; v < params.size(); ++v) {
    std::snprintf(line, sizeof line, "  %-28s %10zu elements  %s\n", params[v].name.c_str(), params[v].value.size(),
                  d.choice.plan[v].c_str());
    os << line;
  }
  std::snprintf(line, sizeof line, "  estimate (communication and codecs per step): %.2f ms (link %.2f, codecs %.2f)",
                d.choice.estimate.total_s * 1e3, d.choice.estimate.link_s * 1e3, d.choice.estimate.codec_s * 1e3);
  os << line;
  for (size_t c = 0; c < d.candidates.size(); ++c) {
    std::snprintf(line, sizeof line, "; %s everywhere %.2f ms", d.candidates[c].c_str(),
                  d.choice.uniform[c].total_s * 1e3);
    os << line;
  }
  os << "\n";
  return os.str();
}

json::Json to_json(const AutoDecision& d, TrainingSession& s) {
  const auto estimate = [](const comm::PlanEstimate& e) {
    return json::Json{{"total_ms", e.total_s * 1e3},
                      {"link_ms", e.link_s * 1e3},
                      {"codecs_ms", e.codec_s * 1e3},
                      {"up_ms", e.up_s * 1e3},
                      {"down_ms", e.down_s * 1e3},
                      {"encode_ms", e.encode_s * 1e3},
                      {"decode_ms", e.decode_s * 1e3},
                      {"server_ms", e.server_s * 1e3},
                      {"up_bytes", e.up_bytes},
                      {"down_bytes", e.down_bytes}};
  };
  json::Json vars = json::Json::array();
  const std::vector<Param>& params = s.params().params;
  for (size_t v = 0; v < params.size(); ++v)
    vars.push_back({{"name", params[v].name}, {"elements", params[v].value.size()}, {"codec", d.choice.plan[v]}});
  json::Json uniform = json::Json::object();
  for (size_t c = 0; c < d.candidates.size(); ++c) uniform[d.candidates[c]] = estimate(d.choice.uniform[c]);
  return {{"candidates", d.candidates},
          {"replicas", d.replicas},
          {"num_ps", d.num_ps},
          {"link", {{"source", d.link_source},
                    {"up_bytes_per_s", d.link.up_bytes_per_s},
                    {"down_bytes_per_s", d.link.down_bytes_per_s},
                    {"round_trip_ms", d.link.latency_s * 1e3},
                    {"two_way_factor", d.link.two_way}}},
          {"costs", d.cost_source},
          {"variables", vars},
          {"estimate", estimate(d.choice.estimate)},
          {"every_variable_one_candidate", uniform}};
}

namespace {

// A resumed run keeps the plan its checkpoint was written with: that plan's
// codecs made the error-feedback states it holds. The JSON says so.
std::optional<std::string> keep_checkpointed_plan(const TrainConfig& cfg, TrainingSession& s) {
  std::optional<std::vector<std::string>> plan = s.checkpointed_plan();
  if (!plan) return std::nullopt;
  s.set_plan(*plan);
  json::Json vars = json::Json::array();
  for (size_t v = 0; v < plan->size(); ++v)
    vars.push_back({{"name", s.params().params[v].name}, {"codec", (*plan)[v]}});
  if (!cfg.quiet)
    std::fprintf(stderr, "--codec=auto: resuming with the codecs of the checkpoint in %s (%s)\n",
                 cfg.train_dir.c_str(), codec_summary(s.plan()).c_str());
  return json::dump_line({{"resumed_from_checkpoint", true}, {"variables", vars}});
}

std::string logged(const TrainConfig& cfg, const AutoDecision& d, TrainingSession& s) {
  if (!cfg.quiet) std::fprintf(stderr, "%s", describe(d, s).c_str());
  return json::dump_line(to_json(d, s));
}

}  // namespace

std::string apply_auto_codec_in_process(const TrainConfig& cfg, TrainingSession& s, int replicas,
                                        std::optional<comm::LinkModel>* decided_with) {
  if (!comm::is_auto_codec(cfg.codec)) return "";
  if (std::optional<std::string> kept = keep_checkpointed_plan(cfg, s)) return *kept;
  const std::optional<comm::LinkModel> flag = link_from_flag(cfg);
  const AutoDecision d = decide_and_set_plan(cfg, s, replicas, 1, flag.value_or(comm::LinkModel{}),
                                             flag ? "--auto_link_rate=" + cfg.auto_link_rate
                                                  : std::string("no link (an in-process run; --auto_link_rate "
                                                                "models one)"));
  if (decided_with) *decided_with = d.link;
  return logged(cfg, d, s);
}

std::string apply_auto_codec_in_cluster(const TrainConfig& cfg, TrainingSession& s, bool chief, int replicas,
                                        const std::vector<std::string>& ps,
                                        const std::optional<comm::Credential>& credential,
                                        const comm::TlsOptions& tls, std::optional<comm::LinkModel>* decided_with) {
  if (!comm::is_auto_codec(cfg.codec)) return "";
  if (!chief) {
    adopt_chiefs_plan(cfg, s, ps.at(0), credential, tls);
    return json::dump_line({{"adopted_from_chief", true}});
  }
  if (std::optional<std::string> kept = keep_checkpointed_plan(cfg, s)) return *kept;
  // A restarted chief of a run that has no checkpoint yet: the plan the
  // running ps holds (a new decision could differ, and the ps would refuse
  // its layout). A ps not up yet, or waiting for Init, is a fresh start.
  if (const std::optional<comm::PsStatus> st = comm::query_ps_status(ps.at(0), 0.5, credential, tls);
      st && st->phase == "running" && !st->variables.empty()) {
    set_plan_of(cfg, s, *st);
    return json::dump_line({{"adopted_from_running_ps", true}});
  }
  std::string source;
  comm::LinkModel link;
  if (const std::optional<comm::LinkModel> flag = link_from_flag(cfg)) {
    link = *flag;
    source = "--auto_link_rate=" + cfg.auto_link_rate;
  } else {
    link = probe_ps_links(cfg, ps, credential, tls, &source);
  }
  const AutoDecision d = decide_and_set_plan(cfg, s, replicas, static_cast<int>(ps.size()), link, source);
  if (decided_with) *decided_with = d.link;
  return logged(cfg, d, s);
}

}  // namespace terngrad::train::detail
