// The overlapped sync step of a cluster replica (overlapped_step.h).
#include "overlapped_step.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "terngrad/base/timeline.h"

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
                               const comm::Layout& layout, Wire& wire, bool wants_scales, int replicas)
    : s_(s),
      replica_(replica),
      client_(client),
      layout_(layout),
      wire_(wire),
      wants_scales_(wants_scales),
      replicas_(replicas),
      next_shard_(s.num_variables()),
      applied_elements_(s.num_variables()),
      shard_applied_(layout.shards.size()),
      queued_(layout.shards.size()) {}

void OverlappedStep::flush(float loss) {
  if (!bucket_.empty()) {
    timeline::instant("bucket queued", static_cast<int64_t>(bucket_.front()));
    client_.push_bucket(loss, bucket_, bucket_views_);
  }
  bucket_.clear();
  bucket_views_.clear();
  bucket_bytes_ = 0;
}

void OverlappedStep::queue_shard(float loss, size_t sh) {
  bucket_.push_back(sh);
  bucket_views_.push_back(wire_.views[sh]);
  bucket_bytes_ += wire_.views[sh].size();
  if (bucket_bytes_ >= bucket_limit_) flush(loss);
}

void OverlappedStep::encode_slices_done(int64_t step, float loss, size_t v, int64_t elements,
                                        const std::vector<float>& no_scales) {
  replica_.encode_slices_within(step, v, elements, no_scales, wire_, queued_,
                                [&](size_t sh) { queue_shard(loss, sh); });
}

bool OverlappedStep::take_next_sum(StepClock& clock) {
  const auto t = Clock::now();
  std::optional<size_t> sh;
  {
    const timeline::Span span("wait for a sum");
    sh = client_.next_sum();
  }
  blocked_.emplace_back(t, Clock::now());
  if (!sh) return false;
  const timeline::Span span("decode and apply a sum", static_cast<int64_t>(*sh));
  const auto td = Clock::now();
  const comm::ShardSpec& shard = layout_.shards[*sh];
  replica_.decode_sum(pending_step_, shard, wire_.sums[*sh]);
  clock.s[StepClock::kDecode] += since(td);
  const size_t v = shard.variable;
  if (replicas_ > 0) {  // the shard's elements are final: apply them now
    const auto ta = Clock::now();
    replica_.apply_range(pending_step_, v, static_cast<int64_t>(shard.begin), static_cast<int64_t>(shard.count),
                         replicas_);
    shard_applied_[*sh] = true;
    const std::vector<size_t>& in_order = layout_.shards_of[v];
    for (size_t& k = next_shard_[v]; k < in_order.size() && shard_applied_[in_order[k]]; ++k)
      applied_elements_[v] = static_cast<int64_t>(layout_.shards[in_order[k]].begin + layout_.shards[in_order[k]].count);
    clock.s[StepClock::kApply] += since(ta);
  }
  return true;
}

void OverlappedStep::take_sums_until(size_t v, int64_t elements, StepClock& clock) {
  while (applied_elements_[v] < elements)
    if (!take_next_sum(clock))
      throw std::logic_error("step " + std::to_string(pending_step_) + ": every sum arrived, variable " +
                             std::to_string(v) + " is applied up to element " + std::to_string(applied_elements_[v]) +
                             " of " + std::to_string(elements));
}

OverlappedStep::Finished OverlappedStep::finish(StepClock& clock) {
  if (!pending_) throw std::logic_error("OverlappedStep::finish with no step pending");
  while (take_next_sum(clock)) {
  }
  comm::WorkerClient::StepTimes times;
  const auto t = Clock::now();
  Finished done{pending_step_, client_.end_step(&times)};
  blocked_.emplace_back(t, Clock::now());
  pending_ = false;
  // Blocked intervals against the step's own push and first-sum times (both since begin_step).
  for (const auto& [a, b] : blocked_)
    clock.blocked(std::chrono::duration<double>(a - began_).count(), std::chrono::duration<double>(b - began_).count(),
                  times.pushed_s, times.first_sum_s);
  blocked_.clear();
  const auto ta = Clock::now();
  if (replicas_ == 0) {
    replica_.apply(done.step, static_cast<int>(done.sums.contributions));
  } else {
    if (done.sums.contributions != static_cast<uint32_t>(replicas_))
      throw std::runtime_error("step " + std::to_string(done.step) + ": the ps summed " +
                               std::to_string(done.sums.contributions) + " payloads, the update was averaged over " +
                               std::to_string(replicas_));
    replica_.finish_apply();
  }
  clock.s[StepClock::kApply] += since(ta);
  return done;
}

