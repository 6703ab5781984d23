// A routing table as the data path reads it: DPDK's rte_fib (IPv4, DIR-24-8) and rte_fib6
// (IPv6, a multibit trie) map a destination to a leaf, and the leaf says what to do: forward
// over one of its next hops (several: ECMP by flow hash), hand to the kernel, or drop.
//
// A RouteTable is immutable once built. Changes build a new table from the whole route list
// and swap it in under RCU (RouteStage), so a lookup never sees a table half way through an
// update, and every packet is decided by one table, old or new. Rebuilding costs ~1 s per
// 100 000 IPv4 prefixes of a realistic length mix; kernel route churn is coalesced before
// a rebuild (KernelSync).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <rte_fib.h>
#include <rte_fib6.h>

#include "config/config.h"
#include "core/dpdk_util.h"
#include "core/error.h"
#include "core/ids.h"
#include "pipeline/stage.h"

namespace vecflow {

class NeighbourTable;

// A route as the file (stage: route, routes:) or the kernel gives it.
struct NextHop {
  std::optional<IpAddress> via;  // absent: directly connected, the destination is the next hop
  std::string port;
  bool operator==(const NextHop&) const = default;
};

enum class RouteAction { Forward, Kernel, Drop };

struct StaticRoute {
  IpPrefix prefix;
  RouteAction action = RouteAction::Forward;
  std::vector<NextHop> nexthops;  // more than one: ECMP by flow hash
  config::Location where;
  uint8_t protocol = 0;  // routes from the kernel: its rtm_protocol (kernel_protocol_name)
  bool operator==(const StaticRoute&) const = default;
};

// "kernel", "static", "bgp", "ospf" ...: who installed a kernel route (rtm_protocol, as
// iproute2's rt_protos names them), or its number.
std::string kernel_protocol_name(uint8_t protocol);

// Where a route came from, for the control plane.
enum class RouteSource : uint8_t { Config, Kernel };

struct RouteEntry {
  StaticRoute route;
  RouteSource source = RouteSource::Config;
};

class RouteTable {
 public:
  // Leaf 0 is "no route": what a lookup returns when no prefix matches.
  static constexpr uint32_t kNoRoute = 0;

  // One next hop: the egress port and the neighbour entry of the gateway, or
  // kNextHopConnected when the destination is on the port's network.
  struct Hop {
    uint32_t neighbour;
    uint16_t port;
  };
  struct Leaf {
    RouteAction action = RouteAction::Drop;
    uint16_t hop_count = 0;
    uint32_t first_hop = 0;  // index into hops
  };

  // Builds the table. Port names resolve through `ports`; a gateway gets an entry (unresolved
  // until learned) in `neighbours`. Fails with the offending route on a port that does not
  // exist, a next hop of the wrong IP version, a duplicate prefix or a full neighbour table.
  static Result<std::unique_ptr<RouteTable>> build(std::vector<RouteEntry> routes,
                                                   const std::vector<PortInfo>& ports,
                                                   NeighbourTable& neighbours);

  // ---- data path ----
  // Leaves for `n` IPv4 destinations in host byte order.
  void lookup4(uint32_t* ips, uint64_t* leaves, unsigned n) const noexcept {
    if (fib4_) {
      rte_fib_lookup_bulk(fib4_.get(), ips, leaves, n);
    } else {
      for (unsigned i = 0; i < n; ++i)
        leaves[i] = kNoRoute;
    }
  }
  // Leaves for `n` IPv6 destinations.
  void lookup6(uint8_t ips[][16], uint64_t* leaves, unsigned n) const noexcept {
    if (fib6_) {
      rte_fib6_lookup_bulk(fib6_.get(), ips, leaves, n);
    } else {
      for (unsigned i = 0; i < n; ++i)
        leaves[i] = kNoRoute;
    }
  }
  // The leaves and hops whole: a loop holds their addresses in registers, where an accessor
  // read the vector's pointer again after each store into a packet (which may alias it).
  std::span<const Leaf> leaves() const noexcept { return leaves_; }
  std::span<const Hop> hops() const noexcept { return hops_; }

  // ---- control plane ----
  const std::vector<RouteEntry>& routes() const noexcept { return routes_; }
  size_t leaf_count() const noexcept { return leaves_.size(); }
  // The leaf of `addr` through the FIB (as the data path would find it), for tests and
  // `vecflowctl route get`.
  uint64_t lookup(const IpAddress& addr) const noexcept;
  // The route (by longest prefix, searched in the route list) that decides `addr`.
  const RouteEntry* match(const IpAddress& addr) const noexcept;
  // The leaf a route was given.
  uint32_t leaf_of(size_t route_index) const noexcept { return route_leaf_[route_index]; }

 private:
  RouteTable() = default;
  std::vector<RouteEntry> routes_;
  std::vector<uint32_t> route_leaf_;  // by route index
  std::vector<Leaf> leaves_;
  std::vector<Hop> hops_;
  DpdkPtr<rte_fib> fib4_;
  DpdkPtr<rte_fib6> fib6_;
};

}  // namespace vecflow
