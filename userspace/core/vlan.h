// 802.1Q tags in a frame's Ethernet header: the l2 stage's vlan_pop/vlan_push and the VLAN
// sub-interfaces (io/vlan/vlan_port.h: removed as a frame is received, added as it leaves)
// move the same 12 address bytes the same way.
#pragma once

#include <cstdint>

struct rte_mbuf;

namespace vecflow {

inline constexpr uint16_t kVlanIdMask = 0x0fff;
inline constexpr uint16_t kVlanIdMax = 4094;  // 0 and 4095 are reserved (802.1Q)

// Removes the outer 802.1Q / 802.1ad tag of `m` if it has one (l2_len follows).
bool vlan_pop(rte_mbuf* m) noexcept;
// Inserts an 802.1Q tag with TCI `tci` after the MAC addresses (l2_len follows). False when
// the buffer has no headroom or is shared (a clone: its bytes are another packet's too).
bool vlan_push(rte_mbuf* m, uint16_t tci) noexcept;

}  // namespace vecflow
