// Which VLAN sub-interface a tagged frame belongs to, decided in the parent port's rx burst
// (io/rx_classify.h), so that the rest of the engine sees an untagged frame from an L3
// interface of its own (io/vlan/vlan_port.h).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include <rte_ether.h>
#include <rte_mbuf.h>

#include "core/packet.h"
#include "core/vlan.h"

namespace vecflow {

// The sub-interface of each VLAN id on one parent port (kNoPort: none): 8 KiB, one load per
// tagged frame.
struct VlanDemux {
  std::array<uint16_t, 4096> port;
  VlanDemux() { port.fill(kNoPort); }
};

// A frame received on a port with sub-interfaces, before its parse or after its metadata was
// taken (whose l2_len and packet type it corrects). Untagged: stays the port's
// (true). Tagged 802.1Q with a VLAN a sub-interface claims: the tag is removed (the address
// bytes move over it, as Linux's VLAN device receives it), its TCI kept in m->vlan_tci, and
// the frame becomes the sub-interface's (true). Anything else tagged (a VLAN no one claims,
// 802.1ad, two tags): false, and the caller drops it as vlan_unknown.
inline bool vlan_demux(rte_mbuf* m, const VlanDemux& d) noexcept {
  constexpr size_t kTagged = RTE_ETHER_HDR_LEN + sizeof(rte_vlan_hdr);
  if (m->data_len < kTagged) return true;  // too short for a tag: the parser judged it
  auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
  if (eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_QINQ)) return false;
  if (eth->ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN)) return true;
  const auto* tag = reinterpret_cast<const rte_vlan_hdr*>(eth + 1);
  if (tag->eth_proto == rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN) ||
      tag->eth_proto == rte_cpu_to_be_16(RTE_ETHER_TYPE_QINQ)) {
    return false;
  }
  const uint16_t tci = rte_be_to_cpu_16(tag->vlan_tci);
  const uint16_t port = d.port[tci & kVlanIdMask];
  if (port == kNoPort) return false;
  vlan_pop(m);
  m->vlan_tci = tci;
  m->ol_flags |= RTE_MBUF_F_RX_VLAN | RTE_MBUF_F_RX_VLAN_STRIPPED;
  if ((m->packet_type & RTE_PTYPE_L2_MASK) == RTE_PTYPE_L2_ETHER_VLAN)
    m->packet_type = (m->packet_type & ~RTE_PTYPE_L2_MASK) | RTE_PTYPE_L2_ETHER;
  m->port = port;
  return true;
}

}  // namespace vecflow
