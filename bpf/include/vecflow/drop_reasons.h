/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The closed list of places a packet can end other than "transmitted" or "handed to the
 * kernel". Shared by the XDP program and user space: one definition, one order.
 *
 * The order is ABI: BPF counter arrays and user-space counters are indexed by the enum value,
 * and the control protocol reports the names. Append new reasons at the end of their group;
 * never renumber. Each entry: X(ENUM_NAME, "wire_name", "what an operator should read").
 */
#ifndef VECFLOW_DROP_REASONS_H
#define VECFLOW_DROP_REASONS_H

#define VF_DROP_REASONS(X)                                                                         \
  /* Malformed frames: found by the parsers (XDP and user space alike). */                         \
  X(L2_TRUNCATED, "l2_truncated", "frame shorter than an Ethernet header")                         \
  X(VLAN_TRUNCATED, "vlan_truncated", "frame ends inside a VLAN tag")                              \
  X(VLAN_TOO_DEEP, "vlan_too_deep", "more VLAN tags than the parser accepts")                      \
  X(ARP_TRUNCATED, "arp_truncated", "frame ends inside an ARP header")                             \
  X(IPV4_TRUNCATED, "ipv4_truncated", "frame ends inside the fixed IPv4 header")                   \
  X(IPV4_BAD_VERSION, "ipv4_bad_version", "IPv4 ethertype but version field is not 4")             \
  X(IPV4_BAD_IHL, "ipv4_bad_ihl", "IPv4 header length below 5 words or past the frame")            \
  X(IPV4_BAD_LEN, "ipv4_bad_len", "IPv4 total length below the header or past the frame")          \
  X(IPV6_TRUNCATED, "ipv6_truncated", "frame ends inside the fixed IPv6 header")                   \
  X(IPV6_BAD_LEN, "ipv6_bad_len", "IPv6 payload length past the frame")                            \
  X(IPV6_EXT_TRUNCATED, "ipv6_ext_truncated", "IPv6 extension header runs past the frame")         \
  X(IPV6_EXT_TOO_LONG, "ipv6_ext_too_long", "more IPv6 extension headers than the bound")          \
  X(TCP_TRUNCATED, "tcp_truncated", "frame ends inside the TCP header")                            \
  X(TCP_BAD_DOFF, "tcp_bad_doff", "TCP data offset below 5 words or past the segment")             \
  X(UDP_TRUNCATED, "udp_truncated", "frame ends inside the UDP header")                            \
  X(UDP_BAD_LEN, "udp_bad_len", "UDP length below 8 or past an unfragmented payload")              \
  X(ICMP_TRUNCATED, "icmp_truncated", "frame ends inside the ICMP/ICMPv6 header")                  \
  X(FRAME_TOO_BIG, "frame_too_big", "frame larger than the buffer or MTU it must fit")             \
  /* Policy: the operator's configuration decided to drop. */                                      \
  X(STEER_RULE, "steer_rule", "dropped by a steering rule or the steering default")                \
  X(ACL_DENY, "acl_deny", "denied by an ACL rule")                                                 \
  X(NO_ROUTE, "no_route", "no route to the destination")                                           \
  X(TTL_EXPIRED, "ttl_expired", "TTL or hop limit reached zero")                                   \
  X(NEIGH_UNRESOLVED, "neigh_unresolved", "next hop has no link-layer address")                    \
  X(NOT_IP, "not_ip", "frame reached an IP stage but carries no IP packet")                        \
  /* Resources and state: the box could not carry the packet. */                                   \
  X(NO_XSK, "no_xsk", "userspace action but no AF_XDP socket on the queue")                        \
  X(REDIRECT_FAILED, "redirect_failed", "XDP redirect to the target interface failed")             \
  X(XSK_RING_FULL, "xsk_ring_full", "AF_XDP rx ring or fill ring had no room")                     \
  X(NOMBUF, "nombuf", "no packet buffer available")                                                \
  X(TX_FULL, "tx_full", "transmit ring stayed full past the retry bound")                          \
  X(LINK_DOWN, "link_down", "output link is down")                                                 \
  X(SCHED_BACKPRESSURE, "sched_backpressure", "scheduler refused the event (queue full)")          \
  X(SHUTDOWN_FLUSH, "shutdown_flush", "in flight when the port or appliance stopped")              \
  /* Malformed frames found after the list above was fixed (appended: the order is ABI). */        \
  X(IPV6_BAD_VERSION, "ipv6_bad_version", "IPv6 ethertype but version field is not 6")             \
  X(SCTP_TRUNCATED, "sctp_truncated", "frame ends inside the SCTP common header")                  \
  /* Device and exception-path outcomes reported by the ports (appended: ABI). */                  \
  X(RX_MISSED, "rx_missed", "device dropped frames: its receive ring was full")                    \
  X(RX_ERROR, "rx_error", "device reported a receive error (bad CRC, length)")                     \
  X(TX_ERROR, "tx_error", "device reported a transmit error")                                      \
  X(NO_KERNEL_PATH, "no_kernel_path", "kernel verdict on a port without a kernel path")            \
  /* The end of the pipeline (sched/tx_adapter.h). */                                              \
  X(BAD_VERDICT, "bad_verdict", "pipeline ended without a usable verdict")                         \
  /* What a router must not forward (RFC 1812, RFC 4291): the route stage's checks. */             \
  X(IPV4_BAD_CHECKSUM, "ipv4_bad_checksum", "IPv4 header checksum is wrong")                       \
  X(MARTIAN_SOURCE, "martian_source", "source multicast, loopback, reserved, unspecified")         \
  X(MARTIAN_DESTINATION, "martian_destination", "destination loopback, unspecified or link-local") \
  /* Frames of an rx queue the appliance file leaves unread (`other_queues: drop`). */             \
  X(QUEUE_NOT_READ, "queue_not_read", "rx queue not read by vecflow (other_queues: drop)")         \
  /* Connection tracking and NAT (pipeline/conntrack/conntrack_stage.h). */                        \
  X(CT_INVALID, "ct_invalid", "conntrack: packet fits no connection's state (invalid)")            \
  X(CT_TABLE_FULL, "ct_table_full", "conntrack: new connection refused, session table full")       \
  X(NAT_NO_PORT, "nat_no_port", "NAT: new connection refused, no free port in its range")          \
  X(NAT_FRAGMENT, "nat_fragment", "NAT: later fragment, first not seen, source to rewrite")        \
  /* A packet larger than its egress link's MTU (core/port_mtu.h). */                              \
  X(PACKET_TOO_BIG, "packet_too_big", "over the egress MTU, may not be fragmented (DF or IPv6)")   \
  /* An ACL `reject` rule: dropped, answered with ICMP administratively prohibited. */             \
  X(ACL_REJECT, "acl_reject", "rejected by an ACL rule (answered: admin prohibited)")              \
  /* An ICMP error withheld by the rate limits (pipeline/icmp_responder.h); the stage that */      \
  /* would have answered counts the packet's own cause (ttl_expired, no_route, ...). */            \
  X(ICMP_LIMITED, "icmp_limited", "dropped; its ICMP error withheld by the rate limits")           \
  /* A tagged frame on a port with VLAN sub-interfaces whose VLAN none of them is (io/vlan). */    \
  X(VLAN_UNKNOWN, "vlan_unknown", "tagged with a VLAN no sub-interface of the port claims")

enum vf_drop_reason {
#define VF_DROP_ENUM(name, wire, text) VF_DROP_##name,
  VF_DROP_REASONS(VF_DROP_ENUM)
#undef VF_DROP_ENUM
      VF_DROP_REASON_COUNT
};

#endif /* VECFLOW_DROP_REASONS_H */
