// "--codec=auto" (comm/codec_choice.h): the candidates and their refusals,
// measured costs, the step model's arithmetic and the choice it makes.
#include "terngrad/comm/codec_choice.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "terngrad/comm/gradient_codec.h"

namespace tc = terngrad::comm;

namespace {

void expect_refused(const std::string& spec, bool sync, const std::string& says) {
  try {
    tc::parse_auto_codec(spec, sync);
    ADD_FAILURE() << spec << " was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << spec << ": " << e.what();
  }
}

// A cost with no compute: the model is then bytes over the link only.
tc::CodecCost free_cost(const std::string& spec) {
  tc::CodecCost c;
  c.spec = tc::make_codec(spec)->spec();
  c.down_bytes = {16, 4};  // used only for codecs that do not know their sum's size
  return c;
}

}  // namespace

TEST(AutoCodec, DefaultsAreFp32Fp16AndTheRecommendedErrorFeedbackConfigurationForTheMode) {
  EXPECT_TRUE(tc::is_auto_codec("auto"));
  EXPECT_TRUE(tc::is_auto_codec("auto(fp32,fp16)"));
  EXPECT_FALSE(tc::is_auto_codec("automatic"));
  EXPECT_FALSE(tc::is_auto_codec("fp32"));
  const auto sync = tc::parse_auto_codec("auto", true).candidates;
  ASSERT_EQ(sync.size(), 3u);
  EXPECT_EQ(sync[0], "fp32");
  EXPECT_EQ(sync[1], "fp16");
  EXPECT_EQ(sync[2], tc::make_codec("ef(server_ef(terngrad:round=nearest))")->spec());
  const auto async = tc::parse_auto_codec("auto", false).candidates;
  ASSERT_EQ(async.size(), 3u);
  EXPECT_EQ(async[2], tc::make_codec("ef(terngrad:round=nearest)")->spec());
}

TEST(AutoCodec, CandidatesMayHoldCommasInTheirOwnParameters) {
  const auto c = tc::parse_auto_codec("auto(fp32,terngrad:clip=2.5,share_scale=1,qsgd:levels=7,bucket=64,fp16)", true);
  ASSERT_EQ(c.candidates.size(), 4u);
  EXPECT_EQ(c.candidates[0], "fp32");
  EXPECT_EQ(c.candidates[1], tc::make_codec("terngrad:clip=2.5,share_scale=1")->spec());
  EXPECT_EQ(c.candidates[2], "qsgd:levels=7,bucket=64");
  EXPECT_EQ(c.candidates[3], "fp16");
  const auto n = tc::parse_auto_codec("auto(ef(topk:ratio=0.01,values=fp16),fp32)", false);
  ASSERT_EQ(n.candidates.size(), 2u);
  EXPECT_EQ(n.candidates[0], tc::make_codec("ef(topk:ratio=0.01,values=fp16)")->spec());
}

TEST(AutoCodec, BadCandidatesAreRefusedByName) {
  expect_refused("auto()", true, "no candidates");
  expect_refused("auto(fp32,,fp16)", true, "candidate 2 is empty");
  expect_refused("auto(fp32,zstd)", true, "candidate \"zstd\"");
  expect_refused("auto(fp32,terngrad:clip=-1)", true, "candidate \"terngrad:clip=-1\"");
  expect_refused("auto(fp32,fp16,fp32)", true, "listed twice");
  expect_refused("auto(share_scale=1,fp32)", true, "\"share_scale=1\" is a parameter of no codec");
  expect_refused("auto(fp32,ef(terngrad)", true, "unbalanced");
  expect_refused("auto(fp32))", true, "unbalanced");
  expect_refused("fp32", true, "is not auto");
  expect_refused("auto(fp32,auto)", true, "candidate \"auto\"");
  // What an async run cannot do, named.
  expect_refused("auto(fp32,powersgd:rank=2)", false, "pre-rounds");
  expect_refused("auto(fp32,ef(server_ef(terngrad:round=nearest)))", false, "only a sync run forms");
  expect_refused("auto(fp32,powersgd:rank=2)", true, "matrix shape");
}

