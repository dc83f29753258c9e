// The steps of a sync run on one ps (sync_steps.h).
#include "sync_steps.h"

#include <algorithm>
#include <stdexcept>

#include "chunks.h"

namespace terngrad::comm::detail {
namespace {

// The result of a push that keeps nothing.
SyncSteps::PushResult dropped(SyncSteps::PushOutcome outcome, bool counted_stale = false) {
  SyncSteps::PushResult r;
  r.outcome = outcome;
  r.counted_stale = counted_stale;
  return r;
}

}  // namespace

SyncSteps::SyncSteps(std::vector<ShardCoding> shards, int replicas, int needed, size_t keep_steps, int64_t first_step,
                     std::vector<std::vector<uint8_t>> server_states)
    : shards_(std::move(shards)),
      replicas_(replicas),
      needed_(needed),
      keep_steps_(keep_steps),
      global_step_(first_step),
      server_states_(std::move(server_states)),
      live_states_step_(first_step - 1) {
  if (server_states_.empty()) server_states_.resize(shards_.size());
  if (server_states_.size() != shards_.size())
    throw std::invalid_argument("SyncSteps: " + std::to_string(server_states_.size()) + " server states for " +
                                std::to_string(shards_.size()) + " shards");
  if (replicas < 1 || needed < 1 || needed > replicas)
    throw std::invalid_argument("SyncSteps: needed " + std::to_string(needed) + " must be in [1, replicas " +
                                std::to_string(replicas) + "]");
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (shards_[s].codec == nullptr) throw std::invalid_argument("SyncSteps: shard " + std::to_string(s) + " has no codec");
    keeps_server_states_ |= shards_[s].codec->aggregate_keeps_state();
  }
  last_pushed_.assign(replicas_, -1);
  last_stale_.assign(replicas_, -1);
  spare_sums_.assign(shards_.size(), {});
  start(global_step_);
}

// A fresh step buffer and its (empty) sums, in the buffers of dropped steps.
void SyncSteps::start(int64_t step) {
  const size_t S = shards_.size();
  current_ = StepBuffer{};
  current_.step = step;
  current_.payloads.assign(replicas_, std::vector<std::string>(S));
  current_.got.assign(replicas_, std::vector<bool>(S, false));
  current_.got_count.assign(replicas_, 0);
  current_.have.assign(S, 0);
  current_.pushed.assign(replicas_, false);
  current_.loss_known.assign(replicas_, false);
  current_.loss.assign(replicas_, 0.0f);
  auto sums = std::make_shared<StepSums>();
  sums->step = step;
  sums->shards = std::move(spare_sums_);
  sums->shards.resize(S);
  sums->ready.assign(S, false);
  current_.sums = std::move(sums);
  spare_sums_.assign(S, {});
}

SyncSteps::PushResult SyncSteps::push(uint32_t replica, int64_t step, std::span<const uint32_t> shards,
                                      std::span<std::string> payloads, float loss) {
  const size_t S = shards_.size();
  if (replica >= static_cast<uint32_t>(replicas_))
    throw std::invalid_argument("SyncSteps: replica " + std::to_string(replica) + " of " + std::to_string(replicas_));
  if (payloads.size() != shards.size())
    throw std::invalid_argument("SyncSteps: " + std::to_string(payloads.size()) + " payloads for " +
                                std::to_string(shards.size()) + " shards");
  std::vector<bool> named(S, false);
  for (uint32_t s : shards) {
    if (s >= S || named[s])
      throw std::invalid_argument("SyncSteps: shard " + std::to_string(s) + (s >= S ? " of " + std::to_string(S) : " named twice"));
    named[s] = true;
  }

  if (step < current_.step || (step == current_.step && current_.closed)) {
    if (step <= last_pushed_[replica]) {
      ++duplicates_;
      return dropped(PushOutcome::kDuplicate);
    }
    if (last_stale_[replica] == step) return dropped(PushOutcome::kStale, false);
    last_stale_[replica] = step;
    ++stale_;
    return dropped(PushOutcome::kStale, true);
  }
  if (step > current_.step) return dropped(PushOutcome::kAhead);
  size_t repeated = 0;
  for (uint32_t s : shards) repeated += current_.got[replica][s];
  if (repeated == shards.size()) {  // a retried push or bucket
    ++duplicates_;
    return dropped(PushOutcome::kDuplicate);
  }
  PushResult kept;
  kept.repeated = repeated;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (current_.got[replica][shards[i]]) continue;  // delivered before: the first delivery stays
    current_.payloads[replica][shards[i]] = std::move(payloads[i]);
    current_.got[replica][shards[i]] = true;
    ++current_.have[shards[i]];
    kept.accepted.push_back(shards[i]);
  }
  current_.got_count[replica] += kept.accepted.size();
  if (!current_.loss_known[replica]) {  // the first bucket's loss
    current_.loss_known[replica] = true;
    current_.loss[replica] = loss;
  }
  if (current_.got_count[replica] == S) {
    current_.pushed[replica] = true;
    last_pushed_[replica] = step;
    ++current_.count;
  }
  return kept;
}

