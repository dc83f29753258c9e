// "--codec=auto" (codec_choice.h): the candidates, each one's measured cost,
// and the plan that minimises the modelled step.
#include "terngrad/comm/codec_choice.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "terngrad/comm/gradient_codec.h"

namespace terngrad::comm {

namespace {

// The recommended error-feedback configuration (experiments/results/codecs:
// fp32's accuracy at 2 bits both ways); async runs have no step sum for
// server_ef() to re-encode, so they keep the worker-side half.
constexpr const char* kSyncDefaults[] = {"fp32", "fp16", "ef(server_ef(terngrad:round=nearest))"};
constexpr const char* kAsyncDefaults[] = {"fp32", "fp16", "ef(terngrad:round=nearest)"};

// "a,b:k=1,k2=2,c(d,e)" -> the candidates: commas at parenthesis depth 0
// separate pieces; a piece "key=value" (no ':' or '(' before its '=')
// continues the previous candidate's parameters.
std::vector<std::string> split_candidates(std::string_view inner, std::string_view whole) {
  std::vector<std::string> pieces;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= inner.size(); ++i) {
    if (i < inner.size()) {
      if (inner[i] == '(') ++depth;
      if (inner[i] == ')' && --depth < 0)
        throw std::invalid_argument("codec \"" + std::string(whole) + "\": unbalanced ')'");
      if (inner[i] != ',' || depth > 0) continue;
    }
    pieces.emplace_back(inner.substr(start, i - start));
    start = i + 1;
  }
  if (depth != 0) throw std::invalid_argument("codec \"" + std::string(whole) + "\": unbalanced '('");
  std::vector<std::string> out;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const std::string& p = pieces[k];
    if (p.empty())
      throw std::invalid_argument("codec \"" + std::string(whole) + "\": candidate " + std::to_string(out.size() + 1) +
                                  " is empty");
    const size_t eq = p.find('='), named = p.find_first_of(":(");
    const bool continues = eq != std::string::npos && (named == std::string::npos || named > eq);
    if (continues && out.empty())
      throw std::invalid_argument("codec \"" + std::string(whole) + "\": \"" + p + "\" is a parameter of no codec");
    if (continues)
      out.back() += "," + p;
    else
      out.push_back(p);
  }
  return out;
}

std::vector<float> gaussian(uint64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> g(n);
  for (float& x : g) x = d(rng);
  return g;
}

