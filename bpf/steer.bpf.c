// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * vecflow's XDP steering program: the first decision a frame meets. It parses the frame
 * (vecflow/parse.h, shared with user space), classifies it against the live rule set
 * (vecflow/steer_abi.h explains the tuple-space classifier and the double-buffered sets),
 * and passes it to the kernel, drops it, redirects it to another interface, sends it back out,
 * or lifts it to the AF_XDP socket of its rx queue with vf_xdp_meta in front.
 *
 * One instance runs per interface; its maps are that interface's. Every frame is counted
 * once under exactly one verdict, so rx_packets equals the sum of verdicts.
 */
#include <linux/bpf.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#include "vecflow/flow.h"
#include "vecflow/parse.h"
#include "vecflow/steer_abi.h"
#include "vecflow/xdp_meta.h"

/* Sizes the loader overrides before loading (bpf_map__set_max_entries). */
#define VF_DEFAULT_RULE_ENTRIES 4096
#define VF_DEFAULT_RULE_STATS (2 * 1024)
#define VF_DEFAULT_OFFLOAD_ENTRIES 16384

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct vf_steer_config);
} vf_config SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, VF_STEER_SETS);
  __type(key, __u32);
  __type(value, struct vf_steer_set);
} vf_sets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, VF_DEFAULT_RULE_ENTRIES);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct vf_rule_key);
  __type(value, struct vf_rule_value);
} vf_rules SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, VF_STEER_SETS * 2 * VF_PORTS);
  __type(key, __u32);
  __type(value, __u16);
} vf_port_class SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, VF_DEFAULT_RULE_STATS);
  __type(key, __u32);
  __type(value, struct vf_rule_counter);
} vf_rule_stats SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct vf_steer_stats);
} vf_stats SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
  __uint(max_entries, VF_STEER_MAX_REDIRECT_TARGETS);
  __type(key, __u32);
  __type(value, __u32);
} vf_devmap SEC(".maps");

/* Flows user space decided, forwarded here (vecflow/offload_abi.h says why a per-CPU hash). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, VF_DEFAULT_OFFLOAD_ENTRIES);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct vf_offload_key);
  __type(value, struct vf_offload_value);
} vf_offload SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct vf_offload_ctl);
} vf_offload_ctl SEC(".maps");

/* The offload table's gates (vecflow/offload_abi.h): shared with user space through mmap. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, VF_OFFLOAD_GATES);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, struct vf_offload_gate);
} vf_flow_gates SEC(".maps");

/* The AF_XDP sockets of this interface, keyed by rx queue. The name is fixed: DPDK's
 * net_af_xdp PMD looks the map up by it when given this object as `xdp_prog`. */
struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, VF_STEER_MAX_QUEUES);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

static __always_inline int count_verdict(struct vf_steer_stats* st, enum vf_steer_verdict v,
                                         int xdp_action) {
  st->verdict[v]++;
  return xdp_action;
}

/* Counter indexes the verifier can see are in bounds (steer_abi.h sizes the arrays). */
static __always_inline __u32 reason_slot(int r) {
  return (__u32)r & (VF_STEER_REASON_SLOTS - 1);
}
static __always_inline __u32 action_slot(__u8 a) {
  return a & (VF_STEER_ACTION_SLOTS - 1);
}

static __always_inline int drop(struct vf_steer_stats* st, enum vf_drop_reason why) {
  st->drop[reason_slot(why)]++;
  return count_verdict(st, VF_VERDICT_DROP, XDP_DROP);
}

/* Pass or drop: the only actions `malformed`, `no_socket` and `other_queues` may take. */
static __always_inline int pass_or_drop(struct vf_steer_stats* st, __u8 action,
                                        enum vf_drop_reason why) {
  if (action == VF_ACT_DROP) return drop(st, why);
  return count_verdict(st, VF_VERDICT_PASS, XDP_PASS);
}

/* The parser and the classifier are global (non-static) functions: the verifier checks each
 * once on its own instead of once per path through its caller, which keeps verification of
 * the whole program fast. */

/* Parses the frame of `ctx`, `len` bytes over all its buffers, into *out; returns VF_PARSE_OK
 * or a vf_drop_reason. The headers are read from the first buffer. */
__attribute__((noinline)) int vf_parse_xdp(struct xdp_md* ctx, __u32 len, struct vf_parsed* out) {
  if (!out) return VF_DROP_L2_TRUNCATED;
  const __u8* data = (const __u8*)(long)ctx->data;
  const __u8* end = (const __u8*)(long)ctx->data_end;
  /* The bound lets the verifier add the length to a packet pointer; no frame comes near it. */
  if (len > 0xffff) len = 0xffff;
  return vf_parse_frame(data, end, data + len, out);
}

