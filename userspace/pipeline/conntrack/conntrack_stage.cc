#include "pipeline/conntrack/conntrack_stage.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <unistd.h>

#include <fmt/format.h>
#include <rte_byteorder.h>
#include <rte_cycles.h>
#include <nlohmann/json.hpp>

#include "core/flow.h"
#include "core/log.h"
#include "core/packet.h"
#include "pipeline/conntrack/tcp_window.h"
#include "pipeline/ip_util.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

using namespace tcp;

namespace {

bool icmp_echo(uint8_t version, uint8_t type, bool& request) noexcept {
  request = version == 4 ? type == 8 : type == 128;
  return request || (version == 4 ? type == 0 : type == 129);
}

// Destination unreachable, source quench, redirect, time exceeded, parameter problem (ICMP);
// destination unreachable, packet too big, time exceeded, parameter problem (ICMPv6).
bool icmp_error(uint8_t version, uint8_t type) noexcept {
  if (version == 4) return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
  return type >= 1 && type <= 4;
}

ConnState unreplied(uint8_t proto) noexcept {
  if (proto == IPPROTO_UDP) return ConnState::UdpUnreplied;
  if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) return ConnState::IcmpUnreplied;
  return ConnState::OtherUnreplied;
}

ConnState replied(uint8_t proto) noexcept {
  if (proto == IPPROTO_UDP) return ConnState::UdpAssured;
  if (proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6) return ConnState::IcmpReplied;
  return ConnState::OtherReplied;
}

// RFC 1624 (eqn. 3), in two parts: what changed, ~from + to over `n` 16-bit words (unfolded),
// and that change applied to a checksum, so that one change summed once updates both the IP
// header's checksum and the L4 one. Words as they sit in the header: one's-complement sums do
// not depend on byte order.
uint32_t checksum_change(const uint16_t* from, const uint16_t* to, unsigned n) noexcept {
  uint32_t acc = 0;
  for (unsigned i = 0; i < n; ++i)
    acc += static_cast<uint16_t>(~from[i]) + uint32_t{to[i]};
  return acc;
}

uint16_t checksum_apply(uint16_t sum, uint32_t change) noexcept {
  uint32_t acc = static_cast<uint16_t>(~sum) + change;  // a few words: two folds suffice
  acc = (acc & 0xffff) + (acc >> 16);
  acc = (acc & 0xffff) + (acc >> 16);
  return static_cast<uint16_t>(~acc);
}

// Rewrites an IPv4 address and the port (or echo identifier) at `port_at` in a packet, with
// the IP header's checksum and the L4 checksum (which covers the address through the
// pseudo-header unless it is ICMP's) kept right: one sum of the change, applied to both.
struct Rewrite {
  rte_ipv4_hdr* ip;
  uint8_t* l4;
  uint8_t proto;
};

// Inlined (as nat_apply() is): called on every translated packet, each call spilled and
// reloaded what the caller had in registers.
[[gnu::always_inline]] inline void rewrite_endpoint(const Rewrite& r, uint8_t* addr,
                                                    uint8_t* port_at, NatEndpoint to) noexcept {
  uint32_t old_addr;
  uint16_t old_port;
  std::memcpy(&old_addr, addr, 4);
  std::memcpy(&old_port, port_at, 2);
  const uint32_t addr_change =
      static_cast<uint16_t>(~old_addr) + (~old_addr >> 16) + (to.addr & 0xffff) + (to.addr >> 16);
  const uint32_t port_change = static_cast<uint16_t>(~old_port) + uint32_t{to.port};
  r.ip->hdr_checksum = checksum_apply(r.ip->hdr_checksum, addr_change);
  std::memcpy(addr, &to.addr, 4);
  std::memcpy(port_at, &to.port, 2);
  // The L4 checksum: where it sits, and what it covers (a UDP checksum 0 means none).
  uint8_t* at;
  uint32_t change = addr_change + port_change;
  if (r.proto == IPPROTO_UDP) {
    at = r.l4 + 6;
  } else if (r.proto == IPPROTO_TCP) {
    at = r.l4 + 16;
  } else if (r.proto == IPPROTO_ICMP) {
    at = r.l4 + 2;
    change = port_change;  // no pseudo-header: the identifier alone
  } else {
    return;  // an IP header only
  }
  uint16_t sum;
  std::memcpy(&sum, at, 2);
  if (r.proto == IPPROTO_UDP && sum == 0) return;
  sum = checksum_apply(sum, change);
  if (r.proto == IPPROTO_UDP && sum == 0) sum = 0xffff;
  std::memcpy(at, &sum, 2);
}

// A TCP session (new, or its port pair used again) as its opening segment `g` sets it up.
void open_tcp(ConnEntry* c, const Segment& g, ConnState state, uint8_t flags) noexcept {
  c->state = state;
  c->flags = static_cast<uint8_t>(flags | (c->flags & (kConnSnat | kConnDnat)));
  c->tcp = {};
  c->tcp[0].end = g.end;
  c->tcp[0].maxend = g.end;
  c->tcp[0].maxwin = std::max<uint32_t>(g.win, 1);
  if (g.wscale >= 0) {
    c->flags |= kConnWscaleOrig;
    c->wscale[0] = static_cast<uint8_t>(g.wscale);
  }
}

}  // namespace

