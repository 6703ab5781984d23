// The kernel's rtnetlink tables (links, addresses, routes, neighbours) as plain records, over
// libmnl. One NetlinkSocket per use: dumps and requests on blocking sockets, events on a
// non-blocking one subscribed to multicast groups. A socket stays bound to the network
// namespace it was opened in.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/net.h"

struct mnl_socket;
struct nlmsghdr;

namespace vecflow {

struct KernelLink {
  int ifindex = 0;
  std::string name;
  bool running = false;  // IFF_UP and IFF_RUNNING: the link can carry frames
};

struct KernelAddress {
  int ifindex = 0;
  IpAddress ip;
  uint8_t scope = 0;       // RT_SCOPE_UNIVERSE (0) for global addresses, RT_SCOPE_LINK ...
  bool secondary = false;  // IFA_F_SECONDARY: another address of its subnet is the primary
};

struct KernelNeighbour {
  int ifindex = 0;
  IpAddress ip;
  std::optional<MacAddress> mac;  // set only in a state the kernel forwards with
};

struct KernelNextHop {
  int ifindex = 0;
  std::optional<IpAddress> via;
};

struct KernelRoute {
  IpPrefix prefix;
  uint8_t type = 0;  // RTN_UNICAST, RTN_LOCAL, RTN_BLACKHOLE ...
  uint32_t table = 0;
  uint32_t metric = 0;
  uint8_t protocol = 0;  // who installed it: RTPROT_KERNEL, RTPROT_STATIC, RTPROT_BGP ...
  std::vector<KernelNextHop> nexthops;
  bool foreign_gateway = false;  // a next hop vecflow cannot express (RTA_VIA, nexthop object)
};

// One event read from a subscribed socket.
struct KernelEvent {
  enum class Kind { Link, Address, Route, Neighbour, Overrun } kind;
  bool deleted = false;
  std::optional<KernelNeighbour> neighbour;  // for Kind::Neighbour
};

class NetlinkSocket {
 public:
  // `groups`: RTMGRP_* bits to subscribe to (0 for a request socket).
  static Result<NetlinkSocket> open(uint32_t groups, bool nonblocking);
  NetlinkSocket(NetlinkSocket&&) noexcept = default;
  NetlinkSocket& operator=(NetlinkSocket&&) noexcept = default;
  ~NetlinkSocket();

  int fd() const noexcept;

  Result<std::vector<KernelLink>> dump_links();
  Result<std::vector<KernelAddress>> dump_addresses(int family);
  Result<std::vector<KernelRoute>> dump_routes(int family);
  Result<std::vector<KernelNeighbour>> dump_neighbours(int family);

  // Asks the kernel to resolve (or confirm) `ip` on `ifindex`: RTM_NEWNEIGH with NTF_USE,
  // creating the entry if needed, which makes the kernel send ARP / neighbour solicitation.
  // Does not wait for the answer (drain_acks() reads them).
  Result<void> request_resolution(int ifindex, const IpAddress& ip);
  // Reads pending acknowledgements without blocking; returns how many reported an error and
  // lowers `pending` by the number read.
  size_t drain_acks(size_t& pending) noexcept;

  // Reads the events waiting on a non-blocking subscribed socket (at most `max`); an
  // overflow of the socket buffer (ENOBUFS: events were lost) is reported as Kind::Overrun.
  std::vector<KernelEvent> read_events(size_t max);

 private:
  struct Close {
    void operator()(mnl_socket* s) const noexcept;
  };
  NetlinkSocket() = default;
  Result<void> dump(uint16_t type, int family, const std::function<void(const nlmsghdr*)>& fn);

  std::unique_ptr<mnl_socket, Close> sock_;
  uint32_t seq_ = 0;
  uint32_t portid_ = 0;
};

}  // namespace vecflow
