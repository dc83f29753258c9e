// Private to ps_load_bench: one simulated replica's steps, on its own thread
// with its own WorkerClient. The sync step is the trainer's overlapped one
// (train/trainer/overlapped_step.cpp) without the computation: share scales,
// push the payloads in backward order (last variable first) in buckets of
// about 256 KiB, take each sum as it arrives, end the step. The async step
// pulls the current values and pushes the payloads.
#pragma once

#include <cstdint>
#include <vector>

#include "load_model.h"
#include "step_board.h"
#include "terngrad/comm/worker_client.h"

namespace terngrad::bench {

// Runs steps [0, steps), posting each to the board; posts an error and
// returns on a failure. sum_bytes (may be null): receives, after the first
// step, the size of each shard's pulled sum (layout.shards order).
void run_sync_replica(int replica, comm::WorkerClient& client, const LoadModel& model, int64_t steps, StepBoard& board,
                      std::vector<uint64_t>* sum_bytes);

void run_async_replica(int replica, comm::WorkerClient& client, const LoadModel& model, int64_t steps,
                       StepBoard& board);

}  // namespace terngrad::bench
