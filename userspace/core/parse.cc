#include "core/parse.h"

#include "core/flow.h"

namespace vecflow {

uint32_t packet_type_of(const ParsedFrame& p) noexcept {
  uint32_t l3;
  if (p.key.ip_version == 4) {
    l3 = p.l3_len > VF_IPV4_HLEN ? RTE_PTYPE_L3_IPV4_EXT : RTE_PTYPE_L3_IPV4;
  } else if (p.key.ip_version == 6) {
    l3 = p.l3_len > VF_IPV6_HLEN ? RTE_PTYPE_L3_IPV6_EXT : RTE_PTYPE_L3_IPV6;
  } else {
    return 0;
  }
  uint32_t l2 = p.vlan_count == 0   ? RTE_PTYPE_L2_ETHER
                : p.vlan_count == 1 ? RTE_PTYPE_L2_ETHER_VLAN
                                    : RTE_PTYPE_L2_ETHER_QINQ;
  uint32_t l4 = 0;
  if (p.flags & VF_PARSED_FRAGMENT) {
    l4 = RTE_PTYPE_L4_FRAG;
  } else {
    switch (p.key.l4_proto) {
      case VF_IPPROTO_TCP:
        l4 = RTE_PTYPE_L4_TCP;
        break;
      case VF_IPPROTO_UDP:
        l4 = RTE_PTYPE_L4_UDP;
        break;
      case VF_IPPROTO_SCTP:
        l4 = RTE_PTYPE_L4_SCTP;
        break;
      case VF_IPPROTO_ICMP:
      case VF_IPPROTO_ICMPV6:
        l4 = RTE_PTYPE_L4_ICMP;
        break;
      default:
        l4 = RTE_PTYPE_L4_NONFRAG;
        break;
    }
  }
  return l2 | l3 | l4;
}

int parse_packet_full(rte_mbuf* m, bool symmetric) noexcept {
  ParsedFrame p;
  auto bad = parse_frame({rte_pktmbuf_mtod(m, const uint8_t*), m->data_len}, p, m->pkt_len);
  m->packet_type = bad ? 0 : packet_type_of(p);
  m->l2_len = p.l2_len;
  m->l3_len = p.l3_len;
  m->hash.rss = flow_hash(p.key, symmetric);
  m->ol_flags |= RTE_MBUF_F_RX_RSS_HASH;
  return bad ? static_cast<int>(*bad) : VF_PARSE_OK;
}

}  // namespace vecflow
