/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Metadata the XDP steering program writes in front of every frame it lifts to user space
 * (bpf_xdp_adjust_meta), so that user space never parses or hashes the frame again. With
 * AF_XDP the metadata ends exactly where the frame's data begins in the UMEM frame; the
 * AF_XDP port copies it into the mbuf (m->hash.rss, m->l2_len, m->l3_len, m->packet_type,
 * PacketMeta.steer_rule).
 */
#ifndef VECFLOW_XDP_META_H
#define VECFLOW_XDP_META_H

#include <linux/types.h>

/* User space trusts the metadata only when the magic matches: a frame that reached the socket
 * some other way (another program, an old vecflow) carries none. */
#define VF_XDP_META_MAGIC 0x7666u /* "vf" */
#define VF_XDP_META_VERSION 3
/* rule_id of frames no rule matched (the steering default). Rule ids are 32-bit: a rule set
 * may hold more than 65535 rules. */
#define VF_NO_RULE 0xffffffffu

/* flags */
#define VF_META_FRAGMENT 0x01u   /* IPv4/IPv6 fragment */
#define VF_META_LATER_FRAG 0x02u /* not the first fragment: no L4 header */
#define VF_META_VLAN 0x04u       /* at least one VLAN tag */

struct vf_xdp_meta {
  __u32 flow_hash; /* vf_flow_hash() of the 5-tuple, never 0 */
  __u32 rule_id;   /* steering rule that chose `userspace` (its index in steering.rules),
                    * VF_NO_RULE for the default */
  __u32 gate_seq;  /* with `gate`: the frame's number under it (vecflow/offload_abi.h) */
  __u16 vlan_tci;  /* outer VLAN TCI (host order) when VF_META_VLAN */
  __u16 l3_len;    /* IP header length incl. IPv4 options / IPv6 extension headers */
  __u8 l2_len;     /* Ethernet header plus VLAN tags */
  __u8 ip_version; /* 4, 6, or 0 when not IP (ARP, other ethertypes) */
  __u8 l4_proto;   /* IPPROTO_* of the L4 header, 0 when none */
  __u8 flags;      /* VF_META_* */
  __u16 gate;      /* offload gate the frame was lifted under (vecflow/offload_abi.h); 0: none.
                    * Also keeps the size a multiple of 4 as bpf_xdp_adjust_meta needs */
  __u16 magic;     /* VF_XDP_META_MAGIC; last, so it sits next to the frame */
};

#endif /* VECFLOW_XDP_META_H */
