// The ps's Init intake (init_intake.h): each step of the check is one
// function, in the order the Init's parts arrive.
#include "init_intake.h"

#include <algorithm>
#include <exception>

#include "server_state.h"

namespace terngrad::comm::detail {

namespace {

// The largest variable a layout may name, in elements (2^40: far beyond any
// model, far below where payload sizes could overflow).
constexpr uint64_t kMaxVariableElements = uint64_t{1} << 40;
// Tensors an async shard may carry: its values and the update rule's slots.
constexpr size_t kMaxSlotsPerShard = 16;

InitRefusal invalid(const std::string& what) { return {InitRefusal::Code::kInvalidArgument, "Init: " + what}; }

std::optional<InitRefusal> check_counts(const rpc::InitHeader& h, const InitLimits& limits) {
  if (h.total_replicas() == 0 || h.total_replicas() > limits.max_replicas)
    return invalid("total_replicas " + std::to_string(h.total_replicas()) + " must be in [1, " +
                   std::to_string(limits.max_replicas) + "]");
  if (h.replicas_to_aggregate() == 0 || h.replicas_to_aggregate() > h.total_replicas())
    return invalid("replicas_to_aggregate " + std::to_string(h.replicas_to_aggregate()) +
                   " must be in [1, total_replicas " + std::to_string(h.total_replicas()) + "]");
  if (h.last_step() < 0) return invalid("last_step " + std::to_string(h.last_step()) + " is negative");
  if (h.checkpoint_interval_steps() < 0)
    return invalid("checkpoint_interval_steps " + std::to_string(h.checkpoint_interval_steps()) + " is negative");
  if (!h.sync() && !limits.has_update_rule)
    return InitRefusal{InitRefusal::Code::kFailedPrecondition,
                       "Init: async training needs an update rule, and this ps has none"};
  for (int v = 0; v < h.variables_size(); ++v)
    if (h.variables(v).size() > kMaxVariableElements)
      return invalid("variable " + h.variables(v).name() + " has " + std::to_string(h.variables(v).size()) +
                     " elements, more than 2^40");
  return std::nullopt;
}

// Shard i of the layout, with its codec; refused if it lies outside its
// variable or its codec cannot serve it in this mode.
std::optional<InitRefusal> make_shard(const rpc::InitHeader& h, int i, IntakeShard& out) {
  const rpc::Shard& s = h.shards(i);
  if (s.variable() >= static_cast<uint32_t>(h.variables_size()))
    return invalid("shard " + std::to_string(i) + " names variable " + std::to_string(s.variable()) + " of " +
                   std::to_string(h.variables_size()));
  const rpc::Variable& v = h.variables(s.variable());
  if (s.begin() > v.size() || s.count() > v.size() - s.begin())
    return invalid("shard " + std::to_string(i) + " lies outside " + v.name());
  out.view = {s.variable(), v.name(), s.begin(), s.count(), v.codec()};
  try {
    out.codec = make_codec(v.codec());
  } catch (const std::exception& e) {
    return invalid(v.name() + ": " + e.what());
  }
  if (out.codec->slices_whole_variable_only() && (s.begin() != 0 || s.count() != v.size()))
    return invalid("shard " + std::to_string(i) + " is part of " + v.name() + ", whose codec " + v.codec() +
                   " sends the whole variable only (place it in one shard)");
  // An async ps applies every push as it comes: there is no sum to re-encode.
  if (!h.sync() && out.codec->aggregate_keeps_state())
    return invalid(v.name() + ": codec " + v.codec() + " re-encodes the servers' sums, which only a sync run forms");
  return std::nullopt;
}

// Every variable's pre-rounds (multi-round codecs), for ExchangePresums:
// from the codec specs, each checked against the variable's size.
std::optional<InitRefusal> plan_presums(const rpc::InitHeader& h, std::vector<std::vector<uint64_t>>& floats) {
  floats.assign(h.variables_size(), {});
  for (int v = 0; v < h.variables_size(); ++v) {
    const rpc::Variable& var = h.variables(v);
    try {
      const std::unique_ptr<GradientCodec> c = make_codec(var.codec());
      if (c->presum_rounds() > 0 && !h.sync())
        return invalid(var.name() + ": codec " + var.codec() +
                       " sums pre-rounds over the replicas of a step, which only a sync run has");
      for (uint32_t round = 0; round < c->presum_rounds(); ++round)
        floats[v].push_back(c->presum_floats(round, var.size()));
    } catch (const std::exception& e) {
      return invalid(var.name() + ": " + e.what());
    }
  }
  return std::nullopt;
}

// The tensors after the header. Async: values and slots, each a complete
// shard-sized tensor. Sync: the server states of a resumed run.
std::optional<InitRefusal> read_tensors(InitPlan& plan, const std::function<bool(rpc::InitChunk&)>& next) {
  const bool sync = plan.header.sync();
  plan.slot_names.assign(plan.shards.size(), {});
  plan.slot_bytes.assign(plan.shards.size(), {});
  rpc::InitChunk chunk;
  while (next(chunk)) {
    if (!chunk.has_tensor()) return invalid("a second header");
    const rpc::TensorChunk& t = chunk.tensor();
    if (sync && t.slot() != kServerStateSlot)
      return invalid("sync runs keep no values on the ps (slot \"" + t.slot().substr(0, 64) + "\")");
    if (t.shard() >= plan.shards.size()) return invalid("tensor for unknown shard " + std::to_string(t.shard()));
    auto& names = plan.slot_names[t.shard()];
    const size_t k = std::find(names.begin(), names.end(), t.slot()) - names.begin();
    if (k == names.size()) {
      if (names.size() >= kMaxSlotsPerShard)
        return invalid("more than " + std::to_string(kMaxSlotsPerShard) + " slots for shard " + std::to_string(t.shard()));
      names.push_back(t.slot());
      plan.slot_bytes[t.shard()].emplace_back();
    }
    const uint64_t count = plan.shards[t.shard()].view.count;
    const std::string err =
        plan.slot_bytes[t.shard()][k].add(t.offset(), t.total_bytes(), t.data(), sync ? max_server_state_bytes(count) : 4 * count);
    if (!err.empty()) return invalid("shard " + std::to_string(t.shard()) + " " + t.slot() + ": " + err);
  }
  for (size_t s = 0; s < plan.shards.size(); ++s)
    for (size_t k = 0; k < plan.slot_names[s].size(); ++k)
      if (!plan.slot_bytes[s][k].complete() || (!sync && plan.slot_bytes[s][k].bytes().size() != 4 * plan.shards[s].view.count))
        return invalid("shard " + std::to_string(s) + " slot \"" + plan.slot_names[s][k] +
                       "\" is incomplete or has the wrong size");
  return std::nullopt;
}

// Every server state is checked by its codec before any is taken.
std::optional<InitRefusal> check_server_states(InitPlan& plan) {
  plan.server_states.assign(plan.shards.size(), {});
  if (!plan.header.sync()) return std::nullopt;
  for (size_t s = 0; s < plan.shards.size(); ++s) {
    if (plan.slot_names[s].empty()) continue;
    const auto& bytes = plan.slot_bytes[s][0].bytes();
    plan.server_states[s].assign(bytes.begin(), bytes.end());
    try {
      plan.shards[s].codec->validate_aggregate_state(plan.server_states[s], plan.shards[s].view.count);
    } catch (const std::exception& e) {
      return invalid("shard " + std::to_string(s) + " (" + plan.shards[s].view.name + "): " + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<InitRefusal> take_init(InitPlan& plan, const std::function<bool(rpc::InitChunk&)>& next,
                                     const InitLimits& limits) {
  const rpc::InitHeader& h = plan.header;
  if (auto r = check_counts(h, limits)) return r;
  plan.shards.clear();
  for (int i = 0; i < h.shards_size(); ++i) {
    IntakeShard shard;
    if (auto r = make_shard(h, i, shard)) return r;
    plan.shards.push_back(std::move(shard));
  }
  if (auto r = plan_presums(h, plan.presum_floats)) return r;
  if (auto r = read_tensors(plan, next)) return r;
  return check_server_states(plan);
}

}  // namespace terngrad::comm::detail