std::optional<OverlappedStep::Finished> OverlappedStep::run(int64_t step, StepClock& clock) {
  const auto t_step = Clock::now();
  std::optional<Finished> before;
  // Time of this call spent on other things than the gradient: the pending
  // step's sums (in the forward pass) and this step's encoding.
  double aside_s = 0;
  auto begin = [&] {
    if (pending_) {
      const auto t = Clock::now();
      before = finish(clock);
      aside_s += since(t);
    }
    if (const double rate = client_.push_rate(); rate > 0)
      bucket_limit_ = std::clamp(static_cast<size_t>(rate * kBucketSeconds), kMinBucketBytes, kMaxBucketBytes);
    client_.begin_step(step, wire_.sums);
    began_ = Clock::now();
    pending_ = true;
    pending_step_ = step;
    for (size_t v = 0; v < s_.num_variables(); ++v) {
      next_shard_[v] = 0;
      applied_elements_[v] = 0;
    }
    std::fill(shard_applied_.begin(), shard_applied_.end(), false);
  };
  bool begun = false;
  const std::vector<float> no_scales(s_.num_variables(), 0.0f);
  std::fill(queued_.begin(), queued_.end(), false);
  auto encode = [&](float loss, size_t v, const std::vector<float>& shared) {
    replica_.encode_into(step, v, shared, wire_);
    for (size_t sh : layout_.shards_of[v]) queue_shard(loss, sh);
  };
  std::optional<ScaleSharingEncoder> sharing;
  if (wants_scales_) sharing.emplace(client_, s_, replica_, step, encode);
  double encode_s = 0;  // on this thread
  auto diverged = [&](float loss) {
    return std::runtime_error("training diverged at step " + std::to_string(step) + " (loss " + std::to_string(loss) +
                              ")");
  };
  auto first_gradient = [&](float loss) {
    if (!std::isfinite(loss)) throw diverged(loss);  // before any of this gradient leaves
    if (!begun) {  // the forward pass read every variable: the pending step is all in
      begin();
      begun = true;
    }
  };
  // Slices that encode separately (fp32) leave as the backward pass
  // finishes them, a row block of a fully connected layer at a time.
  auto streams = [&](size_t v) { return !sharing && s_.codec(0, v).encodes_slices_separately(); };
  auto part_ready = [&](float loss, size_t v, int64_t elements) {
    if (!streams(v)) return;
    first_gradient(loss);
    const auto t = Clock::now();
    encode_slices_done(step, loss, v, elements, no_scales);
    encode_s += since(t);
  };
  auto ready = [&](float loss, size_t v) {
    first_gradient(loss);
    if (sharing) return sharing->ready(loss, v);
    const auto t = Clock::now();
    if (streams(v))
      encode_slices_done(step, loss, v, std::numeric_limits<int64_t>::max(), no_scales);
    else
      encode(loss, v, no_scales);
    encode_s += since(t);
  };
  auto needed = [&](size_t v, int64_t elements) {
    if (!pending_ || begun) return;
    const auto t = Clock::now();
    if (replicas_ > 0)
      take_sums_until(v, elements, clock);
    else
      before = finish(clock);  // nothing is applied before the last sum
    aside_s += since(t);
  };
  const float loss = replica_.compute_gradient(step, ready, needed, part_ready);
  if (!std::isfinite(loss)) throw diverged(loss);
  if (!begun) begin();  // a model without variables
  clock.s[StepClock::kCompute] += since(t_step) - encode_s - aside_s;
  if (sharing) {
    const auto a = Clock::now();
    encode_s += sharing->finish();  // beside the backward pass: may add up past the step
    blocked_.emplace_back(a, Clock::now());
  }
  flush(loss);
  clock.s[StepClock::kEncode] += encode_s;
  return before;
}

}  // namespace terngrad::train::detail