/* Finds the best rule of set `set_idx` for the parsed frame into *best, which holds the
 * set's default on entry. Returns 0, or -1 if the set is missing. */
__attribute__((noinline)) int vf_classify(const struct vf_parsed* p, __u32 set_idx,
                                          struct vf_rule_value* best) {
  if (!p || !best) return -1;
  const struct vf_steer_set* set = bpf_map_lookup_elem(&vf_sets, &set_idx);
  if (!set) return -1;
  struct vf_rule_key base = {};
  __builtin_memcpy(base.src, p->key.src, sizeof(base.src));
  __builtin_memcpy(base.dst, p->key.dst, sizeof(base.dst));
  __u32 sidx = (set_idx * 2) * VF_PORTS + bpf_ntohs(p->key.src_port);
  __u32 didx = (set_idx * 2 + 1) * VF_PORTS + bpf_ntohs(p->key.dst_port);
  const __u16* sc = bpf_map_lookup_elem(&vf_port_class, &sidx);
  const __u16* dc = bpf_map_lookup_elem(&vf_port_class, &didx);
  base.src_port = sc ? *sc : 0;
  base.dst_port = dc ? *dc : 0;
  base.vlan = (p->flags & VF_PARSED_VLAN) ? (p->vlan_tci & 0x0fff) : VF_VLAN_NONE;
  base.inner_vlan = p->vlan_count == 2 ? (p->vlan_tci_inner & 0x0fff) : VF_VLAN_NONE;
  base.l3 = p->key.ip_version == 4         ? VF_L3_IPV4
            : p->key.ip_version == 6       ? VF_L3_IPV6
            : p->eth_proto == VF_ETH_P_ARP ? VF_L3_ARP
                                           : VF_L3_OTHER;
  base.proto = p->key.l4_proto;
  base.l4 = (p->flags & VF_PARSED_L4) ? 1 : 0;

  __u32 count = set->tuple_count;
  __u32 best_rank = best->rank;
  for (__u32 i = 0; i < VF_STEER_MAX_TUPLES; i++) {
    if (i >= count) break;
    const struct vf_tuple* t = &set->tuples[i];
    /* Tuples come sorted by their best rank: none after this one can do better. */
    if (t->max_rank <= best_rank) break;
    struct vf_rule_key k;
    k.set_tuple = (set_idx << 8) | i;
    for (int w = 0; w < 4; w++) {
      k.src[w] = base.src[w] & t->src_mask[w];
      k.dst[w] = base.dst[w] & t->dst_mask[w];
    }
    k.src_port = base.src_port & t->src_port_mask;
    k.dst_port = base.dst_port & t->dst_port_mask;
    k.vlan = base.vlan & t->vlan_mask;
    k.l3 = base.l3 & t->l3_mask;
    k.proto = base.proto & t->proto_mask;
    k.l4 = base.l4 & t->l4_mask;
    k.pad = 0;
    k.inner_vlan = base.inner_vlan & t->inner_vlan_mask;
    const struct vf_rule_value* v = bpf_map_lookup_elem(&vf_rules, &k);
    if (v && v->rank > best_rank) {
      *best = *v;
      best_rank = v->rank;
    }
  }
  return 0;
}

/* Whether lifted frames carry vf_xdp_meta: set by the loader (steer/program.cc) before the
 * load, 0 in steer_nometa.bpf.o. A kernel may refuse bpf_xdp_adjust_meta to XDP programs (the
 * 6.18.44 of some of our machines does); the verifier, which knows this constant, then never
 * sees the call. User space parses such frames itself, as those a driver gave no room. */
#ifdef VF_STEER_NO_META
const volatile __u32 vf_write_meta = 0;
#else
const volatile __u32 vf_write_meta = 1;
#endif

/* Writes vf_xdp_meta in front of the frame. Returns 0, or -1 when the driver has no room (or
 * the program writes none). */
