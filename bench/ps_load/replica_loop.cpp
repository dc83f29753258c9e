// One simulated replica's steps (replica_loop.h).
#include "replica_loop.h"

#include <exception>
#include <span>

namespace terngrad::bench {

namespace {
// As the trainer's OverlappedStep::kBucketBytes.
constexpr size_t kBucketBytes = size_t{256} << 10;
}  // namespace

void run_sync_replica(int replica, comm::WorkerClient& client, const LoadModel& model, int64_t steps, StepBoard& board,
                      std::vector<uint64_t>* sum_bytes) {
  const comm::Layout& L = model.layout;
  const auto& mine = model.payloads[replica];
  std::vector<std::vector<uint8_t>> sums(L.shards.size());
  std::vector<size_t> bucket;
  std::vector<std::span<const uint8_t>> views;
  try {
    for (int64_t step = 0; step < steps; ++step) {
      client.begin_step(step, sums);
      if (model.wants_scales) client.exchange_scales(step, model.local_scales);
      const float loss = 1.0f;
      size_t bytes = 0;
      auto flush = [&] {
        if (!bucket.empty()) client.push_bucket(loss, bucket, views);
        bucket.clear();
        views.clear();
        bytes = 0;
      };
      for (size_t v = L.variables.size(); v-- > 0;) {
        for (size_t sh : L.shards_of[v]) {
          bucket.push_back(sh);
          views.emplace_back(mine[sh]);
          bytes += mine[sh].size();
          if (bytes >= kBucketBytes) flush();
        }
      }
      flush();
      // Bounded: one return per shard, then nullopt (or a throw).
      size_t got = 0;
      while (client.next_sum()) ++got;
      client.end_step();
      if (got != L.shards.size())
        throw std::runtime_error("step " + std::to_string(step) + ": " + std::to_string(got) + " sums for " +
                                 std::to_string(L.shards.size()) + " shards");
      if (step == 0 && sum_bytes != nullptr) {
        sum_bytes->clear();
        for (const auto& s : sums) sum_bytes->push_back(s.size());
      }
      board.finished(replica, step + 1);
    }
  } catch (const std::exception& e) {
    board.failed(replica, e.what());
  }
}

void run_async_replica(int replica, comm::WorkerClient& client, const LoadModel& model, int64_t steps,
                       StepBoard& board) {
  const comm::Layout& L = model.layout;
  std::vector<std::vector<float>> values(L.variables.size());
  std::vector<std::span<float>> value_views;
  for (size_t v = 0; v < L.variables.size(); ++v) {
    values[v].resize(L.variables[v].size);
    value_views.emplace_back(values[v]);
  }
  std::vector<std::span<const uint8_t>> payloads(model.payloads[replica].begin(), model.payloads[replica].end());
  try {
    for (int64_t step = 0; step < steps; ++step) {
      const int64_t at = client.pull_values(value_views);
      client.push(at, 1.0f, payloads);
      board.finished(replica, step + 1);
    }
  } catch (const std::exception& e) {
    board.failed(replica, e.what());
  }
}

}  // namespace terngrad::bench
