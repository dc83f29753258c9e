// Communication threads keep the process's priority when the thread that
// starts them has lowered its own (--compute_nice); a plain std::thread from
// that thread takes the lowered one, which is why comm_thread exists.
#include "terngrad/comm/comm_threads.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace {

int my_nice() { return getpriority(PRIO_PROCESS, static_cast<id_t>(gettid())); }

TEST(CommThreads, KeepTheSpawnersPriorityWhenTheCallersIsLowered) {
  terngrad::comm::start_comm_thread_spawner();
  terngrad::comm::start_comm_thread_spawner();  // idempotent
  const int base = my_nice();
  if (base > 14) GTEST_SKIP() << "this process already runs at nice " << base;
  int lowered = -100, plain = -100, comm = -100;
  std::thread compute([&] {  // stands for a replica's compute thread
    ASSERT_EQ(terngrad::comm::lower_this_thread_priority(5), "");
    lowered = my_nice();
    std::thread p([&] { plain = my_nice(); });
    p.join();
    std::thread c = terngrad::comm::comm_thread([&] { comm = my_nice(); });
    c.join();
  });
  compute.join();
  EXPECT_EQ(lowered, base + 5);
  EXPECT_EQ(plain, base + 5);  // inherited from its creator
  EXPECT_EQ(comm, base);       // started by the spawner
  EXPECT_EQ(my_nice(), base);  // per thread: this one is untouched
}

TEST(CommThreads, RunManyAndRefuseBadNiceSteps) {
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i) threads.push_back(terngrad::comm::comm_thread([&] { ++ran; }));
  for (auto& t : threads) t.join();
  EXPECT_EQ(ran.load(), 32);
  const int base = my_nice();
  EXPECT_NE(terngrad::comm::lower_this_thread_priority(20).find("outside 0..19"), std::string::npos);
  EXPECT_NE(terngrad::comm::lower_this_thread_priority(-1).find("outside 0..19"), std::string::npos);
  EXPECT_EQ(terngrad::comm::lower_this_thread_priority(0), "");
  EXPECT_EQ(my_nice(), base);
}

}  // namespace
