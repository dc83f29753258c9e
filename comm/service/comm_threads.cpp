#include "terngrad/comm/comm_threads.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <mutex>

namespace terngrad::comm {

namespace {

struct Request {
  std::function<void()> fn;
  std::promise<std::thread> started;
};

// Never destroyed: the spawning thread waits on it until the process exits.
struct Spawner {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Request*> requests;
  bool running = false;

  void loop() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return !requests.empty(); });
      Request* r = requests.front();
      requests.pop_front();
      lk.unlock();
      try {
        r->started.set_value(std::thread(std::move(r->fn)));
      } catch (...) {
        r->started.set_exception(std::current_exception());
      }
      lk.lock();
    }
  }
};

Spawner& spawner() {
  static Spawner* s = new Spawner;
  return *s;
}

}  // namespace

void start_comm_thread_spawner() {
  Spawner& s = spawner();
  std::lock_guard<std::mutex> lk(s.mu);
  if (s.running) return;
  std::thread([&s] { s.loop(); }).detach();
  s.running = true;
}

std::thread comm_thread(std::function<void()> fn) {
  start_comm_thread_spawner();
  Spawner& s = spawner();
  Request r{std::move(fn), {}};
  std::future<std::thread> started = r.started.get_future();
  {
    std::lock_guard<std::mutex> lk(s.mu);
    s.requests.push_back(&r);
  }
  s.cv.notify_one();
  return started.get();
}

std::string lower_this_thread_priority(int nice) {
  if (nice < 0 || nice > 19) return "a nice step of " + std::to_string(nice) + " is outside 0..19";
  if (nice == 0) return "";
  const pid_t tid = gettid();
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, static_cast<id_t>(tid));
  if (now == -1 && errno != 0) return std::string("getpriority: ") + std::strerror(errno);
  const int wanted = now + nice > 19 ? 19 : now + nice;
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), wanted) != 0)
    return std::string("setpriority(") + std::to_string(wanted) + "): " + std::strerror(errno);
  return "";
}

}  // namespace terngrad::comm
