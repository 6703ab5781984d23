// A routing table as the data path reads it: DPDK's rte_fib (IPv4, DIR-24-8) and rte_fib6
// (IPv6, a multibit trie) map a destination to a leaf, and the leaf says what to do: forward
// over one of its next hops (several: ECMP by flow hash), hand to the kernel, drop, or look the
// destination up again in another VRF (route leaking).
//
// VRFs: one pair of FIBs per VRF (by VrfId, pipeline/vrf.h), sharing one list of leaves and
// hops. A packet is looked up in the VRF of its ingress port (port_vrfs()), or in the one its
// conntrack session names (PacketMeta::vrf: a reply de-NATed into a tenant's VRF); which ports
// a VRF has is part of the table, so a reload that moves a port into another VRF swaps it with
// the routes, and no packet sees one without the other.
//
// A RouteTable is immutable once built. Changes build a new table from the whole route list
// and swap it in under RCU (RouteStage), so a lookup never sees a table half way through an
// update, and every packet is decided by one table, old or new. Rebuilding costs ~1 s per
// 100 000 IPv4 prefixes of a realistic length mix; kernel route churn is coalesced before
// a rebuild (KernelSync).
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_mbuf.h>

#include "config/config.h"
#include "core/dpdk_util.h"
#include "core/error.h"
#include "core/ids.h"
#include "core/packet.h"
#include "pipeline/stage.h"
#include "pipeline/vrf.h"

namespace vecflow {

class NeighbourTable;

// A route as the file (stage: route, routes:) or the kernel gives it.
struct NextHop {
  std::optional<IpAddress> via;  // absent: directly connected, the destination is the next hop
  std::string port;
  // Route leaking: the destination is looked up again in this VRF's table (a route's `to_vrf`,
  // as Linux's `ip route add ... dev OTHER-VRF-DEVICE vrf THIS`); port and via are empty. Such
  // a next hop is its route's only one.
  std::string vrf = {};
  bool operator==(const NextHop&) const = default;
};

// Leak is a leaf's only: a route whose next hop is a VRF is a Forward route in the file.
enum class RouteAction { Forward, Kernel, Drop, Leak };

struct StaticRoute {
  IpPrefix prefix;
  RouteAction action = RouteAction::Forward;
  std::vector<NextHop> nexthops;  // more than one: ECMP by flow hash
  config::Location where;
  uint8_t protocol = 0;  // routes from the kernel: its rtm_protocol (kernel_protocol_name)
  std::string vrf = {};  // the VRF whose table holds the route; empty: the default VRF
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
    uint32_t first_hop = 0;  // index into hops; Leak: the VrfId to look up in
  };

  // Builds the table. Port names resolve through `ports`, VRF names through `vrfs`; a gateway
  // gets an entry (unresolved until learned) in `neighbours`. Fails with the offending route
  // on a port or VRF that does not exist, a next hop of the wrong IP version, a prefix twice in
  // one VRF, a full neighbour table, or more than kMaxVrfs VRFs.
  static Result<std::unique_ptr<RouteTable>> build(std::vector<RouteEntry> routes,
                                                   const std::vector<PortInfo>& ports,
                                                   const std::vector<config::VrfConfig>& vrfs,
                                                   NeighbourTable& neighbours);
  // The same with the default VRF only.
  static Result<std::unique_ptr<RouteTable>> build(std::vector<RouteEntry> routes,
                                                   const std::vector<PortInfo>& ports,
                                                   NeighbourTable& neighbours) {
    return build(std::move(routes), ports, {}, neighbours);
  }

