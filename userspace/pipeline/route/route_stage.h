// The `route` stage: longest-prefix match on the destination (IPv4 and IPv6), ECMP over a
// route's next hops by flow hash, TTL / hop-limit decrement (IPv4 checksum updated
// incrementally), expired packets counted and, when enabled, answered with ICMP time exceeded.
//
// Routes come from the appliance file, from the control plane (replace_routes), and with
// `routes: from-kernel` from the kernel's routing table over netlink (KernelSync). A route in
// the file wins over a kernel route for the same prefix. Every change builds a new RouteTable
// and swaps it in under RCU.
//
// Per packet, in this order:
//   - not IP: ARP goes to the kernel (it resolves neighbours), anything else is dropped
//     (not_ip);
//   - checks.ipv4_checksum: an IPv4 header whose checksum is wrong is dropped
//     (ipv4_bad_checksum, RFC 1812 §5.2.2), whatever its destination, as Linux's ip_rcv does;
//     the port's verdict (RTE_MBUF_F_RX_IP_CKSUM_*) is taken where it gave one;
//   - checks.martians, addresses no packet on a wire may carry (RFC 1812 §5.3.7, RFC 4291
//     §2.5, §2.7), whatever the destination, the box's own included, as Linux's
//     ip_route_input and ip6_rcv refuse them before they decide on local delivery: sources
//     127/8, 224/4 (multicast), 240/4 and 255.255.255.255; ::1 and ff00::/8 (martian_source);
//     destinations 0/8 and 127/8; :: and ::1 (martian_destination);
//   - host-bound destinations go to the kernel: IPv4 multicast and limited broadcast, IPv6
//     multicast and link-local (a link-local destination is the box's or nobody's; the kernel
//     delivers its own, for NDP and routing protocols, and routes none off its link);
//   - checks.martians, on packets to be routed only: sources 0/8 and :: (martian_source). A
//     host without an address sends from them to the box itself (DHCP, RFC 2131 §4.1; IPv6
//     duplicate address detection, RFC 4862 §5.4.2), which the kernel must still see;
//   - lookup, in the VRF of the ingress port (route_table.h): no route -> no_route, answered with
//   ICMP destination unreachable (network
//     unreachable / no route, icmp_unreachable); a `drop` route -> no_route, silently (a
//     blackhole); a `kernel` route -> kernel (the box's own addresses, 169.254/16 ones
//     included, with routes from the kernel); a route into another VRF (`to_vrf`) -> the
//     destination looked up again there, once;
//   - checks.martians: a 169.254/16 destination is never forwarded (RFC 3927 §2.7;
//     martian_destination);
//   - forward: TTL/hop limit 0 or 1 -> ttl_expired (answered with ICMP time exceeded,
//     icmp_time_exceeded); larger than the egress port's MTU (core/port_mtu.h) with DF
//     set, or IPv6 -> packet_too_big, answered with ICMP fragmentation needed / ICMPv6 packet
//     too big carrying that MTU, so that the sender's path MTU discovery learns it (RFC 1191,
//     RFC 8201; always on, as in Linux); IPv4 without DF goes on, for the tx adapter to
//     fragment. Else decrement, set meta.out_port and meta.nexthop (gateway's neighbour id, or
//     kNextHopConnected) and leave the packet for the neighbour and l2 stages (Continue).
//     An answered packet is a drop under its reason; the answer, a packet the stage made,
//     leaves through the ingress port charged to no port (StageEnv::answered).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "config/config.h"
#include "core/port_mtu.h"
#include "pipeline/icmp_responder.h"
#include "pipeline/rcu_ptr.h"
#include "pipeline/route/route_table.h"
#include "pipeline/stage.h"

namespace vecflow {

enum class OffloadChange : uint64_t;  // core/offload_feed.h

// What the route stage checks before it routes a packet (RFC 1812, RFC 4291), each on by
// default and each dropped under its own reason.
struct RouteChecks {
  bool ipv4_checksum = true;  // IPv4 header checksum (§5.2.2): ipv4_bad_checksum
  bool martians = true;       // martian sources and destinations (§5.3.7, RFC 4291 §2.5):
                              // martian_source, martian_destination
};

// The keys of a `stage: route` entry (configs/reference.yaml).
struct RouteConfig {
  std::vector<StaticRoute> routes;
  bool from_kernel = false;        // also import the kernel's routing table over netlink
  bool icmp_time_exceeded = true;  // answer expired TTLs / hop limits
  bool icmp_unreachable = true;    // answer packets without a route (destination unreachable)
  RouteChecks checks;
};

struct RouteCounters {
  uint64_t forwarded = 0;
  uint64_t to_kernel = 0;
  uint64_t no_route = 0;
  uint64_t ttl_expired = 0;
  uint64_t too_big = 0;  // over the egress MTU, not fragmentable (packet_too_big)
  uint64_t icmp_sent = 0;
  uint64_t icmp_limited = 0;  // answers withheld by the rate (the packet only dropped)
  uint64_t not_ip = 0;
  uint64_t bad_checksum = 0;
  uint64_t martian_source = 0;
  uint64_t martian_destination = 0;
};

class RouteStage final : public Stage {
 public:
  // ECMP hashes a multipath route's packets itself where the port did not (route_stage.cc).
  bool reads_flow_hash() const noexcept override { return false; }
  bool offloadable() const noexcept override { return true; }
  bool decrements_ttl() const noexcept override { return true; }
  // Packets whose destinations are looked up in one rte_fib bulk call.
  static constexpr unsigned kLookupBatch = 64;
  // Packets ahead whose headers are prefetched: an L2 access (~15 ns) hidden behind the first
  // pass over a few packets.
  static constexpr size_t kPrefetchAhead = 8;

