// A fixed team of host threads that run one job per member, call after call:
// the GPU step's per-worker launches (virtual_workers.h) are issued from one
// host thread per worker, so that one worker's ~100 kernel launches and
// cuDNN calls do not wait behind another's. Plain C++ (no CUDA): the team
// knows nothing of devices; each job sets its own.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace terngrad::train::cuda {

class ThreadTeam {
 public:
  // size >= 1 members: size - 1 threads are started here and wait for work;
  // the caller of run() is member 0. Throws std::invalid_argument for size < 1.
  explicit ThreadTeam(int size);
  // Stops and joins the threads (after the run in progress, if any).
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return size_; }

  // Runs job(m) for every member m in [0, size()) at once, member 0 on the
  // calling thread, and returns when every member has returned. If jobs
  // throw, every member still finishes; then the exception of the lowest
  // member that threw is rethrown (the others are dropped). One run at a
  // time: run() is not reentrant and not to be called from two threads.
  void run(const std::function<void(int)>& job);

 private:
  void serve(int member);

  const int size_;
  std::mutex mu_;
  std::condition_variable work_cv_;  // a new run, or stop
  std::condition_variable done_cv_;  // the last helper finished
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;  // runs started; a helper runs each generation once
  int unfinished_ = 0;       // helpers still in the current run
  bool stop_ = false;
  std::vector<std::exception_ptr> errors_;  // per member, of the current run
  std::vector<std::thread> helpers_;        // last: started once the rest exists
};

}  // namespace terngrad::train::cuda
