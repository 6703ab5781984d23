// 802.1Q and 802.1ad tags in a frame's Ethernet header: the l2 stage's vlan_pop/vlan_push and
// the VLAN sub-interfaces (io/vlan/: removed as a frame is received, added as it leaves, both
// tags of a QinQ sub-interface at once) move the same 12 address bytes the same way. Inline, with
// the 12 bytes moved as two loads and two stores: through memmove (a call for 12 bytes) and DPDK's
// rte_vlan_insert the two tag operations cost a VLAN's packets ~12 % of the route + neighbour
// engine run.
#pragma once

#include <cstdint>
#include <cstring>

#include <rte_byteorder.h>
#include <rte_ether.h>
#include <rte_mbuf.h>

namespace vecflow {

inline constexpr uint16_t kVlanIdMask = 0x0fff;
inline constexpr uint16_t kVlanIdMax = 4094;  // 0 and 4095 are reserved (802.1Q)

// The tags a VLAN sub-interface's frames carry on its link, outermost first, each as its TPID
// (RTE_ETHER_TYPE_VLAN or RTE_ETHER_TYPE_QINQ) and TCI: none, one (802.1Q, or an 802.1ad
// service tag), or two (QinQ: a service tag, then the customer's 802.1Q tag).
struct VlanTags {
  uint16_t outer_tpid = 0;
  uint16_t outer_tci = 0;
  uint16_t inner_tpid = 0;  // 0: one tag
  uint16_t inner_tci = 0;

  unsigned count() const noexcept { return outer_tpid == 0 ? 0 : inner_tpid == 0 ? 1 : 2; }
  bool operator==(const VlanTags&) const = default;
};

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

// Room for `bytes` of tags in front of the frame's type: the buffer is not shared (a clone: its
// bytes are another packet's too) and has the headroom.
inline bool can_push(const rte_mbuf* m, uint16_t bytes) noexcept {
  return RTE_MBUF_DIRECT(m) && rte_mbuf_refcnt_read(m) == 1 && rte_pktmbuf_headroom(m) >= bytes &&
         m->data_len >= 2 * RTE_ETHER_ADDR_LEN;
}

// Makes the frame `bytes` longer at the front (can_push said there is room) and returns its
// new start: the caller writes the addresses and the tags there, whole.
inline uint8_t* open_header(rte_mbuf* m, uint16_t bytes) noexcept {
  m->data_off -= bytes;
  m->data_len += bytes;
  m->pkt_len += bytes;
  m->l2_len += bytes;
  m->ol_flags &= ~(RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_RX_QINQ_STRIPPED | RTE_MBUF_F_TX_VLAN |
                   RTE_MBUF_F_TX_QINQ);
  return rte_pktmbuf_mtod(m, uint8_t*);
}

// Opens `bytes` in front of the frame's type (the addresses move back over them) and returns
// where the tags go.
inline uint8_t* open_tags(rte_mbuf* m, uint16_t bytes) noexcept {
  const uint8_t* old = rte_pktmbuf_mtod(m, uint8_t*);
  uint8_t* eth = open_header(m, bytes);
  move_addresses(eth, old);
  return eth + 2 * RTE_ETHER_ADDR_LEN;
}
}  // namespace vlan_detail

// Inserts a tag with TCI `tci` (802.1Q by default, or 802.1ad's TPID) after the MAC addresses
// (l2_len follows), as DPDK's rte_vlan_insert does. False when the buffer has no headroom or
// is shared.
[[gnu::always_inline]] inline bool vlan_push(rte_mbuf* m, uint16_t tci,
                                             uint16_t tpid = RTE_ETHER_TYPE_VLAN) noexcept {
  if (!vlan_detail::can_push(m, sizeof(rte_vlan_hdr))) return false;
  const uint16_t tag[2] = {rte_cpu_to_be_16(tpid), rte_cpu_to_be_16(tci)};
  std::memcpy(vlan_detail::open_tags(m, sizeof(tag)), tag, sizeof(tag));
  m->vlan_tci = tci;
  return true;
}

// Inserts the tags of `t` (one or two; count() > 0) with one move of the addresses. False as
// vlan_push.
// Inlined: the neighbour stage calls it for every packet to a VLAN port, where a call cost ~2
// cycles a packet (perf, engine row rn-qinq).
[[gnu::always_inline]] inline bool vlan_push(rte_mbuf* m, const VlanTags& t) noexcept {
  if (t.inner_tpid == 0) return vlan_push(m, t.outer_tci, t.outer_tpid);
  if (!vlan_detail::can_push(m, 2 * sizeof(rte_vlan_hdr))) return false;
  const uint16_t tags[4] = {rte_cpu_to_be_16(t.outer_tpid), rte_cpu_to_be_16(t.outer_tci),
                            rte_cpu_to_be_16(t.inner_tpid), rte_cpu_to_be_16(t.inner_tci)};
  std::memcpy(vlan_detail::open_tags(m, sizeof(tags)), tags, sizeof(tags));
  m->vlan_tci = t.inner_tci;
  m->vlan_tci_outer = t.outer_tci;
  return true;
}

// Removes the first `count` tags (1 or 2; the caller read them) with one move of the
// addresses (l2_len follows).
inline void vlan_strip(rte_mbuf* m, unsigned count) noexcept {
  const uint16_t bytes = static_cast<uint16_t>(count * sizeof(rte_vlan_hdr));
  auto* eth = rte_pktmbuf_mtod(m, uint8_t*);
  vlan_detail::move_addresses(eth + bytes, eth);
  m->data_off += bytes;
  m->data_len -= bytes;
  m->pkt_len -= bytes;
  if (m->l2_len >= bytes) m->l2_len -= bytes;
}

// Removes the outer 802.1Q / 802.1ad tag of `m` if it has one (l2_len follows).
inline bool vlan_pop(rte_mbuf* m) noexcept {
  if (m->data_len < sizeof(rte_ether_hdr) + sizeof(rte_vlan_hdr)) return false;
  auto* eth = rte_pktmbuf_mtod(m, uint8_t*);
  const uint16_t type = reinterpret_cast<const rte_ether_hdr*>(eth)->ether_type;
  if (type != rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN) &&
      type != rte_cpu_to_be_16(RTE_ETHER_TYPE_QINQ)) {
    return false;
  }
  vlan_strip(m, 1);
  return true;
}

}  // namespace vecflow