  static Result<std::unique_ptr<RouteStage>> create(const config::StageConfig& cfg,
                                                    StageContext& ctx);
  ~RouteStage() override;

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept override;
  // The port's name for the next table built (its routes come with a reload), and its MAC
  // for the ICMP errors sent from it.
  void set_port(PortId id, const PortInfo& info) override;

  // ---- control plane (any thread; serialised internally) ----
  // Replaces the routes of the appliance file (reload, `vecflowctl`); kernel routes stay.
  Result<void> replace_routes(std::vector<StaticRoute> routes);
  // Replaces the VRFs (reload: which ports each has) and the file's routes with them in one
  // table, since a route may name a VRF only one of the two lists has.
  Result<void> replace_vrfs(std::vector<config::VrfConfig> vrfs, std::vector<StaticRoute> routes);
  // The routes of the appliance file in force, and the VRFs.
  std::vector<StaticRoute> config_routes() const;
  std::vector<config::VrfConfig> vrfs() const;
  // The kernel routing tables of the VRFs that name one: table -> VRF (KernelSync).
  std::map<uint32_t, std::string> vrf_tables() const;
  // With `routes: from-kernel`: takes the kernel's routes again, for VRFs whose tables changed.
  Result<void> refresh_kernel_routes();
  // Replaces the routes imported from the kernel (KernelSync).
  Result<void> set_kernel_routes(std::vector<StaticRoute> routes);

  bool follows_kernel() const noexcept { return from_kernel_; }
  bool sends_icmp() const noexcept { return icmp_; }
  bool answers_unreachable() const noexcept { return unreachable_; }
  const RouteChecks& checks() const noexcept { return checks_; }
  // The routes in force, static and kernel-learned.
  std::vector<RouteEntry> routes() const;
  // How many routes of the table in force each VRF has from the file and from the kernel (a
  // gauge for /metrics: counts without copying a table of kernel routes at every scrape).
  struct VrfRouteCount {
    std::string vrf;
    size_t config = 0, kernel = 0;
  };
  std::vector<VrfRouteCount> route_counts() const;
  // The route that decides `addr` in VRF `vrf` (empty: the default VRF) of the table in force,
  // if any.
  std::optional<RouteEntry> route_for(const IpAddress& addr, const std::string& vrf = {}) const;
  // The VRFs of the table in force, the default one first.
  std::vector<std::string> vrf_names() const;
  RouteCounters counters() const noexcept;
  // Who answers, from which address, how often (tests give it addresses directly).
  IcmpResponder& icmp_responder() noexcept { return *icmp_responder_; }
  // The table in force, for tests and benchmarks that look up directly. Valid until the next
  // change; do not call while another thread changes routes.
  const RouteTable& table() const noexcept { return *table_.load(); }

 private:
  struct alignas(64) LcoreState {
    Counter forwarded, to_kernel, no_route, ttl_expired, too_big, not_ip;
    Counter bad_checksum, martian_source, martian_destination;
  };

  RouteStage(const config::StageConfig& cfg, StageContext& ctx);
  // Builds the table from both lists; `which`: the flows the change concerns (offload).
  Result<void> rebuild_locked(OffloadChange which);
  // process() with the checks in force (RouteChecks) fixed.
  template <bool kChecksum, bool kMartians>
  void route(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept;
  // A packet whose TTL ran out, that has no route, or that does not fit its egress link's
  // `mtu`: dropped under its reason, answered where the configuration and the responder
  // (source address, rate limits: icmp_responder.h) allow.
  void expired(rte_mbuf* m, bool v6, LcoreState& st, StageEnv& env) noexcept;
  void unreachable(rte_mbuf* m, bool v6, StageEnv& env) noexcept;
  void too_big(rte_mbuf* m, bool v6, uint32_t mtu, LcoreState& st, StageEnv& env) noexcept;

  std::vector<PortInfo> ports_;
  std::unique_ptr<PortMtuTable> own_mtus_;  // where the context gives none: no limit
  const PortMtuTable* mtus_;
  Qsbr* qsbr_;
  NeighbourTable* neighbours_;
  KernelSync* kernel_;
  OffloadFeed* offload_;
  bool from_kernel_;
  bool icmp_;
  bool unreachable_;
  RouteChecks checks_;
  std::vector<config::VrfConfig> vrfs_;  // under mutex_
  // A conntrack stage before this one (StageContext::session_vrfs): only then is a packet's
  // session VRF read, its cache line untouched so early otherwise (3 cycles a packet).
  const bool session_vrfs_;
  std::unique_ptr<LcoreState[]> lcores_;
  unsigned slots_;
  std::unique_ptr<IcmpResponder> icmp_responder_;

  RcuPtr<RouteTable> table_;
  mutable std::mutex mutex_;  // control plane only
  std::vector<StaticRoute> config_routes_;
  std::vector<StaticRoute> kernel_routes_;
};

struct StageModule;
// The route stage type: its configuration, factory and live reload of its routes.
StageModule route_stage_module();

}  // namespace vecflow