ConntrackStage::ConntrackStage(const config::StageConfig& cfg, StageContext& ctx)
    : Stage(cfg.type, cfg.name, ctx.lcore_slots),
      cfg_(cfg.params.get<ConntrackConfig>()),
      tsc_hz_(rte_get_tsc_hz()),
      table_(std::make_unique<ConnTable>(cfg_.max_sessions)),
      offload_(ctx.offload),
      zones_(new std::atomic<uint8_t>[size_t{UINT16_MAX} + 1]),
      port_v4_(ctx.ports.size(), 0),
      ports_(ctx.ports),
      kernel_(ctx.kernel),
      lcores_(new LcoreState[ctx.lcore_slots]),
      slots_(ctx.lcore_slots),
      qsbr_(ctx.qsbr) {
  if (offload_) offload_->set_sessions(this);
  for (size_t p = 0; p <= UINT16_MAX; ++p)
    zones_[p].store(kDefaultVrfId, std::memory_order_relaxed);
  if (cfg_.nat()) {
    // The configuration check bounds the rules, so those of the file fit.
    nat_ = std::make_unique<NatMap>(std::vector<uint32_t>{}, dnat_rules(cfg_.dnat));
    // The configuration check bounds the pool addresses, so the rules of the file resolve.
    snat_ = std::make_unique<RcuPtr<std::vector<SnatRule>>>(
        std::make_unique<std::vector<SnatRule>>(*snat_rules(cfg_.snat)));
    table_->set_remove_hook(kConnSnat, &ConntrackStage::nat_release, this);
  }
  fragments_ = std::make_unique<FragmentTable>();
  const double ticks_per_s = double(tsc_hz_) / double(uint64_t{1} << ConnTable::kTickShift);
  // A datagram's fragments follow each other within microseconds on a path that does not
  // reorder; seconds cover a slow one. Linux keeps a reassembly 30 s, bounded by memory.
  constexpr double kFragmentLifetimeSeconds = 2;
  fragment_ticks_ = static_cast<uint32_t>(std::max(1.0, kFragmentLifetimeSeconds * ticks_per_s));
  for (size_t s = 0; s < kConnStateCount; ++s) {
    const double t = double(cfg_.timeouts.of(static_cast<ConnState>(s))) * ticks_per_s;
    ticks_[s] = static_cast<uint32_t>(std::clamp(t, 1.0, double(INT32_MAX / 2)));
  }
}

ConntrackStage::~ConntrackStage() {
  if (offload_) offload_->set_sessions(nullptr);
  if (follows_addresses_) kernel_->forget(static_cast<PortAddressFollower*>(this));
}

CtMark ConntrackStage::related(rte_mbuf* m, uint8_t* l4, uint32_t now) const noexcept {
  // An error is at most 576 (IPv4) or 1280 (IPv6) bytes: one in several buffers is not one,
  // and its checksum, recomputed below over the first, would come out wrong.
  if (m->nb_segs != 1) return CtMark::Invalid;
  // The header the error quotes: the packet that caused it, as its sender sent it.
  const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  uint8_t* in = l4 + 8;
  const uint8_t* end = frame + m->data_len;
  ConnKey k;
  const uint8_t own = zone_of(m->port);
  k.zone = own;
  uint32_t ihl;
  if (pkt::is_ipv4(m)) {
    if (in + 20 > end || (in[0] >> 4) != 4) return CtMark::Invalid;
    ihl = uint32_t(in[0] & 0x0f) * 4;
    if (ihl < 20) return CtMark::Invalid;
    k.version = 4;
    k.proto = in[9];
    std::memcpy(k.src.data(), in + 12, 4);
    std::memcpy(k.dst.data(), in + 16, 4);
  } else {
    ihl = 40;
    if (in + 40 > end || (in[0] >> 4) != 6) return CtMark::Invalid;
    k.version = 6;
    k.proto = in[6];
    std::memcpy(k.src.data(), in + 8, 16);
    std::memcpy(k.dst.data(), in + 24, 16);
  }
  uint8_t* il4 = in + ihl;
  if (has_l4_ports(k.proto)) {
    if (il4 + 4 > end) return CtMark::Invalid;
    std::memcpy(&k.src_port, il4, 2);
    std::memcpy(&k.dst_port, il4 + 2, 2);
  } else if (k.proto == IPPROTO_ICMP || k.proto == IPPROTO_ICMPV6) {
    bool request;
    if (il4 + 8 > end || !icmp_echo(k.version, il4[0], request)) return CtMark::Invalid;
    std::memcpy(&k.src_port, il4 + 4, 2);
    k.dst_port = k.src_port;
  }
  // A quote of a translated packet names the pool or a public endpoint: the session is keyed
  // by what they stand for, and hashed as its packets are (pipeline/conntrack/nat_map.h).
  // (A plain enum and a flag: GCC 12 takes an optional's value here for uninitialised.)
  const std::optional<NatProto> quoted_proto =
      nat_ && k.version == 4 ? nat_proto(k.proto) : std::nullopt;
  const bool nat_quote = quoted_proto.has_value();
  const NatProto np = quoted_proto.value_or(NatProto::Tcp);
  if (nat_quote) {
    NatEndpoint src;
    std::memcpy(&src.addr, k.src.data(), 4);
    src.port = k.src_port;
    std::optional<NatEndpoint> was;
    if (const int pool = nat_->pool_of(src.addr); pool >= 0)
      was = nat_->internal(static_cast<unsigned>(pool), np, src.port);
    if (!was && np != NatProto::Icmp) {
      if (const int r = nat_->dnat_public(np, src); r >= 0)
        was = nat_->dnat_rule(unsigned(r)).target;
    }
    if (was) {
      std::memcpy(k.src.data(), &was->addr, 4);
      k.src_port = was->port;
      if (np == NatProto::Icmp) k.dst_port = was->port;
      k.zone = was->zone;  // a pool port's: the tenant the quoted packet left
    }
  }
  // The flow hash the connection's own packets carry: ICMP's flow key has no ports.
  const bool ports = has_l4_ports(k.proto);
  uint32_t hs, hd;
  uint16_t ps = ports ? k.src_port : 0, pd = ports ? k.dst_port : 0;
  if (k.version == 4) {
    NatEndpoint a, b;
    std::memcpy(&a.addr, k.src.data(), 4);
    std::memcpy(&b.addr, k.dst.data(), 4);
    a.port = ps;
    b.port = pd;
    if (nat_quote && ports) nat_->to_public(np, a, b);
    hs = vf_addr4_hash(a.addr);
    hd = vf_addr4_hash(b.addr);
    ps = a.port;
    pd = b.port;
  } else {
    __u32 a[4], b[4];
    std::memcpy(a, k.src.data(), 16);
    std::memcpy(b, k.dst.data(), 16);
    hs = vf_addr_hash(a);
    hd = vf_addr_hash(b);
  }
  const uint32_t hash = vf_flow_hash_parts(hs, hd, ps, pd, k.proto, k.version, 1);
  ConnSnapshot snap;
  bool reply;
  if (!table_->lookup(hash, k, now, snap, reply)) return CtMark::Invalid;
  if (snap.flags & (kConnSnat | kConnDnat)) nat_related(m, l4, in, il4, end, snap, reply);
  route_in_zone(m, k.zone, own);
  return CtMark::Related;
}

