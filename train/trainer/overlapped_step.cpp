// The overlapped sync step of a cluster replica (overlapped_step.h).
#include "overlapped_step.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

namespace terngrad::train::detail {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Variables whose codecs share scales, encoded on a second thread: it takes
// whatever the backward pass has finished (a layer, usually), exchanges
// those variables' scales with the other replicas (one long poll that ends
// when every replica has finished them too), encodes them with the shared
// scales and hands them to `queue`. The backward pass goes on meanwhile.
class ScaleSharingEncoder {
 public:
  template <class Encode>
  ScaleSharingEncoder(comm::WorkerClient& client, TrainingSession& s, const ReplicaStep& replica, int64_t step,
                      Encode encode)
      : client_(client),
        s_(s),
        replica_(replica),
        step_(step),
        encode_(std::move(encode)),
        thread_([this] { loop(); }) {}
  ~ScaleSharingEncoder() {
    finish_no_throw();
  }

  // The backward pass finished variable v (called on the compute thread).
  void ready(float loss, size_t v) {
    std::lock_guard<std::mutex> lk(mu_);
    loss_ = loss;
    queue_.push_back(v);
    cv_.notify_all();
  }
  // Every variable has been handed over: waits until all are encoded and
  // queued; rethrows what the exchange or the encoding met. Returns the
  // seconds spent encoding.
  double finish() {
    finish_no_throw();
    if (error_) std::rethrow_exception(error_);
    return encode_s_;
  }

 private:
  void finish_no_throw() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      done_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

  void loop() {
    try {
      for (;;) {
        std::vector<size_t> vars;
        float loss = 0;
        {
          std::unique_lock<std::mutex> lk(mu_);
          cv_.wait(lk, [&] { return done_ || !queue_.empty(); });
          if (queue_.empty()) return;
          vars.assign(queue_.begin(), queue_.end());
          queue_.clear();
          loss = loss_;
        }
        std::vector<uint32_t> shared_vars;
        std::vector<float> local;
        for (size_t v : vars)
          if (s_.codec(0, v).wants_shared_scale()) {
            shared_vars.push_back(static_cast<uint32_t>(v));
            local.push_back(replica_.local_scales()[v]);
          }
        std::vector<float> shared(s_.num_variables(), 0.0f);
        if (!shared_vars.empty()) {
          const std::vector<float> got = client_.exchange_scales(step_, local, shared_vars);
          for (size_t i = 0; i < shared_vars.size(); ++i) shared[shared_vars[i]] = got.at(i);
        }
        const auto t = Clock::now();
        for (size_t v : vars) encode_(loss, v, shared);
        encode_s_ += since(t);
      }
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  comm::WorkerClient& client_;
  TrainingSession& s_;
  const ReplicaStep& replica_;
  const int64_t step_;
  std::function<void(float, size_t, const std::vector<float>&)> encode_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  float loss_ = 0;
  bool done_ = false;
  double encode_s_ = 0;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest exists
};

}  // namespace

OverlappedStep::OverlappedStep(TrainingSession& s, ReplicaStep& replica, comm::WorkerClient& client,
                               const comm::Layout& layout, Wire& wire, bool wants_scales)
    : s_(s), replica_(replica), client_(client), layout_(layout), wire_(wire), wants_scales_(wants_scales) {}

void OverlappedStep::flush(float loss) {
  if (!bucket_.empty()) client_.push_bucket(loss, bucket_, bucket_views_);
  bucket_.clear();
  bucket_views_.clear();
  bucket_bytes_ = 0;
}

void OverlappedStep::queue_variable(float loss, size_t v) {
  for (size_t sh : layout_.shards_of[v]) {
    bucket_.push_back(sh);
    bucket_views_.push_back(wire_.views[sh]);
    bucket_bytes_ += wire_.views[sh].size();
    if (bucket_bytes_ >= kBucketBytes) flush(loss);
  }
}

comm::WorkerClient::Sums OverlappedStep::run(int64_t step, StepClock& clock) {
  const auto t_step = Clock::now();
  client_.begin_step(step, wire_.sums);
  const std::vector<float> no_scales(s_.num_variables(), 0.0f);
  auto encode = [&](float loss, size_t v, const std::vector<float>& shared) {
    replica_.encode_into(step, v, shared, wire_);
    queue_variable(loss, v);
  };
  std::optional<ScaleSharingEncoder> sharing;
  if (wants_scales_) sharing.emplace(client_, s_, replica_, step, encode);
  double encode_s = 0;  // on this thread
  auto ready = [&](float loss, size_t v) {
    if (sharing) return sharing->ready(loss, v);
    const auto t = Clock::now();
    encode(loss, v, no_scales);
    encode_s += since(t);
  };
  const float loss = replica_.compute_gradient(step, ready);
  if (!std::isfinite(loss))
    throw std::runtime_error("training diverged at step " + std::to_string(step) + " (loss " + std::to_string(loss) + ")");
  clock.s[StepClock::kCompute] += since(t_step) - encode_s;
  // Blocked intervals (seconds since t_step): split into push / wait / pull below.
  std::vector<std::pair<double, double>> blocked;
  if (sharing) {
    const double a = since(t_step);
    encode_s += sharing->finish();  // beside the backward pass: may add up past the step
    blocked.emplace_back(a, since(t_step));
  }
  flush(loss);
  clock.s[StepClock::kEncode] += encode_s;
  // Decode each shard's sum as it arrives.
  for (;;) {
    const double a = since(t_step);
    const std::optional<size_t> sh = client_.next_sum();
    blocked.emplace_back(a, since(t_step));
    if (!sh) break;
    const auto td = Clock::now();
    replica_.decode_sum(layout_.shards[*sh], wire_.sums[*sh]);
    clock.s[StepClock::kDecode] += since(td);
  }
  comm::WorkerClient::StepTimes times;
  const double a = since(t_step);
  const comm::WorkerClient::Sums sums = client_.end_step(&times);
  blocked.emplace_back(a, since(t_step));
  // times are since begin_step, which began with t_step.
  for (const auto& [x, y] : blocked) clock.blocked(x, y, times.pushed_s, times.first_sum_s);
  return sums;
}

}  // namespace terngrad::train::detail
