// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Test fixture for the AF_XDP port, not vecflow's steering program: lifts every well-formed
 * frame to the AF_XDP socket of its rx queue with struct vf_xdp_meta in front of it, computed
 * by the shared parser, so the port's metadata path can be checked against a software parse of
 * the same frame. Frames it cannot parse, or whose queue has no socket, go to the kernel.
 */
#include <linux/bpf.h>

#include <bpf/bpf_helpers.h>

#include "vecflow/flow.h"
#include "vecflow/parse.h"
#include "vecflow/xdp_meta.h"

/* The rule id the fixture reports for every frame, so a test can see it arrive. */
#define FIXTURE_RULE_ID 7

struct {
  __uint(type, BPF_MAP_TYPE_XSKMAP);
  __uint(max_entries, 64);
  __type(key, __u32);
  __type(value, __u32);
} xsks_map SEC(".maps");

SEC("xdp")
int meta_redirect(struct xdp_md* ctx) {
  if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(struct vf_xdp_meta))) return XDP_PASS;
  const __u8* data = (const __u8*)(long)ctx->data;
  const __u8* end = (const __u8*)(long)ctx->data_end;
  struct vf_xdp_meta* md = (struct vf_xdp_meta*)(long)ctx->data_meta;
  if ((const __u8*)(md + 1) > data) return XDP_PASS;
  struct vf_parsed p = {};
  if (vf_parse_frame(data, end, end, &p) != VF_PARSE_OK) return XDP_PASS;
  md->flow_hash = vf_flow_hash(&p.key, 1);
  md->rule_id = FIXTURE_RULE_ID;
  md->vlan_tci = p.vlan_tci;
  md->l3_len = p.l3_len;
  md->l2_len = (__u8)p.l2_len;
  md->ip_version = p.key.ip_version;
  md->l4_proto = p.key.l4_proto;
  md->flags = p.flags & (VF_META_FRAGMENT | VF_META_LATER_FRAG | VF_META_VLAN);
  md->gate = 0;
  md->magic = VF_XDP_META_MAGIC;
  return bpf_redirect_map(&xsks_map, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
