// The ps's replica table (replica_table.h).
#include "replica_table.h"

#include <openssl/crypto.h>

namespace terngrad::comm::detail {

namespace {
double seconds_between(SteadyTime from, SteadyTime to) { return std::chrono::duration<double>(to - from).count(); }
}  // namespace

bool same_session(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::vector<uint32_t> ReplicaTable::unregistered() const {
  std::vector<uint32_t> m;
  for (size_t r = 0; r < records_.size(); ++r)
    if (!records_[r].registered) m.push_back(static_cast<uint32_t>(r));
  return m;
}

ReplicaTable::Join ReplicaTable::join(uint32_t r, const std::string& session, const std::string& label, bool proven,
                                      SteadyTime now) {
  ReplicaRecord& rec = records_[r];
  Join how = Join::kFirst;
  // Register sets a session (an empty one is refused before), so a
  // registered replica always has one.
  if (!rec.session.empty()) {
    if (same_session(session, rec.session)) {
      how = Join::kSame;
    } else {
      // Without a secret anyone could claim the name: only once the old
      // process has gone silent may another take it.
      if (!proven && !rec.gone) return Join::kRefused;
      how = Join::kReplaced;
    }
  }
  rec.registered = true;
  rec.gone = false;
  rec.label = label;
  rec.session = session;
  rec.last_heard = now;
  return how;
}

ReplicaTable::Verdict ReplicaTable::judge(SteadyTime now, double peer_timeout_s, bool sync, int needed,
                                          const std::function<std::string(uint32_t)>& name,
                                          const std::function<int64_t(uint32_t)>& last_pushed) {
  Verdict v;
  int alive = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    const uint32_t r = static_cast<uint32_t>(i);
    ReplicaRecord& rec = records_[i];
    if (rec.done) continue;
    const double silent = seconds_between(rec.last_heard, now);
    if (!rec.gone && silent > peer_timeout_s) {
      rec.gone = true;
      rec.gone_reason = name(r) + " (" + rec.label + ") has been silent for " + std::to_string(static_cast<int>(silent)) +
                        " s (last pushed step " + std::to_string(last_pushed(r)) + ")";
      if (r == 0) {
        v.failure = rec.gone_reason + "; it is the chief, so the run cannot finish";
        return v;
      }
      v.newly_gone.push_back(rec.gone_reason);
    }
    if (!rec.gone) ++alive;
  }
  if (!sync) return v;
  int finished = 0;
  for (const ReplicaRecord& rec : records_) finished += rec.done;
  if (alive + finished < needed && alive > 0) {
    std::string gone;
    for (const ReplicaRecord& rec : records_)
      if (rec.gone) gone += (gone.empty() ? "" : "; ") + rec.gone_reason;
    v.failure = gone + "; only " + std::to_string(alive) + " replicas left and a step needs " + std::to_string(needed);
  }
  return v;
}

ReplicaTable::Startup ReplicaTable::judge_startup(bool initialized, SteadyTime started, SteadyTime now,
                                                  double startup_timeout_s,
                                                  const std::function<std::string(uint32_t)>& name) const {
  Startup v;
  const std::vector<uint32_t> missing = initialized ? unregistered() : std::vector<uint32_t>{};
  v.complete = initialized && missing.empty();
  if (v.complete || seconds_between(started, now) <= startup_timeout_s) return v;
  const std::string within = std::to_string(static_cast<int>(startup_timeout_s)) + " s";
  if (!initialized) {
    v.failure = name(0) + " (the chief) did not initialize this ps within " + within;
  } else {
    std::string names;
    for (uint32_t m : missing) names += (names.empty() ? "" : ", ") + name(m);
    v.failure = "never joined within " + within + ": " + names;
  }
  return v;
}

}  // namespace terngrad::comm::detail
