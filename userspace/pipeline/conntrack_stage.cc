#include "pipeline/conntrack_stage.h"

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
#include "pipeline/ip_util.h"
#include "pipeline/kernel_sync.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

namespace {

constexpr uint8_t kTcpFin = 0x01;
constexpr uint8_t kTcpSyn = 0x02;
constexpr uint8_t kTcpRst = 0x04;
constexpr uint8_t kTcpAck = 0x10;

uint32_t be32(const uint8_t* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return rte_be_to_cpu_32(v);
}
uint16_t be16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

// Sequence-space comparisons (RFC 793 arithmetic modulo 2^32).
bool before(uint32_t a, uint32_t b) noexcept {
  return static_cast<int32_t>(a - b) < 0;
}
bool after(uint32_t a, uint32_t b) noexcept {
  return before(b, a);
}

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

bool has_l4_ports(uint8_t proto) noexcept {
  return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

// The window scale a SYN offers (RFC 7323 §2), or -1. The parser checked that the options lie
// in the frame (doff within the segment).
int window_scale(const uint8_t* tcp, uint32_t doff) noexcept {
  uint32_t i = 20;
  while (i < doff) {
    const uint8_t kind = tcp[i];
    if (kind == 0) break;  // end of options
    if (kind == 1) {       // no-op
      ++i;
      continue;
    }
    if (i + 1 >= doff) break;
    const uint8_t len = tcp[i + 1];
    if (len < 2 || i + len > doff) break;
    if (kind == 3 && len == 3) return std::min<int>(tcp[i + 2], 14);
    i += len;
  }
  return -1;
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

// A TCP segment as the tracker reads it.
struct Segment {
  uint8_t flags;  // FIN, SYN, RST, ACK
  uint32_t seq, ack, end;
  uint32_t win;  // unscaled
  int wscale;    // offered in a SYN, else -1
};

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

bool valid_flags(uint8_t f) noexcept {
  switch (f) {
    case kTcpSyn:
    case kTcpSyn | kTcpAck:
    case kTcpRst:
    case kTcpRst | kTcpAck:
    case kTcpFin | kTcpAck:
    case kTcpAck:
      return true;
    default:
      return false;
  }
}

// The four bounds of "Real Stateful TCP Packet Filtering" on a segment from `s` to `r`, then
// the update of both directions' windows. `swin`: the sender's window, scaled.
bool in_window(TcpWindow& s, TcpWindow& r, const Segment& g, uint32_t swin) noexcept {
  const uint32_t ack = (g.flags & kTcpAck) ? g.ack : r.end;
  const uint32_t maxack = std::max<uint32_t>(s.maxwin, 66000);
  const bool ok = before(g.seq, s.maxend + 1) && after(g.end, s.end - r.maxwin - 1) &&
                  before(ack, r.end + 1) && after(ack, r.end - maxack - 1);
  if (!ok) return false;
  if (s.maxwin < swin) s.maxwin = swin;
  if (after(g.end, s.end)) s.end = g.end;
  if (g.flags & kTcpAck) {
    if (after(ack + swin, r.maxend)) r.maxend = ack + swin;
  }
  return true;
}

// A TCP segment's fields; `l4_room`: the bytes of the IP payload. The parser guarantees the
// whole header, options included, in the first segment.
Segment segment_of(const uint8_t* l4, uint32_t l4_room) noexcept {
  const uint32_t doff = uint32_t(l4[12] >> 4) * 4;
  Segment g;
  g.flags = l4[13] & (kTcpFin | kTcpSyn | kTcpRst | kTcpAck);
  g.seq = be32(l4 + 4);
  g.ack = be32(l4 + 8);
  g.win = be16(l4 + 14);
  g.end = g.seq + (l4_room - doff) + ((g.flags & kTcpSyn) ? 1 : 0) + ((g.flags & kTcpFin) ? 1 : 0);
  g.wscale = (g.flags & kTcpSyn) ? window_scale(l4, doff) : -1;
  return g;
}

// Whether an ACK, FIN or RST segment of `e` in direction `dir` is acceptable (then both
// directions' windows are updated): always on a connection picked up mid-stream, and before
// the other side announced a window.
bool segment_accepted(ConnEntry& e, unsigned dir, const Segment& g) noexcept {
  const bool scaled = (e.flags & kConnWscaleOrig) && (e.flags & kConnWscaleReply);
  const uint32_t swin = g.win << (scaled ? e.wscale[dir] : 0);
  TcpWindow& r = e.tcp[dir ^ 1];
  return (e.flags & kConnLiberal) || r.maxwin == 0 || in_window(e.tcp[dir], r, g, swin);
}

}  // namespace

std::string_view ct_mark_name(CtMark c) noexcept {
  switch (c) {
    case CtMark::None:
      return "none";
    case CtMark::New:
      return "new";
    case CtMark::Established:
      return "established";
    case CtMark::Related:
      return "related";
    case CtMark::Invalid:
      return "invalid";
  }
  return "?";
}

std::optional<CtMark> ct_mark_from_name(std::string_view name) noexcept {
  for (CtMark c : {CtMark::New, CtMark::Established, CtMark::Related, CtMark::Invalid})
    if (ct_mark_name(c) == name) return c;
  return std::nullopt;
}

ConntrackStage::ConntrackStage(const config::StageConfig& cfg, StageContext& ctx)
    : Stage(cfg.type, cfg.name, ctx.lcore_slots),
      cfg_(cfg.params.get<ConntrackConfig>()),
      tsc_hz_(rte_get_tsc_hz()),
      table_(std::make_unique<ConnTable>(cfg_.max_sessions)),
      port_v4_(ctx.ports.size(), 0),
      ports_(ctx.ports),
      kernel_(ctx.kernel),
      lcores_(new LcoreState[ctx.lcore_slots]),
      slots_(ctx.lcore_slots),
      qsbr_(ctx.qsbr) {
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
  if (follows_addresses_) kernel_->forget(static_cast<PortAddressFollower*>(this));
}

namespace {

bool masquerades(const std::vector<SnatRuleConfig>& rules) {
  return std::any_of(rules.begin(), rules.end(),
                     [](const SnatRuleConfig& r) { return !r.masquerade.empty(); });
}

// Every address of a pool's prefixes, in order, each once (network order); kMaxPools + 1 at
// most, which is already too many.
std::vector<uint32_t> pool_addresses(const std::vector<IpPrefix>& to) {
  std::vector<uint32_t> out;
  for (const IpPrefix& p : to) {
    uint32_t first;
    std::memcpy(&first, p.addr.bytes.data(), 4);
    const uint64_t n = uint64_t{1} << (32 - p.length);
    for (uint64_t i = 0; i < n && out.size() <= NatMap::kMaxPools; ++i) {
      const uint32_t a = rte_cpu_to_be_32(rte_be_to_cpu_32(first) + static_cast<uint32_t>(i));
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
  }
  return out;
}

}  // namespace

Result<std::vector<ConntrackStage::SnatRule>> ConntrackStage::snat_rules(
    const std::vector<SnatRuleConfig>& rules) {
  std::vector<SnatRule> out;
  for (const SnatRuleConfig& r : rules) {
    SnatRule b{};
    b.in_port = kNoPort;
    for (size_t i = 0; i < ports_.size(); ++i)
      if (ports_[i].name == r.in_port) b.in_port = static_cast<uint16_t>(i);
    if (r.src) {
      std::memcpy(&b.src, r.src->addr.bytes.data(), 4);
      b.mask = r.src->length == 0 ? 0 : rte_cpu_to_be_32(~uint32_t{0} << (32 - r.src->length));
    }
    std::vector<uint32_t> addrs = pool_addresses(r.to);
    if (!r.masquerade.empty()) {
      for (size_t i = 0; i < ports_.size(); ++i)
        if (ports_[i].name == r.masquerade && port_v4_[i] != 0) addrs.push_back(port_v4_[i]);
    }
    for (uint32_t a : addrs) {
      const int pool = nat_->add_pool(a);
      if (pool < 0)
        return fail(
            "conntrack: nat: more than {} pool addresses since vecflowd started (an address a "
            "reload or a masquerade port drops stays while its sessions live): restart to "
            "reuse them",
            NatMap::kMaxPools);
      b.pools.push_back(static_cast<uint8_t>(pool));
    }
    b.lo = r.ports.low;
    b.hi = r.ports.high;
    out.push_back(std::move(b));
  }
  return out;
}

Result<void> ConntrackStage::replace_nat(const ConntrackConfig& next, const StageContext&) {
  if (!nat_ && next.nat())
    return fail(
        "conntrack: adding nat to a stage started without it needs a restart (the ports' "
        "flow hash rewrite is installed at start)");
  if (!nat_) return {};
  if (auto r = masquerade_ports(next.snat); !r) return r;
  std::lock_guard lock(nat_mutex_);
  auto rules = snat_rules(next.snat);
  if (!rules) return std::unexpected(rules.error());
  if (next.dnat != cfg_.dnat && !nat_->set_dnat(dnat_rules(next.dnat)))
    return fail(
        "conntrack: nat.dnat: more than {} distinct destination NAT rules since vecflowd "
        "started (a rule a reload drops keeps its place while its sessions may live): "
        "restart to load these",
        NatMap::kMaxDnatRules);
  snat_->replace(std::make_unique<std::vector<SnatRule>>(std::move(*rules)), *qsbr_);
  cfg_.snat = next.snat;
  cfg_.dnat = next.dnat;
  return {};
}

std::vector<DnatRule> ConntrackStage::dnat_rules(const std::vector<DnatRuleConfig>& rules) const {
  std::vector<DnatRule> out;
  for (const DnatRuleConfig& r : rules) {
    DnatRule d;
    for (size_t i = 0; i < ports_.size(); ++i)
      if (ports_[i].name == r.in_port) d.in = static_cast<uint16_t>(i);
    d.proto = *nat_proto(r.proto);
    std::memcpy(&d.pub.addr, r.dst.bytes.data(), 4);
    d.pub.port = rte_cpu_to_be_16(r.dst_port);
    std::memcpy(&d.target.addr, r.to.bytes.data(), 4);
    d.target.port = rte_cpu_to_be_16(r.to_port);
    out.push_back(d);
  }
  return out;
}

Result<void> ConntrackStage::masquerade_ports(const std::vector<SnatRuleConfig>& rules) {
  for (size_t i = 0; i < rules.size(); ++i) {
    const std::string& name = rules[i].masquerade;
    if (name.empty()) continue;
    const auto port = std::find_if(ports_.begin(), ports_.end(),
                                   [&](const PortInfo& p) { return p.name == name; });
    if (port == ports_.end() || port->interface.empty())
      return fail(
          "conntrack: nat.snat[{}].masquerade: port '{}' has no kernel interface to take an "
          "address from (masquerade needs an af_xdp port or a DPDK port with one, e.g. "
          "net_tap)",
          i, name);
  }
  if (follows_addresses_ || !masquerades(rules)) return {};
  if (kernel_ == nullptr)
    return fail("conntrack: masquerade on a pipeline started without it needs a restart");
  // Outside nat_mutex_: KernelSync calls set_port_addresses() with its own lock held.
  if (auto r = kernel_->follow_addresses(this); !r) return r;
  follows_addresses_ = true;
  return {};
}

void ConntrackStage::set_port_addresses(std::vector<PortAddresses> addresses) {
  if (!nat_) return;
  std::lock_guard lock(nat_mutex_);
  std::vector<uint32_t> v4(port_v4_.size(), 0);
  for (size_t i = 0; i < v4.size() && i < addresses.size(); ++i)
    if (addresses[i].v4) std::memcpy(&v4[i], addresses[i].v4->bytes.data(), 4);
  if (v4 == port_v4_) return;
  port_v4_ = std::move(v4);
  auto rules = snat_rules(cfg_.snat);
  if (!rules) {
    log::get("pipeline")
        ->warn("stage {}: masquerade keeps its previous addresses: {}", name(),
               rules.error().message);
    return;
  }
  snat_->replace(std::make_unique<std::vector<SnatRule>>(std::move(*rules)), *qsbr_);
}

Result<std::unique_ptr<ConntrackStage>> ConntrackStage::create(const config::StageConfig& cfg,
                                                               StageContext& ctx) {
  const auto& p = cfg.params.get<ConntrackConfig>();
  if (p.max_sessions == 0) return fail("conntrack: max_sessions must be at least 1");
  // The table is reserved and touched at start: a size the machine cannot hold is refused
  // here, named, rather than ending the process when the kernel runs out of memory.
  const size_t need = ConnTable::memory_for(p.max_sessions);
  const size_t ram = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGE_SIZE));
  if (need > ram / 2)
    return fail(
        "conntrack: max_sessions {} needs {} MiB of session table, more than half of "
        "this machine's {} MiB",
        p.max_sessions, need >> 20, ram >> 20);
  std::unique_ptr<ConntrackStage> s;
  try {
    s.reset(new ConntrackStage(cfg, ctx));
  } catch (const std::bad_alloc&) {
    return fail("conntrack: cannot map {} MiB for {} sessions", need >> 20, p.max_sessions);
  }
  if (auto r = s->masquerade_ports(p.snat); !r) return std::unexpected(r.error());
  return s;
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
  // by what they stand for, and hashed as its packets are (pipeline/nat_map.h).
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
      k.set_ports(echo ? e->port : k.src_port, e->port);
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
      const auto port = nat_->acquire(pool, *p, {src, e->key.src_port}, r.lo, r.hi);
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
                                              std::array<uint64_t, kCtMarkCount>& marks) noexcept {
  if (!pkt::is_ipv4(m) || is_fragment(m)) return false;
  const rte_ipv4_hdr* ip = pkt::ipv4(m);
  const uint8_t proto = ip->next_proto_id;
  if (proto != IPPROTO_UDP && proto != IPPROTO_TCP) return false;
  const uint8_t* l4 = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len + m->l3_len);
  uint16_t sp, dp;
  std::memcpy(&sp, l4, 2);
  std::memcpy(&dp, l4 + 2, 2);
  ConnKey k = ConnKey::v4(ip->src_addr, ip->dst_addr, proto);
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
      pool_reply = true;
    } else if (nat_->has_dnat()) {
      return false;
    }
  }
  k.set_ports(sp, dp);
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
  if (e->flags & (kConnSnat | kConnDnat)) nat_apply(m, *e, reply);
  return true;
}