void ConntrackStage::nat_related(rte_mbuf* m, uint8_t* l4, uint8_t* in, uint8_t* il4,
                                 const uint8_t* end, const ConnSnapshot& s,
                                 bool reply) const noexcept {
  // The error goes to the sender of the packet it quotes: quote and addresses become what
  // that sender sent and knows (Linux's nf_nat_icmp_reply_translation does the same).
  rte_ipv4_hdr* ip = pkt::ipv4(m);
  uint8_t* outer = reinterpret_cast<uint8_t*>(ip);
  auto* iip = reinterpret_cast<rte_ipv4_hdr*>(in);
  const Rewrite quoted{iip, il4, in[9]};
  const bool echo = quoted.proto == IPPROTO_ICMP;
  uint8_t* qsport = echo ? il4 + 4 : il4;
  uint8_t* qdport = echo ? il4 + 4 : il4 + 2;
  const auto endpoint = [](const std::array<uint8_t, 16>& a, uint16_t port) {
    NatEndpoint e;
    std::memcpy(&e.addr, a.data(), 4);
    e.port = port;
    return e;
  };
  const NatEndpoint orig_src = endpoint(s.key.src, s.key.src_port);
  const NatEndpoint orig_dst = endpoint(s.key.dst, s.key.dst_port);
  const NatEndpoint pool = (s.flags & kConnSnat)
                               ? NatEndpoint{nat_->pool_address(s.nat_pool), s.nat_port}
                               : NatEndpoint{};
  const NatEndpoint pub = (s.flags & kConnDnat) ? nat_->dnat_rule(s.nat_rule).pub : NatEndpoint{};
  // Only the quote's first 8 bytes of L4 are sure to be there: a TCP checksum past them is
  // left as it is.
  const bool l4_sum_in = quoted.proto != IPPROTO_TCP || il4 + 18 <= end;
  const auto set_outer = [&](uint32_t at, uint32_t addr) {
    uint16_t from[2], to[2];
    std::memcpy(from, outer + at, 4);
    std::memcpy(to, &addr, 4);
    const uint16_t sum = ip->hdr_checksum;
    ip->hdr_checksum = checksum_apply(sum, checksum_change(from, to, 2));
    std::memcpy(outer + at, &addr, 4);
  };
  const auto set_quoted = [&](bool src, NatEndpoint to) {
    uint8_t* addr = in + (src ? 12 : 16);
    uint8_t* port = src ? qsport : qdport;
    if (l4_sum_in) {
      rewrite_endpoint(quoted, addr, port, to);
    } else {
      const Rewrite ip_only{iip, nullptr, 0};
      rewrite_endpoint(ip_only, addr, port, to);
    }
  };
  uint32_t outer_src, outer_dst;
  std::memcpy(&outer_src, outer + 12, 4);
  std::memcpy(&outer_dst, outer + 16, 4);
  if (!reply) {
    // The originator's packet, reported by the responder's side: to the originator.
    if (s.flags & kConnSnat) {
      set_quoted(true, orig_src);
      if (outer_dst == pool.addr) set_outer(16, orig_src.addr);
    }
    if (s.flags & kConnDnat) {
      set_quoted(false, pub);
      if (outer_src == orig_dst.addr) set_outer(12, pub.addr);
    }
  } else {
    // The responder's packet, reported by the originator's side: to the responder.
    if (s.flags & kConnDnat) {
      set_quoted(true, orig_dst);
      if (outer_dst == pub.addr) set_outer(16, orig_dst.addr);
    }
    if (s.flags & kConnSnat) {
      set_quoted(false, pool);
      if (outer_src == orig_src.addr) set_outer(12, pool.addr);
    }
  }
  // The ICMP checksum covers the whole message, quote included: recomputed (errors are rare).
  const uint32_t len = std::min<uint32_t>(rte_be_to_cpu_16(ip->total_length) - m->l3_len,
                                          static_cast<uint32_t>(end - l4));
  l4[2] = l4[3] = 0;
  const uint16_t sum = static_cast<uint16_t>(~rte_raw_cksum(l4, len));
  std::memcpy(l4 + 2, &sum, 2);
}