SyncSteps::SumJob SyncSteps::take_sums(std::span<const uint32_t> shards) {
  for (uint32_t s : shards)
    if (s >= shards_.size())
      throw std::invalid_argument("SyncSteps: shard " + std::to_string(s) + " of " + std::to_string(shards_.size()));
  SumJob job;
  // A closed step is being summed already (or is done): nothing to take.
  if (current_.closed) return job;  // Kind::kNone
  job.step_ = current_.step;
  job.sums_ = current_.sums;
  if (needed_ == replicas_) {
    job.kind_ = SumJob::Kind::kDeliveredShards;
    for (uint32_t s : shards)
      if (current_.have[s] == replicas_) job.shards_.push_back(s);
    job.from_.assign(replicas_, true);
    if (!job.shards_.empty()) live_states_step_ = kNoStep;  // sum() changes them
    return job;
  }
  if (current_.count < needed_) {
    job.sums_ = nullptr;
    return job;  // Kind::kNone
  }
  // Backup replicas: the first `needed` replicas to deliver every shard make
  // the step. The buffer stays (closed, payloads moved out) so that late
  // pushes read as stale and waiting pulls can still list who pushed.
  current_.closed = true;
  live_states_step_ = kNoStep;  // sum() changes them
  job.kind_ = SumJob::Kind::kWholeStep;
  job.from_ = current_.pushed;
  job.loss_ = current_.loss;
  job.count_ = current_.count;
  job.payloads_ = std::move(current_.payloads);
  current_.payloads.assign(replicas_, std::vector<std::string>(shards_.size()));
  for (uint32_t s = 0; s < shards_.size(); ++s) job.shards_.push_back(s);
  return job;
}

std::string SyncSteps::sum(const SumJob& job) const {
  // kDeliveredShards reads current_.payloads without the lock: see SumJob.
  const auto& payloads = job.kind_ == SumJob::Kind::kWholeStep ? job.payloads_ : current_.payloads;
  try {
    for (uint32_t s : job.shards_) {
      std::vector<std::span<const uint8_t>> views;
      for (int r = 0; r < replicas_; ++r)
        if (job.from_[r]) views.push_back(as_bytes(payloads[r][s]));
      const ShardCoding& c = shards_[s];
      const AggregateContext ctx{c.variable, static_cast<uint32_t>(job.step_), c.begin};
      c.codec->aggregate_step(views, c.elements, ctx, server_states_[s], job.sums_->shards[s]);
    }
  } catch (const std::exception& e) {
    return std::string("summing step ") + std::to_string(job.step_) + ": " + e.what();
  }
  return "";
}

bool SyncSteps::settle(const SumJob& job) {
  const size_t S = shards_.size();
  switch (job.kind_) {
    case SumJob::Kind::kNone:
      return false;
    case SumJob::Kind::kDeliveredShards: {
      StepSums& sums = *job.sums_;
      for (uint32_t s : job.shards_) sums.ready[s] = true;
      sums.ready_count += job.shards_.size();
      if (!current_.closed && current_.count == replicas_ && current_.sums->ready_count == S) {
        current_.closed = true;
        finish(current_.step, current_.pushed, current_.loss, current_.count, current_.sums);
        return true;
      }
      return !job.shards_.empty();
    }
    case SumJob::Kind::kWholeStep:
      job.sums_->ready.assign(S, true);
      job.sums_->ready_count = S;
      finish(job.step_, job.from_, job.loss_, job.count_, job.sums_);
      return true;
  }
  return false;
}