static __always_inline int write_meta(struct xdp_md* ctx, const struct vf_parsed* p, __u32 rule_id,
                                      __u32 symmetric, __u32 gate, __u64 seq) {
  if (!vf_write_meta) return -1;
  if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct vf_xdp_meta))) return -1;
  void* data = (void*)(long)ctx->data;
  struct vf_xdp_meta* m = (void*)(long)ctx->data_meta;
  if ((void*)(m + 1) > data) return -1;
  m->flow_hash = vf_flow_hash(&p->key, symmetric);
  m->rule_id = rule_id;
  m->vlan_tci = p->vlan_tci;
  m->l3_len = p->l3_len;
  m->l2_len = (__u8)p->l2_len;
  m->ip_version = p->key.ip_version;
  m->l4_proto = p->key.l4_proto;
  m->flags = p->flags & (VF_META_FRAGMENT | VF_META_LATER_FRAG | VF_META_VLAN);
  m->gate = (__u16)gate;
  m->gate_seq = (__u32)seq;
  m->magic = VF_XDP_META_MAGIC;
  return 0;
}

/* Whether the frame fits the MTU of interface `ifindex` (0: the one it arrived on), measured as
 * the kernel measures what it forwards: the IP packet, L2 header and VLAN tags not included. A
 * frame over it would be lost after the program returned (a devmap redirect or XDP_TX of a
 * frame the link refuses fails uncounted); lifted instead, user space answers it (ICMP
 * fragmentation needed / packet too big) or fragments it. An interface the kernel does not
 * know fits: the redirect then fails, counted. */
static __always_inline int fits_mtu(struct xdp_md* ctx, __u32 frame_len, const struct vf_parsed* p,
                                    __u32 ifindex) {
  __u32 len = frame_len - p->l2_len;
  return bpf_check_mtu(ctx, ifindex, &len, 0, 0) != BPF_MTU_CHK_RET_FRAG_NEEDED;
}

/* One's-complement checksum arithmetic over 16-bit words as they lie in memory (the sum is
 * byte-order independent). A rewrite adds ~old + new for each changed word into a 32-bit
 * delta, then the checksum becomes ~fold(~check + delta) (RFC 1624, eqn. 3). */
static __always_inline __u32 csum_delta32(__u32 old, __u32 new) {
  return (~old & 0xffff) + (~old >> 16) + (new & 0xffff) + (new >> 16);
}
static __always_inline __u16 csum_apply(__u16 check, __u32 delta) {
  __u32 c = (__u16)~check + delta;
  c = (c & 0xffff) + (c >> 16);
  c = (c & 0xffff) + (c >> 16);
  return (__u16)~c;
}

#define VF_TCP_FIN 0x01
#define VF_TCP_RST 0x04

static __always_inline int decline(struct vf_steer_stats* st, enum vf_offload_decline why) {
  st->offload_declined[why & (VF_OFFLOAD_DECLINE_SLOTS - 1)]++;
  return -1;
}

/* Rewrites the IP and L4 headers of an untagged frame without IPv4 options or IPv6 extension
 * headers (so every offset is constant) as `a` says. `l4_csum` is the offset of the TCP/UDP
 * checksum in the L4 header, 0 for other protocols (user space refuses NAT for them). Returns
 * 0, or -1 if the frame is shorter than the headers (the parser checked; the verifier must
 * see it). */
