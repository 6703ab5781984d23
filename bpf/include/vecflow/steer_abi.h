/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The ABI between the XDP steering program (bpf/steer.bpf.c) and its loader
 * (userspace/steer): action codes, the classifier's maps, and the counters. One definition,
 * compiled by both sides.
 *
 * Classifier: tuple-space search over port classes. Ports first become classes: the loader
 * cuts 0..65535 at every bound of every port range of the rule set, and vf_port_class maps a
 * port to its interval (one array read per direction). A rule's port range is then a run of
 * classes, and the rule is stored once per class it covers. The loader groups rules by their
 * shape (which fields they match and the prefix length of each: a "tuple") and stores them in
 * one hash map keyed by the frame's fields under that tuple's masks. Per frame the program
 * masks its fields once per tuple and does one hash lookup, visiting tuples in order of the
 * best rule they hold and stopping once no remaining tuple can beat the match in hand. The
 * cost per frame depends on the number of rule shapes (at most VF_STEER_MAX_TUPLES), never on
 * the number of rules.
 *
 * Atomic replacement: every rule-set object exists twice ("sets" 0 and 1; the set index is
 * part of each rule key). The loader fills the idle set completely, then flips
 * vf_config.active with one 32-bit store; the program reads that word once per packet, so a
 * packet is classified by the old set or by the new one, never by a mix.
 */
#ifndef VECFLOW_STEER_ABI_H
#define VECFLOW_STEER_ABI_H

#include <linux/types.h>

#include "vecflow/drop_reasons.h"
#include "vecflow/offload_abi.h"

/* The program's name in the kernel; the loader finds its own stale instances by it. */
#define VF_STEER_PROG_NAME "vf_steer"

/* Distinct rule shapes one rule set may use. Each costs one hash lookup per packet in the
 * worst case (a packet that matches nothing visits every tuple), so the bound is the
 * worst-case cost; 32 shapes cover every realistic policy (a rule set mixing prefix lengths,
 * exact ports and a few ranges uses a handful) while bounding the program at ~32 lookups. */
#define VF_STEER_MAX_TUPLES 32

/* Rule-set slots for atomic replacement (see above). */
#define VF_STEER_SETS 2

/* vf_port_class: one u16 class per port, per direction, per set:
 * index = (set * 2 + direction) * VF_PORTS + port (host order); direction 0 source, 1 dest. */
#define VF_PORTS 65536

/* Entries of the AF_XDP socket map and the redirect map: rx queues of one interface, and
 * interfaces a rule may redirect to. */
#define VF_STEER_MAX_QUEUES 64
#define VF_STEER_MAX_REDIRECT_TARGETS 64

enum vf_steer_action {
  VF_ACT_PASS = 0,  /* kernel stack */
  VF_ACT_DROP,      /* dropped in XDP, counted as VF_DROP_STEER_RULE */
  VF_ACT_USERSPACE, /* AF_XDP socket of the rx queue, with vf_xdp_meta */
  VF_ACT_TX,        /* back out of the interface it came in on */
  VF_ACT_REDIRECT,  /* to another kernel interface (DEVMAP), never leaving XDP */
  VF_ACT_COUNT
};

/* What the program finally did with a frame (after fallbacks): exactly one per frame, so
 * rx_packets == the sum of verdicts. Append only: user space names them by position. */
enum vf_steer_verdict {
  VF_VERDICT_PASS = 0,
  VF_VERDICT_DROP,
  VF_VERDICT_USERSPACE,
  VF_VERDICT_TX,
  VF_VERDICT_REDIRECT,
  VF_VERDICT_OFFLOAD, /* forwarded by a vf_offload entry (XDP_TX or devmap redirect) */
  VF_VERDICT_COUNT
};

/* vf_rule_key.l3. Bit 2 is set for IP (VF_L3_IP_BIT), so a rule that names an L4 protocol
 * but no IP version matches both versions under the mask VF_L3_IP_BIT. */
#define VF_L3_OTHER 1
#define VF_L3_ARP 3
#define VF_L3_IPV4 4
#define VF_L3_IPV6 6
#define VF_L3_IP_BIT 4

/* vf_rule_key.vlan of an untagged frame: no VLAN id (0..4095) equals it. */
#define VF_VLAN_NONE 0xffffu

/* Key of vf_rules: the packet's fields, each ANDed with the tuple's mask. Addresses in
 * network order, as in vf_flow_key; ports as their vf_port_class classes. */
