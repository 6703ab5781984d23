/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The flow offload table of the XDP steering program (bpf/steer.bpf.c) and its user-space
 * side (userspace/steer/offload_table.h): one definition, compiled by both.
 *
 * User space decides a flow (route, neighbour, ACL, NAT) and installs an entry keyed by the
 * flow and its ingress interface; the program then forwards the flow's frames itself, right
 * after parsing and before the rule classifier: MACs rewritten, TTL / hop limit decremented,
 * the NAT rewrite applied with incremental checksums, out through the devmap (XDP_TX when the
 * egress is the ingress). A frame the entry does not cover (VLAN tag, IPv4 options or IPv6
 * extension headers, fragment, TCP FIN or RST, TTL <= 1, over the egress MTU, egress not in
 * the devmap) goes the normal way, counted in vf_steer_stats.offload_declined.
 *
 * The table is a BPF_MAP_TYPE_PERCPU_HASH, not an LRU. An entry costs its value once per
 * possible CPU, 88 bytes each: user space preallocates the table where that fits 256 MB
 * (steer/program.cc; on a 128-CPU machine 16k entries would take 168 MB per interface) and
 * leaves it to allocate on insert beyond, which the kernel's per-CPU allocator refuses
 * (ENOMEM) after a few thousand quick inserts:
 *  - a full table refuses the insert (E2BIG) and the flow stays on the normal path; an LRU
 *    would instead evict an entry user space still believes installed (its counters gone with
 *    it, its session's view of "offloaded" wrong until the next sweep);
 *  - each CPU has its own copy of the value, so the counters and last-seen time are plain
 *    stores, no atomics and no shared cache line, and one lookup gives action and counters.
 *    The action is written identically to every CPU's copy. An update of an existing key
 *    rewrites the copies in place (a frame could see half of the new action), so user space
 *    changes an action by delete then insert, never by BPF_EXIST.
 */
#ifndef VECFLOW_OFFLOAD_ABI_H
#define VECFLOW_OFFLOAD_ABI_H

#include <linux/types.h>

#include "vecflow/flow.h"

/* Per-flow order across the switch from user space to XDP: an entry is installed with a gate
 * (vf_offload_action.gate). While the gate is closed the program lifts the flow's frames to
 * user space as before, each stamped with the gate and its number under it (vf_xdp_meta.gate,
 * gate_seq: the value of `lifted` it incremented). The flow's frames reach user space in order
 * and leave it in order, so once user space has finished with (sent, handed to the kernel or
 * dropped) the last frame lifted, no earlier frame of the flow is still there: frames lost on
 * the way (a full AF_XDP ring) do not matter. User space then opens the gate, by a
 * compare-and-swap of `lifted` from that frame's number + 1 to the same | VF_GATE_OPEN, which
 * fails if another frame was lifted meanwhile (its own finish opens the gate). The program
 * increments `lifted` with a fetch-and-add and lifts only when the value before had no
 * VF_GATE_OPEN: a frame that lost the race to the opener is forwarded here, never lifted
 * behind frames XDP already sent. A gate under which nothing was lifted for a while (the last
 * frame lifted was lost and the flow went quiet) is opened by the control plane.
 *
 * Gates are few and reused (VF_OFFLOAD_GATES per table): a flow needs one only until it
 * opens. A CPU whose copy of the entry still names a gate since reused lifts the flow's frames
 * under the new owner's gate: order holds, the flow only waits for that gate too. The array is
 * mmapped by user space (BPF_F_MMAPABLE). */
#define VF_OFFLOAD_GATES 16384 /* gate 0 means none: ids 1 .. VF_OFFLOAD_GATES - 1 */
#define VF_GATE_OPEN (1ull << 63)

struct vf_offload_gate {
  __u64 lifted; /* frames the program lifted under the gate; VF_GATE_OPEN once open */
};

/* vf_offload_action.flags */
#define VF_OFFLOAD_DEC_TTL 0x1u /* decrement IPv4 TTL / IPv6 hop limit; <= 1 is declined */
#define VF_OFFLOAD_SNAT 0x2u    /* rewrite source address and port (TCP/UDP only) */
#define VF_OFFLOAD_DNAT 0x4u    /* rewrite destination address and port (TCP/UDP only) */

/* Why a frame whose flow has an entry went the normal way (vf_steer_stats.offload_declined). */
enum vf_offload_decline {
  VF_OFFLOAD_DECLINE_VLAN = 0,    /* tagged: entries cover untagged frames only */
  VF_OFFLOAD_DECLINE_IP_OPTIONS,  /* IPv4 options or IPv6 extension headers */
  VF_OFFLOAD_DECLINE_FRAGMENT,    /* IPv4 or IPv6 fragment */
  VF_OFFLOAD_DECLINE_TCP_FIN_RST, /* user space must see them to close the session */
  VF_OFFLOAD_DECLINE_TTL,         /* TTL / hop limit <= 1: user space answers time exceeded */
  VF_OFFLOAD_DECLINE_MTU,         /* over the egress MTU: user space answers or fragments */
  VF_OFFLOAD_DECLINE_NO_TARGET,   /* egress interface not in the devmap */
  VF_OFFLOAD_DECLINE_GATED,       /* the entry's gate is closed: lifted, stamped */
  VF_OFFLOAD_DECLINE_COUNT
};
#define VF_OFFLOAD_DECLINE_SLOTS 8 /* >= VF_OFFLOAD_DECLINE_COUNT, a power of two */

/* Key of vf_offload: the flow as the parser reads it (vf_flow_key, pad zero) and the ifindex
 * it arrives on. Instances of the program on different interfaces could share one table. */
struct vf_offload_key {
  struct vf_flow_key flow;
  __u32 ifindex;
};

/* What to do with a frame of the flow. Addresses and ports in network order (IPv4 in word 0,
 * words 1..3 zero), as in vf_flow_key. */
struct vf_offload_action {
  __u8 dst_mac[6];
  __u8 src_mac[6];
  __u32 egress_ifindex; /* == key.ifindex: XDP_TX; else redirected through vf_devmap */
  __u32 flags;          /* VF_OFFLOAD_* */
  __u32 nat_src[4];     /* VF_OFFLOAD_SNAT */
  __u32 nat_dst[4];     /* VF_OFFLOAD_DNAT */
  __u16 nat_src_port;   /* VF_OFFLOAD_SNAT */
  __u16 nat_dst_port;   /* VF_OFFLOAD_DNAT */
  __u32 gate;           /* vf_flow_gates slot while the flow's frames are lifted; 0: none */
  __u32 rule_id;        /* steering rule a lifted frame of the flow carries (vf_xdp_meta) */
};

/* Value of vf_offload, one per CPU: the action (the same on every CPU) and that CPU's
 * counters of the frames it forwarded. */
struct vf_offload_value {
  struct vf_offload_action action;
  __u64 packets;
  __u64 bytes;
  __u64 last_seen_ns; /* bpf_ktime_get_coarse_ns() (CLOCK_MONOTONIC_COARSE) of this
                       * CPU's last frame; 0 when it forwarded none */
};

/* vf_offload_ctl[0]: `active` is non-zero while the table may hold entries. The program reads
 * it before looking a frame up, so with offload unused a frame costs one array read. */
struct vf_offload_ctl {
  __u32 active;
};

#endif /* VECFLOW_OFFLOAD_ABI_H */