double seconds_of(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct SizeTiming {
  double encode_s = 1e30, sum2_s = 1e30, decode_s = 1e30;
  double down_bytes = 0;
};

// One size: two replicas' codecs and the server's, the calls of a trainer step.
SizeTiming time_at(const std::string& spec, uint64_t n, int repeats) {
  const std::vector<float> g[2] = {gaussian(n, 1), gaussian(n, 2)};
  std::unique_ptr<GradientCodec> worker[2] = {make_codec(spec), make_codec(spec)};
  const std::unique_ptr<GradientCodec> server = make_codec(spec);
  std::vector<uint8_t> payload[2], state, sum;
  std::vector<float> out(n);
  const uint32_t rounds = worker[0]->presum_rounds();
  SizeTiming best;
  for (int r = 0; r < repeats; ++r) {
    EncodeContext ctx[2];
    std::vector<std::vector<float>> presums(rounds);
    double encode_s = 0;
    for (int w = 0; w < 2; ++w) {
      ctx[w].step = static_cast<uint32_t>(r);
      ctx[w].seed = 1 + static_cast<uint64_t>(w);
    }
    // Pre-rounds, summed over both replicas (the second replica's work is not the replica's cost).
    for (uint32_t round = 0; round < rounds; ++round) {
      std::vector<float> mine[2];
      for (int w = 0; w < 2; ++w) {
        mine[w].resize(worker[w]->presum_floats(round, n));
        const auto t0 = std::chrono::steady_clock::now();
        worker[w]->presum(round, g[w], ctx[w], mine[w]);
        if (w == 0) encode_s += seconds_of(t0);
      }
      presums[round].resize(mine[0].size());
      for (size_t i = 0; i < mine[0].size(); ++i) presums[round][i] = mine[0][i] + mine[1][i];
      for (int w = 0; w < 2; ++w) ctx[w].presums.emplace_back(presums[round]);
    }
    float scale[2] = {0, 0};
    for (int w = 0; w < 2; ++w) {
      const auto t0 = std::chrono::steady_clock::now();
      if (worker[w]->wants_shared_scale()) scale[w] = worker[w]->local_scale(g[w]);
      if (w == 0) encode_s += seconds_of(t0);
    }
    for (int w = 0; w < 2; ++w) {
      if (worker[w]->wants_shared_scale()) ctx[w].shared_scale = std::max(scale[0], scale[1]);
      payload[w].resize(worker[w]->payload_bytes(n));
      const auto t0 = std::chrono::steady_clock::now();
      payload[w].resize(worker[w]->encode(g[w], ctx[w], payload[w]));
      if (w == 0) encode_s += seconds_of(t0);
    }
    const std::span<const uint8_t> views[2] = {payload[0], payload[1]};
    auto t0 = std::chrono::steady_clock::now();
    server->aggregate_step(views, n, AggregateContext{0, static_cast<uint32_t>(r), 0}, state, sum);
    const double sum_s = seconds_of(t0);
    DecodeContext dc;
    dc.step = static_cast<uint32_t>(r);
    for (const auto& p : presums) dc.presums.emplace_back(p);
    t0 = std::chrono::steady_clock::now();
    worker[0]->decode_aggregate_with(sum, dc, out);
    const double decode_s = seconds_of(t0);
    best.encode_s = std::min(best.encode_s, encode_s);
    best.sum2_s = std::min(best.sum2_s, sum_s);
    best.decode_s = std::min(best.decode_s, decode_s);
    best.down_bytes = static_cast<double>(sum.size());
  }
  return best;
}

// a + b n through two points, neither part negative (timing noise at the small size).
LinearCost through(double y_small, double y_large, uint64_t n_small, uint64_t n_large) {
  LinearCost c;
  c.per_element = std::max(0.0, (y_large - y_small) / static_cast<double>(n_large - n_small));
  c.fixed = std::max(0.0, y_small - c.per_element * static_cast<double>(n_small));
  return c;
}

// The codec objects an estimate needs, one per spec.
class CodecTable {
 public:
  const GradientCodec& of(const std::string& spec) {
    auto it = codecs_.find(spec);
    if (it == codecs_.end()) it = codecs_.emplace(spec, make_codec(spec)).first;
    return *it->second;
  }

 private:
  std::map<std::string, std::unique_ptr<GradientCodec>> codecs_;
};

const CodecCost& cost_of(const ChoiceInput& in, const std::string& spec) {
  for (const CodecCost& c : in.costs)
    if (c.spec == spec) return c;
  throw std::invalid_argument("codec choice: no measured cost for \"" + spec + "\"");
}

PlanEstimate estimate(const ChoiceInput& in, const std::vector<std::string>& plan, CodecTable& codecs) {
  if (plan.size() != in.variables.size())
    throw std::invalid_argument("codec choice: a plan of " + std::to_string(plan.size()) + " codecs for " +
                                std::to_string(in.variables.size()) + " variables");
  const double R = in.replicas, P = in.num_ps;
  PlanEstimate e;
  double up = 0, down = 0;
  for (size_t v = 0; v < plan.size(); ++v) {
    const uint64_t n = in.variables[v].size;
    const CodecCost& c = cost_of(in, plan[v]);
    const GradientCodec& codec = codecs.of(plan[v]);
    up += static_cast<double>(codec.payload_bytes(n));
    const std::optional<size_t> known = codec.aggregate_bytes(n, static_cast<size_t>(in.replicas));
    down += known ? static_cast<double>(*known) : c.down_bytes.at(n);
    e.encode_s += c.encode_s.at(n);
    e.decode_s += c.decode_s.at(n);
    e.server_s += R / 2 * c.sum2_s.at(n) / P;
  }
  e.codec_s = e.encode_s + e.decode_s + e.server_s;
  const double k = std::max(1.0, R / P);
  const double u = in.link.up_bytes_per_s > 0 ? k * up / in.link.up_bytes_per_s : 0;
  const double d = in.link.down_bytes_per_s > 0 ? k * down / in.link.down_bytes_per_s : 0;
  e.link_s = std::max(u, d) + (std::clamp(in.link.two_way, 1.0, 2.0) - 1) * std::min(u, d);
  e.up_s = u;
  e.down_s = d;
  e.up_bytes = static_cast<uint64_t>(up);
  e.down_bytes = static_cast<uint64_t>(down);
  e.total_s = e.link_s + e.codec_s + 2 * in.link.latency_s;
  return e;
}

}  // namespace

bool is_auto_codec(std::string_view spec) { return spec == "auto" || spec.starts_with("auto("); }

AutoCodec parse_auto_codec(std::string_view spec, bool sync) {
  const std::string whole(spec);
  std::vector<std::string> named;
  if (spec == "auto") {
    for (const char* s : sync ? kSyncDefaults : kAsyncDefaults) named.emplace_back(s);
  } else if (spec.starts_with("auto(") && spec.ends_with(")")) {
    if (spec.size() > 6) named = split_candidates(spec.substr(5, spec.size() - 6), spec);
  } else {
    throw std::invalid_argument("codec \"" + whole + "\" is not auto or auto(<codec>,...)");
  }
  if (named.empty())
    throw std::invalid_argument("codec \"" + whole + "\": no candidates");
  AutoCodec out;
  for (const std::string& n : named) {
    std::unique_ptr<GradientCodec> c;
    try {
      c = make_codec(n);
    } catch (const std::exception& e) {
      throw std::invalid_argument("codec \"" + whole + "\": candidate \"" + n + "\": " + e.what());
    }
    const std::string canonical = c->spec();
    if (std::find(out.candidates.begin(), out.candidates.end(), canonical) != out.candidates.end())
      throw std::invalid_argument("codec \"" + whole + "\": candidate \"" + n + "\" is listed twice (as " + canonical +
                                  ")");
    if (c->presum_rounds() > 0)
      throw std::invalid_argument(
          "codec \"" + whole + "\": candidate " + canonical +
          (sync ? " is a multi-round codec whose cost depends on each variable's matrix shape, which auto does not "
                  "model; name it with --codec"
                : " sums pre-rounds over the replicas of a step, which an async run does not have"));
    if (!sync && c->aggregate_keeps_state())
      throw std::invalid_argument("codec \"" + whole + "\": candidate " + canonical +
                                  " re-encodes the servers' step sums, which only a sync run forms");
    out.candidates.push_back(canonical);
  }
  return out;
}