ConntrackStage::Tracked ConntrackStage::track(rte_mbuf* m, uint64_t tsc, uint32_t now,
                                              LcoreState& st, LastLookup& last,
                                              bool run_follows) noexcept {
  ConnKey k;
  uint32_t l4_room;  // bytes of the IP payload
  if (pkt::is_ipv4(m)) {
    const rte_ipv4_hdr* ip = pkt::ipv4(m);
    k = ConnKey::v4(ip->src_addr, ip->dst_addr, ip->next_proto_id);
    l4_room = rte_be_to_cpu_16(ip->total_length) - m->l3_len;
  } else {
    const rte_ipv6_hdr* ip = pkt::ipv6(m);
    k = ConnKey::v6(ip->src_addr, ip->dst_addr, pkt::l4_proto(m));
    l4_room = rte_be_to_cpu_16(ip->payload_len) + sizeof(rte_ipv6_hdr) - m->l3_len;
  }
  bool fragment = is_fragment(m);
  if (fragment) [[unlikely]] {
    // Fragments without reassembly (pipeline/fragment_table.h): a first fragment carries its
    // ports and is tracked (and translated) as its connection; a later one takes what its
    // first fragment became, its mark and (IPv4) its addresses. A later fragment of a datagram
    // not known goes on tracked by its addresses alone; with NAT, one whose source would be
    // rewritten is dropped and counted rather than sent with an internal address.
    const FragmentOf f = fragment_of(m);
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
      pre = nat_key(m, k, echo);
      e = table_->find(hash, k, now, reply, expired);
      if (pre.pool >= 0 && (e == nullptr || !(e->flags & kConnSnat) || !reply)) {
        // Not a reply of the connection the pool port maps (the filtering is address and port
        // dependent): the packet goes on as addressed.
        pre.pool = -1;
        k.set_dst_v4(dst);
        k.set_ports(src_port, dst_port);
        e = table_->find(hash, k, now, reply, expired);
      }
    } else {
      e = table_->find(hash, k, now, reply, expired);
    }
    if (expired) st.expired.add(expired);
    if (run_follows) {
      last.entry = e;
      last.reply = reply;
    }
  }
  const unsigned dir = reply ? 1 : 0;
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

  const auto open = [&](ConnEntry* c, ConnState state, uint8_t flags) noexcept {
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
  };

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
      open(e, ConnState::TcpSynSent, 0);
    } else {
      open(e, (g.flags & kTcpFin) ? ConnState::TcpFinWait : ConnState::TcpEstablished,
           kConnLiberal | ((g.flags & kTcpFin) ? kConnFinOrig : 0));
    }
    e->packets[0] = 1;
    e->bytes[0] = m->pkt_len;
    rte_seqcount_write_end(&e->seq);
    table_->set_expiry(e, expiry(e->state, now));
    return Tracked(CtMark::New, e, false);
  }

  rte_seqcount_write_begin(&e->seq);
  CtMark mark = CtMark::Invalid;
  ConnState state = e->state;
  TcpWindow& s = e->tcp[dir];
  TcpWindow& r = e->tcp[dir ^ 1];
  if (g.flags == kTcpSyn) {
    if (!reply && (state == ConnState::TcpTimeWait || state == ConnState::TcpClose)) {
      open(e, ConnState::TcpSynSent, 0);  // the port pair is used again
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
    if (track_established(m, tsc, now, marks)) continue;
    if (!pkt::is_ipv4(m) && !pkt::is_ipv6(m)) continue;
    // A first fragment's outcome is kept for its later fragments, under the datagram it
    // arrived as (NAT may rewrite its addresses).
    FragmentOf fragment;
    bool first_fragment = false;
    if (is_fragment(m)) [[unlikely]] {
      fragment = fragment_of(m);
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

ConntrackCounters ConntrackStage::counters() const noexcept {
  ConntrackCounters c;
  for (unsigned i = 0; i < slots_; ++i) {
    const LcoreState& s = lcores_[i];
    for (size_t k = 0; k < kCtMarkCount; ++k)
      c.marks[k] += s.marks[k].load();
    c.created += s.created.load();
    c.expired += s.expired.load();
    c.table_full += s.table_full.load();
    c.nat_no_port += s.nat_no_port.load();
    c.fragments_known += s.fragments_known.load();
    c.fragments_unknown += s.fragments_unknown.load();
  }
  return c;
}

std::array<uint64_t, kConnStateCount> ConntrackStage::sessions_by_state() const {
  std::array<uint64_t, kConnStateCount> n{};
  table_->for_each(ConnTable::tick(rte_rdtsc()),
                   [&](const ConnSnapshot& s) { ++n[size_t(s.state)]; });
  return n;
}

std::vector<ConnSnapshot> ConntrackStage::sessions(const SessionFilter& f) const {
  std::vector<ConnSnapshot> out;
  for_each_session(f, [&](const ConnSnapshot& s) { out.push_back(s); });
  return out;
}

void ConntrackStage::for_each_session(const SessionFilter& f,
                                      const std::function<void(const ConnSnapshot&)>& fn) const {
  const auto has_address = [&](const ConnKey& k) {
    if (!f.address) return true;
    if (f.address->version != k.version) return false;
    const size_t n = k.version == 4 ? 4 : 16;
    return std::equal(k.src.begin(), k.src.begin() + n, f.address->bytes.begin()) ||
           std::equal(k.dst.begin(), k.dst.begin() + n, f.address->bytes.begin());
  };
  table_->for_each(ConnTable::tick(rte_rdtsc()), [&](const ConnSnapshot& s) {
    if (f.state && s.state != *f.state) return;
    if (!has_address(s.key)) return;
    if (f.port) {
      const uint16_t p = rte_cpu_to_be_16(*f.port);
      const bool ports = has_l4_ports(s.key.proto);
      if (!ports || (s.key.src_port != p && s.key.dst_port != p)) return;
    }
    fn(s);
  });
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_conntrack_stage(const config::StageConfig& cfg,
                                                    StageContext& ctx) {
  auto s = ConntrackStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

// The timeouts: key, member.
struct TimeoutKey {
  std::string_view key;
  uint32_t ConnTimeouts::*field;
};
constexpr TimeoutKey kTimeoutKeys[] = {
    {"tcp_syn_sent", &ConnTimeouts::tcp_syn_sent},
    {"tcp_syn_recv", &ConnTimeouts::tcp_syn_recv},
    {"tcp_established", &ConnTimeouts::tcp_established},
    {"tcp_fin_wait", &ConnTimeouts::tcp_fin_wait},
    {"tcp_time_wait", &ConnTimeouts::tcp_time_wait},
    {"tcp_close", &ConnTimeouts::tcp_close},
    {"udp_unreplied", &ConnTimeouts::udp_unreplied},
    {"udp_assured", &ConnTimeouts::udp_assured},
    {"icmp", &ConnTimeouts::icmp},
    {"other_unreplied", &ConnTimeouts::other_unreplied},
    {"other_replied", &ConnTimeouts::other_replied},
};

// An IPv4 address; IPv6 is refused by name (the NAT is NAT44).
void get_v4(config::Ctx& ctx, config::MapReader& m, std::string_view key, IpAddress& out) {
  std::optional<IpAddress> a;
  if (!m.get_address(key, a)) return;
  if (a->version != 4) {
    ctx.error(m.child(key), m.key_path(key), "NAT translates IPv4 only (NAT44)");
    return;
  }
  out = *a;
}

// `to`: an IPv4 address or prefix, or a list of them.
void read_pool(config::Ctx& ctx, const YAML::Node& n, const std::string& path,
               std::vector<IpPrefix>& out) {
  const auto one = [&](const YAML::Node& item, const std::string& at) {
    const auto text = config::read_string(ctx, item, at);
    if (!text) return;
    std::string why;
    std::optional<IpPrefix> p;
    if (text->find('/') == std::string::npos) {
      if (const auto a = parse_ip_address(*text))
        p = IpPrefix{*a, static_cast<uint8_t>(a->version == 4 ? 32 : 128)};
      else
        why = "not an IPv4 address or prefix";
    } else {
      p = parse_ip_prefix(*text, &why);
    }
    if (!p)
      ctx.error(item, at, fmt::format("invalid pool address '{}': {}", *text, why));
    else if (p->addr.version != 4)
      ctx.error(item, at, "NAT translates IPv4 only (NAT44)");
    else
      out.push_back(*p);
  };
  if (n.IsSequence()) {
    config::for_each_item(ctx, n, path, one);
    if (n.size() == 0) ctx.error(n, path, "an empty pool");
  } else {
    one(n, path);
  }
}

void read_nat(config::Ctx& ctx, config::MapReader& m, ConntrackConfig& c) {
  config::MapReader n(ctx, m.child("nat"), m.key_path("nat"), {"snat", "dnat"});
  if (!n.ok()) return;
  config::for_each_item(
      ctx, n.child("snat"), n.key_path("snat"),
      [&](const YAML::Node& item, const std::string& path) {
        config::MapReader r(ctx, item, path, {"in_port", "src", "to", "masquerade", "ports"});
        if (!r.ok()) return;
        SnatRuleConfig s;
        r.get("in_port", s.in_port);
        if (r.get_prefix("src", s.src) && s.src->addr.version != 4) {
          ctx.error(r.child("src"), r.key_path("src"), "NAT translates IPv4 only (NAT44)");
          s.src.reset();
        }
        r.get("masquerade", s.masquerade);
        if (r.has("to") == !s.masquerade.empty())
          ctx.error(item, path,
                    "give `to` (pool addresses) or `masquerade` (a port whose address to "
                    "take), one of them");
        else if (r.has("to"))
          read_pool(ctx, r.child("to"), r.key_path("to"), s.to);
        std::optional<config::PortRange> ports;
        if (r.get_port_range("ports", ports)) {
          if (ports->low == 0)
            ctx.error(r.child("ports"), r.key_path("ports"), "port 0 cannot be a source port");
          else
            s.ports = *ports;
        }
        c.snat.push_back(std::move(s));
      });
  config::for_each_item(
      ctx, n.child("dnat"), n.key_path("dnat"),
      [&](const YAML::Node& item, const std::string& path) {
        config::MapReader r(ctx, item, path,
                            {"in_port", "proto", "dst", "dst_port", "to", "to_port"});
        if (!r.ok()) return;
        DnatRuleConfig d;
        r.get("in_port", d.in_port);
        r.get_enum<uint8_t>("proto", d.proto, {{"tcp", IPPROTO_TCP}, {"udp", IPPROTO_UDP}});
        if (r.require("dst")) get_v4(ctx, r, "dst", d.dst);
        if (r.require("dst_port")) r.get("dst_port", d.dst_port, 1, 65535);
        if (r.require("to")) get_v4(ctx, r, "to", d.to);
        d.to_port = d.dst_port;
        r.get("to_port", d.to_port, 1, 65535);
        c.dnat.push_back(std::move(d));
      });
}

ConntrackConfig read_conntrack(config::Ctx& ctx, config::MapReader& m) {
  ConntrackConfig c;
  if (m.has("nat")) read_nat(ctx, m, c);
  m.get("max_sessions", c.max_sessions, 1, ConnTable::kMaxSessions);
  m.get_enum<bool>("invalid", c.drop_invalid, {{"mark", false}, {"drop", true}});
  if (m.has("timeouts")) {
    std::vector<std::string_view> keys;
    for (const auto& t : kTimeoutKeys)
      keys.push_back(t.key);
    config::MapReader t(ctx, m.child("timeouts"), m.key_path("timeouts"), keys);
    if (t.ok()) {
      for (const auto& tk : kTimeoutKeys)
        t.get(std::string(tk.key), c.timeouts.*tk.field, 1, kMaxConnTimeout);
    }
  }
  return c;
}

const config::StageConfig* group_head(const config::ApplianceConfig& cfg, size_t i) {
  while (i > 0 && cfg.pipeline[i].fuse)
    --i;
  return &cfg.pipeline[i];
}

void check_nat(config::StageCheck& c, const ConntrackConfig& p) {
  const config::ApplianceConfig& cfg = c.config();
  for (size_t i = 0; i < cfg.pipeline.size(); ++i) {
    if (i == c.index() || cfg.pipeline[i].type != c.stage().type) continue;
    if (cfg.pipeline[i].params.get<ConntrackConfig>().nat() && i < c.index())
      c.error(c.node({"nat"}), c.path(".nat"),
              fmt::format("only one conntrack stage may translate; pipeline[{}] does already", i));
  }
  std::vector<uint32_t> pools;
  size_t masquerade = 0;
  for (size_t i = 0; i < p.snat.size(); ++i) {
    const SnatRuleConfig& r = p.snat[i];
    if (!r.in_port.empty())
      c.port_exists(r.in_port, c.node({"nat", "snat", i, "in_port"}),
                    c.path(fmt::format(".nat.snat[{}].in_port", i)));
    if (!r.masquerade.empty()) {
      c.port_exists(r.masquerade, c.node({"nat", "snat", i, "masquerade"}),
                    c.path(fmt::format(".nat.snat[{}].masquerade", i)));
      ++masquerade;
    }
    for (uint32_t a : pool_addresses(r.to))
      if (std::find(pools.begin(), pools.end(), a) == pools.end()) pools.push_back(a);
  }
  if (pools.size() + masquerade > NatMap::kMaxPools)
    c.error(
        c.node({"nat", "snat"}), c.path(".nat.snat"),
        fmt::format("more than {} pool addresses (each address of a pool, one per masquerade rule)",
                    NatMap::kMaxPools));
  if (p.dnat.size() > 255)
    c.error(c.node({"nat", "dnat"}), c.path(".nat.dnat"),
            fmt::format("{} destination NAT rules; at most 255", p.dnat.size()));
  for (size_t i = 0; i < p.dnat.size(); ++i) {
    const DnatRuleConfig& r = p.dnat[i];
    const std::string at = fmt::format(".nat.dnat[{}]", i);
    if (!r.in_port.empty())
      c.port_exists(r.in_port, c.node({"nat", "dnat", i, "in_port"}), c.path(at + ".in_port"));
    for (size_t j = 0; j < i; ++j) {
      const DnatRuleConfig& o = p.dnat[j];
      if (o.proto == r.proto && o.dst == r.dst && o.dst_port == r.dst_port &&
          (o.in_port == r.in_port || o.in_port.empty() || r.in_port.empty()))
        c.error(c.node({"nat", "dnat", i}), c.path(at),
                fmt::format("forwards the same public endpoint {}:{} as dnat[{}]",
                            r.dst.to_string(), r.dst_port, j));
      if (o.proto == r.proto && o.to == r.to && o.to_port == r.to_port)
        c.error(c.node({"nat", "dnat", i}), c.path(at),
                fmt::format("has the same target {}:{} as dnat[{}]: replies could not tell "
                            "which public endpoint to leave from",
                            r.to.to_string(), r.to_port, j));
    }
  }
}

void check_conntrack(config::StageCheck& c, const ConntrackConfig& p) {
  const config::ApplianceConfig& cfg = c.config();
  const YAML::Node at = c.node();
  if (p.nat()) check_nat(c, p);
  if (group_head(cfg, c.index())->sched != config::SchedType::Atomic)
    c.error(at, c.path(),
            "conntrack keeps per-connection state and needs an atomic queue: give it "
            "`sched: atomic`, or fuse it to a stage that has it");
  if (cfg.scheduler.vector_size < 2)
    c.error(at, c.path(),
            "conntrack needs flow-bucketed vectors (scheduler.vector.size of 2 or more): its "
            "table is owned per flow bucket");
  if (!cfg.steering.symmetric_hash)
    c.error(at, c.path(),
            "conntrack needs steering.symmetric_hash: true, so that both directions of a "
            "connection share a flow bucket");
  const bool any_dpdk = std::any_of(cfg.ports.begin(), cfg.ports.end(),
                                    [](const config::PortConfig& p) { return !p.is_afxdp(); });
  if (cfg.scheduler.flow_id == config::FlowIdSource::Rss ||
      (cfg.scheduler.flow_id == config::FlowIdSource::Auto && any_dpdk))
    c.error(at, c.path(),
            "conntrack needs the flow hash vecflow computes (scheduler.flow_id: software or "
            "xdp): a NIC's RSS hash differs between a connection's two directions");
}

Json conntrack_json(const ConntrackConfig& p) {
  Json t = Json::object();
  for (const auto& tk : kTimeoutKeys)
    t[std::string(tk.key)] = p.timeouts.*tk.field;
  Json snat = Json::array(), dnat = Json::array();
  for (const SnatRuleConfig& r : p.snat) {
    Json rule = {{"in_port", r.in_port.empty() ? Json() : Json(r.in_port)},
                 {"src", config::prefix_json(r.src)}};
    if (r.masquerade.empty()) {
      Json to = Json::array();
      for (const IpPrefix& a : r.to)
        to.push_back(a.length == 32 ? a.addr.to_string() : a.to_string());
      rule["to"] = to.size() == 1 ? to[0] : to;
    } else {
      rule["masquerade"] = r.masquerade;
    }
    rule["ports"] = config::port_range_json(r.ports);
    snat.push_back(std::move(rule));
  }
  for (const DnatRuleConfig& r : p.dnat)
    dnat.push_back({{"in_port", r.in_port.empty() ? Json() : Json(r.in_port)},
                    {"proto", config::l4_proto_json(r.proto)},
                    {"dst", r.dst.to_string()},
                    {"dst_port", r.dst_port},
                    {"to", r.to.to_string()},
                    {"to_port", r.to_port}});
  return {{"max_sessions", p.max_sessions},
          {"invalid", p.drop_invalid ? "drop" : "mark"},
          {"timeouts", std::move(t)},
          {"nat", {{"snat", std::move(snat)}, {"dnat", std::move(dnat)}}}};
}

// Source NAT rules are swapped live (new connections take the new rules; a session keeps the
// mapping it has until it expires, as Linux keeps its NAT bindings); the rest is a restart.
Result<void> apply_nat(Stage& stage, const StageContext& ctx, const config::AnyStageParams&,
                       const config::AnyStageParams& to) {
  return static_cast<ConntrackStage&>(stage).replace_nat(to.get<ConntrackConfig>(), ctx);
}

std::vector<std::pair<std::string, std::string>> nat_ports(const config::AnyStageParams& params) {
  const auto& c = params.get<ConntrackConfig>();
  std::vector<std::pair<std::string, std::string>> out;
  for (size_t i = 0; i < c.snat.size(); ++i) {
    if (!c.snat[i].in_port.empty())
      out.emplace_back(fmt::format("nat.snat[{}]", i), c.snat[i].in_port);
    if (!c.snat[i].masquerade.empty())
      out.emplace_back(fmt::format("nat.snat[{}]", i), c.snat[i].masquerade);
  }
  for (size_t i = 0; i < c.dnat.size(); ++i)
    if (!c.dnat[i].in_port.empty())
      out.emplace_back(fmt::format("nat.dnat[{}]", i), c.dnat[i].in_port);
  return out;
}

}  // namespace

StageModule conntrack_stage_module() {
  return StageModule{
      config::stage_type<ConntrackConfig>("conntrack",
                                          {"max_sessions", "invalid", "timeouts", "nat"},
                                          read_conntrack, conntrack_json, check_conntrack),
      make_conntrack_stage,
      [](const config::AnyStageParams& p) { return masquerades(p.get<ConntrackConfig>().snat); },
      {{{"nat", "", "", nullptr}}, apply_nat, nat_ports}};
}

}  // namespace vecflow
