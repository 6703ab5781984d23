#include "pipeline/icmp_error.h"

#include <algorithm>
#include <cstring>

#include <rte_ether.h>
#include <rte_icmp.h>
#include <rte_ip.h>

#include "core/packet.h"
#include "pipeline/packet_view.h"

namespace vecflow {

namespace {

constexpr uint8_t kIcmpDestUnreachable = 3;
constexpr uint8_t kIcmpNetUnreachable = 0;
constexpr uint8_t kIcmp6DestUnreachable = 1;
constexpr uint8_t kIcmp6NoRoute = 0;
constexpr uint8_t kIcmpAdminProhibited = 13;  // communication administratively prohibited
constexpr uint8_t kIcmp6AdminProhibited = 1;  // communication with destination prohibited
constexpr uint8_t kIcmpFragNeeded = 4;  // destination unreachable: fragmentation needed, DF set
constexpr uint8_t kIcmpTimeExceeded = 11;
constexpr uint8_t kIcmp6PacketTooBig = 2;
constexpr uint8_t kIcmp6TimeExceeded = 3;
// Type of service of ICMP errors: precedence "internetwork control", as Linux sends them.
constexpr uint8_t kIcmpErrorTos = 0xc0;
constexpr uint8_t kErrorTtl = 64;

bool is_icmp4_error(uint8_t type) noexcept {
  // Destination unreachable, source quench, redirect, time exceeded, parameter problem.
  return type == 3 || type == 4 || type == 5 || type == 11 || type == 12;
}

// Makes room for `extra` header bytes between the L2 header and the quoted packet, keeps at
// most `quote` bytes of the quoted packet (no more than its first segment holds), and answers the
// L2 header: destination = the frame's source, source = the port. Returns the start of the new L3
// header, or nullptr.
uint8_t* open_answer(rte_mbuf* m, uint32_t extra, uint32_t quote,
                     const MacAddress& port_mac) noexcept {
  const uint32_t l2 = m->l2_len;
  if (rte_pktmbuf_headroom(m) < extra) return nullptr;
  if (m->next != nullptr) {  // a jumbo frame: the quote lies in the first segment
    rte_pktmbuf_free(m->next);
    m->next = nullptr;
    m->nb_segs = 1;
    m->pkt_len = m->data_len;
  }
  uint8_t* base = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, static_cast<uint16_t>(extra)));
  std::memmove(base, base + extra, l2);
  auto* eth = reinterpret_cast<rte_ether_hdr*>(base);
  eth->dst_addr = eth->src_addr;
  std::memcpy(eth->src_addr.addr_bytes, port_mac.bytes.data(), RTE_ETHER_ADDR_LEN);
  rte_pktmbuf_trim(m, static_cast<uint16_t>(m->data_len - (l2 + extra + quote)));
  return base + l2;
}

void finish(rte_mbuf* m, uint32_t l3_len, uint32_t l3_type, uint32_t l4_type) noexcept {
  m->l3_len = l3_len;
  m->packet_type = (m->packet_type & RTE_PTYPE_L2_MASK) | l3_type | l4_type;
  PacketMeta& pm = meta(m);
  pm.verdict = Verdict::Transmit;
  pm.out_port = m->port;
  pm.nexthop = kNoNextHop;
}

// The IPv4 error of `type` and `code` whose second 32-bit word is `rest` (host order).
bool icmp4_error(rte_mbuf* m, uint8_t type, uint8_t code, uint32_t rest, uint32_t src_be,
                 const MacAddress& port_mac) noexcept {
  const rte_ipv4_hdr* ip = pkt::ipv4(m);
  const uint32_t ihl = rte_ipv4_hdr_len(ip);
  if ((rte_be_to_cpu_16(ip->fragment_offset) & RTE_IPV4_HDR_OFFSET_MASK) != 0) return false;
  const uint32_t dst_of_answer = ip->src_addr;
  const uint8_t first = static_cast<uint8_t>(rte_be_to_cpu_32(dst_of_answer) >> 24);
  if (dst_of_answer == 0 || first >= 224) return false;  // unspecified, multicast, class E
  const uint32_t avail = m->data_len - m->l2_len;
  if (ip->next_proto_id == IPPROTO_ICMP && avail >= ihl + 1) {
    const uint8_t type = *(reinterpret_cast<const uint8_t*>(ip) + ihl);
    if (is_icmp4_error(type)) return false;
  }
  const uint32_t quote =
      std::min({uint32_t(rte_be_to_cpu_16(ip->total_length)), avail, kIcmp4MaxQuote});
  constexpr uint32_t extra = sizeof(rte_ipv4_hdr) + sizeof(rte_icmp_hdr);
  uint8_t* l3 = open_answer(m, extra, quote, port_mac);
  if (l3 == nullptr) return false;

  auto* nip = reinterpret_cast<rte_ipv4_hdr*>(l3);
  nip->version_ihl = RTE_IPV4_VHL_DEF;
  nip->type_of_service = kIcmpErrorTos;
  nip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(extra + quote));
  nip->packet_id = 0;
  nip->fragment_offset = 0;
  nip->time_to_live = kErrorTtl;
  nip->next_proto_id = IPPROTO_ICMP;
  nip->hdr_checksum = 0;
  nip->src_addr = src_be;
  nip->dst_addr = dst_of_answer;
  nip->hdr_checksum = rte_ipv4_cksum(nip);

  auto* icmp = reinterpret_cast<rte_icmp_hdr*>(nip + 1);
  icmp->icmp_type = type;
  icmp->icmp_code = code;
  icmp->icmp_cksum = 0;
  icmp->icmp_ident = rte_cpu_to_be_16(static_cast<uint16_t>(rest >> 16));
  icmp->icmp_seq_nb = rte_cpu_to_be_16(static_cast<uint16_t>(rest));
  uint16_t sum = rte_raw_cksum(icmp, sizeof(rte_icmp_hdr) + quote);
  icmp->icmp_cksum = static_cast<uint16_t>(~sum);
  finish(m, sizeof(rte_ipv4_hdr), RTE_PTYPE_L3_IPV4, RTE_PTYPE_L4_ICMP);
  return true;
}