CodecCost measure_codec_cost(const std::string& spec, uint64_t n_small, uint64_t n_large, int repeats) {
  if (n_small < 4 || n_large <= n_small || repeats < 1)
    throw std::invalid_argument("measure_codec_cost: sizes " + std::to_string(n_small) + " < " +
                                std::to_string(n_large) + " (from 4) and repeats " + std::to_string(repeats) +
                                " (from 1)");
  const SizeTiming s = time_at(spec, n_small, repeats), l = time_at(spec, n_large, repeats);
  CodecCost c;
  c.spec = make_codec(spec)->spec();
  c.encode_s = through(s.encode_s, l.encode_s, n_small, n_large);
  c.sum2_s = through(s.sum2_s, l.sum2_s, n_small, n_large);
  c.decode_s = through(s.decode_s, l.decode_s, n_small, n_large);
  c.down_bytes = through(s.down_bytes, l.down_bytes, n_small, n_large);
  return c;
}

std::vector<std::string> specs_to_cost(const std::vector<std::string>& candidates) {
  std::vector<std::string> specs = candidates;
  if (std::find(specs.begin(), specs.end(), "fp32") == specs.end()) specs.push_back("fp32");
  return specs;
}

PlanEstimate estimate_plan(const ChoiceInput& in, const std::vector<std::string>& plan) {
  CodecTable codecs;
  return estimate(in, plan, codecs);
}

// A plan other than the first candidate everywhere must be this much faster
// (a share of its estimate), and a change of one variable this much.
constexpr double kMinGain = 0.05, kMinStep = 1e-3;

CodecChoice choose_codecs(const ChoiceInput& in) {
  if (in.candidates.empty()) throw std::invalid_argument("codec choice: no candidates");
  if (in.replicas < 1 || in.num_ps < 1)
    throw std::invalid_argument("codec choice: " + std::to_string(in.replicas) + " replicas and " +
                                std::to_string(in.num_ps) + " ps (each must be >= 1)");
  CodecTable codecs;
  const auto uniform_plan = [&](const std::string& spec) {
    std::vector<std::string> plan;
    for (const ChoiceVariable& v : in.variables) plan.push_back(v.fixed ? "fp32" : spec);
    return plan;
  };
  CodecChoice best;
  size_t pick = 0;
  for (size_t c = 0; c < in.candidates.size(); ++c) {
    best.uniform.push_back(estimate(in, uniform_plan(in.candidates[c]), codecs));
    if (best.uniform[c].total_s < best.uniform[pick].total_s) pick = c;
  }
  // The first candidate is the default (fp32 in "auto"): another must beat
  // it by kMinGain, not by the noise of a calibration.
  if (best.uniform[pick].total_s >= best.uniform[0].total_s * (1 - kMinGain)) pick = 0;
  best.plan = uniform_plan(in.candidates[pick]);
  best.estimate = best.uniform[pick];
  // No link: no bytes to save, so nothing to pay for with compute or precision.
  if (in.link.up_bytes_per_s <= 0 && in.link.down_bytes_per_s <= 0) {
    best.plan = uniform_plan(in.candidates[0]);
    best.estimate = best.uniform[0];
    return best;
  }
  // One variable at a time, largest first: the model is not additive (the
  // link's time is its busier direction), so each change is judged whole.
  std::vector<size_t> order;
  for (size_t v = 0; v < in.variables.size(); ++v)
    if (!in.variables[v].fixed) order.push_back(v);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return in.variables[a].size > in.variables[b].size; });
  for (int pass = 0; pass < 8; ++pass) {
    bool changed = false;
    for (size_t v : order) {
      for (const std::string& spec : in.candidates) {
        if (spec == best.plan[v]) continue;
        std::vector<std::string> trial = best.plan;
        trial[v] = spec;
        const PlanEstimate e = estimate(in, trial, codecs);
        if (e.total_s < best.estimate.total_s * (1 - kMinStep)) {
          best.plan = std::move(trial);
          best.estimate = e;
          changed = true;
        }
      }
    }
    if (!changed) break;
  }
  return best;
}

}  // namespace terngrad::comm
