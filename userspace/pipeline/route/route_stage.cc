#include "pipeline/route/route_stage.h"

#include <algorithm>
#include <map>
#include <ranges>
#include <set>

#include <fmt/format.h>
#include <rte_cycles.h>
#include <rte_ether.h>
#include <nlohmann/json.hpp>

#include "config/stage_type.h"
#include "core/offload_feed.h"
#include "core/packet.h"
#include "core/parse.h"
#include "pipeline/icmp_error.h"
#include "pipeline/ip_util.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/packet_view.h"
#include "pipeline/route/route_commands.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

namespace {

// The IP versions whose routes differ between two lists (kernel sync and the file give theirs
// in a stable order): an offloaded flow's route is of its own version.
OffloadChange route_changes(const std::vector<StaticRoute>& a, const std::vector<StaticRoute>& b) {
  uint64_t which = 0;
  for (uint8_t v : {4, 6}) {
    auto of_version = [v](const StaticRoute& r) { return r.prefix.addr.version == v; };
    if (!std::ranges::equal(a | std::views::filter(of_version), b | std::views::filter(of_version)))
      which |= uint64_t(offload_change_of(v));
  }
  return OffloadChange(which);
}

// Whether a non-IP frame is ARP (the ethertype after any VLAN tags).
bool is_arp(const rte_mbuf* m) noexcept {
  if (m->l2_len < sizeof(rte_ether_hdr) || m->data_len < m->l2_len) return false;
  uint16_t type;
  std::memcpy(&type, rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len - 2), 2);
  return type == rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
}

// Destinations the box itself receives rather than routes.
bool host_bound4(uint32_t dst_host) noexcept {
  return (dst_host >> 28) == 0xe || dst_host == 0xffffffff;  // multicast, limited broadcast
}
bool host_bound6(const uint8_t* dst) noexcept {
  return dst[0] == 0xff || (dst[0] == 0xfe && (dst[1] & 0xc0) == 0x80);  // multicast, fe80::/10
}

// Martian IPv4 addresses (RFC 1812 §5.3.7, RFC 6890). Sources are told by their first octet:
// no packet on a wire carries 127/8, nor 224/4 (multicast), 240/4 (reserved) or
// 255.255.255.255, which are all of 224.0.0.0 and above, whatever its destination.
bool martian_source4(uint8_t first_octet) noexcept {
  return first_octet == 127 || first_octet >= 224;
}
// 0/8 as a source: a host that has no address yet (DHCP) may send only to the box itself.
bool unspecified_source4(uint8_t first_octet) noexcept {
  return first_octet == 0;
}
// Destinations (host order) no packet on a wire carries: 0/8 ("this network") and 127/8.
bool martian_destination4(uint32_t dst) noexcept {
  return (dst >> 24) == 0 || (dst >> 24) == 127;
}
// 169.254/16, which a router forwards to no other link (RFC 3927 §2.7).
bool link_local4(uint32_t dst) noexcept {
  return (dst >> 16) == 0xa9fe;
}

// IPv6 addresses (RFC 4291) read as two 64-bit halves in memory order: the unspecified address
// :: (§2.5.2) and the loopback address ::1 (§2.5.3) are the ones whose first half is zero, so
// the second is read only then.
uint64_t half(const uint8_t* a, unsigned i) noexcept {
  uint64_t h;
  std::memcpy(&h, a + 8 * i, 8);
  return h;
}
bool unspecified6(const uint8_t* a) noexcept {
  return half(a, 0) == 0 && half(a, 1) == 0;
}
bool loopback6(const uint8_t* a) noexcept {
  return half(a, 0) == 0 && half(a, 1) == rte_cpu_to_be_64(1);
}
// Sources no packet on a wire carries: ::1, and multicast (ff00::/8, §2.7).
bool martian_source6(const uint8_t* src) noexcept {
  return src[0] == 0xff || loopback6(src);
}
// Destinations no packet on a wire carries: :: and ::1.
bool martian_destination6(const uint8_t* dst) noexcept {
  return half(dst, 0) == 0 && (half(dst, 1) == 0 || half(dst, 1) == rte_cpu_to_be_64(1));
}

// Whether the IPv4 header is intact. Where the port gave no verdict (UNKNOWN: AF_XDP, most
// virtual devices) the header is summed here; else BAD says it is not, GOOD says it is, as
// does NONE ("the checksum in the packet is wrong but the header was verified").
bool ipv4_header_intact(const rte_mbuf* m, const rte_ipv4_hdr* ip) noexcept {
  const uint64_t verdict = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
  if (verdict == RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN) return ipv4_checksum_ok(ip);
  return verdict != RTE_MBUF_F_RX_IP_CKSUM_BAD;
}

