// Reading the headers of a packet that a port's rx path already parsed (core/packet.h): the
// stages trust m->packet_type, m->l2_len and m->l3_len and never parse again. The parser
// guarantees that the headers those fields describe (and the first 4 bytes of a TCP, UDP or
// SCTP header) sit in the first segment.
#pragma once

#include <cstdint>
#include <cstring>

#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_mbuf_ptype.h>

#include "core/flow.h"

namespace vecflow::pkt {

inline bool is_ipv4(const rte_mbuf* m) noexcept {
  return RTE_ETH_IS_IPV4_HDR(m->packet_type);
}
inline bool is_ipv6(const rte_mbuf* m) noexcept {
  return RTE_ETH_IS_IPV6_HDR(m->packet_type);
}

inline rte_ether_hdr* eth(rte_mbuf* m) noexcept {
  return rte_pktmbuf_mtod(m, rte_ether_hdr*);
}
inline rte_ipv4_hdr* ipv4(rte_mbuf* m) noexcept {
  return rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, m->l2_len);
}
inline rte_ipv6_hdr* ipv6(rte_mbuf* m) noexcept {
  return rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, m->l2_len);
}
inline const rte_ipv4_hdr* ipv4(const rte_mbuf* m) noexcept {
  return rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, m->l2_len);
}
inline const rte_ipv6_hdr* ipv6(const rte_mbuf* m) noexcept {
  return rte_pktmbuf_mtod_offset(m, const rte_ipv6_hdr*, m->l2_len);
}

// True when the packet carries a TCP, UDP or SCTP header whose ports can be read. Fragments
// (RTE_PTYPE_L4_FRAG) do not: the parser reports any fragment that way.
inline bool has_ports(const rte_mbuf* m) noexcept {
  uint32_t l4 = m->packet_type & RTE_PTYPE_L4_MASK;
  return l4 == RTE_PTYPE_L4_TCP || l4 == RTE_PTYPE_L4_UDP || l4 == RTE_PTYPE_L4_SCTP;
}

// Source and destination port in network order; zero when has_ports() is false.
inline void ports(const rte_mbuf* m, uint16_t& src_be, uint16_t& dst_be) noexcept {
  if (!has_ports(m)) {
    src_be = dst_be = 0;
    return;
  }
  const uint8_t* l4 = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len + m->l3_len);
  std::memcpy(&src_be, l4, 2);
  std::memcpy(&dst_be, l4 + 2, 2);
}

namespace detail {
// The upper-layer protocol of an IPv6 packet with extension headers: the next-header field
// of the last extension header inside l3_len. Only reached for packets that have extension
// headers and an L4 type the packet type does not name.
inline uint8_t ipv6_last_next_header(const rte_mbuf* m) noexcept {
  const uint8_t* base = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len);
  uint8_t next = reinterpret_cast<const rte_ipv6_hdr*>(base)->proto;
  uint32_t off = sizeof(rte_ipv6_hdr);
  while (off + 2 <= m->l3_len) {
    const uint8_t* h = base + off;
    uint32_t len;
    if (next == IPPROTO_FRAGMENT) {
      len = 8;
    } else if (next == IPPROTO_AH) {
      len = (uint32_t(h[1]) + 2) * 4;
    } else {
      len = (uint32_t(h[1]) + 1) * 8;
    }
    next = h[0];
    off += len;
  }
  return next;
}
}  // namespace detail

// The IP protocol number of the packet's payload (6 for TCP ...). For IPv6 it is the
// upper-layer protocol after any extension headers.
inline uint8_t l4_proto(const rte_mbuf* m) noexcept {
  if (is_ipv4(m)) return ipv4(m)->next_proto_id;
  switch (m->packet_type & RTE_PTYPE_L4_MASK) {
    case RTE_PTYPE_L4_TCP:
      return IPPROTO_TCP;
    case RTE_PTYPE_L4_UDP:
      return IPPROTO_UDP;
    case RTE_PTYPE_L4_SCTP:
      return IPPROTO_SCTP;
    case RTE_PTYPE_L4_ICMP:
      return IPPROTO_ICMPV6;
    default:
      break;
  }
  if (m->l3_len <= sizeof(rte_ipv6_hdr)) return ipv6(m)->proto;
  return detail::ipv6_last_next_header(m);
}

// The flow key of an IP packet, as the XDP program and the software hash compute it.
inline FlowKey flow_key(const rte_mbuf* m) noexcept {
  FlowKey k{};
  if (is_ipv4(m)) {
    const rte_ipv4_hdr* ip = ipv4(m);
    k.src[0] = ip->src_addr;
    k.dst[0] = ip->dst_addr;
    k.ip_version = 4;
  } else {
    const rte_ipv6_hdr* ip = ipv6(m);
    std::memcpy(k.src, ip->src_addr, 16);
    std::memcpy(k.dst, ip->dst_addr, 16);
    k.ip_version = 6;
  }
  k.l4_proto = l4_proto(m);
  ports(m, k.src_port, k.dst_port);
  return k;
}

}  // namespace vecflow::pkt