  // ---- data path ----
  // Leaves for `n` IPv4 destinations in host byte order, in VRF `vrf`.
  void lookup4(VrfId vrf, uint32_t* ips, uint64_t* leaves, unsigned n) const noexcept {
    if (rte_fib* fib = fibs_[vrf].v4.get()) {
      rte_fib_lookup_bulk(fib, ips, leaves, n);
    } else {
      for (unsigned i = 0; i < n; ++i)
        leaves[i] = kNoRoute;
    }
  }
  // Leaves for `n` IPv6 destinations, in VRF `vrf`.
  void lookup6(VrfId vrf, uint8_t ips[][16], uint64_t* leaves, unsigned n) const noexcept {
    if (rte_fib6* fib = fibs_[vrf].v6.get()) {
      rte_fib6_lookup_bulk(fib, ips, leaves, n);
    } else {
      for (unsigned i = 0; i < n; ++i)
        leaves[i] = kNoRoute;
    }
  }
  // Leaves for `n` destinations, each in its packet's VRF (vrf_of()). Nearly always the batch
  // is one port's and no session moved a packet to another VRF (a vector is one flow's, a burst
  // one port's: `one_port`, true only when both hold, which the caller's pass over the packets
  // tells, each mbuf at hand),
  // and one bulk lookup in that port's VRF takes it. Else the batch may still be one VRF's; a
  // batch of mixed VRFs (a trunk's VLANs in different VRFs) is looked up a packet at a time.
  void lookup4(rte_mbuf* const* pkts, const uint16_t* at, bool one_port, uint32_t* ips,
               uint64_t* leaves, unsigned n) const noexcept {
    by_vrf(pkts, at, n, one_port, [&](VrfId vrf, unsigned from, unsigned count) {
      lookup4(vrf, ips + from, leaves + from, count);
    });
  }
  void lookup6(rte_mbuf* const* pkts, const uint16_t* at, bool one_port, uint8_t ips[][16],
               uint64_t* leaves, unsigned n) const noexcept {
    by_vrf(pkts, at, n, one_port, [&](VrfId vrf, unsigned from, unsigned count) {
      lookup6(vrf, ips + from, leaves + from, count);
    });
  }
  // Route leaking: the leaf of a destination whose route (a Leak leaf) names another VRF,
  // looked up there. Followed once: a leak the other VRF leaks on again is no route, so that
  // two VRFs' tables never loop.
  uint64_t leaked(const Leaf& leak, uint32_t ip) const noexcept {
    uint64_t leaf;
    lookup4(static_cast<VrfId>(leak.first_hop), &ip, &leaf, 1);
    return leaf;
  }
  uint64_t leaked(const Leaf& leak, const uint8_t (&ip)[16]) const noexcept {
    uint8_t copy[1][16];
    std::memcpy(copy[0], ip, 16);
    uint64_t leaf;
    lookup6(static_cast<VrfId>(leak.first_hop), copy, &leaf, 1);
    return leaf;
  }
  // The VRF of each port, by PortId index.
  std::span<const VrfId> port_vrfs() const noexcept { return port_vrf_; }
  // The VRF a packet is routed in: its session's (PacketMeta::vrf) or its ingress port's. A
  // session's VRF this table does not have (a reload in between) routes nowhere: the table's
  // last FIB pair, past its VRFs, is empty, and such a packet is dropped as no_route rather
  // than sent into another tenant.
  VrfId vrf_of(const rte_mbuf* m) const noexcept {
    if (const uint16_t v = meta(m).vrf; v != 0) [[unlikely]]
      return static_cast<VrfId>(v < fibs_.size() ? v - 1 : fibs_.size() - 1);
    return port_vrf_[m->port];
  }
  // Whether there is a VRF besides the default one (else every lookup is in VRF 0).
  bool has_vrfs() const noexcept { return fibs_.size() > 2; }
  // The leaves and hops whole: a loop holds their addresses in registers, where an accessor
  // read the vector's pointer again after each store into a packet (which may alias it).
  std::span<const Leaf> leaves() const noexcept { return leaves_; }
  std::span<const Hop> hops() const noexcept { return hops_; }

  // ---- control plane ----
  const std::vector<RouteEntry>& routes() const noexcept { return routes_; }
  size_t leaf_count() const noexcept { return leaves_.size(); }
  // The leaf of `addr` in VRF `vrf` through the FIB (as the data path would find it, a leak
  // not followed), for tests and `vecflowctl routes --lookup`.
  uint64_t lookup(const IpAddress& addr, VrfId vrf = kDefaultVrfId) const noexcept;
  // The route (by longest prefix, searched in the route list) that decides `addr` in `vrf`.
  const RouteEntry* match(const IpAddress& addr, VrfId vrf = kDefaultVrfId) const noexcept;
  // VRF ids by name ("default" or empty: 0), and names by id.
  std::optional<VrfId> vrf_id(std::string_view name) const noexcept;
  const std::string& vrf_name(VrfId vrf) const noexcept { return vrf_names_[vrf]; }
  size_t vrf_count() const noexcept { return vrf_names_.size(); }
  // The leaf a route was given.
  uint32_t leaf_of(size_t route_index) const noexcept { return route_leaf_[route_index]; }

 private:
  RouteTable() = default;
  // lookup4/6 by port: `bulk(vrf, from, count)` looks up entries from..from+count-1 in `vrf`.
  template <typename Bulk>
  [[gnu::always_inline]] void by_vrf(rte_mbuf* const* pkts, const uint16_t* at, unsigned n,
                                     bool one_port, Bulk bulk) const noexcept {
    if (n == 0) return;
    if (fibs_.size() == 2) return bulk(kDefaultVrfId, 0u, n);
    // One port and no session VRF: the port's, from the mbuf line the caller read (the
    // metadata's line, read here for the batch's first packet, cost 3 cycles a packet).
    if (one_port) return bulk(port_vrf_[pkts[at[0]]->port], 0u, n);
    const VrfId first = vrf_of(pkts[at[0]]);
    unsigned k = 1;
    while (k < n && vrf_of(pkts[at[k]]) == first)
      ++k;
    if (k == n) return bulk(first, 0u, n);
    for (k = 0; k < n; ++k)
      bulk(vrf_of(pkts[at[k]]), k, 1u);
  }
  std::vector<RouteEntry> routes_;
  std::vector<uint32_t> route_leaf_;  // by route index
  std::vector<Leaf> leaves_;
  std::vector<Hop> hops_;
  struct Fibs {
    DpdkPtr<rte_fib> v4;
    DpdkPtr<rte_fib6> v6;
  };
  std::vector<Fibs> fibs_;  // by VrfId, and an empty pair last (vrf_of())
  std::vector<std::string> vrf_names_;
  std::vector<VrfId> port_vrf_;
  std::vector<VrfId> route_vrf_;  // by route index
};

}  // namespace vecflow