// Picks one of `count` next hops by flow hash: a multiply-shift maps the 32-bit hash onto
// 0..count-1 evenly without a division. A port computes the hash only where something reads
// it on every packet (io/rx_classify.h); a packet without one is hashed here, the first time a
// multipath route needs it.
// Out of line: parse_packet inlined made pick() too big to inline, and a call per packet for
// the single next hop nearly every route has cost 3-4 % of the route stage (perf).
[[gnu::noinline]] uint32_t pick_multipath(rte_mbuf* m, uint16_t count) noexcept {
  if (!(m->ol_flags & RTE_MBUF_F_RX_RSS_HASH)) [[unlikely]]
    (void)parse_packet(m, /*symmetric=*/true);
  return static_cast<uint32_t>((uint64_t(m->hash.rss) * count) >> 32);
}

inline uint32_t pick(rte_mbuf* m, uint16_t count) noexcept {
  return count == 1 ? 0 : pick_multipath(m, count);
}

// What a vector's packets came to, counted per vector: one store per counter instead of one
// per packet.
struct RouteTally {
  uint64_t forwarded = 0, to_kernel = 0, no_route = 0, not_ip = 0;
  uint64_t bad_checksum = 0, martian_source = 0, martian_destination = 0;
};

// The checks an IPv4 packet passes before its lookup: its header checksum, martian addresses
// (RFC 1812 5.3.7), and the box's own destinations, which go to the kernel. False: decided
// here (dropped or to the kernel) and counted. Inlined into route()'s loop, which it is part of.
template <bool kChecksum, bool kMartians>
[[gnu::always_inline]] inline bool admit4(rte_mbuf* m, const rte_ipv4_hdr* ip, uint32_t dst,
                                          RouteTally& n) noexcept {
  if (kChecksum && !ipv4_header_intact(m, ip)) {
    set_drop(m, DropReason::IPV4_BAD_CHECKSUM);
    ++n.bad_checksum;
    return false;
  }
  // The source's first octet, read as it lies in the packet: all its checks need.
  const uint8_t src_net = reinterpret_cast<const uint8_t*>(&ip->src_addr)[0];
  if (kMartians && martian_source4(src_net)) {
    set_drop(m, DropReason::MARTIAN_SOURCE);
    ++n.martian_source;
    return false;
  }
  if (kMartians && martian_destination4(dst)) {
    set_drop(m, DropReason::MARTIAN_DESTINATION);
    ++n.martian_destination;
    return false;
  }
  if (host_bound4(dst)) {
    set_kernel(m);
    ++n.to_kernel;
    return false;
  }
  if (kMartians && unspecified_source4(src_net)) {
    set_drop(m, DropReason::MARTIAN_SOURCE);
    ++n.martian_source;
    return false;
  }
  return true;
}

// admit4's checks for IPv6 (no header checksum).
template <bool kMartians>
[[gnu::always_inline]] inline bool admit6(rte_mbuf* m, const rte_ipv6_hdr* ip,
                                          RouteTally& n) noexcept {
  if (kMartians && martian_source6(ip->src_addr)) {
    set_drop(m, DropReason::MARTIAN_SOURCE);
    ++n.martian_source;
    return false;
  }
  if (kMartians && martian_destination6(ip->dst_addr)) {
    set_drop(m, DropReason::MARTIAN_DESTINATION);
    ++n.martian_destination;
    return false;
  }
  if (host_bound6(ip->dst_addr)) {
    set_kernel(m);
    ++n.to_kernel;
    return false;
  }
  if (kMartians && unspecified6(ip->src_addr)) {
    set_drop(m, DropReason::MARTIAN_SOURCE);
    ++n.martian_source;
    return false;
  }
  return true;
}

}  // namespace

