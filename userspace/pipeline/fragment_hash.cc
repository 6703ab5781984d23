#include "pipeline/fragment_hash.h"

#include <array>
#include <cstdint>

#include <rte_ip.h>

#include "pipeline/ip_util.h"
#include "pipeline/packet_view.h"

namespace vecflow::fragment_hash {

namespace {

struct FirstFragments {
  struct Slot {
    uint32_t src = 0, dst = 0;
    uint16_t id = 0;
    uint8_t proto = 0;
    bool used = false;
    uint32_t hash = 0;
  };
  static constexpr unsigned kBits = 8;
  std::array<Slot, 1u << kBits> slots;

  Slot& at(const rte_ipv4_hdr* ip) noexcept {
    const uint64_t x = (uint64_t{ip->src_addr} << 32 | ip->dst_addr) ^
                       (uint64_t{ip->packet_id} * 0x9e3779b97f4a7c15ull);
    return slots[static_cast<unsigned>((x * 0xbf58476d1ce4e5b9ull) >> (64 - kBits))];
  }
  static bool names(const Slot& s, const rte_ipv4_hdr* ip) noexcept {
    return s.used && s.src == ip->src_addr && s.dst == ip->dst_addr && s.id == ip->packet_id &&
           s.proto == ip->next_proto_id;
  }
};
// Static storage (no allocation on the receive path): 4 KB per thread.
thread_local FirstFragments tl_first;

}  // namespace

void remember_first(const rte_mbuf* m) noexcept {
  const rte_ipv4_hdr* ip = pkt::ipv4(m);
  tl_first.at(ip) = {ip->src_addr,      ip->dst_addr, ip->packet_id,
                     ip->next_proto_id, true,         static_cast<uint32_t>(m->hash.rss)};
}

void give_later(rte_mbuf* m) noexcept {
  const rte_ipv4_hdr* ip = pkt::ipv4(m);
  const FirstFragments::Slot& s = tl_first.at(ip);
  if (FirstFragments::names(s, ip)) m->hash.rss = s.hash;
}

bool on_fragment(rte_mbuf* m) noexcept {
  if ((m->packet_type & RTE_PTYPE_L4_MASK) != RTE_PTYPE_L4_FRAG || !pkt::is_ipv4(m)) return false;
  if (later_fragment(pkt::ipv4(m))) {
    give_later(m);
  } else {
    remember_first(m);
  }
  return true;
}

}  // namespace vecflow::fragment_hash
