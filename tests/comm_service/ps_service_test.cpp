// The parameter-server service on loopback, replicas as threads: sync sums
// equal the codec's own aggregate in replica order, sharding over two ps
// gives the same sums, backup workers, duplicates, payloads over gRPC's 4 MB
// default, async updates, and every failure reported by name instead of
// hanging (dead replica, never joined, other layout, malformed payload,
// unreachable ps).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <random>
#include <latch>
#include <thread>

#include "terngrad/comm/errors.h"
#include "terngrad/comm/gradient_codec.h"
#include "terngrad/comm/placement.h"
#include "terngrad/comm/ps_server.h"
#include "terngrad/comm/ps_status.h"
#include "terngrad/comm/worker_client.h"

#include "serving_ps.h"

namespace tc = terngrad::comm;

namespace {

std::vector<float> gradient(uint64_t n, int replica, int64_t step) {
  std::mt19937 gen(static_cast<uint32_t>(1000 * replica + step + 7));
  std::normal_distribution<float> d(0.0f, 1e-3f);
  std::vector<float> g(n);
  for (float& x : g) x = d(gen);
  return g;
}

// One ps task serving in a thread.
struct PsTask : terngrad::testing::ServingPs {
  PsTask(int index, int replicas, tc::UpdateHandler* handler = nullptr, double peer_timeout = 20,
         double startup_timeout = 20, double poll = 0.5)
      : ServingPs(options(index, replicas, peer_timeout, startup_timeout, poll), handler) {}
  static tc::ServerOptions options(int index, int replicas, double peer_timeout, double startup_timeout, double poll) {
    tc::ServerOptions o = terngrad::testing::test_server_options(replicas);
    o.task_index = index;
    o.peer_timeout_s = peer_timeout;
    o.startup_timeout_s = startup_timeout;
    o.poll_s = poll;
    return o;
  }
};

tc::ClientOptions fast_client(double peer_timeout = 20) {
  tc::ClientOptions o;
  o.rpc_timeout_s = 5;
  o.peer_timeout_s = peer_timeout;
  o.heartbeat_s = 0.2;
  return o;
}

// A client of a sync run that rejoins rewinds (ps_rejoin_window_s).
tc::ClientOptions rejoining_client() {
  tc::ClientOptions o = fast_client();
  o.ps_rejoin_window_s = 20;
  return o;
}

std::vector<std::string> addresses(const std::vector<std::unique_ptr<PsTask>>& ps) {
  std::vector<std::string> a;
  for (const auto& p : ps) a.push_back(p->address());
  return a;
}

// A replica's gradients for a step and the shared scales the ps hands out for them.
std::vector<float> local_gradients(tc::WorkerClient& c, int replica, int64_t step,
                                   std::vector<std::unique_ptr<tc::GradientCodec>>& codecs,
                                   std::vector<std::vector<float>>& grads) {
  const tc::Layout& l = c.layout();
  std::vector<float> scales;
  for (size_t v = 0; v < l.variables.size(); ++v) {
    grads.push_back(gradient(l.variables[v].size, replica, step));
    scales.push_back(codecs[v]->wants_shared_scale() ? codecs[v]->local_scale(grads[v]) : 0.0f);
  }
  return c.exchange_scales(step, scales);
}

// Encodes variable v's shards into payloads[shard] (sized here).
void encode_shards(const tc::Layout& l, size_t v, int replica, int64_t step, const std::vector<float>& grad,
                   float shared_scale, tc::GradientCodec& codec, std::vector<std::vector<uint8_t>>& payloads) {
  std::vector<tc::ElementRange> slices;
  std::vector<std::span<uint8_t>> outs;
  for (size_t s : l.shards_of[v]) {
    slices.push_back({l.shards[s].begin, l.shards[s].count});
    payloads[s].resize(codec.payload_bytes(l.shards[s].count));
  }
  for (size_t s : l.shards_of[v]) outs.emplace_back(payloads[s]);
  tc::EncodeContext ctx;
  ctx.tensor_id = static_cast<uint32_t>(v);
  ctx.step = static_cast<uint32_t>(step);
  ctx.seed = 100 + replica;
  if (codec.wants_shared_scale()) ctx.shared_scale = shared_scale;
  codec.encode_slices(grad, ctx, slices, outs);
}

// The first half of a replica's sync step against a layout: scales, slices, push.
void push_step(tc::WorkerClient& c, int replica, int64_t step, std::vector<std::unique_ptr<tc::GradientCodec>>& codecs) {
  const tc::Layout& l = c.layout();
  std::vector<std::vector<float>> grads;
  const std::vector<float> shared = local_gradients(c, replica, step, codecs, grads);
  std::vector<std::vector<uint8_t>> payloads(l.shards.size());
  for (size_t v = 0; v < l.variables.size(); ++v) encode_shards(l, v, replica, step, grads[v], shared[v], *codecs[v], payloads);
  std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
  c.push(step, 0.5f * replica, views);
}

// The second half: pull the step's sums; returns the decoded sum per variable.
std::vector<std::vector<float>> pull_step(tc::WorkerClient& c, int64_t step,
                                          std::vector<std::unique_ptr<tc::GradientCodec>>& codecs,
                                          uint32_t* contributions = nullptr) {
  const tc::Layout& l = c.layout();
  std::vector<std::vector<uint8_t>> sums;
  const auto got = c.pull_sums(step, sums);
  if (contributions) *contributions = got.contributions;
  std::vector<std::vector<float>> out;
  for (size_t v = 0; v < l.variables.size(); ++v) {
    out.emplace_back(l.variables[v].size);
    for (size_t s : l.shards_of[v])
      codecs[v]->decode_aggregate(sums[s], std::span<float>(out[v]).subspan(l.shards[s].begin, l.shards[s].count));
  }
  return out;
}

// A replica's whole sync step.
std::vector<std::vector<float>> sync_step(tc::WorkerClient& c, int replica, int64_t step,
                                          std::vector<std::unique_ptr<tc::GradientCodec>>& codecs,
                                          uint32_t* contributions = nullptr) {
  push_step(c, replica, step, codecs);
  return pull_step(c, step, codecs, contributions);
}

// A replica's pipelined sync step (begin_step .. end_step): the payloads of
// each variable pushed as one bucket, last variable first (as a backward
// pass finishes them), the sums decoded as they arrive.
std::vector<std::vector<float>> pipelined_step(tc::WorkerClient& c, int replica, int64_t step,
                                               std::vector<std::unique_ptr<tc::GradientCodec>>& codecs,
                                               std::vector<std::vector<uint8_t>>& payloads, uint32_t replicas) {
  const tc::Layout& l = c.layout();
  std::vector<std::vector<uint8_t>> sums;
  c.begin_step(step, sums);
  std::vector<std::vector<float>> grads;
  const std::vector<float> shared = local_gradients(c, replica, step, codecs, grads);
  payloads.resize(l.shards.size());
  for (size_t v = l.variables.size(); v-- > 0;) {
    encode_shards(l, v, replica, step, grads[v], shared[v], *codecs[v], payloads);
    std::vector<std::span<const uint8_t>> views;
    for (size_t s : l.shards_of[v]) views.emplace_back(payloads[s]);
    c.push_bucket(0.5f * replica, l.shards_of[v], views);
  }
  std::vector<std::vector<float>> out;
  for (size_t v = 0; v < l.variables.size(); ++v) out.emplace_back(l.variables[v].size);
  size_t arrived = 0;
  while (const auto s = c.next_sum()) {
    const tc::ShardSpec& sh = l.shards[*s];
    codecs[sh.variable]->decode_aggregate(sums[*s], std::span<float>(out[sh.variable]).subspan(sh.begin, sh.count));
    ++arrived;
  }
  EXPECT_EQ(arrived, l.shards.size());
  const auto got = c.end_step();
  EXPECT_EQ(got.contributions, replicas);
  return out;
}

std::vector<tc::VariableSpec> variables() {
  return {{"small", 1000, "fp32"}, {"large", 300000, "terngrad:clip=2.5,share_scale=1"}, {"half", 70000, "fp16"}};
}

// One codec per variable of the layout, as a replica makes them.
std::vector<std::unique_ptr<tc::GradientCodec>> codecs_of(const tc::Layout& l) {
  std::vector<std::unique_ptr<tc::GradientCodec>> codecs;
  for (const auto& v : l.variables) codecs.push_back(tc::make_codec(v.codec));
  return codecs;
}

// Runs `replicas` threads for `steps` sync steps; returns replica 0's sums.
// pipelined: begin_step .. end_step with buckets instead of push + pull_sums.
std::vector<std::vector<std::vector<float>>> run_sync(int num_ps, int replicas, int steps, bool pipelined = false,
                                                      uint64_t max_shard_bytes = 0) {
  std::vector<std::unique_ptr<PsTask>> ps;
  for (int p = 0; p < num_ps; ++p) ps.push_back(std::make_unique<PsTask>(p, replicas));
  tc::PlacementOptions po;
  po.min_shard_bytes = 64 * 1024;
  po.max_shard_bytes = max_shard_bytes;
  const tc::Layout layout = tc::place_variables(variables(), num_ps, po);
  std::vector<std::vector<std::vector<std::vector<float>>>> results(replicas);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(replicas);
  for (int r = 0; r < replicas; ++r) {
    threads.emplace_back([&, r] {
      try {
        tc::WorkerClient c(addresses(ps), layout, r, true, replicas, replicas, fast_client());
        auto codecs = codecs_of(layout);
        EXPECT_EQ(c.join(0), 0);
        std::vector<std::vector<uint8_t>> payloads;
        for (int s = 0; s < steps; ++s)
          results[r].push_back(pipelined ? pipelined_step(c, r, s, codecs, payloads, replicas) : sync_step(c, r, s, codecs));
        c.finish(true);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < replicas; ++r) EXPECT_EQ(errors[r], "") << "replica " << r;
  for (int r = 1; r < replicas; ++r) EXPECT_EQ(results[r], results[0]) << "replicas pulled different sums";
  for (auto& p : ps) {
    p->thread.join();  // the chief's finish ends run() normally
    EXPECT_EQ(p->error, "");
    p->thread = std::thread([] {});
  }
  return results[0];
}

// The chief may finish the run while another replica has pushed its last
// step but not yet pulled the sums: that pull is still answered (it used to
// fail with "training finished" when the chief got there first).
TEST(PsService, ALastPullAfterTheChiefFinishedIsServed) {
  std::vector<std::unique_ptr<PsTask>> ps;
  ps.push_back(std::make_unique<PsTask>(0, 2));
  const tc::Layout layout = tc::place_variables(variables(), 1, tc::PlacementOptions{});
  std::promise<void> chief_done;
  std::vector<std::vector<std::vector<float>>> sums(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        tc::WorkerClient c(addresses(ps), layout, r, true, 2, 2, fast_client());
        auto codecs = codecs_of(layout);
        c.join(0);
        push_step(c, r, 0, codecs);
        if (r == 1) chief_done.get_future().wait();  // the chief pulls and finishes first
        sums[r] = pull_step(c, 0, codecs);
        c.finish(true);
        if (r == 0) chief_done.set_value();
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (r == 0) chief_done.set_value();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(sums[1], sums[0]);
  ps[0]->thread.join();
  EXPECT_EQ(ps[0]->error, "");
  ps[0]->thread = std::thread([] {});
}

// A sync run's rewind (a ps restarted: WorkerClient::rewind_run): the chief
// takes both ps back to step 1 while replica 1 waits in step 3's scale
// exchange; that call is answered as a rewound one (PsRestarted), the
// replica rejoins at step 1, and steps 1 and 2 run again with the sums they
// had the first time. The rewind comes after the ps's startup timeout: the
// replicas' registrations are counted from the rewind, not the ps's start.
TEST(PsService, ARewindTakesEveryPsBackAndEveryReplicaRegistersAgain) {
  std::vector<std::unique_ptr<PsTask>> ps;
  for (int p = 0; p < 2; ++p) ps.push_back(std::make_unique<PsTask>(p, 2, nullptr, 20, /*startup_timeout=*/1.5));
  tc::PlacementOptions po;
  po.min_shard_bytes = 64 * 1024;
  const tc::Layout layout = tc::place_variables(variables(), 2, po);
  std::promise<void> started_step_3;
  std::vector<std::vector<std::vector<std::vector<float>>>> first(2), again(2);
  std::vector<std::string> errors(2);
  std::vector<int64_t> rejoined_at(2, -1);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        tc::ClientOptions o = rejoining_client();
        tc::WorkerClient c(addresses(ps), layout, r, true, 2, 2, o);
        auto codecs = codecs_of(layout);
        c.join(0);
        for (int s = 0; s < 3; ++s) first[r].push_back(sync_step(c, r, s, codecs));
        if (r == 1) {
          // Step 3 waits for the chief's scales, which never come.
          started_step_3.set_value();
          EXPECT_THROW(sync_step(c, r, 3, codecs), tc::PsRestarted);
          rejoined_at[r] = c.rejoin_rewound_run();
        } else {
          started_step_3.get_future().wait();
          std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // replica 1 waits on ps 0
          const tc::WorkerClient::InitTensors none;
          rejoined_at[r] = c.rewind_run(1, &none);
        }
        for (int s = 1; s < 3; ++s) again[r].push_back(sync_step(c, r, s, codecs));
        c.finish(true);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(errors[r], "") << "replica " << r;
    EXPECT_EQ(rejoined_at[r], 1) << "replica " << r;
    ASSERT_EQ(first[r].size(), 3u);
    ASSERT_EQ(again[r].size(), 2u);
    EXPECT_EQ(again[r][0], first[r][1]) << "replica " << r << ", step 1 again";
    EXPECT_EQ(again[r][1], first[r][2]) << "replica " << r << ", step 2 again";
  }
  for (auto& p : ps) {
    p->thread.join();
    EXPECT_EQ(p->error, "");
    p->thread = std::thread([] {});
  }
}

// --codec=auto chose again (plan_recheck.h): the chief's next client
// rewinds both ps to step 2 with another layout (InitHeader.new_plan: other
// codecs and shards, so another fingerprint). Replica 1's call of
// step 2 is answered rewound; it reads the new plan and run epoch from every
// ps's Status, builds its client with that layout and registers. Steps 2
// and 3 then sum what the new codecs sum (fp32: the exact sum), the same on
// both replicas.
TEST(PsService, ARewindWithANewPlanTakesTheNewLayoutOnEveryPs) {
  std::vector<std::unique_ptr<PsTask>> ps;
  for (int p = 0; p < 2; ++p) ps.push_back(std::make_unique<PsTask>(p, 2));
  tc::PlacementOptions po;
  po.min_shard_bytes = 64 * 1024;
  const tc::Layout before = tc::place_variables(variables(), 2, po);
  std::vector<tc::VariableSpec> changed = variables();
  changed[0].codec = "fp16";
  changed[1].codec = "fp32";
  tc::PlacementOptions bigger = po;
  bigger.min_shard_bytes = 1024 * 1024;  // fewer shards
  const tc::Layout after = tc::place_variables(changed, 2, bigger);
  ASSERT_NE(after.shards.size(), before.shards.size());
  std::promise<void> started_step_2;
  std::vector<std::vector<std::vector<std::vector<float>>>> sums(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        tc::ClientOptions o = rejoining_client();
        uint64_t epoch = 0;
        {
          tc::WorkerClient c(addresses(ps), before, r, true, 2, 2, o);
          auto codecs = codecs_of(before);
          c.join(0);
          for (int s = 0; s < 2; ++s) (void)sync_step(c, r, s, codecs);
          epoch = c.run_epoch();
          if (r == 1) {
            started_step_2.set_value();
            EXPECT_THROW(sync_step(c, r, 2, codecs), tc::PsRestarted);
          } else {
            started_step_2.get_future().wait();
            std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // replica 1 waits in step 2
          }
        }
        if (r == 1) {  // waits until both ps took the rewind, and checks the plan they name
          for (int tries = 0;; ++tries) {
            const auto a = tc::query_ps_status(ps[0]->address(), 2), b = tc::query_ps_status(ps[1]->address(), 2);
            if (a && b && a->run_epoch > epoch && b->run_epoch == a->run_epoch) {
              ASSERT_EQ(a->variables.size(), 3u);
              EXPECT_EQ(a->variables[0].second, "fp16");
              EXPECT_EQ(a->variables[1].second, "fp32");
              EXPECT_EQ(a->global_step, 2);
              break;
            }
            ASSERT_LT(tries, 200) << "the ps never took the chief's new plan";
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
          }
        } else {
          o.new_plan_rewind_id = epoch + 1;
        }
        tc::WorkerClient c(addresses(ps), after, r, true, 2, 2, o);
        auto codecs = codecs_of(after);
        EXPECT_EQ(c.join(2), 2);
        for (int s = 2; s < 4; ++s) sums[r].push_back(sync_step(c, r, s, codecs));
        c.finish(true);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "replica " << r;
  ASSERT_EQ(sums[0].size(), 2u);
  EXPECT_EQ(sums[0], sums[1]);
  // fp32 sums the two replicas' gradients exactly (in replica order).
  for (int s = 2; s < 4; ++s) {
    const std::vector<float> g0 = gradient(300000, 0, s), g1 = gradient(300000, 1, s);
    for (size_t i = 0; i < g0.size(); i += 997) ASSERT_EQ(sums[0][s - 2][1][i], g0[i] + g1[i]) << "step " << s << " " << i;
  }
  for (auto& p : ps) {
    p->thread.join();
    EXPECT_EQ(p->error, "");
    p->thread = std::thread([] {});
  }
}

TEST(PsService, SyncSumsEqualTheCodecAggregateInReplicaOrder) {
  const int replicas = 3, steps = 2;
  const auto sums = run_sync(1, replicas, steps);
  ASSERT_EQ(sums.size(), static_cast<size_t>(steps));
  // The same payloads summed locally by the codecs, in replica order.
  const auto vars = variables();
  for (int s = 0; s < steps; ++s) {
    for (size_t v = 0; v < vars.size(); ++v) {
      std::vector<std::unique_ptr<tc::GradientCodec>> codecs;
      std::vector<std::vector<float>> grads;
      float shared = 0;
      for (int r = 0; r < replicas; ++r) {
        codecs.push_back(tc::make_codec(vars[v].codec));
        grads.push_back(gradient(vars[v].size, r, s));
        if (codecs[r]->wants_shared_scale()) shared = std::max(shared, codecs[r]->local_scale(grads[r]));
      }
      std::vector<std::vector<uint8_t>> payloads;
      for (int r = 0; r < replicas; ++r) {
        tc::EncodeContext ctx;
        ctx.tensor_id = static_cast<uint32_t>(v);
        ctx.step = static_cast<uint32_t>(s);
        ctx.seed = 100 + r;
        if (codecs[r]->wants_shared_scale()) ctx.shared_scale = shared;
        payloads.emplace_back(codecs[r]->payload_bytes(vars[v].size));
        codecs[r]->encode(grads[r], ctx, payloads.back());
      }
      std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
      std::vector<uint8_t> agg;
      codecs[0]->aggregate(views, vars[v].size, agg);
      std::vector<float> want(vars[v].size);
      codecs[0]->decode_aggregate(agg, want);
      EXPECT_EQ(sums[s][v], want) << "step " << s << " variable " << vars[v].name;
    }
  }
}

TEST(PsService, TwoPsWithShardedVariablesGiveTheSameSumsAsOne) {
  const auto one = run_sync(1, 2, 2);
  const auto two = run_sync(2, 2, 2);
  EXPECT_EQ(one, two);
}

// Buckets pushed as variables finish and sums streamed shard by shard (each
// summed once every replica delivered it) give the sums of whole pushes,
// with small shards over one and two ps.
TEST(PsService, PipelinedStepsGiveTheSumsOfWholePushes) {
  const auto whole = run_sync(1, 3, 2);
  EXPECT_EQ(run_sync(1, 3, 2, /*pipelined=*/true), whole);
  EXPECT_EQ(run_sync(1, 3, 2, /*pipelined=*/true, /*max_shard_bytes=*/16 * 1024), whole);
  EXPECT_EQ(run_sync(2, 3, 2, /*pipelined=*/true, /*max_shard_bytes=*/16 * 1024), whole);
}

// A bucket naming a shard twice is refused by name; a bucket sent again
// whole is a retry, and one repeating some shards an earlier bucket of the
// step delivered keeps only the others (a replica restarted mid-step cuts
// its buckets by its own push rate).
TEST(PsService, BucketsThatRepeatShardsKeepTheFirstDelivery) {
  tc::PlacementOptions po;
  po.max_shard_bytes = 1024;
  const tc::Layout l = tc::place_variables({{"w", 1024, "fp32"}}, 1, po);
  ASSERT_EQ(l.shards.size(), 4u);
  auto codec = tc::make_codec("fp32");
  std::vector<std::vector<uint8_t>> payloads(4);
  for (size_t s = 0; s < 4; ++s) {
    payloads[s].resize(codec->payload_bytes(l.shards[s].count));
    codec->encode(std::vector<float>(l.shards[s].count, 1.0f), {}, payloads[s]);
  }
  auto bucket = [&](tc::WorkerClient& c, std::vector<size_t> shards) {
    std::vector<std::span<const uint8_t>> views;
    for (size_t s : shards) views.emplace_back(payloads[s]);
    c.push_bucket(1.0f, shards, views);
  };
  auto error_of = [&](tc::WorkerClient& c) {
    try {
      while (c.next_sum()) {
      }
      c.end_step();
    } catch (const tc::PeerError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  {
    PsTask ps(0, 1);
    tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, fast_client());
    c.join(0);
    std::vector<std::vector<uint8_t>> sums;
    c.begin_step(0, sums);
    bucket(c, {0, 0});
    EXPECT_NE(error_of(c).find("names shard 0 twice"), std::string::npos);
  }
  {
    PsTask ps(0, 1);
    tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, fast_client());
    c.join(0);
    std::vector<std::vector<uint8_t>> sums;
    c.begin_step(0, sums);
    bucket(c, {0, 1});
    bucket(c, {0, 1});  // a retry: counted once
    bucket(c, {1, 2});  // cut differently (a restarted replica's): shard 1 is dropped, 2 kept
    bucket(c, {3});
    EXPECT_EQ(error_of(c), "no error");
    for (size_t s = 0; s < 4; ++s) {
      std::vector<float> sum(l.shards[s].count);
      codec->decode_aggregate(sums[s], sum);
      EXPECT_EQ(sum, std::vector<float>(l.shards[s].count, 1.0f)) << "shard " << s << " summed once";
    }
  }
  {  // whole steps still work next to buckets
    PsTask ps(0, 1);
    tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, fast_client());
    c.join(0);
    std::vector<std::vector<uint8_t>> sums;
    c.begin_step(0, sums);
    bucket(c, {3, 2});
    bucket(c, {1, 0});
    EXPECT_EQ(error_of(c), "no error");
    std::vector<float> sum(l.shards[1].count);
    codec->decode_aggregate(sums[1], sum);
    EXPECT_EQ(sum, std::vector<float>(l.shards[1].count, 1.0f));
    c.finish(true);
  }
}

// Each replica's step-time report rides on its next step's first push; the
// ps hands the mean over replicas back with the sums (for the chief's log)
// and refuses reports that are not times.
TEST(PsService, StepTimeReportsAreAveragedOverReplicasAndCheckedFirst) {
  PsTask ps(0, 2);
  const tc::Layout l = tc::place_variables({{"w", 256, "fp32"}}, 1);
  auto codec = tc::make_codec("fp32");
  std::vector<uint8_t> payload(codec->payload_bytes(256));
  codec->encode(std::vector<float>(256, 1.0f), {}, payload);
  std::vector<tc::WorkerClient::Sums> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      tc::WorkerClient c({ps.address()}, l, r, true, 2, 2, fast_client());
      c.join(0);
      std::vector<std::vector<uint8_t>> sums;
      const size_t shard[1] = {0};
      const std::span<const uint8_t> views[1] = {payload};
      for (int64_t step = 0; step < 2; ++step) {
        c.report_step_times(std::vector<float>(tc::kStepTimeFields, 10.0f * (r + 1)));
        c.begin_step(step, sums);
        c.push_bucket(0.0f, shard, views);
        got[r] = c.end_step();
      }
      c.finish(true);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(got[0].replicas_reporting, 2u);
  EXPECT_EQ(got[0].replicas_step_ms, std::vector<float>(tc::kStepTimeFields, 15.0f));

  PsTask bad(0, 1);
  tc::WorkerClient c({bad.address()}, l, 0, true, 1, 1, fast_client());
  c.join(0);
  std::vector<float> report(tc::kStepTimeFields, 1.0f);
  report[3] = -1.0f;
  c.report_step_times(report);
  std::vector<std::vector<uint8_t>> sums;
  c.begin_step(0, sums);
  const size_t shard[1] = {0};
  const std::span<const uint8_t> views[1] = {payload};
  c.push_bucket(0.0f, shard, views);
  try {
    c.end_step();
    FAIL();
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("step time -1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.report_step_times({1.0f}), std::invalid_argument);
}

// Scales shared a layer at a time (as the backward pass finishes it): each
// variable's max over replicas, in the order asked, whatever subsets the
// replicas report in; bad requests are refused by name.
TEST(PsService, ScalesAreSharedPerVariableSubset) {
  PsTask ps(0, 2);
  const tc::Layout l = tc::place_variables({{"a", 64, "fp32"}, {"b", 64, "fp32"}, {"c", 64, "fp32"}}, 1);
  std::vector<std::vector<float>> got(2);
  std::vector<std::thread> threads;
  // Neither replica finishes (which ends the ps's run) before both have their
  // scales: a finish while the other still waits would answer it "training
  // finished".
  std::latch both_exchanged(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      tc::WorkerClient c({ps.address()}, l, r, true, 2, 2, fast_client());
      c.join(0);
      const std::vector<uint32_t> first = r == 0 ? std::vector<uint32_t>{2, 1} : std::vector<uint32_t>{2};
      const std::vector<uint32_t> second = r == 0 ? std::vector<uint32_t>{0} : std::vector<uint32_t>{1, 0};
      auto scales_of = [&](const std::vector<uint32_t>& vars) {
        std::vector<float> out;
        for (uint32_t v : vars) out.push_back(1.0f + v + 10.0f * r);
        return out;
      };
      got[r] = c.exchange_scales(0, scales_of(first), first);
      const auto more = c.exchange_scales(0, scales_of(second), second);
      got[r].insert(got[r].end(), more.begin(), more.end());
      both_exchanged.arrive_and_wait();
      c.finish(true);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(got[0], (std::vector<float>{13.0f, 12.0f, 11.0f}));  // c, b, a: replica 1's
  EXPECT_EQ(got[1], (std::vector<float>{13.0f, 12.0f, 11.0f}));

  auto refusal = [&](std::vector<float> scales, std::vector<uint32_t> vars) {
    PsTask bad(0, 1);  // each its own: a second chief process would be a restarted chief
    tc::WorkerClient c({bad.address()}, l, 0, true, 1, 1, fast_client());  // a refusal ends a client's run
    c.join(0);
    try {
      c.exchange_scales(0, scales, vars);
    } catch (const tc::PeerError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal({1, 1}, {0, 0}).find("variable 0 named twice"), std::string::npos);
  EXPECT_NE(refusal({1}, {7}).find("variable 7 of 3"), std::string::npos);
}

TEST(PsService, PayloadsOverFourMegabytesGoThrough) {
  PsTask ps(0, 1);
  // 3M floats = 12 MB fp32 in one shard (no split: one ps, one shard).
  const tc::Layout l = tc::place_variables({{"big", 3000000, "fp32"}}, 1);
  ASSERT_EQ(l.shards.size(), 1u);
  tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, fast_client());
  c.join(0);
  std::vector<std::unique_ptr<tc::GradientCodec>> codecs;
  codecs.push_back(tc::make_codec("fp32"));
  const auto sums = sync_step(c, 0, 0, codecs);
  EXPECT_EQ(sums[0], gradient(3000000, 0, 0));
  EXPECT_GT(c.traffic().payload_sent, 12000000u);
  EXPECT_GT(c.traffic().message_sent, c.traffic().payload_sent);  // protobuf framing on top
  c.finish(true);
}

TEST(PsService, BackupWorkersStalePushesAreDroppedAndCounted) {
  const int replicas = 3;
  PsTask ps(0, replicas);
  const tc::Layout l = tc::place_variables({{"w", 4096, "fp32"}}, 1);
  std::vector<std::unique_ptr<tc::WorkerClient>> c;
  for (int r = 0; r < replicas; ++r)
    c.push_back(std::make_unique<tc::WorkerClient>(std::vector<std::string>{ps.address()}, l, r, true, replicas, 2,
                                                   fast_client()));
  std::vector<std::thread> joins;
  for (int r = 0; r < replicas; ++r) joins.emplace_back([&, r] { c[r]->join(0); });
  for (auto& t : joins) t.join();
  const std::vector<uint8_t> payload = [] {
    auto codec = tc::make_codec("fp32");
    std::vector<float> g(4096, 1.0f);
    std::vector<uint8_t> out(codec->payload_bytes(4096));
    codec->encode(g, {}, out);
    return out;
  }();
  const std::span<const uint8_t> views[1] = {payload};
  EXPECT_TRUE(c[0]->push(0, 1.0f, views).applied);
  EXPECT_TRUE(c[1]->push(0, 3.0f, views).applied);  // the second of R = 2: step 0 is summed
  const auto late = c[2]->push(0, 5.0f, views);
  EXPECT_FALSE(late.applied);
  EXPECT_EQ(late.stale, 1);
  const auto dup = c[0]->push(0, 1.0f, views);  // a retried push
  EXPECT_FALSE(dup.applied);
  EXPECT_EQ(dup.stale, 0);
  std::vector<std::vector<uint8_t>> sums;
  const auto got = c[2]->pull_sums(0, sums);  // the late worker still gets step 0's update
  EXPECT_EQ(got.contributions, 2u);
  EXPECT_FLOAT_EQ(got.mean_loss, 2.0f);
  std::vector<float> sum(4096);
  tc::make_codec("fp32")->decode_aggregate(sums[0], sum);
  EXPECT_EQ(sum, std::vector<float>(4096, 2.0f));
  for (auto& x : c) x->finish(true);
}

TEST(PsService, PullsThatTimeOutWhileAStepIsBeingSummedAreSafe) {
  // Long-poll answers every 10 ms while the ps sums two 64 MB fp32 payloads.
  PsTask ps(0, 2, nullptr, 20, 20, /*poll=*/0.01);
  const uint64_t n = 16u << 20;
  const tc::Layout l = tc::place_variables({{"big", n, "fp32"}}, 1);
  auto codec = tc::make_codec("fp32");
  std::vector<uint8_t> payload(codec->payload_bytes(n));
  codec->encode(std::vector<float>(n, 0.5f), {}, payload);
  std::vector<float> sum(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      tc::WorkerClient c({ps.address()}, l, r, true, 2, 2, fast_client());
      c.join(0);
      const std::span<const uint8_t> views[1] = {payload};
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));  // replica 0 waits in pull
      c.push(0, 0.0f, views);
      std::vector<std::vector<uint8_t>> sums;
      c.pull_sums(0, sums);
      if (r == 0) codec->decode_aggregate(sums[0], sum);
      c.finish(true);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(sum[0], 1.0f);
  EXPECT_EQ(sum[n - 1], 1.0f);
}

// Async SGD: values -= 0.5 * grad, with a "Velocity" slot counting updates.
class HalfStepSgd : public tc::UpdateHandler {
 public:
  void init_shard(size_t shard, const tc::ShardView& view) override {
    if (velocity_.size() <= shard) velocity_.resize(shard + 1);
    velocity_[shard].assign(view.count, 0.0f);
  }
  void apply(size_t shard, int64_t, std::span<float> values, std::span<const float> grad) override {
    for (size_t i = 0; i < values.size(); ++i) {
      values[i] -= 0.5f * grad[i];
      velocity_[shard][i] += 1.0f;
    }
  }
  std::vector<std::pair<std::string, std::span<float>>> slots(size_t shard) override {
    return {{"Velocity", velocity_[shard]}};
  }

 private:
  std::vector<std::vector<float>> velocity_;
};

// Two ps tasks for async runs of `replicas` replicas, each applying
// HalfStepSgd: variable a (5000 elements, one shard on each ps) and b (100).
struct TwoAsyncPs {
  explicit TwoAsyncPs(int replicas) {
    ps.push_back(std::make_unique<PsTask>(0, replicas, &h0));
    ps.push_back(std::make_unique<PsTask>(1, replicas, &h1));
    tc::PlacementOptions po;
    po.min_shard_bytes = 4096;
    layout = tc::place_variables({{"a", 5000, "fp32"}, {"b", 100, "fp32"}}, 2, po);
  }
  // The chief's Init: a0 and b0, and zero "Velocity" slots.
  tc::WorkerClient::InitTensors init(const std::vector<float>& a0, const std::vector<float>& b0) {
    zeros_a.assign(5000, 0.0f);
    zeros_b.assign(100, 0.0f);
    tc::WorkerClient::InitTensors t;
    t.values = {a0, b0};
    t.slots["Velocity"] = {zeros_a, zeros_b};
    return t;
  }
  // fp32 payloads of an all-ones gradient, one per layout shard.
  std::vector<std::vector<uint8_t>> ones_payloads() const {
    auto fp32 = tc::make_codec("fp32");
    std::vector<std::vector<uint8_t>> payloads;
    for (const auto& sh : layout.shards) {
      std::vector<float> g(sh.count, 1.0f);
      payloads.emplace_back(fp32->payload_bytes(sh.count));
      fp32->encode(g, {}, payloads.back());
    }
    return payloads;
  }
  HalfStepSgd h0, h1;
  std::vector<std::unique_ptr<PsTask>> ps;
  tc::Layout layout;
  std::vector<float> zeros_a, zeros_b;
};

TEST(PsService, AsyncPushesAreAppliedOnArrival) {
  TwoAsyncPs cluster(2);
  const tc::Layout& l = cluster.layout;
  ASSERT_EQ(l.shards_of[0].size(), 2u);
  std::vector<float> a0(5000, 1.0f), b0(100, 2.0f);
  const tc::WorkerClient::InitTensors init = cluster.init(a0, b0);
  tc::WorkerClient chief(addresses(cluster.ps), l, 0, false, 2, 1, fast_client());
  tc::WorkerClient other(addresses(cluster.ps), l, 1, false, 2, 1, fast_client());
  std::thread t([&] { other.join(0); });
  EXPECT_EQ(chief.join(7, &init), 7);
  t.join();
  const std::vector<std::vector<uint8_t>> payloads = cluster.ones_payloads();
  auto push_ones = [&](tc::WorkerClient& c) {
    std::vector<float> a(5000), b(100);
    const std::span<float> vals[2] = {a, b};
    c.pull_values(vals);
    std::vector<std::span<const uint8_t>> views(payloads.begin(), payloads.end());
    return c.push(0, 0.0f, views);
  };
  EXPECT_TRUE(push_ones(chief).applied);
  EXPECT_TRUE(push_ones(other).applied);
  EXPECT_TRUE(push_ones(chief).applied);
  std::vector<float> a(5000), b(100);
  const std::span<float> vals[2] = {a, b};
  EXPECT_EQ(chief.pull_values(vals), 10);  // 7 + three applied pushes
  EXPECT_EQ(a, std::vector<float>(5000, 1.0f - 1.5f));
  EXPECT_EQ(b, std::vector<float>(100, 2.0f - 1.5f));
  const auto state = chief.fetch_state();
  EXPECT_EQ(state.at("a"), a);
  EXPECT_EQ(state.at("a/Velocity"), std::vector<float>(5000, 3.0f));
  EXPECT_EQ(state.at("b/Velocity"), std::vector<float>(100, 3.0f));
  other.finish(true);
  chief.finish(true);
}

// The streamed async push and pull (begin_push .. end_push, begin_pull ..
// end_pull) are push() and pull_values(): payloads queued last shard first,
// across two ps tasks, are applied as one push; values waited for variable
// by variable land whole, with the step the ps answered.
TEST(PsService, StreamedAsyncPushAndPullAreThePlainOnes) {
  TwoAsyncPs cluster(1);
  const tc::Layout& l = cluster.layout;
  std::vector<float> a0(5000), b0(100, 2.0f);
  for (size_t i = 0; i < a0.size(); ++i) a0[i] = 0.001f * static_cast<float>(i);
  const tc::WorkerClient::InitTensors init = cluster.init(a0, b0);
  tc::WorkerClient chief(addresses(cluster.ps), l, 0, false, 1, 1, fast_client());
  EXPECT_EQ(chief.join(3, &init), 3);
  std::vector<float> a(5000, -1.0f), b(100, -1.0f);
  const std::span<float> vals[2] = {a, b};
  EXPECT_EQ(chief.begin_pull(vals), 3);
  chief.wait_values(1, 100);
  EXPECT_EQ(b, b0);
  chief.wait_values(0, 1);
  EXPECT_EQ(a[0], a0[0]) << "the first shard of a has landed";
  chief.wait_values(0, 5000);
  chief.end_pull();
  EXPECT_EQ(a, a0);
  const std::vector<std::vector<uint8_t>> payloads = cluster.ones_payloads();
  chief.begin_push();
  for (size_t sh = l.shards.size(); sh-- > 0;) {
    const size_t one[1] = {sh};
    const std::span<const uint8_t> view[1] = {payloads[sh]};
    chief.push_payloads(0.5f, one, view);
  }
  const tc::WorkerClient::PushOutcome out = chief.end_push();
  EXPECT_TRUE(out.applied);
  EXPECT_EQ(out.stale, 0);
  std::vector<float> a2(5000), b2(100);
  const std::span<float> vals2[2] = {a2, b2};
  EXPECT_EQ(chief.pull_values(vals2), 4);
  for (size_t i = 0; i < a2.size(); ++i) ASSERT_EQ(a2[i], a0[i] - 0.5f) << i;
  EXPECT_EQ(b2, std::vector<float>(100, 2.0f - 0.5f));
  // A push that does not carry every shard is refused before it leaves.
  chief.begin_push();
  const size_t first[1] = {0};
  const std::span<const uint8_t> first_view[1] = {payloads[0]};
  chief.push_payloads(0.5f, first, first_view);
  EXPECT_THROW(chief.end_push(), std::logic_error);
  EXPECT_EQ(chief.pull_values(vals2), 4) << "nothing of the short push was applied";
  EXPECT_THROW(chief.wait_values(2, 1), std::invalid_argument) << "no variable 2";
  EXPECT_THROW(chief.wait_values(1, 101), std::invalid_argument) << "b has 100 elements";
  chief.finish(true);
}

// start_pull(after_own_push): the pull leaves before the push's last bytes,
// and each ps answers once it has applied the push, so the values include
// it, with the step after it. (The last shard is queued after the pull was
// sent: a ps that answered at once would return the values before the push.)
TEST(PsService, APullSentWithThePushIsAnsweredOnceThePushIsApplied) {
  TwoAsyncPs cluster(1);
  const tc::Layout& l = cluster.layout;
  std::vector<float> a0(5000, 1.0f), b0(100, 2.0f);
  const tc::WorkerClient::InitTensors init = cluster.init(a0, b0);
  tc::WorkerClient chief(addresses(cluster.ps), l, 0, false, 1, 1, fast_client());
  EXPECT_EQ(chief.join(3, &init), 3);
  std::vector<float> a(5000), b(100);
  const std::span<float> vals[2] = {a, b};
  EXPECT_THROW(chief.start_pull(vals, true), std::logic_error) << "no push in flight";
  EXPECT_EQ(chief.begin_pull(vals), 3);
  chief.end_pull();
  const std::vector<std::vector<uint8_t>> payloads = cluster.ones_payloads();
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    chief.begin_push();
    for (size_t sh = 0; sh + 1 < l.shards.size(); ++sh) {
      const size_t one[1] = {sh};
      const std::span<const uint8_t> view[1] = {payloads[sh]};
      chief.push_payloads(0.5f, one, view);
    }
    chief.start_pull(vals, true);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the pull reaches the ps first
    const size_t last[1] = {l.shards.size() - 1};
    const std::span<const uint8_t> last_view[1] = {payloads.back()};
    chief.push_payloads(0.5f, last, last_view);
    EXPECT_TRUE(chief.end_push().applied);
    EXPECT_EQ(chief.pulled_step(), 4 + round);
    chief.wait_values(0, 5000);
    chief.wait_values(1, 100);
    chief.end_pull();
    const float applied = 0.5f * static_cast<float>(round + 1);
    EXPECT_EQ(a, std::vector<float>(5000, 1.0f - applied));
    EXPECT_EQ(b, std::vector<float>(100, 2.0f - applied));
  }
  EXPECT_THROW(chief.pulled_step(), std::logic_error) << "no pull in flight";
  chief.finish(true);
}

// begin_pull(push_turn): the values land at once, but the replica's next
// push to a ps leaves only once no other replica's push to it is still
// arriving (comm/service/push_turns.h; these ps tasks have no lead, so "still
// arriving" is until read whole). Without the turn it leaves at once.
TEST(PsService, AsyncPushesCrossThePsLinkInTurn) {
  TwoAsyncPs cluster(2);
  const tc::Layout& l = cluster.layout;
  std::vector<float> a0(5000, 1.0f), b0(100, 2.0f);
  const tc::WorkerClient::InitTensors init = cluster.init(a0, b0);
  tc::WorkerClient chief(addresses(cluster.ps), l, 0, false, 2, 1, fast_client());
  tc::WorkerClient other(addresses(cluster.ps), l, 1, false, 2, 1, fast_client());
  std::thread joining([&] { other.join(0); });
  EXPECT_EQ(chief.join(3, &init), 3);
  joining.join();
  const std::vector<std::vector<uint8_t>> payloads = cluster.ones_payloads();
  auto queue = [&](tc::WorkerClient& c, size_t from, size_t to) {
    for (size_t sh = from; sh < to; ++sh) {
      const size_t one[1] = {sh};
      const std::span<const uint8_t> view[1] = {payloads[sh]};
      c.push_payloads(0.5f, one, view);
    }
  };
  std::vector<float> a(5000), b(100), a_other(5000), b_other(100);
  const std::span<float> vals[2] = {a, b};
  const std::span<float> other_vals[2] = {a_other, b_other};
  for (const bool turns : {false, true}) {
    SCOPED_TRACE(turns ? "with push turns" : "without");
    other.begin_pull(other_vals);
    other.end_pull();
    // The other replica's push is under way on the ps of the last shard: all
    // but that shard are queued (its part on the other ps is read whole).
    other.begin_push();
    queue(other, 0, l.shards.size() - 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its header reaches that ps
    chief.begin_pull(vals, turns);
    chief.wait_values(0, 5000);
    chief.wait_values(1, 100);
    EXPECT_EQ(a[0], a_other[0]) << "the values land while the turn waits";
    std::atomic<bool> pushed{false};
    std::thread pushing([&] {
      chief.begin_push();
      queue(chief, 0, l.shards.size());
      EXPECT_TRUE(chief.end_push().applied);
      pushed = true;
    });
    // Held for at most the ps's 1 s bound; 300 ms tells the two apart.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(pushed.load(), !turns) << "the chief's push waits for the other's only with push turns";
    queue(other, l.shards.size() - 1, l.shards.size());
    EXPECT_TRUE(other.end_push().applied);
    pushing.join();
    EXPECT_TRUE(pushed.load());
    chief.end_pull();
  }
  std::vector<float> a2(5000), b2(100);
  const std::span<float> vals2[2] = {a2, b2};
  EXPECT_EQ(chief.pull_values(vals2), 7) << "four pushes applied, each once";
  EXPECT_EQ(a2, std::vector<float>(5000, 1.0f - 4 * 0.5f));
  EXPECT_EQ(b2, std::vector<float>(100, 2.0f - 4 * 0.5f));
  other.finish(true);
  chief.finish(true);
}

TEST(PsService, ADeadReplicaIsReportedByNameAndNobodyHangs) {
  PsTask ps(0, 2, nullptr, /*peer_timeout=*/1.5);
  const tc::Layout l = tc::place_variables({{"w", 64, "fp32"}}, 1);
  tc::WorkerClient alive({ps.address()}, l, 0, true, 2, 2, fast_client());
  auto doomed = std::make_unique<tc::WorkerClient>(std::vector<std::string>{ps.address()}, l, 1, true, 2, 2, fast_client());
  std::thread t([&] { doomed->join(0); });
  alive.join(0);
  t.join();
  doomed.reset();  // the process "dies": no more heartbeats, no push
  const auto start = std::chrono::steady_clock::now();
  try {
    std::vector<std::vector<uint8_t>> sums;
    std::vector<float> g(64, 1.0f);
    std::vector<uint8_t> p(tc::make_codec("fp32")->payload_bytes(64));
    tc::make_codec("fp32")->encode(g, {}, p);
    const std::span<const uint8_t> views[1] = {p};
    alive.push(0, 0.0f, views);
    alive.pull_sums(0, sums);
    FAIL() << "pull_sums returned without the dead replica's push";
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("silent"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
  ps.thread.join();
  EXPECT_NE(ps.error.find("worker 1"), std::string::npos) << ps.error;
  ps.thread = std::thread([] {});
}

TEST(PsService, AReplicaThatNeverJoinsIsNamed) {
  PsTask ps(0, 3, nullptr, 20, /*startup_timeout=*/1.5);
  const tc::Layout l = tc::place_variables({{"w", 64, "fp32"}}, 1);
  tc::WorkerClient chief({ps.address()}, l, 0, true, 3, 3, fast_client());
  tc::WorkerClient one({ps.address()}, l, 1, true, 3, 3, fast_client());
  std::thread t([&] { EXPECT_THROW(one.join(0), tc::PeerError); });
  try {
    chief.join(0);
    FAIL() << "join returned with a replica missing";
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("never joined"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("worker 2"), std::string::npos) << e.what();
  }
  t.join();
}

TEST(PsService, AReplicaWithAnotherLayoutIsRefused) {
  PsTask ps(0, 2);
  tc::WorkerClient chief({ps.address()}, tc::place_variables({{"w", 64, "fp32"}}, 1), 0, true, 2, 2, fast_client());
  tc::WorkerClient other({ps.address()}, tc::place_variables({{"w", 64, "fp16"}}, 1), 1, true, 2, 2, fast_client());
  std::thread t([&] { EXPECT_THROW(chief.join(0), tc::PeerError); });
  try {
    other.join(0);
    FAIL();
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos) << e.what();
  }
  ps.server->stop(false, "test over");
  t.join();
}

TEST(PsService, AMalformedPayloadIsRefusedAndNamed) {
  PsTask ps(0, 1);
  const tc::Layout l = tc::place_variables({{"w", 1000, "terngrad"}}, 1);
  tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, fast_client());
  c.join(0);
  auto codec = tc::make_codec("terngrad");
  std::vector<float> g = gradient(1000, 0, 0);
  std::vector<uint8_t> p(codec->payload_bytes(1000));
  codec->encode(g, {}, p);
  p[50] = 0xFF;  // reserved codes
  const std::span<const uint8_t> views[1] = {p};
  try {
    c.push(0, 0.0f, views);
    FAIL();
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("malformed payload"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("(w)"), std::string::npos) << e.what();
  }
}

TEST(PsService, AnUnreachablePsIsNamedAfterThePeerTimeout) {
  const tc::Layout l = tc::place_variables({{"w", 64, "fp32"}}, 1);
  auto o = fast_client(/*peer_timeout=*/1.0);
  o.rpc_timeout_s = 0.5;
  tc::WorkerClient c({"127.0.0.1:1"}, l, 1, true, 2, 2, o);  // port 1: nothing listens
  try {
    c.join(0);
    FAIL();
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("ps 0 at 127.0.0.1:1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("unreachable"), std::string::npos) << e.what();
  }
}

}  // namespace

// server_ef(): the chief hands the ps a checkpoint's server states at Init
// (each checked by the codec before any is taken) and fetches them back
// after a step's sum; the pull is the server's re-encoding, as the codec's
// own aggregate_step computes it.
TEST(PsService, ServerStatesTravelAtInitAndCheckpointAndAreChecked) {
  constexpr uint64_t n = 5000;
  const tc::Layout l = tc::place_variables({{"w", n, "server_ef(terngrad)"}, {"b", 64, "fp32"}}, 1);
  ASSERT_EQ(l.shards.size(), 2u);
  auto codec = tc::make_codec("server_ef(terngrad)");
  // A state as an earlier sum leaves it.
  const std::vector<float> g0 = gradient(n, 0, 0);
  std::vector<uint8_t> p0(codec->payload_bytes(n)), state, out;
  tc::EncodeContext ec;
  ec.shared_scale = codec->local_scale(g0);
  codec->encode(g0, ec, p0);
  const std::span<const uint8_t> one[1] = {p0};
  codec->aggregate_step(one, n, {0, 0, 0}, state, out);
  ASSERT_FALSE(state.empty());

  PsTask ps(0, 1);
  auto refused = [&](std::vector<std::vector<uint8_t>> states, const std::string& expect) {
    tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, fast_client());
    tc::WorkerClient::InitTensors init;
    init.server_states = std::move(states);
    try {
      c.join(3, &init);
      ADD_FAILURE() << "accepted: " << expect;
    } catch (const tc::PeerError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  };
  std::vector<uint8_t> torn = state;
  torn.resize(torn.size() - 4);
  refused({torn, {}}, "do not hold");
  refused({state, state}, "more than the 576 expected");  // no state of b's size is that large
  std::vector<uint8_t> state64, out64;
  const std::vector<float> g64 = gradient(64, 0, 0);
  std::vector<uint8_t> p64(codec->payload_bytes(64));
  codec->encode(g64, {}, p64);
  const std::span<const uint8_t> one64[1] = {p64};
  codec->aggregate_step(one64, 64, {1, 0, 0}, state64, out64);
  refused({state, state64}, "keeps none on the server");  // b is fp32

  // The refused Inits changed nothing: a good one starts the run at step 3.
  tc::WorkerClient c({ps.address()}, l, 0, true, 1, 1, fast_client());
  tc::WorkerClient::InitTensors init;
  init.server_states = {state, {}};
  ASSERT_EQ(c.join(3, &init), 3);
  const std::vector<float> g = gradient(n, 0, 3), b = gradient(64, 0, 3);
  std::vector<float> scales = {codec->local_scale(g), 0.0f};
  const std::vector<float> shared = c.exchange_scales(3, scales);
  std::vector<std::vector<uint8_t>> payloads(2);
  payloads[0].resize(codec->payload_bytes(n));
  tc::EncodeContext ec3;
  ec3.tensor_id = 0;
  ec3.step = 3;
  ec3.shared_scale = shared[0];
  codec->encode(g, ec3, payloads[0]);
  auto fp32 = tc::make_codec("fp32");
  payloads[1].resize(fp32->payload_bytes(64));
  fp32->encode(b, {}, payloads[1]);
  const std::vector<std::span<const uint8_t>> views = {payloads[0], payloads[1]};
  c.push(3, 0.0f, views);
  std::vector<std::vector<uint8_t>> sums;
  c.pull_sums(3, sums);
  // The codec's own arithmetic from the state handed over.
  std::vector<uint8_t> expect_state = state, expect_sum;
  const std::span<const uint8_t> mine[1] = {payloads[0]};
  codec->aggregate_step(mine, n, {0, 3, 0}, expect_state, expect_sum);
  EXPECT_EQ(sums[0], expect_sum);
  EXPECT_EQ(sums[0].size(), codec->payload_bytes(n)) << "the pull is as small as the push";
  const auto fetched = c.fetch_server_states(3);
  ASSERT_EQ(fetched.size(), 2u);
  EXPECT_EQ(fetched[0], expect_state);
  EXPECT_TRUE(fetched[1].empty());
  try {
    c.fetch_server_states(1);
    ADD_FAILURE() << "a step the ps never summed";
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("no server states of step 1"), std::string::npos) << e.what();
  }
  c.finish(true);
}

TEST(PsService, AnAsyncRunRefusesServerErrorFeedback) {
  HalfStepSgd rule;
  PsTask ps(0, 1, &rule);
  const tc::Layout l = tc::place_variables({{"w", 64, "server_ef(terngrad)"}}, 1);
  tc::WorkerClient c({ps.address()}, l, 0, false, 1, 1, fast_client());
  std::vector<float> w(64, 0.0f);
  tc::WorkerClient::InitTensors init;
  init.values = {w};
  init.slots["Velocity"] = {w};
  try {
    c.join(0, &init);
    ADD_FAILURE();
  } catch (const tc::PeerError& e) {
    EXPECT_NE(std::string(e.what()).find("only a sync run forms"), std::string::npos) << e.what();
  }
}

// Multi-round codecs: ExchangePresums sums the replicas' pre-round vectors in
// replica order; a report of the wrong size, a NaN, a round the codec lacks
// or a step outside the kept window is refused by name; Init refuses a
// whole-only variable that is split, and an async run of such a codec.
TEST(PsService, PresumsAreSummedInReplicaOrderAndBadReportsAreRefused) {
  const std::string codec = "powersgd:rank=2,rows=8";  // 64 elements: P is 8 x 2
  const tc::Layout l = tc::place_variables({{"w", 64, codec, true}, {"b", 64, "fp32"}}, 1);
  PsTask ps(0, 2);
  std::vector<std::vector<float>> got(2);
  std::latch both(2);
  std::vector<std::thread> threads;
  auto values_of = [](int r) {
    std::vector<float> v(16);
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.25f * static_cast<float>(i) + 10.0f * static_cast<float>(r);
    return v;
  };
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      tc::WorkerClient c({ps.address()}, l, r, true, 2, 2, fast_client());
      c.join(0);
      got[r] = c.exchange_presums(0, 0, std::vector<uint32_t>{0}, values_of(r));
      both.arrive_and_wait();
      c.finish(true);
    });
  for (auto& t : threads) t.join();
  std::vector<float> want(16, 0.0f);
  for (int r = 0; r < 2; ++r)
    for (size_t i = 0; i < want.size(); ++i) want[i] += values_of(r)[i];
  EXPECT_EQ(got[0], want);
  EXPECT_EQ(got[1], want);

  auto refusal = [&](int64_t step, uint32_t round, std::vector<uint32_t> vars, std::vector<float> values) {
    PsTask bad(0, 1);
    tc::WorkerClient c({bad.address()}, l, 0, true, 1, 1, fast_client());
    c.join(0);
    try {
      c.exchange_presums(step, round, vars, values);
    } catch (const tc::PeerError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal(0, 0, {0}, std::vector<float>(15)).find("15 values for round 0 of 1 variables, which take 16"),
            std::string::npos);
  std::vector<float> nan(16, 0.0f);
  nan[3] = std::nanf("");
  EXPECT_NE(refusal(0, 0, {0}, nan).find("value 3 is NaN or Inf"), std::string::npos);
  EXPECT_NE(refusal(0, 0, {1}, {}).find("variable 1 has 0 pre-rounds"), std::string::npos);
  EXPECT_NE(refusal(0, 1, {0}, std::vector<float>(16)).find("not a round 1"), std::string::npos);
  EXPECT_NE(refusal(1000, 0, {0}, std::vector<float>(16)).find("outside the run's window"), std::string::npos);
  EXPECT_EQ(refusal(0, 0, {0}, std::vector<float>(16)), "accepted");  // a sum of one
}

TEST(PsService, InitRefusesASplitWholeOnlyVariableAndAnAsyncMultiRoundRun) {
  auto init_error = [](const tc::Layout& l, bool sync) {
    HalfStepSgd rule;
    PsTask ps(0, 1, sync ? nullptr : &rule);
    tc::WorkerClient c({ps.address()}, l, 0, sync, 1, 1, fast_client());
    tc::WorkerClient::InitTensors init;
    std::vector<float> w(l.variables[0].size, 0.0f);
    if (!sync) {
      init.values = {w};
      init.slots["Velocity"] = {w};
    }
    try {
      c.join(0, &init);
    } catch (const tc::PeerError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  tc::PlacementOptions split;
  split.min_shard_bytes = 64;
  split.max_shards = 2;
  const std::string codec = "powersgd:rank=2,rows=16";
  const tc::Layout sharded = tc::place_variables({{"w", 256, codec, false}}, 1, split);
  ASSERT_EQ(sharded.shards.size(), 2u);
  EXPECT_NE(init_error(sharded, true).find("sends the whole variable only"), std::string::npos);
  const tc::Layout whole = tc::place_variables({{"w", 256, codec, true}}, 1, split);
  EXPECT_EQ(whole.shards.size(), 1u);
  EXPECT_NE(init_error(whole, false).find("only a sync run has"), std::string::npos);
}