ConntrackStage::NatPre ConntrackStage::nat_key(const rte_mbuf* m, ConnKey& k,
                                               bool echo) const noexcept {
  NatPre pre;
  const std::optional<NatProto> p = nat_proto(k.proto);
  if (!p) return pre;
  NatEndpoint dst;
  std::memcpy(&dst.addr, k.dst.data(), 4);
  dst.port = k.dst_port;
  if (const int pool = nat_->pool_of(dst.addr); pool >= 0) {
    if (const auto e = nat_->internal(static_cast<unsigned>(pool), *p, dst.port)) {
      k.set_dst_v4(e->addr);
      k.set_tail(echo ? e->port : k.src_port, e->port, e->zone);
      pre.pool = pool;
      return pre;
    }
  }
  if (nat_->has_dnat() && !echo) {
    if (const int r = nat_->dnat_match(m->port, *p, dst); r >= 0) {
      const NatEndpoint to = nat_->dnat_rule(unsigned(r)).target;
      k.set_dst_v4(to.addr);
      k.set_ports(k.src_port, to.port);
      pre.dnat_rule = r;
    }
  }
  return pre;
}

bool ConntrackStage::nat_open(ConnEntry* e, const rte_mbuf* m, const NatPre& pre) noexcept {
  if (pre.pool >= 0 || e->key.version != 4) return true;
  const std::optional<NatProto> p = nat_proto(e->key.proto);
  if (!p) return true;
  if (pre.dnat_rule >= 0) {
    e->flags |= kConnDnat;
    e->nat_rule = static_cast<uint8_t>(pre.dnat_rule);
  }
  uint32_t src;
  std::memcpy(&src, e->key.src.data(), 4);
  for (const SnatRule& r : *snat_->load()) {
    if (r.in_port != kNoPort && r.in_port != m->port) continue;
    if ((src & r.mask) != r.src) continue;
    // Paired: the pool address this internal address hashes to, the next ones only while it
    // has no free port.
    const size_t n = r.pools.size();
    const size_t first = n < 2 ? 0 : size_t((uint64_t{src} * 0x9e3779b97f4a7c15ull >> 32) % n);
    for (size_t i = 0; i < n; ++i) {
      const unsigned pool = r.pools[first + i < n ? first + i : first + i - n];
      const auto port = nat_->acquire(pool, *p, {src, e->key.src_port, e->key.zone}, r.lo, r.hi);
      if (!port) continue;
      e->flags |= kConnSnat;
      e->nat_pool = static_cast<uint8_t>(pool);
      e->nat_port = *port;
      return true;
    }
    return false;
  }
  return true;
}

void ConntrackStage::translate_fragment(rte_mbuf* m, const FragmentTable::Outcome& o) noexcept {
  rte_ipv4_hdr* ip = pkt::ipv4(m);
  if (ip->src_addr == o.src && ip->dst_addr == o.dst) return;
  ip->src_addr = o.src;
  ip->dst_addr = o.dst;
  // No L4 header to update; the IP header summed again (fragments are rare).
  ip->hdr_checksum = 0;
  ip->hdr_checksum = rte_ipv4_cksum(ip);
}

bool ConntrackStage::fragment_source_translated(const rte_mbuf* m,
                                                const ConnKey& k) const noexcept {
  const std::optional<NatProto> p = nat_proto(k.proto);
  if (!p) return false;
  uint32_t src;
  std::memcpy(&src, k.src.data(), 4);
  if (nat_->dnat_target_address(*p, src)) return true;
  for (const SnatRule& r : *snat_->load())
    if ((r.in_port == kNoPort || r.in_port == m->port) && (src & r.mask) == r.src) return true;
  return false;
}

[[gnu::always_inline]] inline void ConntrackStage::nat_apply(rte_mbuf* m, const ConnEntry& e,
                                                             bool reply) const noexcept {
  rte_ipv4_hdr* ip = pkt::ipv4(m);
  const Rewrite r{ip, rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len),
                  ip->next_proto_id};
  const bool echo = r.proto == IPPROTO_ICMP;
  uint8_t* sport = echo ? r.l4 + 4 : r.l4;
  uint8_t* dport = echo ? r.l4 + 4 : r.l4 + 2;
  if (!reply) {
    if (e.flags & kConnDnat) {
      NatEndpoint to;
      std::memcpy(&to.addr, e.key.dst.data(), 4);
      to.port = e.key.dst_port;
      rewrite_endpoint(r, reinterpret_cast<uint8_t*>(ip) + 16, dport, to);
    }
    if (e.flags & kConnSnat)
      rewrite_endpoint(r, reinterpret_cast<uint8_t*>(ip) + 12, sport,
                       {nat_->pool_address(e.nat_pool), e.nat_port});
    return;
  }
  if (e.flags & kConnSnat) {
    NatEndpoint to;
    std::memcpy(&to.addr, e.key.src.data(), 4);
    to.port = e.key.src_port;
    rewrite_endpoint(r, reinterpret_cast<uint8_t*>(ip) + 16, dport, to);
  }
  if (e.flags & kConnDnat)
    rewrite_endpoint(r, reinterpret_cast<uint8_t*>(ip) + 12, sport,
                     nat_->dnat_rule(e.nat_rule).pub);
}

