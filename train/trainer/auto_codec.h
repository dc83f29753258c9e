// Private to the trainer: --codec=auto for a run (comm/codec_choice.h holds
// the model and the search). Who decides and how the others learn it:
//   - in-process: the process decides, for --auto_link_rate's link or, without
//     it, for no link at all (memory);
//   - a cluster: the chief decides, for --auto_link_rate's link or the one it
//     measures by probing every ps (rpc Probe), and its Init carries the plan
//     to every ps; every other replica reads it from ps 0's Status before it
//     builds its layout, so all replicas use the same codec for a variable at
//     every step, and the layout fingerprint the ps checks covers the plan;
//   - a resumed run keeps the plan of the checkpoint it resumes from (its
//     error-feedback states belong to those codecs).
// The candidates' costs are measured once per CPU model, SIMD level and
// thread count and cached (--codec_costs).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "session.h"
#include "terngrad/base/json.h"
#include "terngrad/comm/codec_choice.h"
#include "terngrad/comm/credentials.h"
#include "terngrad/comm/tls.h"

namespace terngrad::train::detail {

struct AutoDecision {
  std::vector<std::string> candidates;
  comm::LinkModel link;
  std::string link_source;  // "--auto_link_rate=1gbit", "probe of 1 ps", "no link (in-process)", "checkpoint ..."
  std::string cost_source;  // the cache file, or "measured now"
  std::vector<comm::CodecCost> costs;
  comm::CodecChoice choice;
  int replicas = 1, num_ps = 1;
};

// The cache file --codec_costs names ("" = the default place, "none" = none).
std::optional<std::string> codec_costs_path(const TrainConfig& cfg);

// The costs of `specs` on this machine: from the cache when it holds them
// for this CPU model, SIMD level and thread count, else measured now and
// written back (atomically). A cache that cannot be read or written is
// named in a warning and bypassed; it never stops the run.
std::vector<comm::CodecCost> codec_costs(const TrainConfig& cfg, const std::vector<std::string>& specs,
                                         std::string* source = nullptr);

// --auto_link_rate as a link (the same rate both ways, no latency), or nullopt.
std::optional<comm::LinkModel> link_from_flag(const TrainConfig& cfg);

// The chief's probe of every ps (retried while a ps is not up yet, within
// --startup_timeout_secs): the slowest rate each way and the longest round
// trip. Throws comm::PeerError naming the ps that never answered.
comm::LinkModel probe_ps_links(const TrainConfig& cfg, const std::vector<std::string>& ps,
                               const std::optional<comm::Credential>& chief, const comm::TlsOptions& tls,
                               std::string* source);

// Decides the plan for this session's variables (s is not changed).
AutoDecision decide(const TrainConfig& cfg, TrainingSession& s, int replicas, int num_ps, const comm::LinkModel& link,
                    const std::string& link_source);
// Decides the plan for this session's variables and sets it (s.set_plan).
AutoDecision decide_and_set_plan(const TrainConfig& cfg, TrainingSession& s, int replicas, int num_ps,
                                 const comm::LinkModel& link, const std::string& link_source);

// A replica other than the chief: waits (within --startup_timeout_secs) for
// ps 0's Status to carry the chief's plan, checks that it names this run's
// variables and only its candidates (or fp32), and sets it.
void adopt_chiefs_plan(const TrainConfig& cfg, TrainingSession& s, const std::string& ps0,
                       const std::optional<comm::Credential>& credential, const comm::TlsOptions& tls);

// The two entry points. Both return "" when --codec is not auto, else the
// decision as one line of JSON (TrainResult::codec_choice), and log it
// unless --quiet. Call right after the session is made, before anything
// reads its plan.
//   in-process (CPU and GPU): `replicas` virtual workers, one imagined ps;
// decided_with, when given: the link a new decision was made for (left
// alone when the plan was kept from a checkpoint or adopted).
std::string apply_auto_codec_in_process(const TrainConfig& cfg, TrainingSession& s, int replicas,
                                        std::optional<comm::LinkModel>* decided_with = nullptr);
//   a replica of a cluster: the chief decides (probing the ps unless
//   --auto_link_rate is given), the others adopt the chief's plan from ps 0.
std::string apply_auto_codec_in_cluster(const TrainConfig& cfg, TrainingSession& s, bool chief, int replicas,
                                        const std::vector<std::string>& ps,
                                        const std::optional<comm::Credential>& credential,
                                        const comm::TlsOptions& tls,
                                        std::optional<comm::LinkModel>* decided_with = nullptr);

// For the log: every variable's choice and the estimates.
std::string describe(const AutoDecision& d, TrainingSession& s);
// For result.json: the same, as an object.
json::Json to_json(const AutoDecision& d, TrainingSession& s);

}  // namespace terngrad::train::detail
