// IPv4 fragmentation for a packet larger than its egress link's MTU whose DF bit is clear
// (RFC 791 §3.2, RFC 1812 §5.2.6), as the tx adapter does it on the way out.
//
// Written here rather than taken from DPDK's rte_ipv4_fragment_packet: that builds each
// fragment as a chain of a new header mbuf and an indirect mbuf into the original's data, from
// two pools. vecflow's AF_XDP ports send a frame from one UMEM buffer and would have to copy the
// chain back into one; here each fragment is one buffer from the original's own pool (a UMEM's
// for AF_XDP ports), its L2 header (VLAN tags included) copied in front, ready for any port.
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

namespace vecflow {

// The most fragments one packet is cut into: a 9000-byte packet down to a 576-byte link needs
// 17. A packet that would need more is not fragmented (the caller drops it).
inline constexpr unsigned kMaxFragments = 64;

// Cuts `m` (an IPv4 packet after its L2 header, as core/packet.h describes it; one segment or a
// chain) into fragments of at most `mtu` bytes of IP packet each (less where a buffer of m's
// pool holds less), written to `out`; returns how many. Each is a single segment with the
// original's L2 header, mbuf fields (port, l2_len, l3_len, packet_type with
// RTE_PTYPE_L4_FRAG, VLAN) and PacketMeta; its IP header is the original's with the fragment's
// offset, MF bit, total length and checksum, and in fragments after the first the options not
// marked "copied" replaced by no-operation options, as Linux does. Returns 0 and keeps nothing
// when the packet cannot be fragmented here: DF set, a fragment reaching past 65535 bytes of
// datagram, an MTU too small for 8 bytes of payload, more than kMaxFragments needed, or the
// pool is out of buffers. `m` itself is left to the caller either way.
unsigned ipv4_fragment(const rte_mbuf* m, uint32_t mtu, rte_mbuf** out) noexcept;

}  // namespace vecflow