void ConntrackStage::nat_release(void* self, const ConnEntry& e) noexcept {
  const auto* stage = static_cast<const ConntrackStage*>(self);
  if (const auto p = nat_proto(e.key.proto)) stage->nat_->release(e.nat_pool, *p, e.nat_port);
}

inline CtMark ConntrackStage::count_datagram(ConnEntry* e, bool reply, const rte_mbuf* m,
                                             uint64_t tsc, uint32_t now) noexcept {
  const unsigned dir = reply ? 1 : 0;
  rte_seqcount_write_begin(&e->seq);
  if (reply && !(e->flags & kConnSeenReply)) {
    e->flags |= kConnSeenReply;
    e->state = replied(e->key.proto);
  }
  e->packets[dir] += 1;
  e->bytes[dir] += m->pkt_len;
  e->last_seen = tsc;
  rte_seqcount_write_end(&e->seq);
  table_->set_expiry(e, expiry(e->state, now));
  return (e->flags & kConnSeenReply) ? CtMark::Established : CtMark::New;
}

inline bool ConntrackStage::track_established(rte_mbuf* m, uint64_t tsc, uint32_t now,
                                              std::array<uint64_t, kCtMarkCount>& marks,
                                              unsigned slot, bool offering) noexcept {
  if (!pkt::is_ipv4(m) || is_fragment(m)) return false;
  const rte_ipv4_hdr* ip = pkt::ipv4(m);
  const uint8_t proto = ip->next_proto_id;
  if (proto != IPPROTO_UDP && proto != IPPROTO_TCP) return false;
  const uint8_t* l4 = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len + m->l3_len);
  uint16_t sp, dp;
  std::memcpy(&sp, l4, 2);
  std::memcpy(&dp, l4 + 2, 2);
  ConnKey k = ConnKey::v4(ip->src_addr, ip->dst_addr, proto);
  const uint8_t own = zone_of(m->port);
  uint8_t zone = own;
  bool pool_reply = false;
  if (nat_) {
    // nat_key()'s cases: to a pool port, the key translated back (the session must be the
    // source NAT that port maps, seen as a reply); to a forwarding rule, track()'s alone.
    if (const int pool = nat_->pool_of(ip->dst_addr); pool >= 0) {
      const auto to = nat_->internal(static_cast<unsigned>(pool),
                                     proto == IPPROTO_TCP ? NatProto::Tcp : NatProto::Udp, dp);
      if (!to) return false;
      k.set_dst_v4(to->addr);
      dp = to->port;
      zone = to->zone;
      pool_reply = true;
    } else if (nat_->has_dnat()) {
      return false;
    }
  }
  k.set_tail(sp, dp, zone);
  bool reply = false;
  ConnEntry* e = table_->find_first_live(m->hash.rss, k, now, reply);
  if (e == nullptr || (pool_reply && (!reply || !(e->flags & kConnSnat)))) return false;
  CtMark mark;
  if (proto == IPPROTO_UDP) {
    mark = count_datagram(e, reply, m, tsc, now);
  } else {
    // An ACK of an established connection within its window: what track() does to it.
    if (e->state != ConnState::TcpEstablished) return false;
    const Segment g = segment_of(l4, rte_be_to_cpu_16(ip->total_length) - m->l3_len);
    if (g.flags != kTcpAck) return false;
    const unsigned dir = reply ? 1 : 0;
    rte_seqcount_write_begin(&e->seq);
    const bool accepted = segment_accepted(*e, dir, g);
    if (accepted) {
      if (reply) e->flags |= kConnSeenReply;
      e->packets[dir] += 1;
      e->bytes[dir] += m->pkt_len;
      e->last_seen = tsc;
    }
    rte_seqcount_write_end(&e->seq);
    if (!accepted) return false;  // track() marks it invalid
    table_->set_expiry(e, expiry(ConnState::TcpEstablished, now));
    mark = (e->flags & kConnSeenReply) ? CtMark::Established : CtMark::New;
  }
  set_ct_mark(m, mark);
  ++marks[size_t(mark)];
  route_in_zone(m, zone, own);
  if (offering) [[unlikely]]
    vouch(m, e, slot, tsc);
  if (e->flags & (kConnSnat | kConnDnat)) nat_apply(m, *e, reply);
  return true;
}

