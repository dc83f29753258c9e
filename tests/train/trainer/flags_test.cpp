// tg-train's flags: TernGrad script names, and every bad value is an error naming the flag.
#include <gtest/gtest.h>

#include "terngrad/train/train_config.h"

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
  EXPECT_NO_THROW(tt::validate(c));
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
}

}  // namespace
