// An emulated network for a distributed run on one machine: every task in
// its own Linux network namespace, all joined by a bridge in a hub
// namespace, every task's link shaped in both directions with tc tbf.
//
//   hub namespace  <prefix>-<pid>-hub : bridge br0, one veth end per task
//   task namespace <prefix>-<pid>-ps0 : eth0 = 10.77.0.N/24, lo
//
// tbf on the task's eth0 shapes what the task sends; tbf on the hub's end of
// the same veth pair shapes what it receives (a qdisc only shapes egress, so
// each direction needs its own). The root namespace's interfaces are never
// touched. The namespaces carry the creating process's pid so that runs at
// the same time do not collide and leftovers of a dead process can be told
// from a live one's.
//
// Everything is done with iproute2's `ip` and `tc` run by fork/exec with an
// argument vector (no shell); a failing command throws NetworkError naming
// the command and its stderr. Needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN
// (namespaces are created with unshare and a bind mount, joined with setns).
#pragma once

#include "terngrad/comm/link_rate.h"

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace terngrad::experiments {

struct NetworkError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// This process may not create network namespaces (no CAP_NET_ADMIN /
// CAP_SYS_ADMIN, or `ip netns add` was refused).
struct NetworkPrivilegeError : NetworkError {
  using NetworkError::NetworkError;
};

// A rate in tc's syntax ("100mbit", "1gbit", "10gbit", "500kbit", "1.5mbit",
// "100Mibit", "12MBps" = megabytes per second, as tc reads it) in bits per
// second. A unit is required: tc reads a bare number as bits per second,
// which is never what "100" meant. Accepts 10kbit to 100gbit. Throws
// std::invalid_argument "--FLAG=VALUE: why".
uint64_t parse_link_rate(const std::string& flag, const std::string& text);
// The same check for a config field (terngrad/comm/link_rate.h).
using terngrad::comm::link_rate_problem;

// tbf's bucket (burst) and queue (limit) in bytes for a rate. Measured with
// bulk TCP between two namespaces through the bridge (README, emulated
// links): the bucket holds 1 ms at the rate (at least 4 KiB, more than one
// 1514-byte frame), the queue 10 ms more (at least 8 KiB). GSO/TSO stay on,
// with GSO packets no larger than the bucket (gso_max_bytes, set on each
// task's interface): tbf cuts a larger one into frames itself, and at
// 500 Mbit/s (a 62.5 KB bucket, 64 KiB packets) that made 10x the packets,
// cost more CPU than the training and drew thousands of spurious
// retransmissions. A bucket raised to a whole packet instead would let 64 KiB
// lumps past unshaped at low rates (13 ms of 40 Mbit/s).
struct TbfParams {
  uint64_t burst_bytes = 0;
  uint64_t limit_bytes = 0;
  uint64_t gso_max_bytes = 0;  // a GSO packet's data, its frames' headers leaving room in the bucket
};
TbfParams tbf_params(uint64_t rate_bps);

// The machine's default TCP congestion control (/proc/sys/net/ipv4/
// tcp_congestion_control), "" when it cannot be read.
std::string host_tcp_congestion();

// Why this process cannot create network namespaces ("" when it has
// CAP_NET_ADMIN and CAP_SYS_ADMIN in /proc/self/status CapEff).
std::string missing_network_privileges();

// Bytes through a task's interface, seen from the task.
struct LinkCounters {
  uint64_t tx_bytes = 0;  // what the task sent
  uint64_t rx_bytes = 0;  // what the task received
};

class EmulatedNetwork {
 public:
  struct Host {
    std::string name;     // "ps0", "chief0" (the task's namespace is <prefix>-<pid>-<name>)
    std::string netns;
    std::string address;  // 10.77.0.N
    uint64_t rate_bps = 0;
    std::string hub_if;   // its veth end in the hub namespace
  };

  // Sweeps leftovers of dead processes (sweep_leftovers), then creates the
  // hub namespace and its bridge. Throws NetworkPrivilegeError when this
  // process lacks the capabilities or `ip netns add` is refused,
  // NetworkError for any other failing command (after removing what it made).
  //
  // tcp_congestion: the congestion control every task's TCP uses on the
  // network (the route's `congctl`), "" for the machine's default. Pinned by
  // default to cubic, Linux's own default, because the machine's may be
  // anything and changes what the links carry: on a machine set to BBR, BBR
  // measured the empty veth's 10 us as its minimum RTT, kept its window near
  // that tiny BDP plus its TSO allowance, and with the tbf queue's
  // milliseconds of delay sent at 610 Mbit/s on a 1 Gbit/s link (`ss -ti`);
  // async LeNet with 2 replicas did 1.12x with cubic. std::invalid_argument
  // for a name that is not 1 to 15 lowercase letters, digits or '_';
  // add_host() throws NetworkError when the kernel has no such algorithm.
  explicit EmulatedNetwork(std::string prefix = "tgnet", std::string tcp_congestion = kDefaultTcpCongestion);
  static constexpr const char* kDefaultTcpCongestion = "cubic";
  const std::string& tcp_congestion() const { return tcp_congestion_; }
  // Removes everything it made (teardown).
  ~EmulatedNetwork();
  EmulatedNetwork(const EmulatedNetwork&) = delete;
  EmulatedNetwork& operator=(const EmulatedNetwork&) = delete;

  // A namespace for one task, its veth pair to the bridge, its address and
  // tbf at rate_bps on both ends. name: letters and digits, at most 12
  // characters (the hub's interface is "h-" + name, within Linux's 15).
  // At most 253 hosts (one /24).
  const Host& add_host(const std::string& name, uint64_t rate_bps);
  const std::vector<Host>& hosts() const { return hosts_; }
  // Host i's link shaped to rate_bps each way from now on (tc qdisc
  // replace on both ends: a link that degrades or is upgraded mid-run).
  // Throws NetworkError.
  void set_rate(size_t i, uint64_t rate_bps);

  // Forks a child that runs prepare_child (redirects, environment), joins the
  // host's namespace (setns) and execs argv[0] with argv. The child is killed
  // if this process dies (PR_SET_PDEATHSIG), so a launcher killed with
  // SIGKILL leaves namespaces (swept by the next run) but no tasks. A child
  // that cannot join or exec writes why to its stderr and exits 127.
  pid_t spawn(const Host& host, const std::vector<std::string>& argv, const std::function<void()>& prepare_child);

  // The host's eth0 byte counters (throws NetworkError).
  LinkCounters counters(const Host& host) const;

  // Kills every process still inside our namespaces, then deletes the task
  // namespaces (which removes their veth pairs) and the hub (its bridge).
  // Idempotent; never throws; problems go to stderr. Bounded in time.
  void teardown();

  const std::string& hub() const { return hub_; }
  const std::string& prefix() const { return prefix_; }

  // Names of the namespaces in /run/netns that belong to process pid.
  static std::vector<std::string> namespaces_of(const std::string& prefix, pid_t pid);
  // Removes the namespaces <prefix>-<pid>-* whose pid no longer runs (a
  // launcher killed with SIGKILL), killing any process left in them first.
  // Returns the names removed.
  static std::vector<std::string> sweep_leftovers(const std::string& prefix = "tgnet");
  // Processes whose network namespace is /run/netns/<netns>.
  static std::vector<pid_t> processes_in(const std::string& netns);

 private:
  std::string prefix_;
  std::string tcp_congestion_;
  std::string hub_;
  std::vector<std::string> made_;  // namespaces created, hub first
  std::vector<Host> hosts_;
  // tbf at rate_bps on both ends of h's link (verb: "add" or "replace").
  void shape(const Host& h, uint64_t rate_bps, const char* verb);
};

}  // namespace terngrad::experiments
