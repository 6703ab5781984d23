// Keeps the pipeline's tables in step with the kernel of the namespace vecflowd runs in, over
// rtnetlink. The kernel keeps ARP, neighbour discovery and routing daemons (XDP passes them
// up); vecflow follows what they decide:
//
//   - neighbours: the kernel's neighbour entries on vecflow ports' interfaces are mirrored into
//     the NeighbourTable as they change;
//   - resolution: next hops the data path found unresolved are handed to the kernel with
//     RTM_NEWNEIGH + NTF_USE, which makes it send ARP / NS (and the answer comes back as a
//     neighbour event); neighbours vecflow forwards through are re-confirmed the same way,
//     since the kernel does not see that traffic and would let them go stale;
//   - routes (`routes: from-kernel`): the main and local tables, re-read after a burst of
//     route changes settles, handed to the route stages that follow the kernel;
//   - addresses: the interfaces' addresses, the source of ICMP errors, and marked local in
//     the NeighbourTable (packets routed to the box go to its kernel).
//
// A Service for the control lcore: poll() reads events without blocking and does the netlink
// requests and dumps, which do block (control plane only). Registration happens while the
// pipeline is built, before the service runs.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "pipeline/neighbour_table.h"
#include "pipeline/netlink.h"
#include "pipeline/route/route_table.h"
#include "pipeline/stage.h"
#include "runtime/service.h"

namespace vecflow {

class RouteStage;

struct KernelSyncStats {
  uint64_t events = 0;             // netlink messages handled
  uint64_t overruns = 0;           // times events were lost and everything was read again
  uint64_t route_syncs = 0;        // route tables handed to route stages
  uint64_t neighbour_updates = 0;  // neighbour entries changed from the kernel
  uint64_t resolve_requests = 0;   // NTF_USE requests sent
  uint64_t request_errors = 0;     // requests the kernel refused
};

class KernelSync final : public Service {
 public:
  // Route changes are collected this long after the first one before the kernel's tables are
  // read again: a routing daemon installing a full table sends thousands of messages, and one
  // rebuild per burst costs far less than one per route, at the price of this much delay.
  static constexpr std::chrono::milliseconds kRouteSettle{50};
  // A neighbour the data path still needs is asked for at most this often. The kernel
  // retries ARP itself while its entry is incomplete, but it drops the entry when the link
  // goes down (or the entry fails): a later ask is what starts resolution again, so this is
  // how long forwarding can lag behind a link coming back. One netlink message per needed
  // next hop per interval costs nothing next to that.
  static constexpr std::chrono::milliseconds kResolveRetry{100};
  // Neighbours the data path used are re-confirmed with the kernel this often: well inside the
  // kernel's default reachable time (30 s), so a host that changed its MAC or left is noticed.
  static constexpr std::chrono::milliseconds kConfirmInterval{5000};
  // After a failed read of the kernel's tables, the next attempt waits this long.
  static constexpr std::chrono::milliseconds kRetryDelay{1000};
  // Netlink events handled per poll, so a burst does not hold the control lcore for long.
  static constexpr size_t kEventsPerPoll = 256;

  static Result<std::shared_ptr<KernelSync>> create(const std::vector<PortInfo>& ports,
                                                    NeighbourTable& neighbours);
  ~KernelSync() override;

  // Mirror the kernel's neighbours from now on (reads them all once).
  Result<void> learn_neighbours();
  // Hand the kernel's routes to `stage` from now on (reads them once now).
  Result<void> follow_routes(RouteStage* stage);
  // Hand the ports' interface addresses to `follower` from now on.
  Result<void> follow_addresses(PortAddressFollower* follower);
  // Port `id` is now `info` (Pipeline::set_port): its interface is looked up at once, and
  // routes, addresses and neighbours through it follow.
  void set_port(PortId id, const PortInfo& info);
  // `stage` is going away.
  void forget(RouteStage* stage) noexcept;
  void forget(PortAddressFollower* follower) noexcept;

  bool poll() noexcept override;

  KernelSyncStats stats() const;
  // The kernel interface index behind each port (0: none, or not present now).
  std::vector<int> port_ifindexes() const;

  // The kernel's routes converted for a route stage: routes of the main and local tables in
  // the default VRF, and of each table `vrf_tables` names (table -> VRF) in that VRF, as a
  // Linux VRF device's table; local, broadcast and anycast destinations and routes through
  // interfaces vecflow does not own go to the kernel; blackhole, unreachable and prohibit
  // routes drop. Exposed for tests.
  static std::vector<StaticRoute> convert_routes(
      const std::vector<KernelRoute>& routes, const std::vector<PortInfo>& ports,
      const std::vector<int>& ifindexes, const std::map<uint32_t, std::string>& vrf_tables = {});
  // Hands `stage` the kernel's routes again (its VRFs' tables changed).
  Result<void> resync_routes(RouteStage* stage);

 private:
  using Clock = std::chrono::steady_clock;
  KernelSync(const std::vector<PortInfo>& ports, NeighbourTable& neighbours);

  Result<void> sync_links();
  Result<void> sync_routes();
  Result<void> sync_addresses();
  Result<void> sync_neighbours();
  void apply_neighbour(const KernelNeighbour& n);
  int port_of(int ifindex) const noexcept;
  void send_requests(Clock::time_point now);

  std::vector<PortInfo> ports_;
  NeighbourTable& neighbours_;
  std::optional<NetlinkSocket> events_;
  std::optional<NetlinkSocket> dumps_;
  std::optional<NetlinkSocket> requests_;

  mutable std::mutex mutex_;
  std::vector<int> ifindex_;  // by PortId
  // By PortId: the link can carry frames. Next hops behind a link that is down are not asked
  // for: the kernel would keep the entry INCOMPLETE and probe again only after its
  // retransmit time (1 s), long after the link came back.
  std::vector<bool> running_;
  bool learning_ = false;
  std::vector<RouteStage*> route_stages_;
  std::vector<PortAddressFollower*> address_followers_;
  bool routes_dirty_ = false;
  Clock::time_point routes_dirty_since_{};
  bool addresses_dirty_ = false;
  bool neighbours_dirty_ = false;
  bool links_dirty_ = false;
  Clock::time_point last_confirm_{};
  Clock::time_point retry_after_{};  // a failed read is tried again from then on
  size_t acks_pending_ = 0;          // resolution requests whose answer was not read yet
  std::map<std::pair<uint16_t, std::array<uint8_t, 17>>, Clock::time_point> asked_;
  KernelSyncStats stats_;
};

}  // namespace vecflow
