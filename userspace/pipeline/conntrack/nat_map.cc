#include "pipeline/conntrack/nat_map.h"

#include <algorithm>
#include <cstring>

#include <netinet/in.h>
#include <rte_byteorder.h>

#include "core/packet.h"
#include "pipeline/conntrack/fragment_hash.h"
#include "pipeline/ip_util.h"
#include "pipeline/packet_view.h"
#include "vecflow/flow.h"

namespace vecflow {

namespace {

// Slot word: internal address (bits 63-32), internal port (31-16), zone (15-8), references
// (7-0). Address and port as they sit in the header, so a comparison needs no byte swap.
constexpr uint64_t kRefMask = 0xff;
uint64_t slot_key(NatEndpoint e) noexcept {
  return uint64_t{e.addr} << 32 | uint64_t{e.port} << 16 | uint64_t{e.zone} << 8;
}
NatEndpoint slot_endpoint(uint64_t w) noexcept {
  return {static_cast<uint32_t>(w >> 32), static_cast<uint16_t>(w >> 16),
          static_cast<uint8_t>(w >> 8)};
}

// Where an internal endpoint's probe sequence starts in a range of `size` ports.
uint32_t probe_start(NatEndpoint e, NatProto p, uint32_t size) noexcept {
  const uint64_t h = (slot_key(e) | uint64_t(p)) * 0x9e3779b97f4a7c15ull;
  return static_cast<uint32_t>(((h >> 32) * size) >> 32);
}

}  // namespace

NatMap::NatMap(const std::vector<uint32_t>& pools, const std::vector<DnatRule>& dnat) {
  for (uint32_t a : pools)
    add_pool(a);
  set_dnat(dnat);
}

bool NatMap::set_dnat(const std::vector<DnatRule>& rules) {
  const uint32_t n = ndnat_.load(std::memory_order_relaxed);
  std::vector<int> index;
  uint32_t added = 0;
  for (const DnatRule& r : rules) {
    int at = -1;
    for (uint32_t i = 0; i < n && at < 0; ++i)
      if (dnat_[i].in == r.in && dnat_[i].proto == r.proto && dnat_[i].pub == r.pub &&
          dnat_[i].target == r.target)
        at = static_cast<int>(i);
    index.push_back(at >= 0 ? at : static_cast<int>(n + added++));
  }
  if (n + added > kMaxDnatRules) return false;
  for (size_t k = 0; k < rules.size(); ++k)
    if (static_cast<uint32_t>(index[k]) >= n) dnat_[size_t(index[k])] = rules[k];
  for (uint32_t i = 0; i < n + added; ++i) {
    const bool on = std::find(index.begin(), index.end(), static_cast<int>(i)) != index.end();
    in_force_[i].store(on, std::memory_order_release);
  }
  ndnat_.store(n + added, std::memory_order_release);
  return true;
}

template <typename Match>
int NatMap::find_dnat(Match match) const noexcept {
  const uint32_t n = ndnat_.load(std::memory_order_acquire);
  int retired = -1;
  for (uint32_t i = 0; i < n; ++i) {
    if (!match(dnat_[i])) continue;
    if (in_force_[i].load(std::memory_order_relaxed)) return static_cast<int>(i);
    if (retired < 0) retired = static_cast<int>(i);
  }
  return retired;
}

int NatMap::add_pool(uint32_t addr) {
  if (const int i = pool_of(addr); i >= 0) return i;
  const uint32_t n = npools_.load(std::memory_order_relaxed);
  if (n == kMaxPools) return -1;
  auto words = std::make_unique<PoolSlots>();
  for (Slots& s : *words)
    for (auto& w : s)
      w.store(0, std::memory_order_relaxed);
  pools_[n] = addr;
  slots_[n] = std::move(words);
  uint32_t i = index_slot(addr);
  while (index_[i].load(std::memory_order_relaxed) != 0)
    i = (i + 1) & (kIndexSize - 1);
  index_[i].store(static_cast<uint16_t>(n + 1), std::memory_order_release);
  npools_.store(n + 1, std::memory_order_release);
  return static_cast<int>(n);
}

std::optional<uint16_t> NatMap::acquire(unsigned pool, NatProto p, NatEndpoint internal,
                                        uint16_t lo, uint16_t hi) noexcept {
  Slots& s = slots(pool, p);
  const uint32_t size = uint32_t(hi) - lo + 1;
  const uint32_t probes = size < kProbes ? size : kProbes;
  const uint32_t start = probe_start(internal, p, size);
  const uint64_t key = slot_key(internal);
  const auto port_at = [&](uint32_t i) {
    const uint32_t off = start + i < size ? start + i : start + i - size;
    return static_cast<uint16_t>(lo + off);
  };
  // A reference on slot `port` if it maps `internal`.
  const auto take = [&](uint16_t port) noexcept {
    uint64_t w = s[port].load(std::memory_order_acquire);
    while ((w & ~kRefMask) == key && (w & kRefMask) != 0 && (w & kRefMask) != kRefMask) {
      if (s[port].compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) return true;
    }
    return false;
  };
  for (uint32_t i = 0; i < probes; ++i) {
    const uint16_t port = port_at(i);
    if (take(port)) return rte_cpu_to_be_16(port);
  }
  for (uint32_t i = 0; i < probes; ++i) {
    const uint16_t port = port_at(i);
    uint64_t expected = 0;
    if (!s[port].compare_exchange_strong(expected, key | 1, std::memory_order_acq_rel)) {
      if (take(port)) return rte_cpu_to_be_16(port);  // another worker claimed it for us
      continue;
    }
    // Claimed. A mapping nearer the start that another worker claimed meanwhile wins.
    for (uint32_t j = 0; j < i; ++j) {
      const uint16_t earlier = port_at(j);
      if (take(earlier)) {
        release(pool, p, rte_cpu_to_be_16(port));
        return rte_cpu_to_be_16(earlier);
      }
    }
    return rte_cpu_to_be_16(port);
  }
  return std::nullopt;
}

void NatMap::release(unsigned pool, NatProto p, uint16_t ext_port) noexcept {
  std::atomic<uint64_t>& w = slots(pool, p)[rte_be_to_cpu_16(ext_port)];
  uint64_t v = w.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t next = (v & kRefMask) <= 1 ? 0 : v - 1;
    if (w.compare_exchange_weak(v, next, std::memory_order_acq_rel)) return;
  }
}