RouteStage::RouteStage(const config::StageConfig& cfg, StageContext& ctx)
    : Stage(cfg.type, cfg.name, ctx.lcore_slots),
      ports_(ctx.ports),
      own_mtus_(ctx.mtus ? nullptr : std::make_unique<PortMtuTable>(ctx.ports.size())),
      mtus_(ctx.mtus ? ctx.mtus : own_mtus_.get()),
      qsbr_(ctx.qsbr),
      neighbours_(ctx.neighbours),
      kernel_(ctx.kernel),
      offload_(ctx.offload),
      from_kernel_(cfg.params.get<RouteConfig>().from_kernel),
      icmp_(cfg.params.get<RouteConfig>().icmp_time_exceeded),
      unreachable_(cfg.params.get<RouteConfig>().icmp_unreachable),
      checks_(cfg.params.get<RouteConfig>().checks),
      vrfs_(ctx.vrfs),
      session_vrfs_(ctx.session_vrfs),
      lcores_(new LcoreState[ctx.lcore_slots]),
      slots_(ctx.lcore_slots) {}

RouteStage::~RouteStage() {
  if (kernel_ != nullptr) kernel_->forget(this);
}

Result<std::unique_ptr<RouteStage>> RouteStage::create(const config::StageConfig& cfg,
                                                       StageContext& ctx) {
  const auto& p = cfg.params.get<RouteConfig>();
  if (ctx.qsbr == nullptr || ctx.neighbours == nullptr)
    return fail("the route stage needs the pipeline's grace-period domain and neighbour table");
  if (p.from_kernel && ctx.kernel == nullptr)
    return fail("routes from the kernel need a port with a kernel interface");
  std::unique_ptr<RouteStage> s(new RouteStage(cfg, ctx));
  s->config_routes_ = p.routes;
  {
    std::lock_guard lock(s->mutex_);
    if (auto r = s->rebuild_locked(OffloadChange::Any); !r) return std::unexpected(r.error());
  }
  if (s->kernel_ != nullptr && p.from_kernel) {
    if (auto r = s->kernel_->follow_routes(s.get()); !r) return std::unexpected(r.error());
  }
  // Too-big answers are always sent.
  auto responder = IcmpResponder::create(ctx);
  if (!responder) return std::unexpected(responder.error());
  s->icmp_responder_ = std::move(*responder);
  return s;
}

Result<void> RouteStage::rebuild_locked(OffloadChange which) {
  std::vector<RouteEntry> entries;
  entries.reserve(config_routes_.size() + kernel_routes_.size());
  std::set<std::tuple<std::string, std::array<uint8_t, 16>, int>> configured;
  for (const auto& r : config_routes_) {
    entries.push_back(RouteEntry{r, RouteSource::Config});
    configured.emplace(r.vrf, r.prefix.addr.bytes, r.prefix.addr.version * 1000 + r.prefix.length);
  }
  for (const auto& r : kernel_routes_) {
    // A VRF a reload removed: its kernel table's routes go with it (KernelSync hands them
    // over again, converted for the VRFs in force, right after).
    if (!r.vrf.empty() &&
        std::ranges::none_of(vrfs_, [&](const auto& v) { return v.name == r.vrf; }))
      continue;
    if (configured.contains(
            {r.vrf, r.prefix.addr.bytes, r.prefix.addr.version * 1000 + r.prefix.length}))
      continue;
    entries.push_back(RouteEntry{r, RouteSource::Kernel});
  }
  auto table = RouteTable::build(std::move(entries), ports_, vrfs_, *neighbours_);
  if (!table) return std::unexpected(table.error());
  table_.replace(std::move(*table), *qsbr_);
  if (offload_ && which != OffloadChange{}) offload_->changed(which);
  return {};
}

Result<void> RouteStage::replace_routes(std::vector<StaticRoute> routes) {
  std::lock_guard lock(mutex_);
  const OffloadChange which = route_changes(config_routes_, routes);
  std::swap(config_routes_, routes);
  auto r = rebuild_locked(which);
  if (!r) std::swap(config_routes_, routes);  // keep the table in force, and its source
  return r;
}

Result<void> RouteStage::replace_vrfs(std::vector<config::VrfConfig> vrfs,
                                      std::vector<StaticRoute> routes) {
  std::lock_guard lock(mutex_);
  std::swap(vrfs_, vrfs);
  std::swap(config_routes_, routes);
  // A port that changes VRF changes the route of every flow through it, of both versions.
  auto r = rebuild_locked(OffloadChange::Any);
  if (!r) {
    std::swap(vrfs_, vrfs);
    std::swap(config_routes_, routes);
  }
  return r;
}

std::vector<StaticRoute> RouteStage::config_routes() const {
  std::lock_guard lock(mutex_);
  return config_routes_;
}

std::vector<config::VrfConfig> RouteStage::vrfs() const {
  std::lock_guard lock(mutex_);
  return vrfs_;
}