// The session of key `k`: the one the packet before found when it was of the same flow, else
// a lookup (with NAT, of the key translated back first).
[[gnu::always_inline]] inline ConnEntry* ConntrackStage::find(const rte_mbuf* m, ConnKey& k,
                                                              bool fragment, bool echo,
                                                              uint32_t now, LcoreState& st,
                                                              LastLookup& last, bool run_follows,
                                                              NatPre& pre, bool& reply) noexcept {
  const uint32_t hash = m->hash.rss;
  ConnEntry* e;
  const uint8_t shape = static_cast<uint8_t>(fragment | echo << 1);
  if (last.entry != nullptr && last.hash == hash && last.port == m->port && last.shape == shape &&
      last.key == k) {
    e = last.entry;
    reply = last.reply;
  } else {
    // Remembered only when the next packet may be of the same flow: with many flows a copy
    // of the key per packet would cost more than the lookups it saves.
    last.entry = nullptr;
    if (run_follows) {
      last.hash = hash;
      last.port = m->port;
      last.shape = shape;
      last.key = k;
    }
    uint64_t expired = 0;
    if (nat_ && k.version == 4 && !fragment && (has_l4_ports(k.proto) || echo)) {
      // What nat_key may change, kept as fields: a copy of the key would read it as 16-byte
      // words (see ConnKey).
      uint32_t dst;
      std::memcpy(&dst, k.dst.data(), 4);
      const uint16_t src_port = k.src_port, dst_port = k.dst_port;
      const uint8_t zone = k.zone;
      pre = nat_key(m, k, echo);
      e = table_->find(hash, k, now, reply, expired);
      if (pre.pool >= 0 && (e == nullptr || !(e->flags & kConnSnat) || !reply)) {
        // Not a reply of the connection the pool port maps (the filtering is address and port
        // dependent): the packet goes on as addressed.
        pre.pool = -1;
        k.set_dst_v4(dst);
        k.set_tail(src_port, dst_port, zone);
        e = table_->find(hash, k, now, reply, expired);
      }
      if (e == nullptr && nat_->has_dnat() && !echo)
        e = find_forwarded(k, hash, now, reply, expired);
    } else {
      e = table_->find(hash, k, now, reply, expired);
    }
    if (expired) st.expired.add(expired);
    if (run_follows) {
      last.entry = e;
      last.reply = reply;
    }
  }
  return e;
}

// A segment of TCP session `e`: the state machine's step and the window checks.
[[gnu::always_inline]] inline ConntrackStage::Tracked ConntrackStage::tcp_segment(
    const rte_mbuf* m, ConnEntry* e, const Segment& g, bool reply, uint64_t tsc,
    uint32_t now) noexcept {
  const unsigned dir = reply ? 1 : 0;
  rte_seqcount_write_begin(&e->seq);
  CtMark mark = CtMark::Invalid;
  ConnState state = e->state;
  TcpWindow& s = e->tcp[dir];
  TcpWindow& r = e->tcp[dir ^ 1];
  if (g.flags == kTcpSyn) {
    if (!reply && (state == ConnState::TcpTimeWait || state == ConnState::TcpClose)) {
      open_tcp(e, g, ConnState::TcpSynSent, 0);  // the port pair is used again
      state = ConnState::TcpSynSent;
      e->packets = {0, 0};
      e->bytes = {0, 0};
      e->created = tsc;
      mark = CtMark::New;
    } else if (!reply && state == ConnState::TcpSynSent) {
      mark = CtMark::New;  // a retransmitted SYN
    }
  } else if (g.flags == (kTcpSyn | kTcpAck)) {
    if (reply && (state == ConnState::TcpSynSent || state == ConnState::TcpSynRecv)) {
      s.end = g.end;
      s.maxend = g.end;
      s.maxwin = std::max<uint32_t>(g.win, 1);
      if (g.wscale >= 0 && (e->flags & kConnWscaleOrig)) {
        e->flags |= kConnWscaleReply;
        e->wscale[1] = static_cast<uint8_t>(g.wscale);
      }
      if (in_window(s, r, g, g.win)) {
        e->flags |= kConnSeenReply;
        state = ConnState::TcpSynRecv;
        mark = CtMark::Established;
      }
    }
  } else if (state != ConnState::TcpSynSent || !reply) {
    // ACK, FIN or RST (the originator's ACKs while the SYN waits for its answer, too).
    if (segment_accepted(*e, dir, g)) {
      if (reply) e->flags |= kConnSeenReply;
      if (g.flags & kTcpRst) {
        state = ConnState::TcpClose;
      } else {
        if (g.flags & kTcpFin) e->flags |= reply ? kConnFinReply : kConnFinOrig;
        if ((e->flags & (kConnFinOrig | kConnFinReply)) == (kConnFinOrig | kConnFinReply)) {
          state = ConnState::TcpTimeWait;
        } else if (g.flags & kTcpFin) {
          state = ConnState::TcpFinWait;
        } else if (state == ConnState::TcpSynRecv && !reply) {
          state = ConnState::TcpEstablished;
        }
      }
      mark = (e->flags & kConnSeenReply) ? CtMark::Established : CtMark::New;
    }
  } else if (g.flags & kTcpRst) {
    // The responder refuses the SYN: its reset acknowledges the SYN exactly.
    if ((g.flags & kTcpAck) && g.ack == e->tcp[0].end) {
      e->flags |= kConnSeenReply;
      state = ConnState::TcpClose;
      mark = CtMark::Established;
    }
  }
  if (mark != CtMark::Invalid) {
    e->state = state;
    e->packets[dir] += 1;
    e->bytes[dir] += m->pkt_len;
    e->last_seen = tsc;
  }
  rte_seqcount_write_end(&e->seq);
  if (mark != CtMark::Invalid) table_->set_expiry(e, expiry(state, now));
  return Tracked(mark, e, reply);
}