std::optional<NatEndpoint> NatMap::internal(unsigned pool, NatProto p,
                                            uint16_t ext_port) const noexcept {
  const uint64_t w = slots(pool, p)[rte_be_to_cpu_16(ext_port)].load(std::memory_order_acquire);
  if ((w & kRefMask) == 0) return std::nullopt;
  return slot_endpoint(w);
}

int NatMap::dnat_match(uint16_t in, NatProto p, NatEndpoint dst) const noexcept {
  const uint32_t n = ndnat_.load(std::memory_order_acquire);
  for (uint32_t i = 0; i < n; ++i) {
    const DnatRule& r = dnat_[i];
    if ((r.in == kNoPort || r.in == in) && r.proto == p && r.pub == dst &&
        in_force_[i].load(std::memory_order_relaxed))
      return static_cast<int>(i);
  }
  return -1;
}

int NatMap::dnat_target(NatProto p, NatEndpoint e) const noexcept {
  return find_dnat([&](const DnatRule& r) { return r.proto == p && r.target == e; });
}

bool NatMap::dnat_target_address(NatProto p, uint32_t addr) const noexcept {
  return find_dnat([&](const DnatRule& r) { return r.proto == p && r.target.addr == addr; }) >= 0;
}

int NatMap::dnat_public(NatProto p, NatEndpoint e) const noexcept {
  return find_dnat([&](const DnatRule& r) { return r.proto == p && r.pub == e; });
}

bool NatMap::to_public(NatProto p, NatEndpoint& src, NatEndpoint& dst) const noexcept {
  bool changed = false;
  if (const int r = dnat_target(p, src); r >= 0) {
    src = dnat_[size_t(r)].pub;
    changed = true;
  }
  if (const int r = dnat_target(p, dst); r >= 0) {
    dst = dnat_[size_t(r)].pub;
    changed = true;
  }
  return changed;
}

void NatMap::apply(rte_mbuf** pkts, uint16_t n) const noexcept {
  // Without destination NAT only a packet to a pool address can change its hash: the others
  // (most, on a LAN's outbound traffic) are passed over on one probe of the pool index.
  const bool dnat = has_dnat();
  for (uint16_t i = 0; i < n; ++i) {
    rte_mbuf* m = pkts[i];
    if (is_fragment(m)) [[unlikely]] {
      // A first fragment carries its ports: hashed as its connection, and that hash given to
      // its later fragments (pipeline/conntrack/fragment_hash.h). IPv6 ones too (NAT leaves them
      // be).
      const FragmentOf f = fragment_of(m);
      if (f.later) {
        fragment_hash::give_later(m, f.datagram);
      } else {
        if (f.datagram.version == 4) rehash(m);
        fragment_hash::remember_first(m, f.datagram);
      }
      continue;
    }
    if (pkt::is_ipv4(m) && (dnat || pool_of(pkt::ipv4(m)->dst_addr) >= 0)) rehash(m);
  }
}

void NatMap::rehash(rte_mbuf* m) const noexcept {
  const rte_ipv4_hdr* ip = pkt::ipv4(m);
  const std::optional<NatProto> p = nat_proto(ip->next_proto_id);
  if (!p) return;
  const uint8_t* l4 = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len + m->l3_len);
  NatEndpoint src{ip->src_addr, 0}, dst{ip->dst_addr, 0};
  const bool ports = *p != NatProto::Icmp;
  if (ports) {
    std::memcpy(&src.port, l4, 2);
    std::memcpy(&dst.port, l4 + 2, 2);
  } else {
    // Echo request or reply: the identifier is the port; errors keep their own hash (the
    // conntrack stage reads the session they quote from any worker).
    if (l4[0] != 0 && l4[0] != 8) return;
    std::memcpy(&dst.port, l4 + 4, 2);
  }
  bool changed = false;
  if (const int pool = pool_of(dst.addr); pool >= 0) {
    if (const auto e = internal(static_cast<unsigned>(pool), *p, dst.port)) {
      dst = {e->addr, e->port};  // the zone is no part of the hash
      changed = true;
    }
  }
  if (ports && has_dnat() && to_public(*p, src, dst)) changed = true;
  if (!changed) return;
  // ICMP's flow key has no ports (core/parse.h).
  m->hash.rss =
      vf_flow_hash_parts(vf_addr4_hash(src.addr), vf_addr4_hash(dst.addr), ports ? src.port : 0,
                         ports ? dst.port : 0, ip->next_proto_id, 4, 1);
}

uint32_t NatMap::ports_in_use(unsigned pool, NatProto p) const noexcept {
  uint32_t n = 0;
  for (const auto& w : slots(pool, p))
    n += (w.load(std::memory_order_relaxed) & kRefMask) != 0;
  return n;
}

}  // namespace vecflow
