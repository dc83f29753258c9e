// The ps's request handling under scripts of requests (tests/support/
// ps_request_script.h), as the fuzz target fuzz_ps_requests runs them but
// with a fixed set of mutations, so every build checks it: the seed scripts
// run a whole step with nothing refused but what must be, and mutated
// scripts never crash, hang or leave the ps unable to answer.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "ps_request_script.h"

namespace tt = terngrad::testing;

TEST(PsRequests, TheSeedScriptsRunAWholeStep) {
  for (bool secret : {true, false}) {
    // Sync seeds also rewind the run with a new plan (InitHeader.new_plan).
    const tt::ScriptOutcome sync = tt::run_ps_request_script(tt::make_seed_script(secret, false));
    EXPECT_EQ(sync.calls, 16u);
    EXPECT_EQ(sync.refused, 1u) << "only the Checkpoint of a sync ps (it holds no values) is refused";
    EXPECT_TRUE(sync.ps_alive) << sync.detail;
    const tt::ScriptOutcome async = tt::run_ps_request_script(tt::make_seed_script(secret, true));
    EXPECT_EQ(async.calls, 13u);
    EXPECT_EQ(async.refused, 0u);
    EXPECT_TRUE(async.ps_alive) << async.detail;
    // server_ef(): the Init's server state is taken and the Checkpoint of
    // step 0 returns the states after its sum, so nothing is refused.
    const tt::ScriptOutcome ef = tt::run_ps_request_script(tt::make_seed_script(secret, false, true));
    EXPECT_EQ(ef.calls, 16u);
    EXPECT_EQ(ef.refused, 0u);
    EXPECT_TRUE(ef.ps_alive) << ef.detail;
  }
}

TEST(PsRequests, MutatedScriptsNeverCrashHangOrSilenceThePs) {
  std::mt19937 gen(20261124);
  const std::vector<std::vector<uint8_t>> seeds = {tt::make_seed_script(true, false), tt::make_seed_script(true, true),
                                                   tt::make_seed_script(false, false), tt::make_seed_script(false, true),
                                                   tt::make_seed_script(true, false, true)};
  size_t calls = 0, refused = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 400; ++i) {
    std::vector<uint8_t> s = seeds[i % seeds.size()];
    const int edits = 1 + static_cast<int>(gen() % 8);
    for (int e = 0; e < edits && !s.empty(); ++e) {
      const size_t at = gen() % s.size();
      switch (gen() % 4) {
        case 0: s[at] ^= static_cast<uint8_t>(1u << (gen() % 8)); break;
        case 1: s[at] = static_cast<uint8_t>(gen()); break;
        case 2: s.insert(s.begin() + static_cast<long>(at), static_cast<uint8_t>(gen())); break;
        default: s.erase(s.begin() + static_cast<long>(at), s.begin() + static_cast<long>(std::min(s.size(), at + 1 + gen() % 16)));
      }
    }
    const tt::ScriptOutcome o = tt::run_ps_request_script(s);
    ASSERT_TRUE(o.ps_alive) << "script " << i << ": " << o.detail;
    calls += o.calls;
    refused += o.refused;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("400 mutated scripts: %zu calls, %zu refused, %.1f s\n", calls, refused, secs);
  EXPECT_GT(refused, 0u);
  EXPECT_GT(calls, refused);  // the mutations still reach the handlers' inner paths
}