ConntrackStage::Tracked ConntrackStage::track(rte_mbuf* m, uint64_t tsc, uint32_t now,
                                              LcoreState& st, LastLookup& last,
                                              bool run_follows) noexcept {
  ConnKey k;
  const uint8_t own = zone_of(m->port);
  uint32_t l4_room;  // bytes of the IP payload
  if (pkt::is_ipv4(m)) {
    const rte_ipv4_hdr* ip = pkt::ipv4(m);
    k = ConnKey::v4(ip->src_addr, ip->dst_addr, ip->next_proto_id, own);
    l4_room = rte_be_to_cpu_16(ip->total_length) - m->l3_len;
  } else {
    const rte_ipv6_hdr* ip = pkt::ipv6(m);
    k = ConnKey::v6(ip->src_addr, ip->dst_addr, pkt::l4_proto(m), own);
    l4_room = rte_be_to_cpu_16(ip->payload_len) + sizeof(rte_ipv6_hdr) - m->l3_len;
  }
  bool fragment = is_fragment(m);
  if (fragment) [[unlikely]] {
    // Fragments without reassembly (pipeline/conntrack/fragment_table.h): a first fragment carries
    // its ports and is tracked (and translated) as its connection; a later one takes what its first
    // fragment became, its mark and (IPv4) its addresses. A later fragment of a datagram not known
    // goes on tracked by its addresses alone; with NAT, one whose source would be rewritten is
    // dropped and counted rather than sent with an internal address.
    FragmentOf f = fragment_of(m);
    f.datagram.zone = own;
    if (!f.later) {
      fragment = false;
    } else if (const FragmentTable::Outcome* o = fragments_->find(m->hash.rss, f.datagram, now)) {
      st.fragments_known.add();
      if (k.version == 4) translate_fragment(m, *o);
      return Tracked(o->mark);
    } else {
      st.fragments_unknown.add();
      if (nat_ && k.version == 4 && fragment_source_translated(m, k))
        return Tracked::refuse(DropReason::NAT_FRAGMENT);
    }
  }
  uint8_t* l4 = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len + m->l3_len);
  bool tcp = false;
  bool echo = false;
  bool echo_reply = false;
  if (!fragment) {
    if (has_l4_ports(k.proto)) {
      uint16_t sp, dp;
      std::memcpy(&sp, l4, 2);
      std::memcpy(&dp, l4 + 2, 2);
      k.set_ports(sp, dp);
      tcp = k.proto == IPPROTO_TCP;
    } else if (k.proto == (k.version == 4 ? int{IPPROTO_ICMP} : int{IPPROTO_ICMPV6})) {
      bool request;
      if (icmp_echo(k.version, l4[0], request)) {
        uint16_t id;
        std::memcpy(&id, l4 + 4, 2);
        k.set_ports(id, id);
        echo = true;
        echo_reply = !request;
      } else if (icmp_error(k.version, l4[0])) {
        return Tracked(related(m, l4, now));
      }
    }
  }

  const uint32_t hash = m->hash.rss;
  bool reply = false;
  NatPre pre;
  ConnEntry* e = find(m, k, fragment, echo, now, st, last, run_follows, pre, reply);
  if (e != nullptr) route_in_zone(m, e->key.zone, own);
  // A new session's translation; refused when its source NAT rule has no free port. A bound
  // session is what the next packets of the flow find.
  const auto bind = [&](ConnEntry* c) noexcept {
    if (!nat_ || nat_open(c, m, pre)) {
      if (run_follows) {
        last.entry = c;
        last.reply = false;
      }
      return true;
    }
    table_->remove(c);
    return false;
  };

  if (!tcp) {
    if (e == nullptr) {
      if (echo_reply) return Tracked(CtMark::Invalid);
      e = table_->insert(hash, k, tsc);
      if (e == nullptr) return Tracked::refuse(DropReason::CT_TABLE_FULL);
      if (!bind(e)) return Tracked::refuse(DropReason::NAT_NO_PORT);
      st.created.add();
      e->state = unreplied(k.proto);
    }
    return Tracked(count_datagram(e, reply, m, tsc, now), e, reply);
  }

  const Segment g = segment_of(l4, l4_room);
  if (!valid_flags(g.flags)) return Tracked(CtMark::Invalid);

  if (e == nullptr) {
    // A SYN opens a connection; a reset or SYN/ACK for none is invalid; any other segment
    // picks up a connection already running (vecflowd restarted, a route moved).
    if (g.flags & kTcpRst || g.flags == (kTcpSyn | kTcpAck)) return Tracked(CtMark::Invalid);
    e = table_->insert(hash, k, tsc);
    if (e == nullptr) return Tracked::refuse(DropReason::CT_TABLE_FULL);
    if (!bind(e)) return Tracked::refuse(DropReason::NAT_NO_PORT);
    st.created.add();
    rte_seqcount_write_begin(&e->seq);
    if (g.flags == kTcpSyn) {
      open_tcp(e, g, ConnState::TcpSynSent, 0);
    } else {
      open_tcp(e, g, (g.flags & kTcpFin) ? ConnState::TcpFinWait : ConnState::TcpEstablished,
               kConnLiberal | ((g.flags & kTcpFin) ? kConnFinOrig : 0));
    }
    e->packets[0] = 1;
    e->bytes[0] = m->pkt_len;
    rte_seqcount_write_end(&e->seq);
    table_->set_expiry(e, expiry(e->state, now));
    return Tracked(CtMark::New, e, false);
  }

  return tcp_segment(m, e, g, reply, tsc, now);
}