static __always_inline int rewrite_ip(void* data, void* end, const struct vf_offload_action* a,
                                      __u8 ip_version, __u32 l4_csum) {
  __u32 l4_delta = 0;
  if (ip_version == 4) {
    __u8* ip = (__u8*)data + VF_ETH_HLEN;
    __u8* l4 = ip + VF_IPV4_HLEN;
    if ((void*)l4 > end) return -1;
    if (l4_csum && (void*)(l4 + VF_UDP_HLEN) > end) return -1;
    if (l4_csum == 16 && (void*)(l4 + VF_TCP_HLEN) > end) return -1;
    __u32 ip_delta = 0;
    if (a->flags & VF_OFFLOAD_DEC_TTL) {
      __u16 old = *(__u16*)(ip + 8);
      ip[8]--;
      ip_delta += csum_delta32(old, *(__u16*)(ip + 8));
    }
    if (l4_csum && (a->flags & VF_OFFLOAD_SNAT)) {
      __u32 d = csum_delta32(*(__u32*)(ip + 12), a->nat_src[0]);
      ip_delta += d;
      l4_delta += d + csum_delta32(*(__u16*)l4, a->nat_src_port);
      *(__u32*)(ip + 12) = a->nat_src[0];
      *(__u16*)l4 = a->nat_src_port;
    }
    if (l4_csum && (a->flags & VF_OFFLOAD_DNAT)) {
      __u32 d = csum_delta32(*(__u32*)(ip + 16), a->nat_dst[0]);
      ip_delta += d;
      l4_delta += d + csum_delta32(*(__u16*)(l4 + 2), a->nat_dst_port);
      *(__u32*)(ip + 16) = a->nat_dst[0];
      *(__u16*)(l4 + 2) = a->nat_dst_port;
    }
    *(__u16*)(ip + 10) = csum_apply(*(__u16*)(ip + 10), ip_delta);
    if (!l4_delta) return 0;
    if (l4_csum == 6) {
      __u16* c = (__u16*)(l4 + 6);
      /* An IPv4 UDP checksum of 0 means none: it stays none. A computed 0 is sent as 0xffff. */
      if (*c == 0) return 0;
      __u16 v = csum_apply(*c, l4_delta);
      *c = v ? v : 0xffff;
    } else if (l4_csum == 16) {
      __u16* c = (__u16*)(l4 + 16);
      *c = csum_apply(*c, l4_delta);
    }
    return 0;
  }
  __u8* ip = (__u8*)data + VF_ETH_HLEN;
  __u8* l4 = ip + VF_IPV6_HLEN;
  if ((void*)l4 > end) return -1;
  if (l4_csum && (void*)(l4 + VF_UDP_HLEN) > end) return -1;
  if (l4_csum == 16 && (void*)(l4 + VF_TCP_HLEN) > end) return -1;
  if (a->flags & VF_OFFLOAD_DEC_TTL) ip[7]--; /* no IPv6 header checksum */
  if (l4_csum && (a->flags & VF_OFFLOAD_SNAT)) {
    for (int w = 0; w < 4; w++) {
      l4_delta += csum_delta32(*(__u32*)(ip + 8 + 4 * w), a->nat_src[w]);
      *(__u32*)(ip + 8 + 4 * w) = a->nat_src[w];
    }
    l4_delta += csum_delta32(*(__u16*)l4, a->nat_src_port);
    *(__u16*)l4 = a->nat_src_port;
  }
  if (l4_csum && (a->flags & VF_OFFLOAD_DNAT)) {
    for (int w = 0; w < 4; w++) {
      l4_delta += csum_delta32(*(__u32*)(ip + 24 + 4 * w), a->nat_dst[w]);
      *(__u32*)(ip + 24 + 4 * w) = a->nat_dst[w];
    }
    l4_delta += csum_delta32(*(__u16*)(l4 + 2), a->nat_dst_port);
    *(__u16*)(l4 + 2) = a->nat_dst_port;
  }
  if (!l4_delta) return 0;
  __u16* c = (__u16*)(l4 + (l4_csum == 16 ? 16 : 6));
  __u16 v = csum_apply(*c, l4_delta);
  /* UDP over IPv6 always carries a checksum; a computed 0 is sent as 0xffff. */
  *c = (v || l4_csum == 16) ? v : 0xffff;
  return 0;
}

/* To the AF_XDP socket of the frame's rx queue with its metadata (stamped with `gate`, 0 for
 * none, and `seq`), or where the file sends frames of a queue without one. */
static __always_inline int lift(struct xdp_md* ctx, struct vf_steer_stats* st,
                                const struct vf_steer_set* set, const struct vf_parsed* p,
                                __u32 rule_id, __u32 gate, __u64 seq) {
  __u32 queue = ctx->rx_queue_index;
  if (!bpf_map_lookup_elem(&xsks_map, &queue)) {
    /* No socket: a queue the port does not read (the file handed it to other_queues, or
     * the interface gained it after start-up), or a read queue whose socket is missing. */
    if (queue >= VF_STEER_MAX_QUEUES || !((set->read_queues >> queue) & 1)) {
      st->queue_not_read++;
      return pass_or_drop(st, set->other_queues.action, VF_DROP_QUEUE_NOT_READ);
    }
    st->no_socket_fallback++;
    return pass_or_drop(st, set->no_socket.action, VF_DROP_NO_XSK);
  }
  /* A stamped frame that does not reach user space (no socket, no room for the metadata)
   * opens nothing: the gate waits for the next one, or opens once the flow is quiet. */
  if (write_meta(ctx, p, rule_id, set->symmetric_hash, gate, seq)) st->meta_unavailable++;
  /* The socket can go away between the lookup and the redirect: fall back then too. */
  if (bpf_redirect_map(&xsks_map, queue, 0) == XDP_REDIRECT)
    return count_verdict(st, VF_VERDICT_USERSPACE, XDP_REDIRECT);
  st->no_socket_fallback++;
  return pass_or_drop(st, set->no_socket.action, VF_DROP_NO_XSK);
}