// The step's replicas and shards are all in: its sums are complete, and the
// next step begins. The arguments may be current_'s own, so they are not
// read after start().
void SyncSteps::finish(int64_t step, const std::vector<bool>& pushed, const std::vector<float>& loss, int count,
                       const std::shared_ptr<StepSums>& sums) {
  StepSums& done = *sums;
  done.contributions = static_cast<uint32_t>(count);
  double total_loss = 0;
  for (int r = 0; r < replicas_; ++r)
    if (pushed[r]) total_loss += loss[r];
  done.mean_loss = static_cast<float>(total_loss / count);
  done.complete = true;
  recent_.push_back(sums);
  while (recent_.size() > keep_steps_) {
    if (recent_.front().use_count() == 1) spare_sums_ = std::move(recent_.front()->shards);  // nobody streams it
    recent_.pop_front();
  }
  // Every shard of the step is summed and the next has not begun: the
  // states are this step's.
  live_states_step_ = step;
  if (keeps_server_states_ && keep_states_every_ > 0 && (step + 1) % keep_states_every_ == 0) {
    // A checkpoint step: copied aside, into the buffers of the oldest copy
    // once the ring is full or that copy left the window.
    StatesAfter after;
    while (!states_after_.empty() && (states_after_.size() >= std::max<size_t>(keep_steps_, 1) ||
                                      states_after_.front().step < step + 1 - static_cast<int64_t>(keep_steps_))) {
      after = std::move(states_after_.front());
      states_after_.pop_front();
    }
    after.step = step;
    after.states.resize(server_states_.size());
    for (size_t s = 0; s < server_states_.size(); ++s) after.states[s].assign(server_states_[s].begin(), server_states_[s].end());
    states_after_.push_back(std::move(after));
  }
  global_step_ = step + 1;
  if (step == current_.step) start(global_step_);
}

void SyncSteps::keep_states_every(int64_t every) {
  if (every < 0) throw std::invalid_argument("SyncSteps: checkpoint interval " + std::to_string(every) + " is negative");
  keep_states_every_ = every;
}

const std::vector<std::vector<uint8_t>>* SyncSteps::server_states_after(int64_t step) const {
  if (!keeps_server_states_) return nullptr;
  if (step == live_states_step_) return &server_states_;
  if (step < global_step_ - static_cast<int64_t>(keep_steps_)) return nullptr;  // left the window
  for (const StatesAfter& a : states_after_)
    if (a.step == step) return &a.states;
  return nullptr;
}

std::shared_ptr<StepSums> SyncSteps::sums_of(int64_t step) const {
  if (step == current_.step && !current_.closed) return current_.sums;
  for (const auto& a : recent_)
    if (a->step == step) return a;
  if (step == current_.step) return current_.sums;  // closed, being summed
  return nullptr;
}

void SyncSteps::pulled(const std::shared_ptr<StepSums>& held, uint32_t replica) {
  if (replica >= static_cast<uint32_t>(replicas_))
    throw std::invalid_argument("SyncSteps: replica " + std::to_string(replica) + " of " + std::to_string(replicas_));
  auto at = std::find(recent_.begin(), recent_.end(), held);
  if (at == recent_.end()) return;
  StepSums& sums = **at;
  if (sums.pulled_by.size() != static_cast<size_t>(replicas_)) sums.pulled_by.assign(replicas_, false);
  if (sums.pulled_by[replica]) return;
  sums.pulled_by[replica] = true;
  if (++sums.pulls >= replicas_ && !keep_pulled_) {
    if (held.use_count() == 2) spare_sums_ = std::move((*at)->shards);  // the ring's copy and the caller's
    recent_.erase(at);
  }
}

std::vector<uint32_t> SyncSteps::missing() const {
  std::vector<uint32_t> out;
  for (int r = 0; r < replicas_; ++r)
    if (!current_.pushed[r]) out.push_back(static_cast<uint32_t>(r));
  return out;
}

int64_t SyncSteps::last_pushed(uint32_t replica) const {
  if (replica >= last_pushed_.size())
    throw std::invalid_argument("SyncSteps: replica " + std::to_string(replica) + " of " + std::to_string(replicas_));
  return last_pushed_[replica];
}

}  // namespace terngrad::comm::detail
