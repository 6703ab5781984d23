// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Frames XDP handed to an interface that its driver then refused, counted per interface.
 *
 * The steering program counts an offloaded or redirected frame when it hands it to the egress
 * interface (bpf_redirect_map into the devmap). The driver transmits the devmap's frames later,
 * in bulk, at the end of the NAPI poll, and a driver that cannot take them (a veth whose peer
 * has no NAPI running: no XDP program and GRO off, or link down) frees them without counting
 * them anywhere an operator looks: not in the interface's statistics, not in the program's.
 * The kernel reports each bulk transmit in the tracepoint xdp:xdp_devmap_xmit (frames sent,
 * frames dropped, error). Kernels since 6.3 refuse earlier a redirect to an interface that
 * cannot take XDP frames at all (its xdp_features lack ndo_xdp_xmit: a veth whose peer has no
 * XDP program and GRO off), as the program returns: that frame is reported in
 * xdp:xdp_redirect_err, with the map and the key it was redirected by. Attached to both as raw
 * tracepoints (no tracefs needed), these programs add the lost frames per egress interface:
 * the transmit drops of vecflowd's network namespace, and the redirect errors of vecflowd's own
 * devmaps (keyed by the egress ifindex, steer.bpf.c).
 *
 * Cost: the tracepoints fire once per bulk transmit (up to 16 frames) and once per failed
 * redirect on the whole machine; the programs return at their first test unless frames were
 * lost.
 */
#include <linux/bpf.h>

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "vecflow/xmit_abi.h"

/* The kernel's types as far as this program reads them; CO-RE relocates the offsets to the
 * running kernel's (its BTF). */
struct ns_common {
  unsigned int inum;
} __attribute__((preserve_access_index));
struct net {
  struct ns_common ns;
} __attribute__((preserve_access_index));
typedef struct {
  struct net* net;
} possible_net_t;
struct net_device {
  int ifindex;
  possible_net_t nd_net;
} __attribute__((preserve_access_index));

/* The inode number of the network namespace whose interfaces are counted; set by the loader. */
const volatile __u32 vf_netns = 0;

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_HASH);
  __uint(max_entries, VF_XMIT_INTERFACES);
  __type(key, __u32); /* ifindex */
  __type(value, struct vf_xmit_drops);
} vf_xmit SEC(".maps");

/* The ids of vecflowd's devmaps (one per steering program), filled by user space. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, VF_XMIT_INTERFACES);
  __type(key, __u32);
  __type(value, __u8);
} vf_xmit_maps SEC(".maps");

static __always_inline void count(__u32 ifindex, __u64 frames, int err) {
  struct vf_xmit_drops* d = bpf_map_lookup_elem(&vf_xmit, &ifindex);
  if (!d) {
    struct vf_xmit_drops zero = {};
    bpf_map_update_elem(&vf_xmit, &ifindex, &zero, BPF_NOEXIST);
    d = bpf_map_lookup_elem(&vf_xmit, &ifindex);
    if (!d) return; /* the table is full: VF_XMIT_INTERFACES interfaces lost frames already */
  }
  d->frames += frames;
  d->events++;
  if (err != 0) d->errors++;
}

/* TP_PROTO(const struct net_device *from_dev, const struct net_device *to_dev, int sent,
 *          int drops, int err) */
SEC("raw_tp/xdp_devmap_xmit")
int vf_xmit_drops(struct bpf_raw_tracepoint_args* ctx) {
  const int drops = (int)ctx->args[3];
  if (drops <= 0) return 0;
  const struct net_device* to = (const struct net_device*)ctx->args[1];
  if (BPF_CORE_READ(to, nd_net.net, ns.inum) != vf_netns) return 0;
  count((__u32)BPF_CORE_READ(to, ifindex), (__u64)drops, (int)ctx->args[4]);
  return 0;
}

/* TP_PROTO(const struct net_device *dev, const struct bpf_prog *xdp, const void *tgt, int err,
 *          enum bpf_map_type map_type, u32 map_id, u32 index) */
SEC("raw_tp/xdp_redirect_err")
int vf_redirect_errors(struct bpf_raw_tracepoint_args* ctx) {
  __u32 map_id = (__u32)ctx->args[5];
  if (!bpf_map_lookup_elem(&vf_xmit_maps, &map_id)) return 0;
  count((__u32)ctx->args[6], 1, (int)ctx->args[3]);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
