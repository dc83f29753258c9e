// The ps's Push intake (comm/service/push_intake.h) without a server: what
// an accepted push keeps, and every refusal named.
#include "push_intake.h"

#include <gtest/gtest.h>

#include <deque>
#include <random>
#include <string>
#include <vector>

#include "chunk_stream.h"
#include "terngrad/comm/step_times.h"
#include "terngrad/quantize/format.h"

namespace tc = terngrad::comm;
namespace td = terngrad::comm::detail;
namespace tq = terngrad::quantize;
namespace rpc = terngrad::comm::rpc;

namespace {

// Three shards: "w" 2-bit terngrad (1000 elements), "e" entropy-coded
// terngrad (5000), "b" fp32 (10).
std::vector<td::IntakeShard> shards() {
  std::vector<td::IntakeShard> s;
  for (auto [name, count, spec] : {std::tuple{"w", 1000u, "terngrad"}, std::tuple{"e", 5000u, "terngrad:pack=entropy"},
                                   std::tuple{"b", 10u, "fp32"}}) {
    td::IntakeShard sh;
    sh.view = {static_cast<uint32_t>(s.size()), name, 0, count, spec};
    sh.codec = tc::make_codec(spec);
    s.push_back(std::move(sh));
  }
  return s;
}

std::string payload(const td::IntakeShard& sh, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(sh.view.count);
  for (float& v : x) v = d(g);
  std::vector<uint8_t> out(sh.codec->payload_bytes(x.size()));
  tc::EncodeContext ctx;
  ctx.seed = seed;
  out.resize(sh.codec->encode(x, ctx, out));
  return std::string(out.begin(), out.end());
}

rpc::PushChunk chunk(uint32_t shard, const std::string& data, uint64_t offset, uint64_t total) {
  rpc::PushChunk c;
  auto* p = c.mutable_payload();
  p->set_shard(shard);
  p->set_offset(offset);
  p->set_total_bytes(total);
  p->set_data(data);
  return c;
}

struct Outcome {
  std::optional<std::string> refusal;
  td::PushIntake intake;
};

Outcome take(const rpc::PushHeader& h, std::deque<rpc::PushChunk> chunks, bool sync = true) {
  static const std::vector<td::IntakeShard> s = shards();
  Outcome o;
  o.refusal = td::take_push(h, s, sync, "worker 1 step 3",
                            chunk_stream(chunks),
                            o.intake);
  return o;
}

void expect_refused(const Outcome& o, const std::string& words) {
  ASSERT_TRUE(o.refusal.has_value()) << "accepted; expected a refusal naming: " << words;
  EXPECT_EQ(o.refusal->rfind("Push from worker 1 step 3", 0), 0u) << *o.refusal;
  EXPECT_NE(o.refusal->find(words), std::string::npos) << *o.refusal;
}

}  // namespace

TEST(PushIntake, AWholePushIsKeptAndAnEntropyCodedOneAsItsTwoBitCodes) {
  const auto s = shards();
  const std::string w = payload(s[0], 1), e = payload(s[1], 2), b = payload(s[2], 3);
  ASSERT_EQ(static_cast<uint8_t>(e[tq::kHeaderCodecOffset]), tq::kCodecTernaryEntropy);
  // The 2-bit payload in two chunks, the others whole.
  const Outcome o = take({}, {chunk(0, w.substr(0, 100), 0, w.size()), chunk(0, w.substr(100), 100, w.size()),
                              chunk(1, e, 0, e.size()), chunk(2, b, 0, b.size())});
  ASSERT_FALSE(o.refusal) << *o.refusal;
  EXPECT_EQ(o.intake.ids, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_EQ(o.intake.received, w.size() + e.size() + b.size());
  EXPECT_EQ(o.intake.payloads[0], w);
  EXPECT_EQ(o.intake.payloads[2], b);
  const std::string& kept = o.intake.payloads[1];
  EXPECT_EQ(static_cast<uint8_t>(kept[tq::kHeaderCodecOffset]), tq::kCodecTernary2Bit);
  std::vector<float> a(5000), c(5000);
  s[1].codec->decode(td::as_bytes(e), a);
  s[1].codec->decode(td::as_bytes(kept), c);
  EXPECT_EQ(a, c);
}

TEST(PushIntake, ABucketCarriesItsShardsOnly) {
  const auto s = shards();
  const std::string b = payload(s[2], 3);
  rpc::PushHeader h;
  h.add_shards(2);
  const Outcome o = take(h, {chunk(2, b, 0, b.size())});
  ASSERT_FALSE(o.refusal) << *o.refusal;
  EXPECT_EQ(o.intake.ids, std::vector<uint32_t>{2});
  expect_refused(take(h, {chunk(0, payload(s[0], 1), 0, 290)}), "shard 0 is not in its bucket");
  expect_refused(take(h, {chunk(2, b, 0, b.size())}, /*sync=*/false), "an async push carries every shard");
  h.add_shards(7);
  expect_refused(take(h, {}), "bucket names shard 7 of this ps's 3");
  rpc::PushHeader twice;
  twice.add_shards(1);
  twice.add_shards(1);
  expect_refused(take(twice, {}), "bucket names shard 1 twice");
}

TEST(PushIntake, RefusesMalformedPushesNamingTheShard) {
  const auto s = shards();
  const std::string w = payload(s[0], 1), e = payload(s[1], 2), b = payload(s[2], 3);
  rpc::PushHeader h;
  h.add_shards(0);
  expect_refused(take(h, {}), "shard 0 has 0 of the 290 payload bytes its codec writes");
  expect_refused(take(h, {chunk(0, w.substr(0, 100), 0, w.size())}), "shard 0 has 100 of the 290");
  expect_refused(take(h, {chunk(5, w, 0, w.size())}), "shard 5 is unknown");
  rpc::PushChunk second;
  *second.mutable_header() = h;
  expect_refused(take(h, {second}), "a second header");
  std::string bad = w;
  bad[tq::kHeaderBytes + 3] = static_cast<char>(0xFF);  // reserved codes
  expect_refused(take(h, {chunk(0, bad, 0, bad.size())}), "shard 0 (w): malformed payload: ");
  rpc::PushHeader he;
  he.add_shards(1);
  expect_refused(take(he, {}), "its variable-size codec writes 1 to");
  expect_refused(take(he, {chunk(1, e.substr(0, 50), 0, e.size())}), "50 of the " + std::to_string(e.size()) + " announced");
  std::string short_e = e.substr(0, e.size() - 1);
  expect_refused(take(he, {chunk(1, short_e, 0, short_e.size())}), "shard 1 (e): malformed payload: ");
  rpc::PushHeader times = h;
  times.add_step_ms(1.0f);
  expect_refused(take(times, {chunk(0, w, 0, w.size())}),
                 "1 step times, expected 0 or " + std::to_string(tc::kStepTimeFields));
  rpc::PushHeader negative = h;
  for (size_t i = 0; i < tc::kStepTimeFields; ++i) negative.add_step_ms(i == 3 ? -1.0f : 1.0f);
  expect_refused(take(negative, {chunk(0, w, 0, w.size())}), "step time -1");
}
