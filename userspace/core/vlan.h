// 802.1Q tags in a frame's Ethernet header: the l2 stage's vlan_pop/vlan_push and the VLAN
// sub-interfaces (io/vlan/: removed as a frame is received, added as it leaves) move the same
// 12 address bytes the same way. Inline, with the 12 bytes moved as two loads and two stores:
// through memmove (a call for 12 bytes) and DPDK's rte_vlan_insert the two tag operations cost
// a VLAN's packets ~12 % of the route + neighbour engine run.
#pragma once

#include <cstdint>
#include <cstring>

#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_mbuf.h>

namespace vecflow {

inline constexpr uint16_t kVlanIdMask = 0x0fff;
inline constexpr uint16_t kVlanIdMax = 4094;  // 0 and 4095 are reserved (802.1Q)

namespace vlan_detail {
// The destination and source MACs, from `from` to `to` (which may overlap it).
inline void move_addresses(uint8_t* to, const uint8_t* from) noexcept {
  uint64_t a;
  uint32_t b;
  std::memcpy(&a, from, 8);
  std::memcpy(&b, from + 8, 4);
  std::memcpy(to, &a, 8);
  std::memcpy(to + 8, &b, 4);
}
}  // namespace vlan_detail

// Removes the outer 802.1Q / 802.1ad tag of `m` if it has one (l2_len follows).
inline bool vlan_pop(rte_mbuf* m) noexcept {
  if (m->data_len < sizeof(rte_ether_hdr) + sizeof(rte_vlan_hdr)) return false;
  auto* eth = rte_pktmbuf_mtod(m, uint8_t*);
  const uint16_t type = reinterpret_cast<const rte_ether_hdr*>(eth)->ether_type;
  if (type != rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN) &&
      type != rte_cpu_to_be_16(RTE_ETHER_TYPE_QINQ)) {
    return false;
  }
  // The address bytes move 4 bytes forward over the tag; the rest stays in place.
  vlan_detail::move_addresses(eth + sizeof(rte_vlan_hdr), eth);
  m->data_off += sizeof(rte_vlan_hdr);
  m->data_len -= sizeof(rte_vlan_hdr);
  m->pkt_len -= sizeof(rte_vlan_hdr);
  if (m->l2_len >= sizeof(rte_vlan_hdr)) m->l2_len -= sizeof(rte_vlan_hdr);
  return true;
}

// Inserts an 802.1Q tag with TCI `tci` after the MAC addresses (l2_len follows), as DPDK's
// rte_vlan_insert does. False when the buffer has no headroom or is shared (a clone: its bytes
// are another packet's too).
inline bool vlan_push(rte_mbuf* m, uint16_t tci) noexcept {
  if (!RTE_MBUF_DIRECT(m) || rte_mbuf_refcnt_read(m) > 1 ||
      rte_pktmbuf_headroom(m) < sizeof(rte_vlan_hdr) || m->data_len < 2 * RTE_ETHER_ADDR_LEN) {
    return false;
  }
  auto* old = rte_pktmbuf_mtod(m, uint8_t*);
  uint8_t* eth = old - sizeof(rte_vlan_hdr);
  vlan_detail::move_addresses(eth, old);
  const uint16_t tag[2] = {rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN), rte_cpu_to_be_16(tci)};
  std::memcpy(eth + 2 * RTE_ETHER_ADDR_LEN, tag, sizeof(tag));
  m->data_off -= sizeof(rte_vlan_hdr);
  m->data_len += sizeof(rte_vlan_hdr);
  m->pkt_len += sizeof(rte_vlan_hdr);
  m->vlan_tci = tci;
  m->ol_flags &= ~(RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_TX_VLAN);
  m->l2_len += sizeof(rte_vlan_hdr);
  return true;
}

}  // namespace vecflow
