// Training as separate processes: parameter servers, a chief, workers and an
// evaluator talking over gRPC (comm/). Every task runs tg-train with the same
// flags plus its role; the cluster comes from --job_name/--task_id/--ps_hosts/
// --worker_hosts[/--chief_host/--evaluator_host] or from TF_CONFIG.
//
//   ps         serves its shards; in async runs it applies the run's optimizer
//   chief      replica 0: initializes the ps (or restores train_dir's latest
//              checkpoint), trains, writes checkpoints, metrics.jsonl, the
//              exported model and the result, and ends the run
//   worker     replica i: trains (sync: its gradients, the sum it pulls and
//              its own copy of the weights; async: pulled weights)
//   evaluator  evaluates each new checkpoint in train_dir (eval.jsonl)
//
// A sync run with the same seed and codec computes what the in-process
// trainer computes with num_nodes = replicas (bit for bit when each process's
// gradient math runs on one thread). train_dir must be visible to the chief,
// the evaluator and, for resuming, every worker (one machine, or shared storage).
#pragma once

#include <optional>

#include "terngrad/comm/cluster.h"
#include "terngrad/train/train_config.h"
#include "terngrad/train/trainer.h"

namespace terngrad::train {

// The cluster cfg describes: from the flags when job_name is set, else from
// TF_CONFIG when that environment variable is set, else nullopt (in-process).
// Throws std::invalid_argument naming the problem.
std::optional<comm::ClusterSpec> cluster_of(const TrainConfig& cfg);

// Runs this process's role. The chief returns the run's result; other roles
// return steps and throughput only. Throws comm::PeerError when a peer dies,
// never joins or refuses (the message names it); returns normally when a
// worker finds the run already finished by the chief.
TrainResult run_task(const TrainConfig& cfg, const comm::ClusterSpec& cluster);

}  // namespace terngrad::train
