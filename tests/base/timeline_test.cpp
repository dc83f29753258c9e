// The timeline: what is recorded comes back from the file as Chrome trace
// events (spans with their duration and argument, instants, thread and
// process names), nothing is recorded before start(), and merge_files joins
// files and counter rows, refusing what is not a trace with the file's name.
#include "terngrad/base/timeline.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include "terngrad/base/json.h"

namespace {

namespace fs = std::filesystem;
namespace tl = terngrad::timeline;
using terngrad::json::Json;

Json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return terngrad::json::parse_strict(s.str());
}

// Every event of `trace` named `name`.
std::vector<Json> named(const Json& trace, const std::string& name) {
  std::vector<Json> out;
  for (const Json& e : trace.at("traceEvents"))
    if (e.contains("name") && e.at("name") == name) out.push_back(e);
  return out;
}

class Timeline : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_timeline_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// One test records everything: recording, once started, lasts the process.
TEST_F(Timeline, RecordsSpansInstantsAndNamesAndMergesWithCounters) {
  ASSERT_FALSE(tl::recording());
  { const tl::Span ignored("before start", 1); }
  tl::instant("before start");

  tl::start("replica 0");
  ASSERT_TRUE(tl::recording());
  tl::name_thread("main");
  const int64_t t0 = tl::now_us();
  {
    const tl::Span span("forward", 4);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  tl::instant("sum landed", 7);
  std::thread other([] {
    tl::name_thread("push sender");
    tl::complete("push a bucket", 100, 350);  // no argument
  });
  other.join();
  const int64_t t1 = tl::now_us();
  const fs::path file = dir_ / "replica.json";
  tl::write(file.string());

  const Json t = read_json(file);
  EXPECT_TRUE(named(t, "before start").empty());
  const auto forward = named(t, "forward");
  ASSERT_EQ(forward.size(), 1u);
  EXPECT_EQ(forward[0].at("ph"), "X");
  EXPECT_EQ(forward[0].at("args").at("n"), 4);
  EXPECT_GE(forward[0].at("dur").get<int64_t>(), 2000);
  EXPECT_GE(forward[0].at("ts").get<int64_t>(), t0);
  EXPECT_LE(forward[0].at("ts").get<int64_t>() + forward[0].at("dur").get<int64_t>(), t1);
  const auto landed = named(t, "sum landed");
  ASSERT_EQ(landed.size(), 1u);
  EXPECT_EQ(landed[0].at("ph"), "i");
  EXPECT_EQ(landed[0].at("args").at("n"), 7);
  const auto push = named(t, "push a bucket");
  ASSERT_EQ(push.size(), 1u);
  EXPECT_EQ(push[0].at("ts"), 100);
  EXPECT_EQ(push[0].at("dur"), 250);
  EXPECT_FALSE(push[0].contains("args"));
  EXPECT_NE(push[0].at("tid"), forward[0].at("tid"));  // another thread, another row
  const auto process = named(t, "process_name");
  ASSERT_EQ(process.size(), 1u);
  EXPECT_EQ(process[0].at("args").at("name"), "replica 0");
  std::set<std::string> threads;
  for (const Json& e : named(t, "thread_name")) threads.insert(e.at("args").at("name").get<std::string>());
  EXPECT_EQ(threads, (std::set<std::string>{"main", "push sender"}));

  // Merged: both files' events, and a counter row on the same clock.
  const fs::path other_file = dir_ / "other.json";
  {
    std::ofstream o(other_file);
    o << R"({"traceEvents":[{"name":"ps: sum","ph":"X","pid":9,"tid":1,"ts":5,"dur":3}]})";
  }
  tl::Counter link{"h-ps0 in, Mbit/s", {10, 20}, {950.0, 0.0}};
  const fs::path merged_file = dir_ / "trace.json";
  tl::merge_files({file.string(), other_file.string()}, {link}, merged_file.string());
  const Json m = read_json(merged_file);
  EXPECT_EQ(named(m, "forward").size(), 1u);
  EXPECT_EQ(named(m, "ps: sum").size(), 1u);
  const auto rates = named(m, "h-ps0 in, Mbit/s");
  ASSERT_EQ(rates.size(), 2u);
  EXPECT_EQ(rates[0].at("ph"), "C");
  EXPECT_EQ(rates[0].at("ts"), 10);
  EXPECT_EQ(rates[0].at("args").at("value"), 950.0);

  // What is not a trace is refused, naming the file; nothing is written.
  const fs::path bad = dir_ / "bad.json";
  {
    std::ofstream o(bad);
    o << R"({"events":[]})";
  }
  const fs::path not_written = dir_ / "not_written.json";
  try {
    tl::merge_files({file.string(), bad.string()}, {}, not_written.string());
    FAIL() << "a file without traceEvents was merged";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(bad.string()), std::string::npos) << e.what();
  }
  EXPECT_THROW(tl::merge_files({(dir_ / "missing.json").string()}, {}, not_written.string()), std::runtime_error);
  EXPECT_FALSE(fs::exists(not_written));
  tl::Counter uneven{"x", {1, 2}, {1.0}};
  EXPECT_THROW(tl::merge_files({}, {uneven}, not_written.string()), std::runtime_error);
  EXPECT_THROW(tl::write((dir_ / "no_such_dir" / "t.json").string()), std::runtime_error);
}

}  // namespace
