// Which VLAN sub-interface a tagged frame belongs to, decided in the parent port's rx burst
// (io/rx_classify.h), so that the rest of the engine sees an untagged frame from an L3
// interface of its own (io/vlan/vlan_port.h).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <rte_ether.h>
#include <rte_mbuf.h>

#include "core/ids.h"
#include "core/packet.h"
#include "core/vlan.h"

namespace vecflow {

class VlanDemux;
inline bool vlan_demux(rte_mbuf* m, const VlanDemux& d) noexcept;

// The sub-interfaces of one link, by the tags their frames carry there. A frame's first tag
// is looked up by its TPID (802.1Q or 802.1ad) and VLAN id: one load per tagged frame. A
// sub-interface whose own sub-interfaces are QinQ customer VLANs (a service VLAN) has a second
// table, for the 802.1Q tag inside.
class VlanDemux {
 public:
  static constexpr uint16_t kNoInner = 0xffff;
  struct Entry {
    uint16_t port = kNoPort;    // the sub-interface of frames with this tag alone
    uint16_t inner = kNoInner;  // its customer VLANs' table (inner_), if it has one
  };

  // Room for a customer table per port (kMaxPorts): a claim while frames arrive never moves
  // the tables a burst reads (the memory is only touched as tables are made).
  VlanDemux() { inner_.reserve(kMaxPorts); }

  // Frames whose first tag is `tpid` (RTE_ETHER_TYPE_VLAN or _QINQ) with VLAN `vid` are
  // port `port`'s. Also while the link receives (a reload): the claim is one 16-bit store,
  // after everything the caller made the port ready with (release order).
  void claim(uint16_t tpid, uint16_t vid, uint16_t port) { publish(table(tpid)[vid].port, port); }
  // Frames tagged `tpid` `vid` and then 802.1Q `inner_vid` are port `port`'s (QinQ).
  void claim_inner(uint16_t tpid, uint16_t vid, uint16_t inner_vid, uint16_t port);
  // The claims undone: those frames are vlan_unknown from now on (a service VLAN's customers
  // keep theirs).
  void release(uint16_t tpid, uint16_t vid) { publish(table(tpid)[vid].port, kNoPort); }
  void release_inner(uint16_t tpid, uint16_t vid, uint16_t inner_vid);

  // The frame's sub-interface, its tags removed (see vlan_demux below).
  friend bool vlan_demux(rte_mbuf* m, const VlanDemux& d) noexcept;

 private:
  using Ports = std::array<uint16_t, 4096>;
  std::array<Entry, 4096>& table(uint16_t tpid) {
    return tpid == RTE_ETHER_TYPE_QINQ ? dot1ad_ : dot1q_;
  }
  static void publish(uint16_t& field, uint16_t value) {
    __atomic_store_n(&field, value, __ATOMIC_RELEASE);
  }
  std::array<Entry, 4096> dot1q_{};
  std::array<Entry, 4096> dot1ad_{};
  std::vector<Ports> inner_;  // grows while ports are claimed, before the first frame
};

inline void VlanDemux::claim_inner(uint16_t tpid, uint16_t vid, uint16_t inner_vid, uint16_t port) {
  Entry& e = table(tpid)[vid];
  if (e.inner == kNoInner) {
    inner_.emplace_back().fill(kNoPort);
    publish(e.inner, static_cast<uint16_t>(inner_.size() - 1));
  }
  publish(inner_[e.inner][inner_vid], port);
}

inline void VlanDemux::release_inner(uint16_t tpid, uint16_t vid, uint16_t inner_vid) {
  const Entry& e = table(tpid)[vid];
  if (e.inner != kNoInner) publish(inner_[e.inner][inner_vid], kNoPort);
}

// A frame received on a port with sub-interfaces, before its parse or after its metadata was
// taken (whose l2_len and packet type it corrects). Untagged: stays the port's (true). Tagged
// with a VLAN a sub-interface claims (802.1Q or 802.1ad; and for QinQ the 802.1Q tag inside
// it): the tags are removed (the address bytes move over them, as Linux's VLAN devices receive
// it), their TCIs kept in m->vlan_tci (and m->vlan_tci_outer for QinQ), and the frame becomes
// the sub-interface's (true). Anything else tagged (a VLAN no one claims, a second tag where
// the first one's port has no customer VLANs, three tags): false, and the caller drops it as
// vlan_unknown.
inline bool vlan_demux(rte_mbuf* m, const VlanDemux& d) noexcept {
  constexpr size_t kTagged = RTE_ETHER_HDR_LEN + sizeof(rte_vlan_hdr);
  const uint16_t kDot1q = rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN);
  const uint16_t kDot1ad = rte_cpu_to_be_16(RTE_ETHER_TYPE_QINQ);
  if (m->data_len < kTagged) return true;  // too short for a tag: the parser judged it
  auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
  const VlanDemux::Entry* table;
  if (eth->ether_type == kDot1q) {
    table = d.dot1q_.data();
  } else if (eth->ether_type == kDot1ad) {
    table = d.dot1ad_.data();
  } else {
    return true;
  }
  const auto* tag = reinterpret_cast<const rte_vlan_hdr*>(eth + 1);
  const uint16_t tci = rte_be_to_cpu_16(tag->vlan_tci);
  const VlanDemux::Entry e = table[tci & kVlanIdMask];
  uint16_t port = e.port;
  if (tag->eth_proto == kDot1q || tag->eth_proto == kDot1ad) [[unlikely]] {
    // Two tags: a QinQ customer VLAN, an 802.1Q tag inside a port that has them.
    if (e.inner == VlanDemux::kNoInner || tag->eth_proto != kDot1q) return false;
    if (m->data_len < kTagged + sizeof(rte_vlan_hdr)) return true;  // the parser judges it
    const uint16_t inner_tci = rte_be_to_cpu_16(tag[1].vlan_tci);
    if (tag[1].eth_proto == kDot1q || tag[1].eth_proto == kDot1ad) return false;  // three
    port = d.inner_[e.inner][inner_tci & kVlanIdMask];
    if (port == kNoPort) return false;
    vlan_strip(m, 2);
    m->vlan_tci = inner_tci;
    m->vlan_tci_outer = tci;
    m->ol_flags |= RTE_MBUF_F_RX_VLAN | RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_RX_QINQ |
                   RTE_MBUF_F_RX_QINQ_STRIPPED;
  } else {
    if (port == kNoPort) return false;
    vlan_strip(m, 1);
    m->vlan_tci = tci;
    m->ol_flags |= RTE_MBUF_F_RX_VLAN | RTE_MBUF_F_RX_VLAN_STRIPPED;
  }
  const uint32_t l2 = m->packet_type & RTE_PTYPE_L2_MASK;
  if (l2 == RTE_PTYPE_L2_ETHER_VLAN || l2 == RTE_PTYPE_L2_ETHER_QINQ)
    m->packet_type = (m->packet_type & ~RTE_PTYPE_L2_MASK) | RTE_PTYPE_L2_ETHER;
  m->port = port;
  return true;
}

}  // namespace vecflow
