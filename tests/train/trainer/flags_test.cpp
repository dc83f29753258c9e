// tg-train's flags: TernGrad script names, and every bad value is an error naming the flag.
#include <gtest/gtest.h>

#include "terngrad/train/train_config.h"

#include "plan_recheck.h"

namespace tt = terngrad::train;

namespace {

void expect_error(const std::vector<std::string>& args, const std::string& mention) {
  tt::TrainConfig c;
  try {
    tt::parse_train_flags(args, c);
    tt::validate(c);
    ADD_FAILURE() << "accepted " << args[0];
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
  }
}

TEST(TrainFlags, ParsesTernGradScriptFlags) {
  tt::TrainConfig c;
  tt::parse_train_flags({"--net=cifarnet", "--batch_size", "64", "--optimizer=adam", "--initial_learning_rate=0.0002",
                         "--num_nodes=16", "--grad_bits=2", "--clip_factor=2.5", "--size_to_binarize=9217",
                         "--quantize_logits=false", "--train_dir=/tmp/x", "--seed=7", "--max_steps=10"},
                        c);
  EXPECT_EQ(c.net, "cifarnet");
  EXPECT_EQ(c.batch_size, 64);
  EXPECT_EQ(c.optimizer, "adam");
  EXPECT_DOUBLE_EQ(c.initial_learning_rate, 0.0002);
  EXPECT_EQ(c.num_nodes, 16);
  EXPECT_EQ(c.grad_bits, 2);
  EXPECT_EQ(c.size_to_binarize, 9217);
  EXPECT_FALSE(c.quantize_logits);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_TRUE(c.retain_freed_memory);  // tg-train's default
  EXPECT_NO_THROW(tt::validate(c));
  tt::parse_train_flags({"--retain_freed_memory=false"}, c);
  EXPECT_FALSE(c.retain_freed_memory);
}

TEST(TrainFlags, AcceptsThePapersImageNetNets) {
  for (const char* net : {"alexnet", "googlenet", "vgg_a"}) {
    tt::TrainConfig c;
    tt::parse_train_flags({std::string("--net=") + net}, c);
    EXPECT_EQ(c.net, net);
  }
}

TEST(TrainFlags, RejectsUnknownFlagsAndBadValues) {
  expect_error({"--nett=lenet"}, "--nett");
  expect_error({"--net=vgg"}, "--net=vgg");
  expect_error({"--grad_bits=8"}, "grad_bits");
  expect_error({"--batch_size=abc"}, "batch_size");
  expect_error({"--batch_size=0"}, "--batch_size");
  expect_error({"--num_nodes=-2"}, "--num_nodes");
  expect_error({"--clip_factor=-1"}, "--clip_factor");
  expect_error({"--quantize_logits=maybe"}, "quantize_logits");
  expect_error({"--learning_rate_decay_type=exponential"}, "--decay_steps");
  expect_error({"--max_steps"}, "needs a value");
  expect_error({"lenet"}, "unexpected argument");
  expect_error({"--compute_nice=20"}, "--compute_nice");
  expect_error({"--compute_nice=-1"}, "--compute_nice");
  expect_error({"--push_lead_bytes=-1"}, "--push_lead_bytes");
  expect_error({"--retain_freed_memory=sometimes"}, "retain_freed_memory");
  expect_error({"--trace_file=/no/such/folder/trace.json"}, "/no/such/folder does not exist");
}

// --auto_link_changes (plan_recheck.h): STEP:RATE entries, steps ascending,
// each bad entry named; only with --codec=auto in a sync run.
TEST(TrainFlags, AutoLinkChangesAreStepsAndRatesNamedWhenWrong) {
  const auto changes = tt::parse_link_changes("100:1gbit,250:100mbit");
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0], (std::pair<int64_t, uint64_t>{100, 1000000000}));
  EXPECT_EQ(changes[1], (std::pair<int64_t, uint64_t>{250, 100000000}));
  expect_error({"--codec=auto", "--auto_link_changes=100"}, "entry \"100\" is not STEP:RATE");
  expect_error({"--codec=auto", "--auto_link_changes=0:1gbit"}, "entry \"0:1gbit\" has no step >= 1");
  expect_error({"--codec=auto", "--auto_link_changes=x:1gbit"}, "entry \"x:1gbit\"");
  expect_error({"--codec=auto", "--auto_link_changes=5:1gbit,5:1mbit"}, "entry \"5:1mbit\" does not come after");
  expect_error({"--codec=auto", "--auto_link_changes=5:fast"}, "entry \"5:fast\"");
  expect_error({"--codec=fp32", "--auto_link_changes=5:1gbit"}, "is for --codec=auto");
  expect_error({"--codec=auto(fp32,fp16)", "--sync_replicas=false", "--auto_link_changes=5:1gbit"}, "an async run keeps");
  expect_error({"--auto_recheck_secs=-1"}, "--auto_recheck_secs must be in [0, 86400]");
}

// A re-check chooses again only when a direction's rate moved by more than
// 2x (0 is no link: memory, faster than any link).
TEST(PlanRecheck, MovedMeansMoreThanTwiceEitherWayInEitherDirection) {
  using terngrad::comm::LinkModel;
  using terngrad::train::detail::PlanRecheck;
  const LinkModel gbit{125e6, 125e6, 1e-4};
  EXPECT_FALSE(PlanRecheck::moved(gbit, gbit));
  EXPECT_FALSE(PlanRecheck::moved(gbit, LinkModel{250e6, 62.5e6, 1e-3}));  // 2x exactly: not more
  EXPECT_TRUE(PlanRecheck::moved(gbit, LinkModel{251e6, 125e6, 0}));
  EXPECT_TRUE(PlanRecheck::moved(gbit, LinkModel{125e6, 62e6, 0}));
  EXPECT_TRUE(PlanRecheck::moved(gbit, LinkModel{}));
  EXPECT_TRUE(PlanRecheck::moved(LinkModel{}, gbit));
  EXPECT_FALSE(PlanRecheck::moved(LinkModel{}, LinkModel{}));
}

}  // namespace