/* Forwards a parsed frame by its vf_offload entry. Returns the XDP action, or -1 when the frame
 * goes the normal way (no entry, or one it does not cover: counted by reason). The frame is
 * counted as offloaded when it is handed to the egress: a devmap transmit that fails after the
 * program returned (a veth whose peer is down, a full ring) is not seen here; the kernel
 * counts it in the xdp:xdp_devmap_xmit tracepoint (`drops`) and in the egress driver's own
 * counters (veth: the egress device's tx_dropped / the peer's rx drops, `ip -s link`). */
static __always_inline int offload(struct xdp_md* ctx, struct vf_steer_stats* st,
                                   const struct vf_steer_set* set, const struct vf_parsed* p,
                                   __u32 len) {
  if (p->key.ip_version != 4 && p->key.ip_version != 6) return -1;
  struct vf_offload_key k;
  __builtin_memcpy(&k.flow, &p->key, sizeof(k.flow));
  k.ifindex = ctx->ingress_ifindex;
  struct vf_offload_value* e = bpf_map_lookup_elem(&vf_offload, &k);
  if (!e) return -1;

  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  if (p->vlan_count) return decline(st, VF_OFFLOAD_DECLINE_VLAN);
  if (p->flags & VF_PARSED_FRAGMENT) return decline(st, VF_OFFLOAD_DECLINE_FRAGMENT);
  const int v4 = p->key.ip_version == 4;
  if (p->l3_len != (v4 ? VF_IPV4_HLEN : VF_IPV6_HLEN))
    return decline(st, VF_OFFLOAD_DECLINE_IP_OPTIONS);
  /* Untagged and without options: constant offsets. The parser checked these bounds; the
   * verifier needs to see them again. */
  const __u8* ip = (const __u8*)data + VF_ETH_HLEN;
  const __u8* l4;
  __u8 hops;
  if (v4) {
    l4 = ip + VF_IPV4_HLEN;
    if ((void*)l4 > end) return -1;
    hops = ip[8];
  } else {
    l4 = ip + VF_IPV6_HLEN;
    if ((void*)l4 > end) return -1;
    hops = ip[7];
  }
  __u32 l4_csum = 0;
  if (p->key.l4_proto == VF_IPPROTO_TCP) {
    if ((void*)(l4 + VF_TCP_HLEN) > end) return -1;
    if (l4[13] & (VF_TCP_FIN | VF_TCP_RST)) return decline(st, VF_OFFLOAD_DECLINE_TCP_FIN_RST);
    l4_csum = 16;
  } else if (p->key.l4_proto == VF_IPPROTO_UDP) {
    if ((void*)(l4 + VF_UDP_HLEN) > end) return -1;
    l4_csum = 6;
  }
  const struct vf_offload_action* a = &e->action;
  if ((a->flags & VF_OFFLOAD_DEC_TTL) && hops <= 1) return decline(st, VF_OFFLOAD_DECLINE_TTL);
  const int tx = a->egress_ifindex == ctx->ingress_ifindex;
  if (!fits_mtu(ctx, len, p, tx ? 0 : a->egress_ifindex))
    return decline(st, VF_OFFLOAD_DECLINE_MTU);
  /* While the entry's gate is closed the frame goes to user space behind the flow's earlier
   * frames (vecflow/offload_abi.h). Once this CPU saw it open, its copy forgets the gate. */
  __u32 gate = e->action.gate;
  if (gate) {
    struct vf_offload_gate* g = bpf_map_lookup_elem(&vf_flow_gates, &gate);
    if (g && !(g->lifted & VF_GATE_OPEN)) {
      const __u64 seq = __sync_fetch_and_add(&g->lifted, 1);
      if (!(seq & VF_GATE_OPEN)) {
        st->offload_declined[VF_OFFLOAD_DECLINE_GATED]++;
        return lift(ctx, st, set, p, e->action.rule_id, gate, seq);
      }
    }
    e->action.gate = 0;
  }
  /* Redirect before rewriting: a target missing from the devmap leaves the frame untouched
   * for the normal path. bpf_redirect_map only records the target; nothing is sent yet. */
  if (!tx && bpf_redirect_map(&vf_devmap, a->egress_ifindex, 0) != XDP_REDIRECT)
    return decline(st, VF_OFFLOAD_DECLINE_NO_TARGET);

  if (rewrite_ip(data, end, a, p->key.ip_version, l4_csum)) return -1;
  __builtin_memcpy(data, a->dst_mac, 6);
  __builtin_memcpy((__u8*)data + 6, a->src_mac, 6);
  e->packets++;
  e->bytes += len;
  /* The coarse clock (a jiffy's resolution) is enough for idle timeouts and costs less. */
  e->last_seen_ns = bpf_ktime_get_coarse_ns();
  st->offload_bytes += len;
  return count_verdict(st, VF_VERDICT_OFFLOAD, tx ? XDP_TX : XDP_REDIRECT);
}