// The costs are what the trainer's calls take: positive, growing with n,
// and fp32's sum is 4 bytes an element.
TEST(CodecCost, MeasuredCostsGrowWithTheVariable) {
  for (const char* spec : {"fp32", "terngrad", "ef(server_ef(terngrad:round=nearest))", "qsgd:levels=7,bucket=64"}) {
    SCOPED_TRACE(spec);
    const tc::CodecCost c = tc::measure_codec_cost(spec, 1 << 10, 1 << 16, 2);
    EXPECT_EQ(c.spec, tc::make_codec(spec)->spec());
    EXPECT_GT(c.encode_s.at(1 << 16), 0.0);
    EXPECT_GT(c.sum2_s.at(1 << 16), 0.0);
    EXPECT_GT(c.decode_s.at(1 << 16), 0.0);
    EXPECT_GE(c.encode_s.per_element, 0.0);
    EXPECT_GE(c.encode_s.fixed, 0.0);
  }
  const tc::CodecCost f = tc::measure_codec_cost("fp32", 1 << 10, 1 << 16, 1);
  EXPECT_NEAR(f.down_bytes.per_element, 4.0, 1e-9);
  const tc::CodecCost t = tc::measure_codec_cost("ef(server_ef(terngrad:round=nearest))", 1 << 10, 1 << 16, 1);
  EXPECT_NEAR(t.down_bytes.per_element, 0.25, 1e-3);  // the re-encoded sum: 2 bits
  EXPECT_THROW(tc::measure_codec_cost("fp32", 100, 100, 1), std::invalid_argument);
  EXPECT_THROW(tc::measure_codec_cost("fp32", 100, 1000, 0), std::invalid_argument);
  EXPECT_THROW(tc::measure_codec_cost("nope", 100, 1000, 1), std::invalid_argument);
}

// The model's arithmetic on one plan, by hand.
TEST(CodecChoice, EstimateIsTheBusierDirectionPlusTheCodecsPlusTwoRoundTrips) {
  tc::ChoiceInput in;
  in.variables = {{"w", 1000, false}, {"b", 10, true}};
  in.candidates = {"fp32", tc::make_codec("terngrad")->spec()};
  tc::CodecCost fp32 = free_cost("fp32"), tern = free_cost("terngrad");
  tern.encode_s = {1e-3, 1e-6};
  tern.decode_s = {0, 2e-6};
  tern.sum2_s = {0, 4e-6};
  in.costs = {fp32, tern};
  in.replicas = 4;
  in.num_ps = 1;
  in.link = {1e6, 2e6, 0.01};
  const tc::PlanEstimate e = tc::estimate_plan(in, {in.candidates[1], "fp32"});
  const auto T = tc::make_codec("terngrad");
  const double up = T->payload_bytes(1000) + tc::make_codec("fp32")->payload_bytes(10);
  const double down = *T->aggregate_bytes(1000, 4) + *tc::make_codec("fp32")->aggregate_bytes(10, 4);
  EXPECT_EQ(e.up_bytes, static_cast<uint64_t>(up));
  EXPECT_EQ(e.down_bytes, static_cast<uint64_t>(down));
  EXPECT_DOUBLE_EQ(e.link_s, std::max(4 * up / 1e6, 4 * down / 2e6));
  EXPECT_DOUBLE_EQ(e.up_s, 4 * up / 1e6);
  EXPECT_DOUBLE_EQ(e.down_s, 4 * down / 2e6);
  EXPECT_DOUBLE_EQ(e.encode_s, 1e-3 + 1e-6 * 1000);
  EXPECT_DOUBLE_EQ(e.decode_s, 2e-6 * 1000);
  EXPECT_DOUBLE_EQ(e.server_s, 2 * 4e-6 * 1000);
  EXPECT_DOUBLE_EQ(e.codec_s, (1e-3 + 1e-6 * 1000) + 2e-6 * 1000 + 2 * 4e-6 * 1000);
  EXPECT_DOUBLE_EQ(e.total_s, e.link_s + e.codec_s + 0.02);
  EXPECT_THROW(tc::estimate_plan(in, {"fp32"}), std::invalid_argument);
  EXPECT_THROW(tc::estimate_plan(in, {"fp16", "fp32"}), std::invalid_argument);  // no cost measured
  // Where the probe found the directions slowing each other, the less busy
  // one adds its share: both in turn at two_way = 2, halfway at 1.5; the
  // factor is taken within [1, 2].
  const double u = 4 * up / 1e6, d = 4 * down / 2e6;
  for (const auto& [two_way, extra] : {std::pair{2.0, 1.0}, {1.5, 0.5}, {1.0, 0.0}, {3.0, 1.0}, {0.5, 0.0}}) {
    in.link.two_way = two_way;
    EXPECT_DOUBLE_EQ(tc::estimate_plan(in, {in.candidates[1], "fp32"}).link_s,
                     std::max(u, d) + extra * std::min(u, d))
        << "two_way " << two_way;
  }
}