// The ICMPv6 error of `type` and `code` whose second 32-bit word is `rest` (host order).
bool icmp6_error(rte_mbuf* m, uint8_t type, uint8_t code, uint32_t rest, const uint8_t src[16],
                 const MacAddress& port_mac) noexcept {
  const rte_ipv6_hdr* ip = pkt::ipv6(m);
  uint8_t dst_of_answer[16];
  std::memcpy(dst_of_answer, ip->src_addr, 16);
  static constexpr uint8_t kUnspecified[16] = {};
  if (dst_of_answer[0] == 0xff || std::memcmp(dst_of_answer, kUnspecified, 16) == 0) return false;
  const uint32_t avail = m->data_len - m->l2_len;
  if (pkt::l4_proto(m) == IPPROTO_ICMPV6 && avail >= m->l3_len + 1u) {
    const uint8_t type = *(reinterpret_cast<const uint8_t*>(ip) + m->l3_len);
    if (type < 128) return false;  // ICMPv6 error messages are types 0..127
  }
  const uint32_t quote = std::min(
      {uint32_t(sizeof(rte_ipv6_hdr)) + rte_be_to_cpu_16(ip->payload_len), avail, kIcmp6MaxQuote});
  constexpr uint32_t extra = sizeof(rte_ipv6_hdr) + 8;
  uint8_t* l3 = open_answer(m, extra, quote, port_mac);
  if (l3 == nullptr) return false;

  auto* nip = reinterpret_cast<rte_ipv6_hdr*>(l3);
  nip->vtc_flow = rte_cpu_to_be_32(6u << 28);
  nip->payload_len = rte_cpu_to_be_16(static_cast<uint16_t>(8 + quote));
  nip->proto = IPPROTO_ICMPV6;
  nip->hop_limits = kErrorTtl;
  std::memcpy(nip->src_addr, src, 16);
  std::memcpy(nip->dst_addr, dst_of_answer, 16);

  uint8_t* icmp = reinterpret_cast<uint8_t*>(nip + 1);
  icmp[0] = type;
  icmp[1] = code;
  std::memset(icmp + 2, 0, 2);
  const uint32_t rest_be = rte_cpu_to_be_32(rest);
  std::memcpy(icmp + 4, &rest_be, 4);
  uint16_t sum = rte_ipv6_udptcp_cksum(nip, icmp);
  std::memcpy(icmp + 2, &sum, 2);
  finish(m, sizeof(rte_ipv6_hdr), RTE_PTYPE_L3_IPV6, RTE_PTYPE_L4_ICMP);
  return true;
}

}  // namespace

bool icmp4_time_exceeded(rte_mbuf* m, uint32_t src_be, const MacAddress& port_mac) noexcept {
  return icmp4_error(m, kIcmpTimeExceeded, 0 /* TTL exceeded in transit */, 0, src_be, port_mac);
}

bool icmp6_time_exceeded(rte_mbuf* m, const uint8_t src[16], const MacAddress& port_mac) noexcept {
  return icmp6_error(m, kIcmp6TimeExceeded, 0 /* hop limit exceeded in transit */, 0, src,
                     port_mac);
}

bool icmp4_net_unreachable(rte_mbuf* m, uint32_t src_be, const MacAddress& port_mac) noexcept {
  return icmp4_error(m, kIcmpDestUnreachable, kIcmpNetUnreachable, 0, src_be, port_mac);
}

bool icmp6_no_route(rte_mbuf* m, const uint8_t src[16], const MacAddress& port_mac) noexcept {
  return icmp6_error(m, kIcmp6DestUnreachable, kIcmp6NoRoute, 0, src, port_mac);
}

bool icmp4_frag_needed(rte_mbuf* m, uint32_t mtu, uint32_t src_be,
                       const MacAddress& port_mac) noexcept {
  // RFC 1191 §4: the next-hop MTU in the low-order 16 bits of the second word.
  return icmp4_error(m, kIcmpDestUnreachable, kIcmpFragNeeded, mtu & 0xffff, src_be, port_mac);
}

bool icmp6_packet_too_big(rte_mbuf* m, uint32_t mtu, const uint8_t src[16],
                          const MacAddress& port_mac) noexcept {
  return icmp6_error(m, kIcmp6PacketTooBig, 0, mtu, src, port_mac);
}

bool icmp4_admin_prohibited(rte_mbuf* m, uint32_t src_be, const MacAddress& port_mac) noexcept {
  return icmp4_error(m, kIcmpDestUnreachable, kIcmpAdminProhibited, 0, src_be, port_mac);
}

bool icmp6_admin_prohibited(rte_mbuf* m, const uint8_t src[16],
                            const MacAddress& port_mac) noexcept {
  return icmp6_error(m, kIcmp6DestUnreachable, kIcmp6AdminProhibited, 0, src, port_mac);
}

}  // namespace vecflow