/* Multi-buffer aware ("xdp.frags"): an interface may carry frames larger than a page (jumbo
 * frames), which then arrive as a first buffer holding the headers and fragments holding the
 * rest. Every action the program takes works on such a frame: the parser reads the headers
 * and holds the length fields against the whole frame, XDP_TX and devmap redirects send all
 * of it, and an AF_XDP socket bound with XDP_USE_SG receives it in several descriptors. */
SEC("xdp.frags")
int vf_steer(struct xdp_md* ctx) {
  const __u32 len = (__u32)bpf_xdp_get_buff_len(ctx);
  __u32 zero = 0;

  struct vf_steer_stats* st = bpf_map_lookup_elem(&vf_stats, &zero);
  if (!st) return XDP_PASS; /* cannot happen: a one-entry array always has entry 0 */
  st->rx_packets++;
  st->rx_bytes += len;

  const struct vf_steer_config* cfg = bpf_map_lookup_elem(&vf_config, &zero);
  __u32 active = cfg ? cfg->active : 0;
  if (active == 0) {
    st->unconfigured++;
    return count_verdict(st, VF_VERDICT_PASS, XDP_PASS);
  }
  __u32 set_idx = (active - 1) & 1;
  const struct vf_steer_set* set = bpf_map_lookup_elem(&vf_sets, &set_idx);
  if (!set) return count_verdict(st, VF_VERDICT_PASS, XDP_PASS); /* cannot happen */

  struct vf_parsed p;
  int bad = vf_parse_xdp(ctx, len, &p);
  if (bad != VF_PARSE_OK) {
    st->malformed[reason_slot(bad)]++;
    st->action[action_slot(set->malformed.action)]++;
    return pass_or_drop(st, set->malformed.action, (enum vf_drop_reason)bad);
  }

  /* Offloaded flows skip the classifier: user space decided them with the rules in force and
   * removes their entries when the rules change. */
  const struct vf_offload_ctl* octl = bpf_map_lookup_elem(&vf_offload_ctl, &zero);
  if (octl && octl->active) {
    int done = offload(ctx, st, set, &p, len);
    if (done >= 0) return done;
  }

  struct vf_rule_value r = set->default_action;
  if (vf_classify(&p, set_idx, &r)) return count_verdict(st, VF_VERDICT_PASS, XDP_PASS);
  if (r.rank == 0) st->default_hits++;
  st->action[action_slot(r.action)]++;
  if (r.rank) {
    __u32 slot = set_idx * set->rule_capacity + r.rule_id;
    struct vf_rule_counter* rc = bpf_map_lookup_elem(&vf_rule_stats, &slot);
    if (rc) {
      rc->packets++;
      rc->bytes += len;
    }
  }

  switch (r.action) {
    case VF_ACT_PASS:
      return count_verdict(st, VF_VERDICT_PASS, XDP_PASS);
    case VF_ACT_DROP:
      return drop(st, VF_DROP_STEER_RULE);
    case VF_ACT_TX:
      if (!fits_mtu(ctx, len, &p, 0)) {
        st->mtu_lifted++;
        return lift(ctx, st, set, &p, r.rule_id, 0, 0);
      }
      return count_verdict(st, VF_VERDICT_TX, XDP_TX);
    case VF_ACT_REDIRECT:
      if (!fits_mtu(ctx, len, &p, r.ifindex)) {
        st->mtu_lifted++;
        return lift(ctx, st, set, &p, r.rule_id, 0, 0);
      }
      if (bpf_redirect_map(&vf_devmap, r.ifindex, 0) == XDP_REDIRECT)
        return count_verdict(st, VF_VERDICT_REDIRECT, XDP_REDIRECT);
      return drop(st, VF_DROP_REDIRECT_FAILED);
    case VF_ACT_USERSPACE:
      return lift(ctx, st, set, &p, r.rule_id, 0, 0);
    default:
      return count_verdict(st, VF_VERDICT_PASS, XDP_PASS);
  }
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
