/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Flow key and flow hash, compiled by both the XDP program and user space so that a flow id
 * computed in the kernel equals the one computed by the software fallback for DPDK ports.
 */
#ifndef VECFLOW_FLOW_H
#define VECFLOW_FLOW_H

#include <linux/types.h>

#ifndef VF_INLINE
#define VF_INLINE static inline __attribute__((always_inline))
#endif

/* The 5-tuple of an IPv4 or IPv6 packet. Addresses and ports are in network byte order, as
 * they sit on the wire; IPv4 addresses use word 0 and leave words 1..3 zero. A packet without
 * an L4 header (non-first fragment, unknown protocol) has zero ports. */
struct vf_flow_key {
  __u32 src[4];
  __u32 dst[4];
  __u16 src_port;
  __u16 dst_port;
  __u8 l4_proto;
  __u8 ip_version; /* 4 or 6 */
  __u16 pad;
};

/* murmur3's 32-bit mixing steps: cheap (a few multiplies, no table), good avalanche, and
 * loop-free per word, which keeps the BPF verifier's job trivial. */
VF_INLINE __u32 vf_rotl32(__u32 x, int r) {
  return (x << r) | (x >> (32 - r));
}

VF_INLINE __u32 vf_mix_word(__u32 h, __u32 k) {
  k *= 0xcc9e2d51u;
  k = vf_rotl32(k, 15);
  k *= 0x1b873593u;
  h ^= k;
  h = vf_rotl32(h, 13);
  return h * 5 + 0xe6546b64u;
}

VF_INLINE __u32 vf_final_mix(__u32 h) {
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  h ^= h >> 16;
  return h;
}

VF_INLINE __u32 vf_addr_hash(const __u32 a[4]) {
  __u32 h = 0x9747b28cu;
  h = vf_mix_word(h, a[0]);
  h = vf_mix_word(h, a[1]);
  h = vf_mix_word(h, a[2]);
  h = vf_mix_word(h, a[3]);
  return h;
}

/* Hash of a flow key. With `symmetric` set, both directions of a connection hash alike (the
 * endpoints are ordered by their address hash, then by port), so a stateful stage sees both
 * directions on one worker. Never returns 0: 0 is left to mean "no hash" in metadata. */
VF_INLINE __u32 vf_flow_hash(const struct vf_flow_key* key, int symmetric) {
  __u32 hs = vf_addr_hash(key->src);
  __u32 hd = vf_addr_hash(key->dst);
  __u32 ps = key->src_port;
  __u32 pd = key->dst_port;
  if (symmetric && (hs > hd || (hs == hd && ps > pd))) {
    __u32 t = hs;
    hs = hd;
    hd = t;
    t = ps;
    ps = pd;
    pd = t;
  }
  __u32 h = 0x3c6ef372u;
  h = vf_mix_word(h, hs);
  h = vf_mix_word(h, hd);
  h = vf_mix_word(h, (ps << 16) | pd);
  h = vf_mix_word(h, ((__u32)key->l4_proto << 8) | key->ip_version);
  h = vf_final_mix(h ^ 40u);
  return h ? h : 1;
}

#endif /* VECFLOW_FLOW_H */
