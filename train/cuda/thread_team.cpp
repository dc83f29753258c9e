#include "terngrad/train/cuda/thread_team.h"

#include <stdexcept>
#include <string>

namespace terngrad::train::cuda {

ThreadTeam::ThreadTeam(int size) : size_(size) {
  if (size < 1) throw std::invalid_argument("ThreadTeam: size must be >= 1, got " + std::to_string(size));
  errors_.resize(static_cast<size_t>(size));
  helpers_.reserve(static_cast<size_t>(size - 1));
  try {
    for (int m = 1; m < size; ++m) helpers_.emplace_back([this, m] { serve(m); });
  } catch (...) {  // a thread that cannot start: stop the ones that did
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : helpers_) t.join();
    throw;
  }
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : helpers_) t.join();
}

void ThreadTeam::run(const std::function<void(int)>& job) {
  for (auto& e : errors_) e = nullptr;
  if (size_ > 1) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      unfinished_ = size_ - 1;
      ++generation_;
    }
    work_cv_.notify_all();
  }
  try {
    job(0);
  } catch (...) {
    errors_[0] = std::current_exception();
  }
  if (size_ > 1) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [this] { return unfinished_ == 0; });
    job_ = nullptr;
  }
  for (auto& e : errors_)
    if (e) std::rethrow_exception(e);
}

void ThreadTeam::serve(int member) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
    }
    try {
      (*job)(member);
    } catch (...) {
      errors_[static_cast<size_t>(member)] = std::current_exception();  // this member's slot alone
    }
    bool last = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --unfinished_ == 0;
    }
    if (last) done_cv_.notify_one();
  }
}

}  // namespace terngrad::train::cuda
