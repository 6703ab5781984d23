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

/* The hash is computed on every packet, in XDP and in user space, so it is built for a short
 * dependency chain rather than a chain of per-word mixing rounds (murmur3 over the key's ten
 * words took ~90 cycles of latency per packet): each address folds to 32 bits (an IPv4
 * address is its own fold; IPv6's last three words are multiplied by independent odd
 * constants, in parallel, and added to the first), the ordered endpoints and the ports,
 * protocol and version form two 64-bit words, and murmur3's 64-bit finaliser mixes their
 * combination so that every input bit reaches every output bit, low and high. Users take low
 * bits (the rx adapter's flow bucket) and high bits (ECMP's next hop) alike. */
VF_INLINE __u32 vf_addr_hash(const __u32 a[4]) {
  __u64 h = (__u64)a[1] * 0xc2b2ae3d27d4eb4full + (__u64)a[2] * 0x165667b19e3779f9ull +
            (__u64)a[3] * 0xd6e8feb86659fd93ull;
  return a[0] + (__u32)(h >> 32);
}

/* vf_addr_hash of an IPv4 address (word 0; words 1..3 zero). */
VF_INLINE __u32 vf_addr4_hash(__u32 a) {
  return a;
}

VF_INLINE __u64 vf_fmix64(__u64 x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

/* The flow hash from its parts: both address hashes, the ports (network order), protocol and
 * IP version. vf_flow_hash() below is this over a key; a parser that has the fields in
 * registers (user space's common-frame path, core/parse.h) calls it directly and gets the
 * same value without building a key. With `symmetric` set, both directions of a connection
 * hash alike (the endpoints are ordered by their address hash, then by port), so a stateful
 * stage sees both directions on one worker. Never returns 0: 0 is left to mean "no hash" in
 * metadata. */
VF_INLINE __u32 vf_flow_hash_parts(__u32 hs, __u32 hd, __u32 ps, __u32 pd, __u8 l4_proto,
                                   __u8 ip_version, int symmetric) {
  if (symmetric && (hs > hd || (hs == hd && ps > pd))) {
    __u32 t = hs;
    hs = hd;
    hd = t;
    t = ps;
    ps = pd;
    pd = t;
  }
  __u64 ends = ((__u64)hs << 32) | hd;
  __u64 rest = ((__u64)ps << 48) | ((__u64)pd << 32) | ((__u32)l4_proto << 8) | ip_version;
  __u32 h = (__u32)vf_fmix64(ends * 0x9e3779b97f4a7c15ull ^ rest);
  return h ? h : 1;
}

/* Hash of a flow key (see vf_flow_hash_parts). */
VF_INLINE __u32 vf_flow_hash(const struct vf_flow_key* key, int symmetric) {
  return vf_flow_hash_parts(vf_addr_hash(key->src), vf_addr_hash(key->dst), key->src_port,
                            key->dst_port, key->l4_proto, key->ip_version, symmetric);
}

#endif /* VECFLOW_FLOW_H */