std::map<uint32_t, std::string> RouteStage::vrf_tables() const {
  std::lock_guard lock(mutex_);
  std::map<uint32_t, std::string> tables;
  for (const auto& v : vrfs_) {
    if (v.table != 0) tables.emplace(v.table, v.name);
  }
  return tables;
}

Result<void> RouteStage::refresh_kernel_routes() {
  // Without the stage's lock: KernelSync takes its own, then this stage's (set_kernel_routes).
  if (kernel_ == nullptr || !from_kernel_) return {};
  return kernel_->resync_routes(this);
}

Result<void> RouteStage::set_kernel_routes(std::vector<StaticRoute> routes) {
  std::lock_guard lock(mutex_);
  // Kernel sync hands over the whole list at each event of the kernel's: an unchanged one is
  // not a change (a rebuild would take every offloaded flow back to user space), and a change
  // of one IP version's routes leaves the other's flows where they are.
  const OffloadChange which = route_changes(kernel_routes_, routes);
  if (which == OffloadChange{}) return {};
  std::swap(kernel_routes_, routes);
  auto r = rebuild_locked(which);
  if (!r) std::swap(kernel_routes_, routes);
  return r;
}

std::vector<RouteEntry> RouteStage::routes() const {
  std::lock_guard lock(mutex_);
  return table_.load()->routes();
}

std::vector<RouteStage::VrfRouteCount> RouteStage::route_counts() const {
  std::lock_guard lock(mutex_);
  const RouteTable& t = *table_.load();
  std::vector<VrfRouteCount> by_id(t.vrf_count());
  for (size_t i = 0; i < by_id.size(); ++i)
    by_id[i].vrf = t.vrf_name(static_cast<VrfId>(i));
  for (const RouteEntry& e : t.routes()) {
    VrfRouteCount& c = by_id[t.vrf_id(e.route.vrf).value_or(kDefaultVrfId)];
    ++(e.source == RouteSource::Kernel ? c.kernel : c.config);
  }
  std::vector<VrfRouteCount> out;
  for (auto& c : by_id) {
    if (!c.vrf.empty()) out.push_back(std::move(c));  // a retired place (pipeline/vrf.h)
  }
  return out;
}

std::optional<RouteEntry> RouteStage::route_for(const IpAddress& addr,
                                                const std::string& vrf) const {
  std::lock_guard lock(mutex_);
  const RouteTable& t = *table_.load();
  const auto id = t.vrf_id(vrf);
  if (!id) return std::nullopt;
  const RouteEntry* e = t.match(addr, *id);
  if (e == nullptr) return std::nullopt;
  return *e;
}

std::vector<std::string> RouteStage::vrf_names() const {
  std::lock_guard lock(mutex_);
  const RouteTable& t = *table_.load();
  std::vector<std::string> names;
  for (size_t i = 0; i < t.vrf_count(); ++i) {
    if (!t.vrf_name(static_cast<VrfId>(i)).empty()) names.push_back(t.vrf_name(VrfId(i)));
  }
  return names;
}

RouteCounters RouteStage::counters() const noexcept {
  RouteCounters c;
  for (unsigned i = 0; i < slots_; ++i) {
    const LcoreState& s = lcores_[i];
    c.forwarded += s.forwarded.load();
    c.to_kernel += s.to_kernel.load();
    c.no_route += s.no_route.load();
    c.ttl_expired += s.ttl_expired.load();
    c.too_big += s.too_big.load();
    c.not_ip += s.not_ip.load();
    c.bad_checksum += s.bad_checksum.load();
    c.martian_source += s.martian_source.load();
    c.martian_destination += s.martian_destination.load();
  }
  c.icmp_sent = icmp_responder_->sent();
  c.icmp_limited = icmp_responder_->limited();
  return c;
}

void RouteStage::expired(rte_mbuf* m, bool v6, LcoreState& st, StageEnv& env) noexcept {
  st.ttl_expired.add();
  if (!icmp_ ||
      !icmp_responder_->answer(m, v6, IcmpResponder::Kind::Expired, DropReason::TTL_EXPIRED, env,
                               icmp4_time_exceeded, icmp6_time_exceeded))
    set_drop(m, DropReason::TTL_EXPIRED);
}

void RouteStage::unreachable(rte_mbuf* m, bool v6, StageEnv& env) noexcept {
  if (!unreachable_ ||
      !icmp_responder_->answer(m, v6, IcmpResponder::Kind::Unreachable, DropReason::NO_ROUTE, env,
                               icmp4_net_unreachable, icmp6_no_route))
    set_drop(m, DropReason::NO_ROUTE);
}