void ConntrackStage::process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept {
  if (pkts.empty()) return;
  LcoreState& st = lcores_[env.slot()];
  const uint64_t tsc = env.now() != 0 ? env.now() : rte_rdtsc();
  const uint32_t now = ConnTable::tick(tsc);
  std::array<uint64_t, kCtMarkCount> marks{};
  LastLookup last;
  // Three steps ahead of the packet being tracked, each on lines the step before brought in:
  // the mbuf kMbufAhead packets ahead; its headers and table buckets (from the hash in the
  // mbuf) kBucketsAhead; the session whose signature matches kSessionAhead. With many flows
  // the vector's mbufs and sessions are rarely in cache when a vector reaches this stage.
  constexpr size_t kMbufAhead = 24, kBucketsAhead = 12, kSessionAhead = 6;
  // The buckets the call sweeps at its end, brought in while its packets are tracked.
  constexpr unsigned kSweepBuckets = 2;
  const size_t n = pkts.size();
  const unsigned slot = env.slot();
  const bool offering = offload_ != nullptr && offload_->enabled();
  table_->prefetch_sweep(pkts[0]->hash.rss, kSweepBuckets);
  for (size_t i = 0; i < n && i < kMbufAhead; ++i)
    rte_prefetch0(pkts[i]);
  for (size_t i = 0; i < n && i < kBucketsAhead; ++i) {
    table_->prefetch_buckets(pkts[i]->hash.rss);
    rte_prefetch0(rte_pktmbuf_mtod(pkts[i], void*));
  }
  for (size_t i = 0; i < n && i < kSessionAhead; ++i)
    table_->prefetch_session(pkts[i]->hash.rss);
  for (size_t i = 0; i < n; ++i) {
    if (i + kMbufAhead < n) rte_prefetch0(pkts[i + kMbufAhead]);
    if (i + kBucketsAhead < n) {
      table_->prefetch_buckets(pkts[i + kBucketsAhead]->hash.rss);
      rte_prefetch0(rte_pktmbuf_mtod(pkts[i + kBucketsAhead], void*));
    }
    if (i + kSessionAhead < n) table_->prefetch_session(pkts[i + kSessionAhead]->hash.rss);
    rte_mbuf* m = pkts[i];
    if (track_established(m, tsc, now, marks, slot, offering)) continue;
    if (!pkt::is_ipv4(m) && !pkt::is_ipv6(m)) continue;
    // A first fragment's outcome is kept for its later fragments, under the datagram it
    // arrived as (NAT may rewrite its addresses).
    FragmentOf fragment;
    bool first_fragment = false;
    if (is_fragment(m)) [[unlikely]] {
      fragment = fragment_of(m);
      fragment.datagram.zone = zone_of(m->port);
      first_fragment = !fragment.later;
    }
    // The next packet carries this one's flow hash: it may be of the same flow.
    const bool run_follows = i + 1 < n && pkts[i + 1]->hash.rss == m->hash.rss;
    const Tracked t = track(m, tsc, now, st, last, run_follows);
    if (t.refused) {
      if (*t.refused == DropReason::NAT_NO_PORT) st.nat_no_port.add();
      if (*t.refused == DropReason::CT_TABLE_FULL) st.table_full.add();
      set_drop(m, *t.refused);
      continue;
    }
    set_ct_mark(m, t.mark);
    ++marks[size_t(t.mark)];
    if (offering) [[unlikely]] {
      if (t.entry != nullptr)
        vouch(m, t.entry, slot, tsc);
      else
        meta(m).flags |= kMetaFlagKeep;
    }
    if (t.mark == CtMark::Invalid) {
      if (cfg_.drop_invalid) set_drop(m, DropReason::CT_INVALID);
    } else if (t.entry != nullptr && (t.entry->flags & (kConnSnat | kConnDnat))) {
      nat_apply(m, *t.entry, t.reply);
    }
    if (first_fragment) [[unlikely]] {
      FragmentTable::Outcome o;
      o.mark = t.mark;
      if (fragment.datagram.version == 4) {
        const rte_ipv4_hdr* ip = pkt::ipv4(m);
        o.src = ip->src_addr;
        o.dst = ip->dst_addr;
      }
      fragments_->remember(m->hash.rss, fragment.datagram, o, now, now + fragment_ticks_);
    }
  }
  for (size_t c = 0; c < kCtMarkCount; ++c)
    if (marks[c]) st.marks[c].add(marks[c]);
  // The first packet's flow bucket is this worker's while the call runs: a class of it is
  // this worker's to sweep.
  if (const unsigned gone = table_->sweep(pkts[0]->hash.rss, now, kSweepBuckets))
    st.expired.add(gone);
}

size_t ConntrackStage::describe(rte_mbuf* m, std::span<char> out) const noexcept {
  const auto r = fmt::format_to_n(out.data(), out.size(), "{}", ct_mark_name(ct_mark(m)));
  return std::min(out.size(), r.size);
}

}  // namespace vecflow
