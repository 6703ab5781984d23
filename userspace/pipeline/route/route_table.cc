#include "pipeline/route/route_table.h"

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>
#include <linux/rtnetlink.h>
#include <rte_errno.h>

#include "core/packet.h"
#include "pipeline/neighbour_table.h"

namespace vecflow {

std::string kernel_protocol_name(uint8_t protocol) {
  // linux/rtnetlink.h's RTPROT_* (the kernel's own, and those routing daemons register).
  static const std::map<uint8_t, std::string_view> names = {
      {RTPROT_UNSPEC, "unspec"},
      {RTPROT_REDIRECT, "redirect"},
      {RTPROT_KERNEL, "kernel"},
      {RTPROT_BOOT, "boot"},
      {RTPROT_STATIC, "static"},
      {RTPROT_RA, "ra"},
      {RTPROT_DHCP, "dhcp"},
      {RTPROT_ZEBRA, "zebra"},
      {RTPROT_BABEL, "babel"},
      {RTPROT_OPENR, "openr"},
      {RTPROT_BGP, "bgp"},
      {RTPROT_ISIS, "isis"},
      {RTPROT_OSPF, "ospf"},
      {RTPROT_RIP, "rip"},
      {RTPROT_EIGRP, "eigrp"},
      // FRR's staticd installs with its own number.
      {196, "static"}};
  const auto it = names.find(protocol);
  return it != names.end() ? std::string(it->second) : std::to_string(protocol);
}

namespace {

// Extra tbl8 groups on top of the count the route list needs: DIR-24-8 hands groups out of a
// bitmap in runs of 64 (a partial run is unusable), and a group costs at most 1 KB.
constexpr uint32_t kTbl8Slack = 64;

bool host_bits_clear(const IpPrefix& p) {
  const unsigned max = p.addr.version == 4 ? 32 : 128;
  for (unsigned bit = p.length; bit < max; ++bit) {
    if (p.addr.bytes[bit / 8] & (0x80u >> (bit % 8))) return false;
  }
  return true;
}

// The smallest FIB entry that holds a leaf or a tbl8 group index (an entry holds either),
// `values` being the larger count: a smaller first level is faster to look up in and build.
// One bit of each entry is the FIB's own: 1 byte holds values below 2^7 ...
rte_fib_dir24_8_nh_sz fib4_nh_size(size_t values) {
  if (values < (1u << 7)) return RTE_FIB_DIR24_8_1B;
  if (values < (1u << 15)) return RTE_FIB_DIR24_8_2B;
  return RTE_FIB_DIR24_8_4B;
}

rte_fib_trie_nh_sz fib6_nh_size(size_t values) {
  if (values < (1u << 15)) return RTE_FIB6_TRIE_2B;
  return RTE_FIB6_TRIE_4B;
}

// tbl8 groups (second-level blocks of 256 entries) a FIB is created with. The finished table
// needs one per distinct path that leads past the first level; while routes are added the FIB
// holds some more for a moment (a spare for split ranges, groups freed and taken again), about
// a fifth more on a table of 100 000 random IPv4 prefixes. A build starts with the count plus
// kTbl8Headroom and, if the FIB still runs out, doubles it: memory stays near what the table
// uses, and no route list fails for want of groups.
constexpr uint32_t kTbl8HeadroomDivisor = 4;  // +25%
constexpr int kTbl8Attempts = 4;

uint32_t tbl8_start(uint32_t needed) {
  return needed + needed / kTbl8HeadroomDivisor + kTbl8Slack;
}

// DIR-24-8: one group per distinct /24 holding a longer prefix.
uint32_t tbl8_groups4(const std::vector<const RouteEntry*>& routes) {
  std::set<uint32_t> groups;
  for (const auto* r : routes) {
    if (r->route.prefix.length > 24) groups.insert(r->route.prefix.addr.v4_host() >> 8);
  }
  return static_cast<uint32_t>(groups.size());
}

// The IPv6 trie: after its 24-bit first level, one group per distinct path of 24, 32, 40 ...
// bits leading to a longer prefix.
uint32_t tbl8_groups6(const std::vector<const RouteEntry*>& routes) {
  std::set<std::pair<int, std::array<uint8_t, 16>>> groups;
  for (const auto* r : routes) {
    const auto& p = r->route.prefix;
    for (int depth = 24; depth < p.length; depth += 8) {
      std::array<uint8_t, 16> path{};
      std::copy_n(p.addr.bytes.begin(), depth / 8, path.begin());
      groups.emplace(depth, path);
    }
  }
  return static_cast<uint32_t>(groups.size());
}

// Builds a FIB with `fill(tbl8)`, doubling the tbl8 groups while it runs out of them.
template <typename Fill>
Result<void> with_tbl8_retry(uint32_t needed, Fill fill) {
  uint32_t tbl8 = tbl8_start(needed);
  int rc = 0;
  for (int attempt = 0; attempt < kTbl8Attempts; ++attempt, tbl8 *= 2) {
    rc = fill(tbl8);
    if (rc != -ENOSPC) break;
  }
  if (rc == 0) return {};
  return fail("{}", errno_text(rc));
}

// Shortest prefixes first (build_fib4 says why).
bool by_length(const RouteEntry* a, const RouteEntry* b) {
  return a->route.prefix.length < b->route.prefix.length;
}

// The IPv4 FIB of one VRF's routes (their leaves in `leaf_of`), shortest prefixes first:
// then a route never has more-specific routes in the FIB when it is added, which keeps clear
// of a DPDK 22.11 DIR-24-8 bug: adding a route whose more-specific routes already cover its
// range up to 255.255.255.255 makes modify_fib's end-of-range arithmetic wrap to 0 and install
// the route over the whole table (found by the reference test: 255.128.0.0/9 added after
// 255.128.0.0/10 and 255.192.0.0/10).
template <typename LeafOf>
Result<DpdkPtr<rte_fib>> build_fib4(std::vector<const RouteEntry*> v4, size_t leaves,
                                    LeafOf leaf_of) {
  std::stable_sort(v4.begin(), v4.end(), by_length);
  DpdkPtr<rte_fib> fib;
  std::string failed;  // the route the FIB refused, for the message
  auto r = with_tbl8_retry(tbl8_groups4(v4), [&](uint32_t tbl8) -> int {
    rte_fib_conf conf{};
    conf.type = RTE_FIB_DIR24_8;
    conf.default_nh = RouteTable::kNoRoute;
    conf.max_routes = static_cast<int>(v4.size());
    conf.dir24_8.nh_sz = fib4_nh_size(std::max<size_t>(leaves, tbl8));
    conf.dir24_8.num_tbl8 = tbl8;
    std::string name = dpdk_name("fib4");
    fib.reset(rte_fib_create(name.c_str(), SOCKET_ID_ANY, &conf));
    if (!fib) return -rte_errno;
    for (const RouteEntry* e : v4) {
      const auto& p = e->route.prefix;
      int rc = rte_fib_add(fib.get(), p.addr.v4_host(), p.length, leaf_of(e));
      if (rc < 0) {
        failed = p.to_string();
        return rc;
      }
    }
    return 0;
  });
  if (!r)
    return fail("cannot build the IPv4 FIB ({} routes{}): {}", v4.size(),
                failed.empty() ? "" : ", at " + failed, r.error().message);
  return fib;
}

// The same for IPv6.
template <typename LeafOf>
Result<DpdkPtr<rte_fib6>> build_fib6(std::vector<const RouteEntry*> v6, size_t leaves,
                                     LeafOf leaf_of) {
  std::stable_sort(v6.begin(), v6.end(), by_length);
  DpdkPtr<rte_fib6> fib;
  std::string failed;
  auto r = with_tbl8_retry(tbl8_groups6(v6), [&](uint32_t tbl8) -> int {
    rte_fib6_conf conf{};
    conf.type = RTE_FIB6_TRIE;
    conf.default_nh = RouteTable::kNoRoute;
    conf.max_routes = static_cast<int>(v6.size());
    conf.trie.nh_sz = fib6_nh_size(std::max<size_t>(leaves, tbl8));
    conf.trie.num_tbl8 = tbl8;
    std::string name = dpdk_name("fib6");
    fib.reset(rte_fib6_create(name.c_str(), SOCKET_ID_ANY, &conf));
    if (!fib) return -rte_errno;
    for (const RouteEntry* e : v6) {
      const auto& p = e->route.prefix;
      int rc = rte_fib6_add(fib.get(), p.addr.bytes.data(), p.length, leaf_of(e));
      if (rc < 0) {
        failed = p.to_string();
        return rc;
      }
    }
    return 0;
  });
  if (!r)
    return fail("cannot build the IPv6 FIB ({} routes{}): {}", v6.size(),
                failed.empty() ? "" : ", at " + failed, r.error().message);
  return fib;
}

}  // namespace

Result<std::unique_ptr<RouteTable>> RouteTable::build(std::vector<RouteEntry> routes,
                                                      const std::vector<PortInfo>& ports,
                                                      const std::vector<config::VrfConfig>& vrfs,
                                                      NeighbourTable& neighbours) {
  std::unique_ptr<RouteTable> t(new RouteTable());
  t->routes_ = std::move(routes);
  t->leaves_.push_back(Leaf{RouteAction::Drop, 0, 0});  // kNoRoute

  std::unordered_map<std::string, uint16_t> port_ids;
  for (size_t i = 0; i < ports.size(); ++i)
    port_ids.emplace(ports[i].name, static_cast<uint16_t>(i));

  auto port_vrf = vecflow::port_vrfs(vrfs, ports);
  if (!port_vrf) return std::unexpected(port_vrf.error());
  t->port_vrf_ = std::move(*port_vrf);
  t->vrf_names_ = vecflow::vrf_names(vrfs);
  t->fibs_.resize(t->vrf_names_.size() + 1);

  // Routes with the same decision share a leaf: a real table has far fewer distinct next-hop
  // sets than prefixes, which keeps the FIB entries (and so its first level) small.
  std::map<std::pair<int, std::vector<uint64_t>>, uint32_t> leaf_ids;
  std::set<std::tuple<VrfId, std::array<uint8_t, 16>, int>> seen;
  std::vector<std::vector<const RouteEntry*>> v4(t->vrf_names_.size()), v6(v4.size());
  t->route_leaf_.reserve(t->routes_.size());
  t->route_vrf_.reserve(t->routes_.size());

  for (const RouteEntry& e : t->routes_) {
    const StaticRoute& r = e.route;
    const std::string what = r.prefix.to_string();
    if (!host_bits_clear(r.prefix)) return fail("route {}: host bits set past the length", what);
    const auto vrf = t->vrf_id(r.vrf);
    if (!vrf) return fail("route {}: no VRF '{}'", what, r.vrf);
    if (!seen.emplace(*vrf, r.prefix.addr.bytes, r.prefix.addr.version * 1000 + r.prefix.length)
             .second) {
      return fail("duplicate route {} in VRF {}", what, t->vrf_name(*vrf));
    }
    RouteAction action = r.action;
    std::vector<uint64_t> key;
    if (r.action == RouteAction::Forward) {
      if (r.nexthops.empty()) return fail("route {}: forward without a next hop", what);
      for (const auto& nh : r.nexthops) {
        if (!nh.vrf.empty()) {
          const auto to = t->vrf_id(nh.vrf);
          if (!to) return fail("route {}: no VRF '{}'", what, nh.vrf);
          if (*to == *vrf) return fail("route {}: leaks into its own VRF {}", what, nh.vrf);
          if (r.nexthops.size() != 1)
            return fail("route {}: a next hop into VRF {} is the route's only one", what, nh.vrf);
          action = RouteAction::Leak;
          key.push_back(*to);
          break;
        }
        auto pit = port_ids.find(nh.port);
        if (pit == port_ids.end()) return fail("route {}: no port '{}'", what, nh.port);
        uint32_t neighbour = kNextHopConnected;
        if (nh.via) {
          if (nh.via->version != r.prefix.addr.version)
            return fail("route {}: next hop {} is of another IP version", what,
                        nh.via->to_string());
          auto id = neighbours.ensure(NeighbourKey::of(PortId{pit->second}, *nh.via));
          if (!id) return fail("route {}: {}", what, id.error().message);
          neighbour = *id;
        }
        key.push_back(uint64_t(neighbour) << 16 | pit->second);
      }
      if (r.nexthops.size() > UINT16_MAX) return fail("route {}: too many next hops", what);
    }
    auto [it, fresh] = leaf_ids.try_emplace({static_cast<int>(action), key},
                                            static_cast<uint32_t>(t->leaves_.size()));
    if (fresh) {
      Leaf leaf;
      leaf.action = action;
      if (action == RouteAction::Leak) {
        leaf.first_hop = static_cast<uint32_t>(key[0]);
      } else {
        leaf.first_hop = static_cast<uint32_t>(t->hops_.size());
        leaf.hop_count = static_cast<uint16_t>(key.size());
        for (uint64_t k : key)
          t->hops_.push_back(Hop{static_cast<uint32_t>(k >> 16), static_cast<uint16_t>(k)});
      }
      t->leaves_.push_back(leaf);
    }
    t->route_leaf_.push_back(it->second);
    t->route_vrf_.push_back(*vrf);
    (r.prefix.addr.version == 4 ? v4 : v6)[*vrf].push_back(&e);
  }

  const auto leaf_of = [&t](const RouteEntry* e) {
    return t->route_leaf_[static_cast<size_t>(e - t->routes_.data())];
  };
  for (size_t vrf = 0; vrf < v4.size(); ++vrf) {
    const std::string in = vrf == 0 ? "" : fmt::format(" of VRF {}", t->vrf_names_[vrf]);
    if (!v4[vrf].empty()) {
      auto fib = build_fib4(std::move(v4[vrf]), t->leaves_.size(), leaf_of);
      if (!fib) return fail("{}{}", fib.error().message, in);
      t->fibs_[vrf].v4 = std::move(*fib);
    }
    if (!v6[vrf].empty()) {
      auto fib = build_fib6(std::move(v6[vrf]), t->leaves_.size(), leaf_of);
      if (!fib) return fail("{}{}", fib.error().message, in);
      t->fibs_[vrf].v6 = std::move(*fib);
    }
  }
  return t;
}

std::optional<VrfId> RouteTable::vrf_id(std::string_view name) const noexcept {
  if (name.empty()) return kDefaultVrfId;
  for (size_t i = 0; i < vrf_names_.size(); ++i) {
    if (vrf_names_[i] == name) return static_cast<VrfId>(i);
  }
  return std::nullopt;
}

uint64_t RouteTable::lookup(const IpAddress& addr, VrfId vrf) const noexcept {
  uint64_t leaf = kNoRoute;
  if (vrf >= vrf_names_.size()) return leaf;
  if (addr.version == 4) {
    uint32_t ip = addr.v4_host();
    lookup4(vrf, &ip, &leaf, 1);
  } else {
    uint8_t ip[1][16];
    std::copy(addr.bytes.begin(), addr.bytes.end(), ip[0]);
    lookup6(vrf, ip, &leaf, 1);
  }
  return leaf;
}

const RouteEntry* RouteTable::match(const IpAddress& addr, VrfId vrf) const noexcept {
  const RouteEntry* best = nullptr;
  for (size_t i = 0; i < routes_.size(); ++i) {
    const RouteEntry& e = routes_[i];
    if (route_vrf_[i] != vrf) continue;
    if (e.route.prefix.addr.version != addr.version || !e.route.prefix.contains(addr)) continue;
    if (best == nullptr || e.route.prefix.length > best->route.prefix.length) best = &e;
  }
  return best;
}

}  // namespace vecflow
