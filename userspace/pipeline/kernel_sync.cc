#include "pipeline/kernel_sync.h"

#include <linux/rtnetlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "core/log.h"
#include "pipeline/route/route_stage.h"

namespace vecflow {

namespace {

constexpr uint32_t kTableMain = RT_TABLE_MAIN;
constexpr uint32_t kTableLocal = RT_TABLE_LOCAL;
// Resolution requests taken from the data path's ring per poll.
constexpr size_t kRequestsPerPoll = 64;

std::shared_ptr<spdlog::logger> logger() {
  return log::get("pipeline");
}

std::array<uint8_t, 17> key_bytes(const NeighbourKey& k) {
  std::array<uint8_t, 17> b{};
  b[0] = k.version;
  std::copy_n(k.ip, 16, b.begin() + 1);
  return b;
}

}  // namespace

KernelSync::KernelSync(const std::vector<PortInfo>& ports, NeighbourTable& neighbours)
    : Service("kernel-sync"), ports_(ports), neighbours_(neighbours), ifindex_(ports.size(), 0) {}

KernelSync::~KernelSync() = default;

Result<std::shared_ptr<KernelSync>> KernelSync::create(const std::vector<PortInfo>& ports,
                                                       NeighbourTable& neighbours) {
  std::shared_ptr<KernelSync> k(new KernelSync(ports, neighbours));
  // Subscribe before the first dumps, so that no change falls between a dump and the events.
  auto events = NetlinkSocket::open(RTMGRP_LINK | RTMGRP_NEIGH | RTMGRP_IPV4_IFADDR |
                                        RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE | RTMGRP_IPV6_ROUTE,
                                    true);
  if (!events) return std::unexpected(events.error());
  auto dumps = NetlinkSocket::open(0, false);
  if (!dumps) return std::unexpected(dumps.error());
  auto requests = NetlinkSocket::open(0, true);
  if (!requests) return std::unexpected(requests.error());
  k->events_ = std::move(*events);
  k->dumps_ = std::move(*dumps);
  k->requests_ = std::move(*requests);
  std::lock_guard lock(k->mutex_);
  if (auto r = k->sync_links(); !r) return std::unexpected(r.error());
  // The box's own addresses, which packets may be routed to like any connected host.
  if (auto r = k->sync_addresses(); !r) return std::unexpected(r.error());
  return k;
}

void KernelSync::set_port(PortId id, const PortInfo& info) {
  std::lock_guard lock(mutex_);
  if (to_index(id) >= ports_.size()) return;
  ports_[to_index(id)] = info;
  // A failed dump leaves the old map; the next link event or watch reads it again.
  if (auto r = sync_links(); !r) links_dirty_ = true;
}

int KernelSync::port_of(int ifindex) const noexcept {
  if (ifindex <= 0) return -1;
  for (size_t i = 0; i < ifindex_.size(); ++i) {
    if (ifindex_[i] == ifindex) return static_cast<int>(i);
  }
  return -1;
}

Result<void> KernelSync::sync_links() {
  auto links = dumps_->dump_links();
  if (!links) return std::unexpected(links.error());
  std::vector<int> fresh(ports_.size(), 0);
  running_.assign(ports_.size(), false);
  for (size_t i = 0; i < ports_.size(); ++i) {
    if (ports_[i].interface.empty()) continue;
    for (const auto& l : *links) {
      if (l.name != ports_[i].interface) continue;
      fresh[i] = l.ifindex;
      running_[i] = l.running;
    }
  }
  if (fresh != ifindex_) {
    // An interface came, went or was renamed: what was read through the old map is stale.
    ifindex_ = std::move(fresh);
    routes_dirty_ = !route_stages_.empty();
    routes_dirty_since_ = Clock::now() - kRouteSettle;
    addresses_dirty_ = true;
    neighbours_dirty_ = learning_;
  }
  return {};
}

std::vector<StaticRoute> KernelSync::convert_routes(
    const std::vector<KernelRoute>& routes, const std::vector<PortInfo>& ports,
    const std::vector<int>& ifindexes, const std::map<uint32_t, std::string>& vrf_tables) {
  auto port_of = [&](int ifindex) -> int {
    for (size_t i = 0; i < ifindexes.size(); ++i) {
      if (ifindex > 0 && ifindexes[i] == ifindex) return static_cast<int>(i);
    }
    return -1;
  };
  // Per prefix, the route the kernel itself would use: the local table is consulted before
  // the main table, and within a table the lowest metric wins.
  using Key = std::tuple<std::string, uint8_t, std::array<uint8_t, 16>, uint8_t>;
  std::map<Key, std::pair<std::tuple<int, uint32_t>, StaticRoute>> best;
  for (const KernelRoute& kr : routes) {
    std::string vrf;
    if (kr.table != kTableMain && kr.table != kTableLocal) {
      const auto it = vrf_tables.find(kr.table);
      if (it == vrf_tables.end()) continue;
      vrf = it->second;
    }
    StaticRoute r;
    r.prefix = kr.prefix;
    r.protocol = kr.protocol;
    r.vrf = vrf;
    switch (kr.type) {
      case RTN_UNICAST: {
        bool owned = !kr.foreign_gateway && !kr.nexthops.empty();
        for (const auto& nh : kr.nexthops)
          owned = owned && port_of(nh.ifindex) >= 0;
        if (!owned) {
          r.action = RouteAction::Kernel;
          break;
        }
        r.action = RouteAction::Forward;
        for (const auto& nh : kr.nexthops)
          r.nexthops.push_back(NextHop{nh.via, ports[port_of(nh.ifindex)].name});
        break;
      }
      case RTN_LOCAL:
      case RTN_BROADCAST:
      case RTN_ANYCAST:
        r.action = RouteAction::Kernel;
        break;
      case RTN_BLACKHOLE:
      case RTN_UNREACHABLE:
      case RTN_PROHIBIT:
        r.action = RouteAction::Drop;
        break;
      default:
        continue;  // multicast (host-bound anyway), throw, nat ...
    }
    std::tuple<int, uint32_t> rank{kr.table == kTableLocal ? 0 : 1, kr.metric};
    Key key{vrf, kr.prefix.addr.version, kr.prefix.addr.bytes, kr.prefix.length};
    auto it = best.find(key);
    if (it == best.end() || rank < it->second.first) best[key] = {rank, std::move(r)};
  }
  std::vector<StaticRoute> out;
  out.reserve(best.size());
  for (auto& [key, v] : best)
    out.push_back(std::move(v.second));
  return out;
}

Result<void> KernelSync::sync_routes() {
  std::vector<KernelRoute> all;
  for (int family : {AF_INET, AF_INET6}) {
    auto routes = dumps_->dump_routes(family);
    if (!routes) return std::unexpected(routes.error());
    all.insert(all.end(), routes->begin(), routes->end());
  }
  for (RouteStage* s : route_stages_) {
    if (auto r = s->set_kernel_routes(convert_routes(all, ports_, ifindex_, s->vrf_tables())); !r)
      logger()->warn("stage {}: kernel routes not applied: {}", s->name(), r.error().message);
  }
  ++stats_.route_syncs;
  return {};
}

Result<void> KernelSync::sync_addresses() {
  std::vector<PortAddresses> by_port(ports_.size());
  std::vector<unsigned> rank_v4(ports_.size()), rank_v6(ports_.size());
  std::vector<NeighbourKey> local;
  for (int family : {AF_INET, AF_INET6}) {
    auto addrs = dumps_->dump_addresses(family);
    if (!addrs) return std::unexpected(addrs.error());
    for (const auto& a : *addrs) {
      int p = port_of(a.ifindex);
      if (p < 0) continue;
      local.push_back(NeighbourKey::of(PortId{static_cast<uint16_t>(p)}, a.ip));
      // The port's address: a global one before a link-local one, a primary before a
      // secondary, else the first listed (the source Linux picks, and what masquerade uses).
      const unsigned rank = (a.scope == RT_SCOPE_UNIVERSE ? 0 : 2) + (a.secondary ? 1 : 0);
      const bool v4 = a.ip.version == 4;
      auto& slot = v4 ? by_port[p].v4 : by_port[p].v6;
      unsigned& best = v4 ? rank_v4[p] : rank_v6[p];
      if (!slot || rank < best) {
        slot = a.ip;
        best = rank;
      }
    }
  }
  if (!neighbours_.set_local(local))
    logger()->warn("neighbour table full: not every address of the box is tracked");
  for (PortAddressFollower* f : address_followers_)
    f->set_port_addresses(by_port);
  return {};
}

void KernelSync::apply_neighbour(const KernelNeighbour& n) {
  int p = port_of(n.ifindex);
  if (p < 0) return;
  if (neighbours_.learn(PortId{static_cast<uint16_t>(p)}, n.ip, n.mac)) {
    ++stats_.neighbour_updates;
  } else {
    logger()->warn("neighbour table full: {} on port {} is not tracked", n.ip.to_string(),
                   ports_[p].name);
  }
}

Result<void> KernelSync::sync_neighbours() {
  std::set<std::pair<uint16_t, std::array<uint8_t, 17>>> present;
  for (int family : {AF_INET, AF_INET6}) {
    auto ns = dumps_->dump_neighbours(family);
    if (!ns) return std::unexpected(ns.error());
    for (const auto& n : *ns) {
      int p = port_of(n.ifindex);
      if (p < 0) continue;
      apply_neighbour(n);
      present.emplace(static_cast<uint16_t>(p),
                      key_bytes(NeighbourKey::of(PortId{static_cast<uint16_t>(p)}, n.ip)));
    }
  }
  // Entries the kernel no longer has (their deletion may be among the lost events).
  for (const auto& e : neighbours_.entries()) {
    if (e.is_static || !e.mac) continue;
    if (!present.contains({to_index(e.port), key_bytes(NeighbourKey::of(e.port, e.ip))}))
      neighbours_.learn(e.port, e.ip, std::nullopt);
  }
  return {};
}

Result<void> KernelSync::learn_neighbours() {
  std::lock_guard lock(mutex_);
  learning_ = true;
  return sync_neighbours();
}

Result<void> KernelSync::follow_routes(RouteStage* stage) {
  {
    std::lock_guard lock(mutex_);
    route_stages_.push_back(stage);
  }
  return resync_routes(stage);
}

Result<void> KernelSync::resync_routes(RouteStage* stage) {
  std::lock_guard lock(mutex_);
  std::vector<KernelRoute> all;
  for (int family : {AF_INET, AF_INET6}) {
    auto routes = dumps_->dump_routes(family);
    if (!routes) return std::unexpected(routes.error());
    all.insert(all.end(), routes->begin(), routes->end());
  }
  ++stats_.route_syncs;
  return stage->set_kernel_routes(convert_routes(all, ports_, ifindex_, stage->vrf_tables()));
}

Result<void> KernelSync::follow_addresses(PortAddressFollower* follower) {
  std::lock_guard lock(mutex_);
  address_followers_.push_back(follower);
  return sync_addresses();
}

void KernelSync::forget(RouteStage* stage) noexcept {
  std::lock_guard lock(mutex_);
  std::erase(route_stages_, stage);
}

void KernelSync::forget(PortAddressFollower* follower) noexcept {
  std::lock_guard lock(mutex_);
  std::erase(address_followers_, follower);
}

void KernelSync::send_requests(Clock::time_point now) {
  std::vector<NeighbourKey> todo = neighbours_.take_requests(kRequestsPerPoll);
  if (now - last_confirm_ >= kConfirmInterval) {
    last_confirm_ = now;
    auto used = neighbours_.take_used();
    todo.insert(todo.end(), used.begin(), used.end());
    std::erase_if(asked_, [&](const auto& kv) { return now - kv.second >= kResolveRetry; });
  }
  for (const NeighbourKey& k : todo) {
    if (k.port >= ifindex_.size() || ifindex_[k.port] == 0 || !running_[k.port]) continue;
    auto [it, fresh] = asked_.try_emplace({k.port, key_bytes(k)}, now);
    if (!fresh) {
      if (now - it->second < kResolveRetry) continue;
      it->second = now;
    }
    if (auto r = requests_->request_resolution(ifindex_[k.port], k.address()); !r) {
      ++stats_.request_errors;
      continue;
    }
    ++stats_.resolve_requests;
    ++acks_pending_;
  }
}

bool KernelSync::poll() noexcept {
  std::lock_guard lock(mutex_);
  bool worked = false;
  auto events = events_->read_events(kEventsPerPoll);
  const auto now = Clock::now();
  if (now - last_confirm_ >= kConfirmInterval) acks_pending_ = 0;  // lost answers expire
  for (const KernelEvent& e : events) {
    worked = true;
    ++stats_.events;
    switch (e.kind) {
      case KernelEvent::Kind::Link:
        links_dirty_ = true;
        // A request made while a link was down got no answer; one that came back up should
        // not wait out kResolveRetry before its next hops are asked for again.
        asked_.clear();
        break;
      case KernelEvent::Kind::Address:
        addresses_dirty_ = true;
        break;
      case KernelEvent::Kind::Route:
        if (!route_stages_.empty() && !routes_dirty_) {
          routes_dirty_ = true;
          routes_dirty_since_ = now;
        }
        break;
      case KernelEvent::Kind::Neighbour:
        if (learning_) apply_neighbour(*e.neighbour);
        break;
      case KernelEvent::Kind::Overrun:
        ++stats_.overruns;
        links_dirty_ = true;
        neighbours_dirty_ = learning_;
        addresses_dirty_ = true;
        if (!route_stages_.empty() && !routes_dirty_) {
          routes_dirty_ = true;
          routes_dirty_since_ = now;
        }
        break;
    }
  }

  auto attempt = [&](bool& dirty, Result<void> (KernelSync::*sync)(), const char* what) {
    if (!dirty || now < retry_after_) return;
    dirty = false;
    worked = true;
    if (auto r = (this->*sync)(); !r) {
      dirty = true;
      retry_after_ = now + kRetryDelay;
      logger()->warn("reading the kernel's {}: {} (retrying in {} ms)", what, r.error().message,
                     kRetryDelay.count());
    }
  };
  attempt(links_dirty_, &KernelSync::sync_links, "interfaces");
  attempt(neighbours_dirty_, &KernelSync::sync_neighbours, "neighbours");
  attempt(addresses_dirty_, &KernelSync::sync_addresses, "addresses");
  if (routes_dirty_ && now - routes_dirty_since_ >= kRouteSettle)
    attempt(routes_dirty_, &KernelSync::sync_routes, "routes");

  size_t before = stats_.resolve_requests;
  send_requests(now);
  worked = worked || stats_.resolve_requests != before;
  if (acks_pending_ > 0) {
    // Answers arrive soon after the requests; reading them only while some are due keeps an
    // idle poll to one system call (the event socket's).
    stats_.request_errors += requests_->drain_acks(acks_pending_);
  }
  return worked;
}

KernelSyncStats KernelSync::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<int> KernelSync::port_ifindexes() const {
  std::lock_guard lock(mutex_);
  return ifindex_;
}

}  // namespace vecflow