// Slow link: compress; no link (memory): nothing to save, the first
// candidate; fixed variables stay fp32 either way. Costs of this machine's
// order (ns per element), written out: measured ones move with the load of
// a shared machine, and the choice must not be tested on noise.
TEST(CodecChoice, CompressesOverSlowLinksAndNotWithoutOne) {
  const std::string ef = tc::make_codec("ef(server_ef(terngrad:round=nearest))")->spec();
  tc::ChoiceInput in;
  in.variables = {{"conv", 500000, false}, {"fc", 3000000, false}, {"logits", 10000, true}};
  in.candidates = {"fp32", "fp16", ef};
  tc::CodecCost fp32 = free_cost("fp32"), fp16 = free_cost("fp16"), e = free_cost(ef);
  fp32.encode_s = {2e-6, 0.1e-9};
  fp32.sum2_s = {1e-6, 0.3e-9};
  fp32.decode_s = {1e-6, 0.2e-9};
  fp16.encode_s = {2e-6, 0.3e-9};
  fp16.sum2_s = {1e-6, 0.5e-9};
  fp16.decode_s = {1e-6, 0.2e-9};
  e.encode_s = {5e-6, 1.5e-9};  // two passes over gradient and residual
  e.sum2_s = {5e-6, 2e-9};      // the sum re-encoded
  e.decode_s = {2e-6, 0.3e-9};
  e.down_bytes = {40, 0.25};
  in.costs = {fp32, fp16, e};
  in.replicas = 2;
  in.link = {125e6, 125e6, 1e-4};  // 1 Gbit/s
  const tc::CodecChoice slow = tc::choose_codecs(in);
  EXPECT_EQ(slow.plan, (std::vector<std::string>{ef, ef, "fp32"}));
  ASSERT_EQ(slow.uniform.size(), 3u);
  for (const tc::PlanEstimate& u : slow.uniform) EXPECT_LE(slow.estimate.total_s, u.total_s);
  EXPECT_LT(slow.estimate.total_s, 0.5 * slow.uniform[0].total_s);  // 16x fewer bytes than fp32
  in.link = {};
  const tc::CodecChoice memory = tc::choose_codecs(in);
  EXPECT_EQ(memory.plan, (std::vector<std::string>{"fp32", "fp32", "fp32"}));
  EXPECT_EQ(memory.estimate.link_s, 0.0);
  // 100 Gbit/s, 2 replicas: the error-feedback codec's compute (about 4 ms
  // for these sizes) costs more than the bytes it saves (about 1 ms).
  in.link = {12.5e9, 12.5e9, 1e-5};
  const tc::CodecChoice fast = tc::choose_codecs(in);
  EXPECT_NE(fast.plan[1], ef);
  EXPECT_LE(fast.estimate.total_s, fast.uniform[0].total_s);
}

// Within 5% of the first candidate's estimate, the first candidate stays:
// a calibration's noise does not trade fp32's precision for nothing.
TEST(CodecChoice, AnotherCandidateMustBeatTheFirstByFivePercent) {
  tc::ChoiceInput in;
  in.variables = {{"w", 1000000, false}};
  in.candidates = {"fp32", "fp16"};
  tc::CodecCost fp32 = free_cost("fp32"), fp16 = free_cost("fp16");
  fp32.encode_s = {0, 1e-9};  // 1 ms
  in.costs = {fp32, fp16};
  in.link = {1e12, 1e12, 0};  // fp32: 1 ms of compute + 4 us of bytes; fp16: 4 us
  EXPECT_EQ(tc::choose_codecs(in).plan[0], "fp16");
  fp32.encode_s = {0, 1e-12};
  in.costs = {fp32, fp16};
  in.link = {4e9, 4e9, 0};  // fp32: 1 ms of bytes each way + 1 us; fp16: its sum is fp32, 1 ms down: 0.1% faster
  EXPECT_EQ(tc::choose_codecs(in).plan[0], "fp32");
}

TEST(CodecChoice, KeepsSmallVariablesFp32WhereTheCallCostsMoreThanTheBytesSave) {
  const std::string ef = tc::make_codec("ef(server_ef(terngrad:round=nearest))")->spec();
  tc::ChoiceInput in;
  in.variables = {{"big", 4000000, false}, {"mid", 100000, false}, {"small", 2000, false}, {"bias", 64, false}};
  in.candidates = {"fp32", ef};
  tc::CodecCost e = free_cost(ef);
  e.encode_s = {1e-3, 0};    // 1 ms a call, whatever the size
  e.down_bytes = {40, 0.25};  // the re-encoded sum (its size is measured: aggregate_bytes() cannot tell)
  in.costs = {free_cost("fp32"), e};
  in.replicas = 2;
  in.link = {125e6, 125e6, 0};  // 1 Gbit/s: 3.75 bytes saved an element, 2 replicas: 60 ns an element
  const tc::CodecChoice c = tc::choose_codecs(in);
  // big saves 240 ms, mid 6 ms, small 0.12 ms (< 1 ms), bias nothing.
  EXPECT_EQ(c.plan, (std::vector<std::string>{ef, ef, "fp32", "fp32"}));
  for (const tc::PlanEstimate& u : c.uniform) EXPECT_LT(c.estimate.total_s, u.total_s);
  EXPECT_THROW(tc::choose_codecs(tc::ChoiceInput{}), std::invalid_argument);
  in.replicas = 0;
  EXPECT_THROW(tc::choose_codecs(in), std::invalid_argument);
}
