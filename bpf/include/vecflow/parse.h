/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The frame parser, one definition compiled by the XDP program and by user space (the DPDK
 * ports' software path, core/parse.h), so both sides accept, reject and describe every frame
 * alike. It reads Ethernet, up to two VLAN tags (802.1Q, 802.1ad), ARP, IPv4 (options,
 * fragments), IPv6 (a bounded walk over hop-by-hop, routing, destination-options, fragment and
 * AH extension headers), TCP, UDP, SCTP, ICMP and ICMPv6.
 *
 * Every read is preceded by an explicit check against `end`: a frame that ends early or whose
 * headers claim more bytes than it carries is rejected with the vf_drop_reason that names
 * the header at fault; nothing past `end` is ever read. Lengths smaller than the frame are
 * legal (Ethernet padding): the IP length bounds the L4 header, not the frame.
 *
 * A frame may be longer than the bytes the parser can read: a multi-buffer XDP frame or a
 * chained mbuf, of which only the first buffer is given. `end` closes what may be read and
 * `frame_end` the frame itself, against which the length fields are held; the headers must
 * lie in the first buffer (they always do: it holds at least a page's worth, or a mbuf's).
 *
 * Pointers are plain `const __u8 *`: in BPF they are the packet pointers the verifier tracks
 * (each comparison against `end` proves the following read), in user space ordinary memory.
 * The verifier learns a packet range only from a comparison with the frame's end, not with
 * an end computed from a length field; so every read is checked against both (VF_NEED).
 */
#ifndef VECFLOW_PARSE_H
#define VECFLOW_PARSE_H

#include <linux/types.h>

#include "vecflow/drop_reasons.h"
#include "vecflow/flow.h"

#ifndef VF_INLINE
#define VF_INLINE static inline __attribute__((always_inline))
#endif

/* The bounded loops are unrolled for the BPF verifier; other compilers choose for themselves. */
#if defined(__clang__)
#define VF_UNROLL _Pragma("unroll")
#else
#define VF_UNROLL
#endif

/* Wire constants, spelled here so the header needs no libc or kernel networking headers. */
#define VF_ETH_HLEN 14
#define VF_ETH_P_IPV4 0x0800
#define VF_ETH_P_ARP 0x0806
#define VF_ETH_P_8021Q 0x8100
#define VF_ETH_P_8021AD 0x88a8
#define VF_ETH_P_IPV6 0x86dd
#define VF_VLAN_HLEN 4
#define VF_ARP_HLEN 8 /* fixed part; addresses follow */
#define VF_IPV4_HLEN 20
#define VF_IPV6_HLEN 40
#define VF_TCP_HLEN 20
#define VF_UDP_HLEN 8
#define VF_SCTP_HLEN 12
#define VF_ICMP_HLEN 8 /* type, code, checksum and the 32-bit field every message has */

#define VF_IPPROTO_HOPOPTS 0
#define VF_IPPROTO_ICMP 1
#define VF_IPPROTO_TCP 6
#define VF_IPPROTO_UDP 17
#define VF_IPPROTO_ROUTING 43
#define VF_IPPROTO_FRAGMENT 44
#define VF_IPPROTO_AH 51
#define VF_IPPROTO_ICMPV6 58
#define VF_IPPROTO_DSTOPTS 60
#define VF_IPPROTO_SCTP 132

/* At most this many VLAN tags (QinQ). A third tag is VF_DROP_VLAN_TOO_DEEP. */
#define VF_MAX_VLAN_TAGS 2
/* At most this many IPv6 extension headers are walked; a chain that still has one more is
 * VF_DROP_IPV6_EXT_TOO_LONG. Six covers every ordering RFC 8200 recommends (hop-by-hop,
 * destination options, routing, fragment, AH, destination options) while keeping the BPF
 * program's unrolled walk short. */
#define VF_MAX_IPV6_EXT 6

/* vf_parsed.flags; the fragment and VLAN bits equal the VF_META_* bits of xdp_meta.h. */
#define VF_PARSED_FRAGMENT 0x01u   /* IPv4/IPv6 fragment (first or later) */
#define VF_PARSED_LATER_FRAG 0x02u /* not the first fragment: no L4 header */
#define VF_PARSED_VLAN 0x04u       /* at least one VLAN tag */
#define VF_PARSED_L4 0x08u         /* an L4 header with ports (TCP, UDP, SCTP) was read */

/* What the parser found. Offsets are from the start of the frame. */
struct vf_parsed {
  struct vf_flow_key key; /* addresses, ports (0 when none), protocol, IP version */
  __u16 eth_proto;        /* ethertype after the VLAN tags, host order */
  __u16 vlan_tci;         /* outer tag's TCI, host order (VF_PARSED_VLAN) */
  __u16 vlan_tci_inner;   /* the second tag's TCI, host order (vlan_count == 2: QinQ) */
  __u16 l2_len;           /* Ethernet header plus VLAN tags */
  __u16 l3_len;           /* IP header incl. IPv4 options / IPv6 extension headers; 0 if not IP */
  __u16 l4_len;           /* TCP header incl. options, UDP/SCTP/ICMP header; 0 if none read */
  __u8 vlan_count;
  __u8 flags; /* VF_PARSED_* */
};

/* Returns `reason` unless `n` bytes at `p` lie before both the frame's `end` and `limit`
 * (the end the IP length gives, never past `end`). */
#define VF_NEED(p, n, limit, reason)                             \
  do {                                                           \
    if ((p) + (n) > end || (p) + (n) > (limit)) return (reason); \
  } while (0)

/* Parse succeeded. Any other return value is the vf_drop_reason of the malformed frame. */
#define VF_PARSE_OK (-1)

VF_INLINE __u16 vf_be16(const __u8* p) {
#if defined(__bpf__)
  /* The verifier of kernels before 6.10 (Debian 12's 6.1 included) forgets a register's
   * bounds when it is ORed with a non-constant (or byte-swapped), and then refuses to add the
   * result to a packet pointer ("math between pkt pointer and register with unbounded min
   * value"). ADD keeps the bounds (<= 0xff00 + 0xff); the empty asm hides the operand's bits
   * from clang, which would otherwise turn an ADD of disjoint bits back into OR. */
  __u32 hi = (__u32)p[0] << 8;
  asm volatile("" : "+r"(hi));
  return (__u16)(hi + p[1]);
#else
  return (__u16)(((__u16)p[0] << 8) | p[1]);
#endif
}

/* Reads the L4 header at `l4` that must end by `l4_end` (the IP length's end, itself within
 * the frame). Fragments other than the first never get here. In a first fragment
 * (VF_PARSED_FRAGMENT already set in `out`) the header itself must be whole, as RFC 1858 and
 * RFC 8200 §4.5 ask of a first fragment, but the UDP length counts the whole datagram, most of
 * which follows in later fragments: only an unfragmented datagram's length is held against the
 * bytes the packet carries. */
VF_INLINE int vf_parse_l4(const __u8* l4, const __u8* l4_end, const __u8* end, __u8 proto,
                          struct vf_parsed* out) {
  switch (proto) {
    case VF_IPPROTO_TCP: {
      VF_NEED(l4, VF_TCP_HLEN, l4_end, VF_DROP_TCP_TRUNCATED);
      __u16 doff = (__u16)((l4[12] >> 4) * 4);
      if (doff < VF_TCP_HLEN || l4 + doff > l4_end) return VF_DROP_TCP_BAD_DOFF;
      out->l4_len = doff;
      break;
    }
    case VF_IPPROTO_UDP: {
      VF_NEED(l4, VF_UDP_HLEN, l4_end, VF_DROP_UDP_TRUNCATED);
      __u16 len = vf_be16(l4 + 4);
      if (len < VF_UDP_HLEN) return VF_DROP_UDP_BAD_LEN;
      if (!(out->flags & VF_PARSED_FRAGMENT) && l4 + len > l4_end) return VF_DROP_UDP_BAD_LEN;
      out->l4_len = VF_UDP_HLEN;
      break;
    }
    case VF_IPPROTO_SCTP:
      VF_NEED(l4, VF_SCTP_HLEN, l4_end, VF_DROP_SCTP_TRUNCATED);
      out->l4_len = VF_SCTP_HLEN;
      break;
    case VF_IPPROTO_ICMP:
    case VF_IPPROTO_ICMPV6:
      VF_NEED(l4, VF_ICMP_HLEN, l4_end, VF_DROP_ICMP_TRUNCATED);
      out->l4_len = VF_ICMP_HLEN;
      return VF_PARSE_OK;
    default:
      return VF_PARSE_OK; /* an L4 protocol without ports: matched on L3 fields only */
  }
  /* TCP, UDP and SCTP all start with source and destination port. */
  __builtin_memcpy(&out->key.src_port, l4, 2);
  __builtin_memcpy(&out->key.dst_port, l4 + 2, 2);
  out->flags |= VF_PARSED_L4;
  return VF_PARSE_OK;
}

VF_INLINE int vf_parse_ipv4(const __u8* ip, const __u8* end, const __u8* frame_end,
                            struct vf_parsed* out) {
  if (ip + VF_IPV4_HLEN > end) return VF_DROP_IPV4_TRUNCATED;
  if ((ip[0] >> 4) != 4) return VF_DROP_IPV4_BAD_VERSION;
  __u16 hlen = (__u16)((ip[0] & 0x0f) * 4);
  if (hlen < VF_IPV4_HLEN || ip + hlen > end) return VF_DROP_IPV4_BAD_IHL;
  __u16 tot_len = vf_be16(ip + 2);
  if (tot_len < hlen || ip + tot_len > frame_end) return VF_DROP_IPV4_BAD_LEN;

  out->l3_len = hlen;
  out->key.ip_version = 4;
  out->key.l4_proto = ip[9];
  __builtin_memcpy(out->key.src, ip + 12, 4);
  __builtin_memcpy(out->key.dst, ip + 16, 4);

  __u16 frag = vf_be16(ip + 6);
  if (frag & 0x3fff) { /* MF set or a non-zero offset */
    out->flags |= VF_PARSED_FRAGMENT;
    if (frag & 0x1fff) {
      out->flags |= VF_PARSED_LATER_FRAG;
      return VF_PARSE_OK;
    }
  }
  return vf_parse_l4(ip + hlen, ip + tot_len, end, ip[9], out);
}

VF_INLINE int vf_parse_ipv6(const __u8* ip, const __u8* end, const __u8* frame_end,
                            struct vf_parsed* out) {
  if (ip + VF_IPV6_HLEN > end) return VF_DROP_IPV6_TRUNCATED;
  if ((ip[0] >> 4) != 6) return VF_DROP_IPV6_BAD_VERSION;
  const __u8* ip_end = ip + VF_IPV6_HLEN + vf_be16(ip + 4);
  if (ip_end > frame_end) return VF_DROP_IPV6_BAD_LEN;

  out->key.ip_version = 6;
  __builtin_memcpy(out->key.src, ip + 8, 16);
  __builtin_memcpy(out->key.dst, ip + 24, 16);

  __u8 next = ip[6];
  const __u8* p = ip + VF_IPV6_HLEN;
  int later_fragment = 0;
  VF_UNROLL
  for (int i = 0; i < VF_MAX_IPV6_EXT; i++) {
    __u16 len;
    switch (next) {
      case VF_IPPROTO_HOPOPTS:
      case VF_IPPROTO_ROUTING:
      case VF_IPPROTO_DSTOPTS:
        VF_NEED(p, 2, ip_end, VF_DROP_IPV6_EXT_TRUNCATED);
        len = (__u16)((p[1] + 1) * 8);
        break;
      case VF_IPPROTO_AH:
        VF_NEED(p, 2, ip_end, VF_DROP_IPV6_EXT_TRUNCATED);
        len = (__u16)((p[1] + 2) * 4);
        break;
      case VF_IPPROTO_FRAGMENT:
        VF_NEED(p, 8, ip_end, VF_DROP_IPV6_EXT_TRUNCATED);
        len = 8;
        out->flags |= VF_PARSED_FRAGMENT;
        if (vf_be16(p + 2) & 0xfff8) later_fragment = 1;
        break;
      default:
        goto done;
    }
    VF_NEED(p, len, ip_end, VF_DROP_IPV6_EXT_TRUNCATED);
    next = p[0];
    p += len;
  }
  /* The bound is reached; a chain that goes on is rejected rather than half-read. */
  switch (next) {
    case VF_IPPROTO_HOPOPTS:
    case VF_IPPROTO_ROUTING:
    case VF_IPPROTO_DSTOPTS:
    case VF_IPPROTO_AH:
    case VF_IPPROTO_FRAGMENT:
      return VF_DROP_IPV6_EXT_TOO_LONG;
  }
done:
  out->l3_len = (__u16)(p - ip);
  out->key.l4_proto = next;
  if (later_fragment) {
    out->flags |= VF_PARSED_LATER_FRAG;
    return VF_PARSE_OK;
  }
  return vf_parse_l4(p, ip_end, end, next, out);
}

/* Parses the frame [data, frame_end) of which [data, end) may be read (end <= frame_end).
 * Fills *out (zeroed first) and returns VF_PARSE_OK, or the vf_drop_reason of a malformed
 * frame (then *out holds what was read before the fault). */
VF_INLINE int vf_parse_frame(const __u8* data, const __u8* end, const __u8* frame_end,
                             struct vf_parsed* out) {
  __builtin_memset(out, 0, sizeof(*out));
  if (data + VF_ETH_HLEN > end) return VF_DROP_L2_TRUNCATED;
  const __u8* p = data + VF_ETH_HLEN;
  __u16 proto = vf_be16(data + 12);
  VF_UNROLL
  for (int i = 0; i < VF_MAX_VLAN_TAGS; i++) {
    if (proto != VF_ETH_P_8021Q && proto != VF_ETH_P_8021AD) break;
    if (p + VF_VLAN_HLEN > end) return VF_DROP_VLAN_TRUNCATED;
    if (i == 0) out->vlan_tci = vf_be16(p);
    if (i == 1) out->vlan_tci_inner = vf_be16(p);
    proto = vf_be16(p + 2);
    p += VF_VLAN_HLEN;
    out->vlan_count++;
    out->flags |= VF_PARSED_VLAN;
  }
  if (proto == VF_ETH_P_8021Q || proto == VF_ETH_P_8021AD) return VF_DROP_VLAN_TOO_DEEP;
  out->eth_proto = proto;
  out->l2_len = (__u16)(p - data);

  switch (proto) {
    case VF_ETH_P_IPV4:
      return vf_parse_ipv4(p, end, frame_end, out);
    case VF_ETH_P_IPV6:
      return vf_parse_ipv6(p, end, frame_end, out);
    case VF_ETH_P_ARP:
      if (p + VF_ARP_HLEN > end) return VF_DROP_ARP_TRUNCATED;
      /* sender and target hardware and protocol addresses */
      if (p + VF_ARP_HLEN + 2 * (p[4] + p[5]) > end) return VF_DROP_ARP_TRUNCATED;
      return VF_PARSE_OK;
    default:
      return VF_PARSE_OK; /* not IP: steered on L2 fields only */
  }
}

#undef VF_NEED

#endif /* VECFLOW_PARSE_H */
