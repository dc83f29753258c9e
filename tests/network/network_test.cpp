// tg-cluster's emulated links (experiments/emulated_network.h): tc rate
// parsing; a bulk TCP transfer between two namespaces runs at the shaped
// rate in both directions; a 1-ps 1-replica fp32 run over shaped links takes
// at least payload / rate per step and moves the bytes its metrics report;
// leftovers of a dead launcher are swept by the next run; SIGTERM and
// SIGKILL to the launcher leave no namespaces and no tasks; tg-experiment
// sweeps --link_rates; without the privileges, or with `ip netns add`
// refused, the launcher says so (exit 2). Tests that need namespaces skip
// with a message where this process cannot make them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "emulated_network.h"
#include "interface_counters.h"
#include "link_sampler.h"
#include "run_command.h"
#include "terngrad/base/json.h"

namespace fs = std::filesystem;
namespace tx = terngrad::experiments;
namespace json = terngrad::json;
using Clock = std::chrono::steady_clock;
using terngrad::testing::Proc;
using terngrad::testing::run_command;

namespace {

// Why namespaces cannot be made here, or "" (tries once: the hub alone).
const std::string& why_no_namespaces() {
  static const std::string why = [] {
    try {
      tx::EmulatedNetwork probe;
      return std::string();
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  }();
  return why;
}

#define SKIP_WITHOUT_NAMESPACES()                                                                        \
  do {                                                                                                   \
    if (!why_no_namespaces().empty())                                                                    \
      GTEST_SKIP() << "cannot create network namespaces here: " << why_no_namespaces();                  \
  } while (0)

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

const json::Json& member(const json::Json& v, const std::string& key) {
  const auto it = v.find(key);
  if (it == v.end()) throw std::runtime_error("no member " + key);
  return *it;
}
double number(const json::Json& v, const std::string& key) { return member(v, key).get<double>(); }
std::string text(const json::Json& v, const std::string& key) { return member(v, key).get<std::string>(); }

// A live process (zombies, which hold no namespace and run nothing, count as gone).
bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z';
}

// Live processes whose command line mentions text (a test's unique train_dir).
std::vector<pid_t> live_processes_mentioning(const std::string& text) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = slurp(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    const pid_t pid = std::stoi(name);
    if (pid != getpid() && cmdline.find(text) != std::string::npos && alive(pid)) out.push_back(pid);
  }
  return out;
}

// A pid that no longer runs (a child that has exited and been reaped).
pid_t dead_pid() {
  const pid_t p = fork();
  if (p == 0) _exit(0);
  int st = 0;
  waitpid(p, &st, 0);
  return p;
}

// Waits for a child with a deadline; -1 when it did not end in time.
int wait_for(pid_t pid, double seconds, int* status) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    if (waitpid(pid, status, WNOHANG) == pid) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return -1;
}

class Network : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tg_network_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure()) fs::remove_all(dir_);
  }

  // LeNet on synthetic data, fp32 gradients (5 MB each way per step).
  std::vector<std::string> train_flags(int steps) const {
    return {"--net=lenet", "--dataset_name=synthetic", "--synthetic_examples=512", "--batch_size=8",
            "--max_steps=" + std::to_string(steps), "--grad_bits=32", "--log_every_n_steps=1",
            "--eval_batch_size=64", "--max_eval_examples=64", "--peer_timeout_secs=20", "--startup_timeout_secs=30",
            "--train_dir=" + (dir_ / "run").string()};
  }

  // Starts tg-cluster in the background, output to dir_/launcher.out;
  // extra: tg-train flags after train_flags(steps).
  pid_t start_cluster(const std::vector<std::string>& launcher_flags, int steps,
                      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {TG_CLUSTER_BIN, "--replica_threads=1"};
    args.insert(args.end(), launcher_flags.begin(), launcher_flags.end());
    args.push_back("--");
    for (const auto& f : train_flags(steps)) args.push_back(f);
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string out = (dir_ / "launcher.out").string();
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    return pid;
  }

  // Waits (bounded) until the chief has logged a training step.
  bool wait_for_training(pid_t launcher, double seconds) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      if (slurp(dir_ / "run" / "metrics.jsonl").find("\"event\":\"train\"") != std::string::npos) return true;
      int st = 0;
      if (waitpid(launcher, &st, WNOHANG) == launcher) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  fs::path dir_;
};

}  // namespace

