// ICMP errors a router sends back (RFC 1812 §4.3.2, RFC 4443 §2.4), built in place: "time
// exceeded" for packets whose TTL or hop limit ran out, "destination unreachable" for packets
// without a route, "fragmentation needed" / "packet too big" for packets larger than their
// egress link's MTU that may not be fragmented, "administratively prohibited" for packets an
// ACL rejects. The
// packet's buffer becomes the answer (its L2 header, VLAN tags included, with the MAC
// addresses swapped; a new IP and ICMP header; the start of the expired packet as the quote),
// sent back out of the port it came in through to the previous hop. No buffer is allocated.
//
// The answer leaves with verdict Transmit on the ingress port. For accounting the packet that
// entered is a drop under its reason and the answer a packet vecflow made (StageEnv::answered).
#pragma once

#include <cstdint>

#include <rte_mbuf.h>

#include "core/net.h"

namespace vecflow {

// Bytes of the expired packet quoted in the answer: as much as keeps the message within the
// minimum datagram every IPv4 host accepts (576, RFC 1812 4.3.2.3) / the IPv6 minimum MTU (1280,
// RFC 4443 2.4(c)).
inline constexpr uint32_t kIcmp4MaxQuote = 576 - 20 - 8;
inline constexpr uint32_t kIcmp6MaxQuote = 1280 - 40 - 8;

// Rewrite `m` (an IPv4 packet, single segment) into an ICMP time exceeded from `src_be`
// (network order). Returns false, leaving `m` untouched, when no error may be sent for it (it
// is an ICMP error itself, a non-first fragment, or from an unspecified, multicast or broadcast
// source) or it does not fit the buffer.
bool icmp4_time_exceeded(rte_mbuf* m, uint32_t src_be, const MacAddress& port_mac) noexcept;

// The same for IPv6 (ICMPv6 type 3 code 0) from `src`.
bool icmp6_time_exceeded(rte_mbuf* m, const uint8_t src[16], const MacAddress& port_mac) noexcept;

// Destination unreachable, network unreachable (type 3 code 0): no route (RFC 1812 §5.2.7.1).
// The same rules as icmp4_time_exceeded.
bool icmp4_net_unreachable(rte_mbuf* m, uint32_t src_be, const MacAddress& port_mac) noexcept;

// Destination unreachable, no route to destination (ICMPv6 type 1 code 0, RFC 4443 §3.1).
bool icmp6_no_route(rte_mbuf* m, const uint8_t src[16], const MacAddress& port_mac) noexcept;

// Destination unreachable, fragmentation needed and DF set (type 3 code 4), carrying the
// next-hop `mtu` (RFC 1191 §4). The same rules as icmp4_time_exceeded.
bool icmp4_frag_needed(rte_mbuf* m, uint32_t mtu, uint32_t src_be,
                       const MacAddress& port_mac) noexcept;

// Packet too big (ICMPv6 type 2, RFC 4443 §3.2), carrying the egress link's `mtu`.
bool icmp6_packet_too_big(rte_mbuf* m, uint32_t mtu, const uint8_t src[16],
                          const MacAddress& port_mac) noexcept;

// Destination unreachable, communication administratively prohibited (type 3 code 13, RFC 1812
// §5.2.7.1; ICMPv6 type 1 code 1, RFC 4443 §3.1): a packet an ACL `reject` rule refused, as
// nftables' `reject with icmp admin-prohibited`. The same rules as icmp4_time_exceeded.
bool icmp4_admin_prohibited(rte_mbuf* m, uint32_t src_be, const MacAddress& port_mac) noexcept;
bool icmp6_admin_prohibited(rte_mbuf* m, const uint8_t src[16],
                            const MacAddress& port_mac) noexcept;

}  // namespace vecflow