void RouteStage::too_big(rte_mbuf* m, bool v6, uint32_t mtu, LcoreState& st,
                         StageEnv& env) noexcept {
  st.too_big.add();
  const bool answered = icmp_responder_->answer(
      m, v6, IcmpResponder::Kind::TooBig, DropReason::PACKET_TOO_BIG, env,
      [mtu](rte_mbuf* p, uint32_t src, const MacAddress& mac) {
        return icmp4_frag_needed(p, mtu, src, mac);
      },
      [mtu](rte_mbuf* p, const uint8_t* src, const MacAddress& mac) {
        return icmp6_packet_too_big(p, mtu, src, mac);
      });
  if (!answered) set_drop(m, DropReason::PACKET_TOO_BIG);
}

void RouteStage::set_port(PortId id, const PortInfo& info) {
  if (to_index(id) < ports_.size()) ports_[to_index(id)] = info;
  if (icmp_responder_) icmp_responder_->set_port(id, info);
}

void RouteStage::process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept {
  // The checks in force are chosen once per vector: each combination is a loop of its own, so
  // the packets of a vector are not asked again and again what never changes.
  if (checks_.ipv4_checksum) {
    checks_.martians ? route<true, true>(pkts, env) : route<true, false>(pkts, env);
  } else {
    checks_.martians ? route<false, true>(pkts, env) : route<false, false>(pkts, env);
  }
}