TEST(LinkRate, ParsesTcSyntax) {
  EXPECT_EQ(tx::parse_link_rate("link_rate", "100mbit"), 100'000'000u);
  EXPECT_EQ(tx::parse_link_rate("link_rate", "1gbit"), 1'000'000'000u);
  EXPECT_EQ(tx::parse_link_rate("link_rate", "10gbit"), 10'000'000'000u);
  EXPECT_EQ(tx::parse_link_rate("link_rate", "500kbit"), 500'000u);
  EXPECT_EQ(tx::parse_link_rate("link_rate", "1.5mbit"), 1'500'000u);
  EXPECT_EQ(tx::parse_link_rate("link_rate", "100Mbit"), 100'000'000u) << "units are case-insensitive, as in tc";
  EXPECT_EQ(tx::parse_link_rate("link_rate", "1mibit"), 1'048'576u);
  EXPECT_EQ(tx::parse_link_rate("link_rate", "20000bit"), 20'000u);
  // tc's *bps units are bytes per second.
  EXPECT_EQ(tx::parse_link_rate("link_rate", "12.5mbps"), 100'000'000u);
  EXPECT_EQ(tx::parse_link_rate("link_rate", "100gbit"), 100'000'000'000u);
}

TEST(LinkRate, BadValuesAreRefusedNamingTheFlagAndValue) {
  struct Case {
    std::string text, fragment;
  };
  for (const Case& c : std::vector<Case>{{"", "expected a rate"},
                                          {"fast", "expected a rate"},
                                          {"100", "no unit"},
                                          {"100mbits", "unknown unit \"mbits\""},
                                          {"-5mbit", "expected a rate"},
                                          {"0mbit", "out of range"},
                                          {"1kbit", "out of range"},
                                          {"1tbit", "out of range"},
                                          {"1.2.3mbit", "expected a rate"},
                                          {" 100mbit", "expected a rate"},
                                          {"100 mbit", "unknown unit"}}) {
    try {
      tx::parse_link_rate("ps_link_rate", c.text);
      ADD_FAILURE() << "accepted \"" << c.text << "\"";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("--ps_link_rate=" + c.text + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(c.fragment), std::string::npos) << what;
    }
  }
}

TEST(LinkRate, TbfBucketHoldsAFrameAndAMillisecond) {
  for (uint64_t rate : {10'000ull, 500'000ull, 100'000'000ull, 1'000'000'000ull, 10'000'000'000ull}) {
    const tx::TbfParams p = tx::tbf_params(rate);
    EXPECT_GE(p.burst_bytes, 1514u) << rate << ": a full Ethernet frame must fit the bucket";
    EXPECT_LE(p.gso_max_bytes + (p.gso_max_bytes / 1448 + 1) * 66, p.burst_bytes)
        << rate << ": a GSO packet with its frames' headers must fit the bucket, or tbf splits it";
    EXPECT_LE(p.gso_max_bytes, 65536u) << rate;
    EXPECT_GE(p.burst_bytes, rate / 8 / 1000) << rate;
    EXPECT_GT(p.limit_bytes, p.burst_bytes) << rate;
  }
  EXPECT_EQ(tx::tbf_params(10'000'000'000ull).burst_bytes, 1'250'000u);
  EXPECT_EQ(tx::tbf_params(10'000'000'000ull).limit_bytes, 1'250'000u + 12'500'000u);
}

TEST(LinkRate, TgClusterRefusesBadLinkFlags) {
  struct Case {
    std::string flags, fragment;
  };
  for (const Case& c : std::vector<Case>{
           {"--link_rate=fast", "--link_rate=fast: expected a rate"},
           {"--link_rate=100", "--link_rate=100: no unit"},
           {"--link_rate=100mbit --ps_link_rate=1zbit", "--ps_link_rate=1zbit: unknown unit"},
           {"--ps_link_rate=50mbit", "--ps_link_rate=50mbit needs --link_rate"},
           {"--link_rate=100mbit --host=127.0.0.1", "--host=127.0.0.1 with --link_rate"},
           {"--link_rate_changes=5:1gbit", "--link_rate_changes needs --link_rate"},
           {"--link_rate=1gbit --link_rate_changes=5", "entry \"5\" is not SECS:RATE"},
           {"--link_rate=1gbit --link_rate_changes=5:1gbit,3:1mbit", "entry \"3:1mbit\" does not come after the time before it"},
           {"--link_rate=1gbit --link_rate_changes=0:1gbit", "entry \"0:1gbit\" has no seconds > 0 before its ':'"},
           {"--link_rate=1gbit --link_rate_changes=2:fast", "entry \"2:fast\" expected a rate in tc's syntax"},
           {"--link_rate=1gbit --link_rate_changes=5:fast", "fast"},
           {"--tcp_congestion=reno", "--tcp_congestion=reno needs --link_rate"},
           {"--link_rate=1gbit --tcp_congestion=", "name an algorithm"},
           {"--link_rate=1gbit --tcp_congestion=Cubic", "1 to 15 lowercase letters"}}) {
    const Proc p = run_command(std::string(TG_CLUSTER_BIN) + " " + c.flags + " -- --net=lenet --max_steps=1");
    EXPECT_EQ(p.exit_code, 2) << c.flags << "\n" << p.output;
    EXPECT_NE(p.output.find(c.fragment), std::string::npos) << c.flags << "\n" << p.output;
  }
}

// One bulk transfer each way between a 40 Mbit/s host and a 200 Mbit/s one:
// both directions run at the slow host's rate (its egress shaper on one,
// the hub's shaper towards it on the other), and its counters see the bytes.
// The sampler's netlink counters against the kernel's text of the same
// counters: /proc/net/dev, read between two netlink reads of loopback
// (which other processes may use meanwhile, so the counters only grow).
TEST(InterfaceCounters, AgreeWithProcNetDev) {
  tx::InterfaceCounters counters({"lo"});
  std::vector<uint64_t> tx0, rx0, tx1, rx1;
  ASSERT_TRUE(counters.read(tx0, rx0));
  std::ifstream dev("/proc/self/net/dev");
  uint64_t proc_rx = 0, proc_tx = 0;
  bool found = false;
  for (std::string line; std::getline(dev, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;  // the two heading lines
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != "lo") continue;
    std::istringstream in(line.substr(colon + 1));
    uint64_t f[9];
    for (uint64_t& x : f) ASSERT_TRUE(in >> x) << line;
    proc_rx = f[0];
    proc_tx = f[8];
    found = true;
  }
  ASSERT_TRUE(found) << "no lo in /proc/self/net/dev";
  ASSERT_TRUE(counters.read(tx1, rx1));
  EXPECT_LE(tx0[0], proc_tx);
  EXPECT_LE(proc_tx, tx1[0]);
  EXPECT_LE(rx0[0], proc_rx);
  EXPECT_LE(proc_rx, rx1[0]);
}

TEST(InterfaceCounters, AMissingInterfaceIsNamed) {
  try {
    tx::InterfaceCounters counters({"lo", "tg-nosuch0"});
    FAIL() << "no error for a missing interface";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tg-nosuch0"), std::string::npos) << e.what();
  }
}

TEST(EmulatedNetworkLinks, BulkTransfersRunAtTheShapedRateBothWays) {
  SKIP_WITHOUT_NAMESPACES();
  const Proc py = run_command("python3 -c 'import socket'");
  if (py.exit_code != 0) GTEST_SKIP() << "python3 (the transfer's two ends) is not available: " << py.output;
  const uint64_t slow = 40'000'000, fast = 200'000'000;
  const int64_t bytes = 7'500'000;  // 1.5 s at 40 Mbit/s
  tx::EmulatedNetwork net;
  const auto a = net.add_host("a", slow);
  const auto b = net.add_host("b", fast);
  ASSERT_EQ(a.address, "10.77.0.1");
  ASSERT_EQ(b.address, "10.77.0.2");
  EXPECT_EQ(tx::EmulatedNetwork::namespaces_of("tgnet", getpid()).size(), 3u) << "hub, a, b";
  // Every host's TCP runs the pinned algorithm, whatever the machine's default.
  ASSERT_EQ(net.tcp_congestion(), "cubic");
  for (const auto& h : {a, b}) {
    const Proc route = run_command("ip -n " + h.netns + " route get 10.77.0.9");
    EXPECT_NE(route.output.find("congctl cubic"), std::string::npos) << h.name << ": " << route.output;
  }
  // The receiver times from the first byte to the end, so connection setup
  // and the bucket's first burst barely count.
  const std::string sink =
      "import socket,sys,time\n"
      "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind((sys.argv[1], 5001)); s.listen(1); c,_=s.accept(); n=0; t0=None\n"
      "while True:\n"
      "  d=c.recv(1<<20)\n"
      "  if not d: break\n"
      "  if t0 is None: t0=time.monotonic()\n"
      "  n+=len(d)\n"
      "print(n, time.monotonic()-t0, flush=True)\n";
  const std::string source =
      "import socket,sys,time\n"
      "for i in range(100):\n"
      "  try:\n"
      "    c=socket.create_connection((sys.argv[1], 5001)); break\n"
      "  except OSError: time.sleep(0.05)\n"
      "buf=b'x'*(1<<20); left=int(sys.argv[2])\n"
      "while left>0:\n"
      "  c.sendall(buf[:min(left,len(buf))]); left-=min(left,len(buf))\n"
      "c.close()\n";
  for (const bool a_sends : {true, false}) {
    SCOPED_TRACE(a_sends ? "a -> b (a's uplink)" : "b -> a (a's downlink)");
    const auto& from = a_sends ? a : b;
    const auto& to = a_sends ? b : a;
    // Up to 3 tries: the 2 cores are shared with whatever else runs, and a
    // starved receiver lowers goodput; a shaper never lets it go above.
    double best = 0;
    for (int attempt = 0; attempt < 3 && best < 0.85 * slow / 1e6; ++attempt) {
      const tx::LinkCounters before = net.counters(a);
      const fs::path out = fs::temp_directory_path() / ("tg_network_sink_" + std::to_string(getpid()));
      const pid_t rx = net.spawn(to, {"/usr/bin/env", "python3", "-c", sink, to.address}, [&out] {
        const int fd = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
      });
      const pid_t tx_pid =
          net.spawn(from, {"/usr/bin/env", "python3", "-c", source, to.address, std::to_string(bytes)}, [] {});
      int st = 0;
      ASSERT_EQ(wait_for(tx_pid, 30, &st), tx_pid) << "the sender did not finish";
      EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
      ASSERT_EQ(wait_for(rx, 10, &st), rx) << "the receiver did not finish";
      const std::string result = slurp(out);
      fs::remove(out);
      std::istringstream in(result);
      int64_t got = 0;
      double secs = 0;
      ASSERT_TRUE(in >> got >> secs) << result;
      EXPECT_EQ(got, bytes);
      const double mbit = got * 8 / secs / 1e6;
      std::printf("[ measured ] %s at %.0f Mbit/s shaped: %.1f Mbit/s goodput\n", a_sends ? "a -> b" : "b -> a",
                  slow / 1e6, mbit);
      EXPECT_LE(mbit, 1.02 * slow / 1e6) << "faster than the link: not shaped";
      best = std::max(best, mbit);
      const tx::LinkCounters after = net.counters(a);
      if (a_sends) EXPECT_GE(after.tx_bytes - before.tx_bytes, static_cast<uint64_t>(bytes));
      else EXPECT_GE(after.rx_bytes - before.rx_bytes, static_cast<uint64_t>(bytes));
    }
    // Goodput is at most the rate less the headers (tbf counts whole frames:
    // 1448 of 1514 bytes are payload, 95.6%); 85% is the bar for the bucket.
    EXPECT_GE(best, 0.85 * slow / 1e6);
  }
  net.teardown();
  EXPECT_TRUE(tx::EmulatedNetwork::namespaces_of("tgnet", getpid()).empty());
}

// The link sampler on a link that carries bursts: 3 bursts of 1 MB at
// 40 Mbit/s (0.2 s each) 0.5 s apart. The sending direction idles between
// them, the other (ACKs only, about 2% of the rate) all the time, and the
// bytes counted are the bursts' (plus headers).
TEST(EmulatedNetworkLinks, LinkSamplerSeesTheGapsBetweenBursts) {
  SKIP_WITHOUT_NAMESPACES();
  const Proc py = run_command("python3 -c 'import socket'");
  if (py.exit_code != 0) GTEST_SKIP() << "python3 (the transfer's two ends) is not available: " << py.output;
  const uint64_t rate = 40'000'000;
  const int64_t burst = 1'000'000;
  tx::EmulatedNetwork net;
  const auto a = net.add_host("a", rate);
  const auto b = net.add_host("b", rate);
  const std::string sink =
      "import socket,sys\n"
      "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
      "s.bind((sys.argv[1], 5002)); s.listen(1); c,_=s.accept()\n"
      "while c.recv(1<<20): pass\n";
  // Each burst waits until the last one has left the socket (SIOCOUTQ), so
  // the gaps are on the link, not in the sender's buffer.
  const std::string source =
      "import socket,sys,time,fcntl,struct\n"
      "for i in range(100):\n"
      "  try:\n"
      "    c=socket.create_connection((sys.argv[1], 5002)); break\n"
      "  except OSError: time.sleep(0.05)\n"
      "for k in range(3):\n"
      "  c.sendall(b'x'*int(sys.argv[2]))\n"
      "  while struct.unpack('i', fcntl.ioctl(c, 0x5411, b'\\0'*4))[0] > 0: time.sleep(0.005)\n"
      "  if k < 2: time.sleep(0.5)\n"
      "c.close()\n";
  tx::LinkSampler sampler(net.hub(), {a.hub_if, b.hub_if}, rate);
  const pid_t rx = net.spawn(b, {"/usr/bin/env", "python3", "-c", sink, b.address}, [] {});
  const pid_t tx_pid =
      net.spawn(a, {"/usr/bin/env", "python3", "-c", source, b.address, std::to_string(burst)}, [] {});
  int st = 0;
  ASSERT_EQ(wait_for(tx_pid, 30, &st), tx_pid) << "the sender did not finish";
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_EQ(wait_for(rx, 10, &st), rx) << "the receiver did not finish";
  const tx::LinkIdleReport r = sampler.stop();
  ASSERT_EQ(r.links.size(), 2u);
  const tx::LinkIdle& sender = r.links[0];  // seen from a: it sends ("out")
  std::printf("[ measured ] window %.2f s over %llu samples; a's link idle: out %.2f s, in %.2f s; out unused %.2f\n",
              r.window_s, static_cast<unsigned long long>(r.samples), sender.out_idle_s, sender.in_idle_s,
              sender.out_unused);
  // Three bursts of 0.2 s and two gaps of 0.5 s: about 1.6 s.
  EXPECT_GT(r.window_s, 1.3);
  EXPECT_LT(r.window_s, 2.5);
  EXPECT_GE(sender.out_idle_s, 0.8) << "the two gaps";
  EXPECT_LE(sender.out_idle_s, r.window_s - 0.4) << "the bursts are not idle";
  // ACKs only: a few percent of the rate, mostly under the idle threshold
  // (at 1 ms samples two or three ACKs can cross it).
  EXPECT_GE(sender.in_unused, 0.94) << "ACKs only";
  EXPECT_GE(sender.in_idle_s, 0.6 * r.window_s) << "ACKs only";
  EXPECT_GE(sender.out_bytes, static_cast<uint64_t>(3 * burst));
  EXPECT_LE(sender.out_bytes, static_cast<uint64_t>(3 * burst * 1.1));
  EXPECT_NEAR(sender.out_unused, 1 - 3 * burst * 8.0 / rate / r.window_s, 0.1);
  // b's link mirrors a's: what a sent, b received.
  EXPECT_GE(r.links[1].in_bytes, static_cast<uint64_t>(3 * burst));
  EXPECT_THROW(tx::LinkSampler(net.hub(), {"h-nosuch"}, rate), std::runtime_error);
  net.teardown();
}

// A 1-ps 1-replica run with fp32 gradients over a 50 Mbit/s ps link: each
// step pushes 5 MB to the ps and pulls 5 MB back, so a step cannot take less
// than payload / rate (0.8 s) one way; unshaped it takes a tenth of that.
// It also starts with a leftover of a launcher that no longer runs, which
// the run removes.
TEST_F(Network, ShapedRunTakesAtLeastPayloadOverRateAndLeavesNothing) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string leftover = "tgnet-" + std::to_string(dead_pid()) + "-ps0";
  const Proc add = run_command("ip netns add " + leftover);
  ASSERT_EQ(add.exit_code, 0) << add.output;

  const int steps = 4;
  const uint64_t ps_rate = 50'000'000, rate = 100'000'000;
  const pid_t launcher = start_cluster({"--num_ps=1", "--num_workers=0", "--link_rate=100mbit", "--ps_link_rate=50mbit"},
                                       steps);
  int st = 0;
  ASSERT_EQ(wait_for(launcher, 50, &st), launcher) << "the run did not end in 50 s:\n" << slurp(dir_ / "launcher.out");
  const std::string out = slurp(dir_ / "launcher.out");
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("removed " + leftover), std::string::npos) << out;
  EXPECT_FALSE(fs::exists("/run/netns/" + leftover)) << "the next run sweeps a dead launcher's leftovers";
  EXPECT_NE(out.find("tg-cluster: ps links (50mbit each way)"), std::string::npos) << out;

  // link_stats.json
  const json::Json stats = json::parse_strict(slurp(dir_ / "run" / "logs" / "link_stats.json"));
  EXPECT_EQ(number(stats, "link_rate_bps"), rate);
  EXPECT_EQ(number(stats, "ps_link_rate_bps"), ps_rate);
  EXPECT_EQ(text(stats, "outcome"), "ok");
  const double wall = number(stats, "wall_seconds");
  std::map<std::string, const json::Json*> task;
  for (const auto& t : member(stats, "tasks")) task[text(t, "task")] = &t;
  ASSERT_EQ(task.size(), 2u);
  const json::Json& ps = *task.at("ps-0");
  const json::Json& chief = *task.at("chief-0");
  EXPECT_EQ(text(ps, "address"), "10.77.0.1");
  EXPECT_EQ(text(chief, "address"), "10.77.0.2");
  EXPECT_EQ(number(ps, "link_rate_bps"), ps_rate);
  EXPECT_EQ(number(chief, "link_rate_bps"), rate);

  // The chief's metrics: bytes per step and the steps' times.
  std::ifstream metrics(dir_ / "run" / "metrics.jsonl");
  double payload = 0, slowest_rate_time = 0;
  std::vector<double> step_secs;
  for (std::string line; std::getline(metrics, line);) {
    const json::Json m = json::parse_strict(line);
    if (text(m, "event") != "train") continue;
    payload = number(m, "bytes_sent_per_worker");
    step_secs.push_back(8 / number(m, "examples_per_sec"));  // batch 8, one step per line
  }
  ASSERT_EQ(static_cast<int>(step_secs.size()), steps);
  ASSERT_GT(payload, 4e6) << "fp32 LeNet gradients are 5 MB";
  slowest_rate_time = payload * 8 / ps_rate;
  for (size_t i = 0; i < step_secs.size(); ++i) {
    std::printf("[ measured ] step %zu: %.3f s; %.0f bytes each way / 50 Mbit/s = %.3f s\n", i + 1, step_secs[i],
                payload, slowest_rate_time);
    EXPECT_GE(step_secs[i], slowest_rate_time) << "step " << i + 1 << " faster than its payload over the ps link";
  }
  // The interface counts: every step's push reached the ps and every pull
  // left it; and never faster than the link (plus one bucket).
  const double ps_rx = number(ps, "rx_bytes"), ps_tx = number(ps, "tx_bytes");
  std::printf("[ measured ] ps-0 received %.0f and sent %.0f bytes in %.2f s (%.1f / %.1f Mbit/s)\n", ps_rx, ps_tx,
              wall, ps_rx * 8 / wall / 1e6, ps_tx * 8 / wall / 1e6);
  EXPECT_GE(ps_rx, steps * payload);
  EXPECT_GE(ps_tx, steps * payload);
  EXPECT_GE(number(chief, "tx_bytes"), steps * payload);
  const double bucket = static_cast<double>(tx::tbf_params(ps_rate).burst_bytes);
  EXPECT_LE(ps_rx * 8, ps_rate * wall + 8 * bucket);
  EXPECT_LE(ps_tx * 8, ps_rate * wall + 8 * bucket);

  // The ps link's idle time: each direction is busy at least the steps'
  // payload over the rate, and idles in the gaps between (the compute; the
  // sums stream back while the pushes go out, so the directions overlap).
  const json::Json& idle = member(stats, "ps_link_idle");
  EXPECT_EQ(number(idle, "steps"), steps);
  const double window = number(idle, "window_seconds");
  EXPECT_GE(window, steps * slowest_rate_time);
  EXPECT_LE(window, wall);
  const json::Json& link = member(idle, "links")[0];
  EXPECT_EQ(text(link, "interface"), "h-ps0");
  std::printf("[ measured ] ps link busy for %.2f s: idle in %.2f s, out %.2f s\n", window,
              number(link, "in_idle_seconds"), number(link, "out_idle_seconds"));
  EXPECT_GE(number(link, "in_bytes"), 0.9 * steps * payload);
  EXPECT_GE(number(link, "out_bytes"), 0.9 * steps * payload);
  for (const char* dir : {"in_idle_seconds", "out_idle_seconds"}) {
    EXPECT_GT(number(link, dir), 0) << dir;
    EXPECT_LE(number(link, dir), window - 0.9 * steps * slowest_rate_time) << dir;
  }
  EXPECT_NEAR(number(idle, "in_idle_ms_per_step"), 1e3 * number(link, "in_idle_seconds") / steps, 1e-6);
  EXPECT_TRUE(fs::exists(dir_ / "run" / "logs" / "ps_link_timeline.csv"));

  // Nothing left: the launcher's namespaces and its tasks are gone.
  EXPECT_TRUE(tx::EmulatedNetwork::namespaces_of("tgnet", launcher).empty());
  EXPECT_TRUE(live_processes_mentioning(dir_.string()).empty());
}

// SIGTERM mid-run: the launcher stops the tasks, then removes the namespaces.
// --codec=auto in a cluster whose links get faster mid-run (tg-cluster
// --link_rate_changes): the chief probes the ps again at each checkpoint,
// and once the rate it measures has moved by more than 2x from the 40 Mbit/s
// it chose for, it chooses again (plan_recheck.h); the run goes on to its
// end whatever it chose. The codecs' costs are measured first (cached), so
// the chief's first probe comes before the change; probes at most every
// 3 s (--auto_recheck_secs; the default, 20 probes' time, is about 20 s).
TEST_F(Network, AutoCodecProbesAgainAtCheckpointsAndSeesTheLinkMove) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string costs = "--codec_costs=" + (dir_ / "codec_costs.json").string();
  const Proc calibrate = run_command(std::string(TG_TRAIN_BIN) + " --net=lenet --dataset_name=synthetic "
                                     "--synthetic_examples=64 --batch_size=8 --max_steps=1 --quiet=true --threads=1 "
                                     "--codec=auto --auto_link_rate=1gbit " + costs);
  ASSERT_EQ(calibrate.exit_code, 0) << calibrate.output;
  const pid_t launcher = start_cluster({"--num_ps=1", "--num_workers=1", "--link_rate=40mbit",
                                        "--link_rate_changes=8:100mbit", "--timeout_secs=80"},
                                       200, {"--codec=auto", "--save_interval_steps=20", "--auto_recheck_secs=3", costs});
  int st = 0;
  ASSERT_EQ(wait_for(launcher, 85, &st), launcher) << "the run did not end in 85 s:\n" << slurp(dir_ / "launcher.out");
  const std::string out = slurp(dir_ / "launcher.out");
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << out;
  EXPECT_NE(out.find("every link now 100 Mbit/s each way"), std::string::npos) << out;
  const std::string chief = slurp(dir_ / "run" / "logs" / "chief-0.log");
  EXPECT_NE(chief.find("link: probe of 1 ps"), std::string::npos) << chief;
  const size_t again = chief.find("--codec=auto: after step ");
  ASSERT_NE(again, std::string::npos) << "no re-check saw the link move:\n" << chief;
  const std::string line = chief.substr(again, chief.find('\n', again) - again);
  std::printf("[ measured ] %s\n", line.c_str());
  EXPECT_NE(line.find("(was "), std::string::npos) << line;
  EXPECT_TRUE(line.find("choosing again") != std::string::npos || line.find("the choice stands") != std::string::npos)
      << line;
  EXPECT_TRUE(tx::EmulatedNetwork::namespaces_of("tgnet", launcher).empty());
}

TEST_F(Network, SigtermMidRunLeavesNothingBehind) {
  SKIP_WITHOUT_NAMESPACES();
  const pid_t launcher = start_cluster({"--num_ps=1", "--num_workers=1", "--link_rate=1gbit"}, 1000000);
  ASSERT_TRUE(wait_for_training(launcher, 40)) << slurp(dir_ / "launcher.out");
  const std::vector<std::string> namespaces = tx::EmulatedNetwork::namespaces_of("tgnet", launcher);
  EXPECT_EQ(namespaces.size(), 4u) << "hub, ps0, chief0, worker0";
  std::vector<pid_t> tasks;
  for (const auto& ns : namespaces)
    for (pid_t p : tx::EmulatedNetwork::processes_in(ns)) tasks.push_back(p);
  EXPECT_EQ(tasks.size(), 3u);
  ASSERT_EQ(kill(launcher, SIGTERM), 0);
  int st = 0;
  ASSERT_EQ(wait_for(launcher, 20, &st), launcher) << "the launcher did not end 20 s after SIGTERM";
  const std::string out = slurp(dir_ / "launcher.out");
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 1) << out;
  EXPECT_NE(out.find("FAILED: interrupted"), std::string::npos) << out;
  EXPECT_TRUE(tx::EmulatedNetwork::namespaces_of("tgnet", launcher).empty());
  for (pid_t p : tasks) EXPECT_FALSE(alive(p)) << "task pid " << p;
  EXPECT_TRUE(live_processes_mentioning(dir_.string()).empty());
  // The statistics are written for an interrupted run too.
  EXPECT_NE(slurp(dir_ / "run" / "logs" / "link_stats.json").find("\"outcome\": \"interrupted\""), std::string::npos);
}

// SIGKILL cannot be caught: the tasks die with the launcher (PDEATHSIG), the
// namespaces stay until the next run's sweep, which removes them.
TEST_F(Network, SigkilledLauncherLeavesNoTasksAndItsNamespacesAreSwept) {
  SKIP_WITHOUT_NAMESPACES();
  const pid_t launcher = start_cluster({"--num_ps=1", "--num_workers=0", "--link_rate=1gbit"}, 1000000);
  ASSERT_TRUE(wait_for_training(launcher, 40)) << slurp(dir_ / "launcher.out");
  const std::vector<std::string> namespaces = tx::EmulatedNetwork::namespaces_of("tgnet", launcher);
  EXPECT_EQ(namespaces.size(), 3u);
  ASSERT_EQ(kill(launcher, SIGKILL), 0);
  int st = 0;
  ASSERT_EQ(wait_for(launcher, 10, &st), launcher);
  const auto until = Clock::now() + std::chrono::seconds(5);
  while (!live_processes_mentioning(dir_.string()).empty() && Clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(live_processes_mentioning(dir_.string()).empty()) << "tasks outlived their launcher";
  EXPECT_EQ(tx::EmulatedNetwork::namespaces_of("tgnet", launcher), namespaces) << "left for the next run";
  // What the next run (or any EmulatedNetwork) does first.
  const std::vector<std::string> swept = tx::EmulatedNetwork::sweep_leftovers();
  for (const auto& ns : namespaces) EXPECT_NE(std::find(swept.begin(), swept.end(), ns), swept.end()) << ns;
  EXPECT_TRUE(tx::EmulatedNetwork::namespaces_of("tgnet", launcher).empty());
}

// tg-experiment passes a config's link rates to tg-cluster and sweeps
// --link_rates: each rate's run directory has its own link_stats.json.
TEST_F(Network, TgExperimentSweepsLinkRates) {
  SKIP_WITHOUT_NAMESPACES();
  std::ofstream(dir_ / "links.pbtxt") << "name: \"links\"\n"
                                         "model { net: LENET moving_average_decay: 0 }\n"
                                         "dataset { format: SYNTHETIC synthetic_examples: 128 }\n"
                                         "cluster { mode: LOCAL_CLUSTER num_workers: 1 ps_link_rate: \"200mbit\" "
                                         "link_rate: \"1gbit\" }\n"
                                         "training { batch_per_worker: 8 steps: 3 }\n"
                                         "optimizer { type: SGD learning_rate: 0.01 }\n"
                                         "evaluation { max_examples: 64 batch_size: 64 log_every_n_steps: 1 }\n"
                                         "codec { name: \"terngrad\" }\n";
  const Proc p = run_command(std::string(TG_EXPERIMENT_BIN) + " run " + (dir_ / "links.pbtxt").string() +
                             " --link_rates=100mbit,1gbit --out=" + (dir_ / "runs").string());
  ASSERT_EQ(p.exit_code, 0) << p.output;
  for (const auto& [rate, bps] : {std::pair<std::string, double>{"100mbit", 1e8}, {"1gbit", 1e9}}) {
    const fs::path run = dir_ / "runs/links" / ("link-" + rate) / "w1/seed1";
    const json::Json stats = json::parse_strict(slurp(run / "logs/link_stats.json"));
    EXPECT_EQ(number(stats, "link_rate_bps"), bps) << rate;
    EXPECT_EQ(number(stats, "ps_link_rate_bps"), 2e8) << "the config's ps rate stays";
    EXPECT_NE(slurp(run / "run.json").find("\"link_rate\": \"" + rate + "\""), std::string::npos) << rate;
    EXPECT_TRUE(fs::exists(run / "result.json")) << rate;
  }
  EXPECT_TRUE(live_processes_mentioning(dir_.string()).empty());
}

// Without CAP_NET_ADMIN (every capability dropped, still uid 0) the launcher
// stops at once, exit 2, saying what it needs.
TEST_F(Network, WithoutPrivilegesItSaysSo) {
  // Already without them (not root): as it is; else every capability dropped.
  std::string prefix;
  if (tx::missing_network_privileges().empty()) {
    const Proc has = run_command("setpriv --help");
    if (has.exit_code != 0) GTEST_SKIP() << "setpriv (util-linux) is not available to drop capabilities";
    prefix = "setpriv --inh-caps=-all --bounding-set=-all -- ";
  }
  const Proc p = run_command(prefix + TG_CLUSTER_BIN +
                             " --num_ps=1 --num_workers=0 --link_rate=100mbit -- --net=lenet --max_steps=1"
                             " --train_dir=" + (dir_ / "run").string());
  if (p.output.find("setpriv:") != std::string::npos) GTEST_SKIP() << "setpriv cannot drop capabilities here: " << p.output;
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("--link_rate=100mbit: emulated links need root"), std::string::npos) << p.output;
  EXPECT_NE(p.output.find("lacks CAP_NET_ADMIN"), std::string::npos) << p.output;
  EXPECT_LT(p.seconds, 10);
}

// With the capabilities but `ip netns add` refused (a sandbox without
// /run/netns mounts; stood in for by an `ip` first on PATH that fails the
// way iproute2 does there): the same exit 2, naming the command and its error.
TEST_F(Network, RefusedNetnsAddSaysSo) {
  if (!tx::missing_network_privileges().empty()) GTEST_SKIP() << "needs the capabilities to get that far";
  const fs::path bin = dir_ / "bin";
  fs::create_directories(bin);
  std::ofstream(bin / "ip") << "#!/bin/sh\necho 'mount --make-shared /run/netns failed: Operation not permitted' >&2\n"
                               "exit 1\n";
  fs::permissions(bin / "ip", fs::perms::owner_all);
  const Proc p = run_command("PATH=" + bin.string() + ":$PATH " + TG_CLUSTER_BIN +
                             " --num_ps=1 --num_workers=0 --link_rate=100mbit -- --net=lenet --max_steps=1"
                             " --train_dir=" + (dir_ / "run").string());
  EXPECT_EQ(p.exit_code, 2) << p.output;
  EXPECT_NE(p.output.find("--link_rate=100mbit: cannot create a network namespace: `ip netns add tgnet-"),
            std::string::npos) << p.output;
  EXPECT_NE(p.output.find("failed with exit status 1: mount --make-shared /run/netns failed"), std::string::npos)
      << p.output;
}