struct vf_rule_key {
  __u32 set_tuple; /* (set << 8) | tuple index */
  __u32 src[4];
  __u32 dst[4];
  __u16 src_port; /* port class */
  __u16 dst_port; /* port class */
  __u16 vlan;     /* outer VLAN id, VF_VLAN_NONE when untagged */
  __u8 l3;        /* VF_L3_* */
  __u8 proto;     /* L4 protocol, 0 when not IP */
  __u8 l4;        /* 1 when the frame carries ports (TCP/UDP/SCTP, not a later fragment) */
  __u8 pad;
  __u16 inner_vlan; /* the second tag's VLAN id (QinQ), VF_VLAN_NONE without one */
};

/* What a rule (or the default) decides. */
struct vf_rule_value {
  __u32 rank;    /* higher wins; 0 is the default. Unique per rule: priority, then order */
  __u32 rule_id; /* index in steering.rules, VF_NO_RULE for the defaults */
  __u32 ifindex; /* VF_ACT_REDIRECT target */
  __u8 action;   /* enum vf_steer_action */
  __u8 pad[3];
};

/* One tuple: the masks its rules apply, and the best rank among them (for early exit). */
struct vf_tuple {
  __u32 src_mask[4];
  __u32 dst_mask[4];
  __u16 src_port_mask;
  __u16 dst_port_mask;
  __u16 vlan_mask;
  __u8 l3_mask;
  __u8 proto_mask;
  __u8 l4_mask;
  __u8 pad;
  __u16 inner_vlan_mask;
  __u32 max_rank;
};

/* A whole rule set except its rules (which live in vf_rules under this set's index). */
struct vf_steer_set {
  struct vf_rule_value default_action;
  struct vf_rule_value malformed; /* VF_ACT_PASS or VF_ACT_DROP */
  struct vf_rule_value no_socket; /* VF_ACT_PASS or VF_ACT_DROP */
  /* `userspace` on an rx queue the port does not read (not in read_queues, or at and above
   * VF_STEER_MAX_QUEUES): VF_ACT_PASS or VF_ACT_DROP (VF_DROP_QUEUE_NOT_READ). Queues the
   * interface gained after start-up land here too. */
  struct vf_rule_value other_queues;
  __u64 read_queues; /* bit q: rx queue q is read (vecflow's sockets or DPDK's) */
  __u32 symmetric_hash;
  __u32 rule_capacity; /* vf_rule_stats holds this many entries per set */
  __u32 tuple_count;
  __u32 pad;
  struct vf_tuple tuples[VF_STEER_MAX_TUPLES];
};

/* vf_config.active: 0 before the loader configured the program (then every frame passes),
 * else 1 + the index of the live set. */
struct vf_steer_config {
  __u32 active;
};

struct vf_rule_counter {
  __u64 packets;
  __u64 bytes;
};

/* Counter arrays are indexed by a masked value so the verifier can see every index is in
 * bounds; the slots past the enums stay zero. */
#define VF_STEER_ACTION_SLOTS 8  /* >= VF_ACT_COUNT, a power of two */
#define VF_STEER_REASON_SLOTS 64 /* >= VF_DROP_REASON_COUNT, a power of two */

/* Per-CPU counters of one interface's program; user space sums the CPUs. */
struct vf_steer_stats {
  __u64 rx_packets;
  __u64 rx_bytes;
  __u64 verdict[VF_VERDICT_COUNT];
  __u64 action[VF_STEER_ACTION_SLOTS];    /* action chosen (rule, default or malformed), before
                                             fallback */
  __u64 default_hits;                     /* well-formed frames no rule matched */
  __u64 no_socket_fallback;               /* `userspace` with no AF_XDP socket on the queue */
  __u64 meta_unavailable;                 /* lifted without metadata: the driver refused the room */
  __u64 unconfigured;                     /* passed before the loader configured the program */
  __u64 queue_not_read;                   /* `userspace` on an rx queue the port does not read */
  __u64 mtu_lifted;                       /* `tx`/`redirect` over the target's MTU: lifted */
  __u64 malformed[VF_STEER_REASON_SLOTS]; /* parse errors by reason, whatever the action */
  __u64 drop[VF_STEER_REASON_SLOTS];      /* XDP_DROP verdicts by reason */
  /* Bytes of VF_VERDICT_OFFLOAD frames: with that verdict, the port's offloaded totals, which
   * survive the removal of the entries that counted them. */
  __u64 offload_bytes;
  __u64 offload_declined[VF_OFFLOAD_DECLINE_SLOTS]; /* vf_offload_decline */
};

#endif /* VECFLOW_STEER_ABI_H */
