// Interface byte counters over rtnetlink (interface_counters.h).
#include "interface_counters.h"

#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace terngrad::experiments {

InterfaceCounters::InterfaceCounters(std::vector<std::string> interfaces) : names_(std::move(interfaces)) {
  for (const std::string& name : names_) {
    const unsigned index = ::if_nametoindex(name.c_str());
    if (index == 0) throw std::runtime_error("no interface " + name + " in this network namespace");
    ifindex_.push_back(static_cast<int>(index));
  }
  fd_ = ::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
  if (fd_ < 0) throw std::runtime_error(std::string("cannot open an rtnetlink socket: ") + std::strerror(errno));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0) {
    const int err = errno;
    ::close(fd_);
    throw std::runtime_error(std::string("cannot bind an rtnetlink socket: ") + std::strerror(err));
  }
}

InterfaceCounters::~InterfaceCounters() {
  if (fd_ >= 0) ::close(fd_);
}

bool InterfaceCounters::read(std::vector<uint64_t>& tx, std::vector<uint64_t>& rx) {
  tx.assign(ifindex_.size(), 0);
  rx.assign(ifindex_.size(), 0);
  for (size_t i = 0; i < ifindex_.size(); ++i)
    if (!read_one(ifindex_[i], tx[i], rx[i])) return false;
  return true;
}

bool InterfaceCounters::read_one(int ifindex, uint64_t& tx, uint64_t& rx) {
  struct {
    nlmsghdr head;
    if_stats_msg body;
  } req{};
  req.head.nlmsg_len = NLMSG_LENGTH(sizeof(if_stats_msg));
  req.head.nlmsg_type = RTM_GETSTATS;
  req.head.nlmsg_flags = NLM_F_REQUEST;
  req.head.nlmsg_seq = ++seq_;
  req.body.family = AF_UNSPEC;
  req.body.ifindex = ifindex;
  req.body.filter_mask = IFLA_STATS_FILTER_BIT(IFLA_STATS_LINK_64);
  if (::send(fd_, &req, req.head.nlmsg_len, 0) != static_cast<ssize_t>(req.head.nlmsg_len)) return false;
  // The reply: one RTM_NEWSTATS (an if_stats_msg, then IFLA_STATS_LINK_64),
  // or an NLMSG_ERROR. The kernel answers a request within send(), so the
  // reply is already queued; the sequence number guards against strays.
  alignas(nlmsghdr) char buf[1024];
  for (int tries = 0; tries < 4; ++tries) {
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    size_t left = static_cast<size_t>(n);
    for (auto* h = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(h, left); h = NLMSG_NEXT(h, left)) {
      if (h->nlmsg_seq != seq_) continue;  // not the answer to this request
      if (h->nlmsg_type != RTM_NEWSTATS || h->nlmsg_len < NLMSG_LENGTH(sizeof(if_stats_msg))) return false;
      auto* attr = reinterpret_cast<rtattr*>(static_cast<char*>(NLMSG_DATA(h)) + NLMSG_ALIGN(sizeof(if_stats_msg)));
      size_t attr_left = h->nlmsg_len - NLMSG_LENGTH(NLMSG_ALIGN(sizeof(if_stats_msg)));
      for (; RTA_OK(attr, attr_left); attr = RTA_NEXT(attr, attr_left)) {
        if (attr->rta_type != IFLA_STATS_LINK_64 || RTA_PAYLOAD(attr) < sizeof(rtnl_link_stats64)) continue;
        rtnl_link_stats64 stats;
        std::memcpy(&stats, RTA_DATA(attr), sizeof stats);
        tx = stats.tx_bytes;
        rx = stats.rx_bytes;
        return true;
      }
      return false;
    }
  }
  return false;
}

}  // namespace terngrad::experiments