template <bool kChecksum, bool kMartians>
void RouteStage::route(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept {
  const RouteTable* t = table_.load();
  const std::span<const RouteTable::Leaf> leaves = t->leaves();
  const std::span<const RouteTable::Hop> hops = t->hops();
  // Read once: the packets' stores may alias the global, which meta() reads each time.
  const int meta_offset = g_packet_meta_offset;
  const bool session_vrfs = session_vrfs_ && t->has_vrfs();  // see session_vrfs_
  const PortMtuTable& mtus = *mtus_;
  LcoreState& st = lcores_[env.slot()];
  RouteTally n;
  // The egress MTU, read again only when the egress port changes (nearly every packet of a
  // vector leaves where the one before it did): read through the table per packet, its
  // fields were loaded anew after each header store, which may alias them.
  uint16_t mtu_port = kNoPort;
  uint32_t mtu_value = 0;
  const auto egress_mtu = [&](uint16_t port) noexcept {
    if (port != mtu_port) [[unlikely]] {
      mtu_port = port;
      mtu_value = mtus.get(port);
    }
    return mtu_value;
  };

  uint32_t ip4[kLookupBatch];
  uint64_t leaf4[kLookupBatch];
  uint16_t at4[kLookupBatch];
  uint8_t ip6[kLookupBatch][16];
  uint64_t leaf6[kLookupBatch];
  uint16_t at6[kLookupBatch];
  // Each packet's IP header, found once in the first pass (its address takes three mbuf
  // fields) and rewritten in the second.
  void* hdr[kLookupBatch];

  for (size_t base = 0; base < pkts.size(); base += kLookupBatch) {
    const size_t end = std::min(pkts.size(), base + kLookupBatch);
    unsigned n4 = 0, n6 = 0;
    const uint16_t first_port = pkts[base]->port;
    // Any bit set: a packet of another port than the first's, or one its conntrack session
    // routes in another VRF (read only where there are VRFs).
    uint16_t other_ports = 0;
    for (size_t i = base; i < end; ++i) {
      // The first stage to read a packet's headers: with many flows they waited in the rx
      // adapter's vectors long enough to leave L1. The runner prefetched the mbufs.
      if (i + kPrefetchAhead < pkts.size())
        rte_prefetch0(rte_pktmbuf_mtod(pkts[i + kPrefetchAhead], void*));
      rte_mbuf* m = pkts[i];
      other_ports |= m->port ^ first_port;
      if (session_vrfs) other_ports |= RTE_MBUF_DYNFIELD(m, meta_offset, const PacketMeta*)->vrf;
      if (pkt::is_ipv4(m)) {
        rte_ipv4_hdr* ip = pkt::ipv4(m);
        const uint32_t dst = rte_be_to_cpu_32(ip->dst_addr);
        if (!admit4<kChecksum, kMartians>(m, ip, dst, n)) continue;
        hdr[i - base] = ip;
        ip4[n4] = dst;
        at4[n4++] = static_cast<uint16_t>(i - base);
      } else if (pkt::is_ipv6(m)) {
        rte_ipv6_hdr* ip = pkt::ipv6(m);
        const uint8_t* dst = ip->dst_addr;
        if (!admit6<kMartians>(m, ip, n)) continue;
        hdr[i - base] = ip;
        std::memcpy(ip6[n6], dst, 16);
        at6[n6++] = static_cast<uint16_t>(i - base);
      } else if (is_arp(m)) {
        set_kernel(m);
        ++n.to_kernel;
      } else {
        set_drop(m, DropReason::NOT_IP);
        ++n.not_ip;
      }
    }
    t->lookup4(pkts.data() + base, at4, other_ports == 0, ip4, leaf4, n4);
    t->lookup6(pkts.data() + base, at6, other_ports == 0, ip6, leaf6, n6);

    for (unsigned k = 0; k < n4 + n6; ++k) {
      const bool v6 = k >= n4;
      const uint16_t at = v6 ? at6[k - n4] : at4[k];
      rte_mbuf* m = pkts[base + at];
      uint64_t leaf_id = v6 ? leaf6[k - n4] : leaf4[k];
      if (leaves[leaf_id].action == RouteAction::Leak) [[unlikely]]
        leaf_id = v6 ? t->leaked(leaves[leaf_id], ip6[k - n4]) : t->leaked(leaves[leaf_id], ip4[k]);
      const RouteTable::Leaf& leaf = leaves[leaf_id];
      switch (leaf.action) {
        case RouteAction::Kernel:
          set_kernel(m);
          ++n.to_kernel;
          continue;
        case RouteAction::Drop:
        case RouteAction::Leak:  // leaked on again by the other VRF: not followed
          // No route at all is answered (network unreachable); a `drop` route drops silently,
          // as a Linux blackhole route does.
          if (leaf_id == RouteTable::kNoRoute) {
            unreachable(m, v6, env);
          } else {
            set_drop(m, DropReason::NO_ROUTE);
          }
          ++n.no_route;
          continue;
        case RouteAction::Forward:
          break;
      }
      const RouteTable::Hop& hop = hops[leaf.first_hop + pick(m, leaf.hop_count)];
      // What the egress link must carry, as Linux measures it (the IP packet as received).
      const uint32_t l3_bytes = m->pkt_len - m->l2_len;
      if (!v6) {
        if (kMartians && link_local4(ip4[k])) {
          set_drop(m, DropReason::MARTIAN_DESTINATION);
          ++n.martian_destination;
          continue;
        }
        auto* ip = static_cast<rte_ipv4_hdr*>(hdr[at]);
        if (ip->time_to_live <= 1) {
          expired(m, false, st, env);
          continue;
        }
        // Checked before the TTL changes: the answer quotes the packet as it arrived.
        if (l3_bytes > egress_mtu(hop.port) &&
            (ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG))) [[unlikely]] {
          too_big(m, false, egress_mtu(hop.port), st, env);
          continue;
        }
        ipv4_decrement_ttl(ip);
      } else {
        auto* ip = static_cast<rte_ipv6_hdr*>(hdr[at]);
        if (ip->hop_limits <= 1) {
          expired(m, true, st, env);
          continue;
        }
        if (l3_bytes > egress_mtu(hop.port)) [[unlikely]] {
          too_big(m, true, egress_mtu(hop.port), st, env);
          continue;
        }
        ip->hop_limits--;
      }
      PacketMeta& pm = *RTE_MBUF_DYNFIELD(m, meta_offset, PacketMeta*);
      pm.out_port = hop.port;
      pm.nexthop = hop.neighbour;
      ++n.forwarded;
    }
  }
  // Every packet routed (forwarded is only counted for packets left Continue).
  if (n.forwarded == pkts.size()) env.kept_all();
  st.forwarded.add(n.forwarded);
  st.to_kernel.add(n.to_kernel);
  st.no_route.add(n.no_route);
  st.not_ip.add(n.not_ip);
  st.bad_checksum.add(n.bad_checksum);
  st.martian_source.add(n.martian_source);
  st.martian_destination.add(n.martian_destination);
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_route_stage(const config::StageConfig& cfg, StageContext& ctx) {
  auto s = RouteStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

void read_nexthop(config::MapReader& m, NextHop& nh) {
  m.get_address("via", nh.via);
  if (m.require("port")) m.get("port", nh.port);
}

RouteConfig read_route(config::Ctx& ctx, config::MapReader& m) {
  RouteConfig s;
  YAML::Node routes = m.child("routes");
  if (routes.IsScalar()) {
    auto v = config::read_string(ctx, routes, m.key_path("routes"));
    if (v && *v == "from-kernel") {
      s.from_kernel = true;
    } else if (v) {
      ctx.error(routes, m.key_path("routes"), "expected a list of routes or 'from-kernel'");
    }
  } else {
    config::for_each_item(
        ctx, routes, m.key_path("routes"), [&](const YAML::Node& item, const std::string& ip) {
          config::MapReader r(ctx, item, ip,
                              {"prefix", "vrf", "via", "port", "nexthops", "action", "to_vrf"});
          if (!r.ok()) return;
          StaticRoute route;
          route.where = ctx.at(item);
          std::optional<IpPrefix> prefix;
          if (r.require("prefix") && r.get_prefix("prefix", prefix)) route.prefix = *prefix;
          if (r.get("vrf", route.vrf) && route.vrf == config::kDefaultVrf) route.vrf.clear();
          r.get_enum<RouteAction>("action", route.action,
                                  {{"forward", RouteAction::Forward},
                                   {"kernel", RouteAction::Kernel},
                                   {"drop", RouteAction::Drop}});
          bool single = r.has("via") || r.has("port") || r.has("to_vrf");
          if (route.action != RouteAction::Forward) {
            for (auto k : {"via", "port", "nexthops", "to_vrf"}) {
              if (r.has(k)) {
                ctx.error(r.child(k), r.key_path(k),
                          fmt::format("a route with action {} has no next hop",
                                      route.action == RouteAction::Kernel ? "kernel" : "drop"));
              }
            }
          } else if (single && r.has("nexthops")) {
            ctx.error(item, ip,
                      "give either via/port, to_vrf or a nexthops list, not one with another");
          } else if (r.has("nexthops")) {
            config::for_each_item(ctx, r.child("nexthops"), r.key_path("nexthops"),
                                  [&](const YAML::Node& nh_node, const std::string& np) {
                                    config::MapReader nm(ctx, nh_node, np, {"via", "port"});
                                    if (!nm.ok()) return;
                                    NextHop nh;
                                    read_nexthop(nm, nh);
                                    route.nexthops.push_back(nh);
                                  });
            if (route.nexthops.empty())
              ctx.error(item, r.key_path("nexthops"), "needs at least one next hop");
          } else if (r.has("to_vrf")) {
            NextHop nh;
            r.get("to_vrf", nh.vrf);
            if (r.has("via") || r.has("port"))
              ctx.error(item, ip,
                        "a route into another VRF (to_vrf) has no port or gateway: the VRF's own "
                        "route for the destination gives them");
            route.nexthops.push_back(nh);
          } else {
            NextHop nh;
            read_nexthop(r, nh);
            route.nexthops.push_back(nh);
          }
          for (const auto& nh : route.nexthops) {
            if (nh.via && nh.via->version != route.prefix.addr.version) {
              ctx.error(item, ip, "next hop and prefix are of different IP versions");
            }
          }
          s.routes.push_back(std::move(route));
        });
  }
  bool fk = false;
  if (m.get("from_kernel", fk)) s.from_kernel = s.from_kernel || fk;
  m.get("icmp_time_exceeded", s.icmp_time_exceeded);
  m.get("icmp_unreachable", s.icmp_unreachable);
  if (m.has("checks")) {
    config::MapReader c(ctx, m.child("checks"), m.key_path("checks"),
                        {"ipv4_checksum", "martians"});
    c.get("ipv4_checksum", s.checks.ipv4_checksum);
    c.get("martians", s.checks.martians);
  }
  return s;
}

// Whether the file declares VRF `name` (empty: the default VRF, always there).
bool vrf_declared(const config::ApplianceConfig& cfg, const std::string& name) {
  return name.empty() ||
         std::ranges::any_of(cfg.vrfs, [&](const auto& v) { return v.name == name; });
}

void check_route(config::StageCheck& c, const RouteConfig& r) {
  std::set<std::tuple<std::string, std::string, int>> seen;
  for (size_t ri = 0; ri < r.routes.size(); ++ri) {
    const auto& route = r.routes[ri];
    YAML::Node rn = c.node({"routes", ri});
    std::string rp = c.path(fmt::format(".routes[{}]", ri));
    if (!vrf_declared(c.config(), route.vrf)) {
      c.error(config::locate(rn, {"vrf"}), rp + ".vrf",
              fmt::format("no VRF '{}' (vrfs: declares them)", route.vrf));
    }
    if (!seen.emplace(route.vrf, route.prefix.addr.to_string(), route.prefix.length).second) {
      c.error(
          config::locate(rn, {"prefix"}), rp + ".prefix",
          fmt::format("duplicate route {}{} (list next hops under 'nexthops' for ECMP)",
                      route.prefix.to_string(), route.vrf.empty() ? "" : " in VRF " + route.vrf));
    }
    if (route.nexthops.size() == 1 && !route.nexthops[0].vrf.empty()) {
      const std::string& to = route.nexthops[0].vrf;
      const YAML::Node at = config::locate(rn, {"to_vrf"});
      if (!vrf_declared(c.config(), to == config::kDefaultVrf ? std::string() : to)) {
        c.error(at, rp + ".to_vrf", fmt::format("no VRF '{}' (vrfs: declares them)", to));
      } else if ((to == config::kDefaultVrf ? std::string() : to) == route.vrf) {
        c.error(at, rp + ".to_vrf",
                fmt::format("the route is in VRF {} already: to_vrf names another VRF",
                            route.vrf.empty() ? std::string(config::kDefaultVrf) : route.vrf));
      }
      continue;
    }
    for (size_t ni = 0; ni < route.nexthops.size(); ++ni) {
      YAML::Node at = route.nexthops.size() == 1 && !config::locate(rn, {"nexthops"}).IsSequence()
                          ? config::locate(rn, {"port"})
                          : config::locate(rn, {"nexthops", ni, "port"});
      c.port_exists(route.nexthops[ni].port, at, rp + ".port");
    }
  }
}

Json route_json(const RouteConfig& p) {
  Json routes = Json::array();
  for (const auto& r : p.routes) {
    Json hops = Json::array();
    for (const auto& n : r.nexthops)
      hops.push_back({{"via", n.via ? Json(n.via->to_string()) : Json(nullptr)}, {"port", n.port}});
    std::string_view act = r.action == RouteAction::Forward  ? "forward"
                           : r.action == RouteAction::Kernel ? "kernel"
                                                             : "drop";
    // A route without next hops (kernel, drop) has no `nexthops` key in the file.
    const bool leak = r.nexthops.size() == 1 && !r.nexthops[0].vrf.empty();
    routes.push_back({{"prefix", r.prefix.to_string()},
                      {"vrf", r.vrf.empty() ? Json(nullptr) : Json(r.vrf)},
                      {"action", act},
                      {"to_vrf", leak ? Json(r.nexthops[0].vrf) : Json(nullptr)},
                      {"nexthops", hops.empty() || leak ? Json(nullptr) : std::move(hops)}});
  }
  return {{"routes", std::move(routes)},
          {"from_kernel", p.from_kernel},
          {"icmp_time_exceeded", p.icmp_time_exceeded},
          {"icmp_unreachable", p.icmp_unreachable},
          {"checks", {{"ipv4_checksum", p.checks.ipv4_checksum}, {"martians", p.checks.martians}}}};
}

Result<void> apply_routes(Stage& stage, const StageContext&, const config::AnyStageParams&,
                          const config::AnyStageParams& to) {
  return static_cast<RouteStage&>(stage).replace_routes(to.get<RouteConfig>().routes);
}

std::vector<std::pair<std::string, std::string>> route_ports(const config::AnyStageParams& p) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& route : p.get<RouteConfig>().routes) {
    for (const auto& hop : route.nexthops) {
      if (hop.vrf.empty()) out.emplace_back("route " + route.prefix.to_string(), hop.port);
    }
  }
  return out;
}

}  // namespace

StageModule route_stage_module() {
  return StageModule{
      config::stage_type<RouteConfig>(
          "route", {"routes", "from_kernel", "icmp_time_exceeded", "icmp_unreachable", "checks"},
          read_route, route_json, check_route),
      make_route_stage,
      // Its ICMP errors come from the ports' kernel addresses (too-big answers
      // are always on).
      [](const config::AnyStageParams&) { return true; },
      {{{"routes", "route", "routes",
         [](const Json& r) { return r["prefix"].get<std::string>(); }}},
       apply_routes,
       route_ports},
      control::add_route_commands};
}

}  // namespace vecflow
