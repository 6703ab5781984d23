#include "pipeline/conntrack/fragment_table.h"

#include <cstring>

#include <rte_ip.h>

#include "pipeline/conntrack/conntrack_table.h"
#include "pipeline/ip_util.h"
#include "pipeline/packet_view.h"

namespace vecflow {

static_assert((1u << FragmentTable::kBucketBits) >= ConnTable::kClasses,
              "a bucket must hold the datagrams of one flow hash class only");

FragmentTable::FragmentTable() : buckets_(new Bucket[size_t{1} << kBucketBits]()) {}

void FragmentTable::remember(uint32_t hash, const Datagram& d, const Outcome& o, uint32_t now,
                             uint32_t expires) noexcept {
  Bucket& b = bucket(hash);
  Entry* slot = nullptr;
  for (Entry& e : b.ways) {
    if (e.used && e.datagram == d) {
      slot = &e;  // a first fragment sent again
      break;
    }
    if (!live(e, now)) {
      if (slot == nullptr || live(*slot, now)) slot = &e;
    } else if (slot == nullptr ||
               (live(*slot, now) && static_cast<int32_t>(e.expires - slot->expires) < 0)) {
      slot = &e;
    }
  }
  slot->datagram = d;
  slot->outcome = o;
  slot->expires = expires;
  slot->used = true;
}

const FragmentTable::Outcome* FragmentTable::find(uint32_t hash, const Datagram& d,
                                                  uint32_t now) const noexcept {
  for (const Entry& e : bucket(hash).ways)
    if (live(e, now) && e.datagram == d) return &e.outcome;
  return nullptr;
}

namespace {

// The fragment header of an IPv6 fragment, among the extension headers within l3_len that the
// parser walked (bpf/include/vecflow/parse.h); nullptr if there is none.
const uint8_t* ipv6_fragment_header(const rte_mbuf* m) noexcept {
  const uint8_t* base = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len);
  uint8_t next = reinterpret_cast<const rte_ipv6_hdr*>(base)->proto;
  uint32_t off = sizeof(rte_ipv6_hdr);
  while (off + 8 <= m->l3_len) {
    const uint8_t* h = base + off;
    if (next == IPPROTO_FRAGMENT) return h;
    off += next == IPPROTO_AH ? (uint32_t(h[1]) + 2) * 4 : (uint32_t(h[1]) + 1) * 8;
    next = h[0];
  }
  return nullptr;
}

}  // namespace

FragmentOf fragment_of(const rte_mbuf* m) noexcept {
  FragmentOf f{};
  FragmentTable::Datagram& d = f.datagram;
  if (pkt::is_ipv4(m)) {
    const rte_ipv4_hdr* ip = pkt::ipv4(m);
    std::memcpy(d.src.data(), &ip->src_addr, 4);
    std::memcpy(d.dst.data(), &ip->dst_addr, 4);
    d.id = ip->packet_id;
    d.proto = ip->next_proto_id;
    d.version = 4;
    f.later = later_fragment(ip);
    return f;
  }
  const rte_ipv6_hdr* ip = pkt::ipv6(m);
  std::memcpy(d.src.data(), ip->src_addr, 16);
  std::memcpy(d.dst.data(), ip->dst_addr, 16);
  d.proto = pkt::l4_proto(m);
  d.version = 6;
  // The parser marks a fragment only when it found the header: without one (a packet type set
  // by hand) the packet is taken as a later fragment of no known datagram.
  const uint8_t* frag = ipv6_fragment_header(m);
  if (frag == nullptr) {
    f.later = true;
    return f;
  }
  std::memcpy(&d.id, frag + 4, 4);
  // The offset: the upper 13 bits of bytes 2-3.
  f.later = ((frag[2] << 8 | frag[3]) & 0xfff8) != 0;
  return f;
}

}  // namespace vecflow
