// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * trafgen's frame writer for the kernel's XDP live-frames mode (BPF_PROG_RUN with
 * BPF_F_TEST_XDP_LIVE_FRAMES, xdp_live.cc): the kernel runs this program once per frame on a
 * copy of one prebuilt frame and transmits what it returns XDP_TX for out of the ingress
 * interface. The copy is recycled from run to run, so every field that differs between frames
 * is written here, whole, for each frame: the headers, copied from the prebuilt frame (what
 * receives a frame may have changed them in the recycled copy: a forwarder that decrements the
 * TTL in place, rewrites MACs or translates addresses hands the page back so, and a frame
 * built on it would leave with a stale header and a wrong checksum), the flow's source port
 * and source address (as build_flow_frame() lays flows out: port src_port + flow % 60000, the
 * address's last two bytes raised by flow / 60000), the payload header's flow, sequence
 * number and send stamp (CLOCK_REALTIME, as the AF_PACKET sender's), and the checksums over
 * them (RFC 1624: a base sum of the words that stay, from user space, plus the words written
 * here). Flows take turns as in the AF_PACKET sender: frame n is flow n % flows with sequence
 * number n / flows.
 */
#include <linux/bpf.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* Set by trafgen before loading. The interface the frames leave from: trafgen also attaches
 * this program to the loopback interface while it sends (xdp_live.h says why), where it lets
 * every frame pass. */
const volatile __u32 ifindex = 0;
/* The frame's layout and flow 0's values. Offsets are from the start of the frame and even, so
 * that the 16-bit words read here are the checksums' words. */
const volatile __u32 flows = 1;
const volatile __u32 first_flow = 0;
const volatile __u16 src_port = 1024;
const volatile __u16 sport_off = 0;   /* L4 source port */
const volatile __u16 addr_off = 0;    /* last two bytes of the source address */
const volatile __u16 payload_off = 0; /* struct PayloadHeader (frame.h) */
const volatile __u16 l4_csum_off = 0; /* 0: none (IPv4 UDP) */
const volatile __u16 ip_csum_off = 0; /* 0: none (IPv6) */
const volatile __u8 addr_hi = 0;      /* flow 0's bytes at addr_off */
const volatile __u8 addr_lo = 0;
/* The prebuilt frame's first headers_len bytes (Ethernet, IP, L4 headers, rounded up to 8
 * bytes: the payload header's first bytes come along, unchanged too). */
#define HEADERS_MAX 96
const volatile __u64 headers[HEADERS_MAX / 8] = {};
const volatile __u32 headers_len = 0; /* a multiple of 8, <= HEADERS_MAX */
/* Sums (16-bit one's complement, in the host's word order) of each checksum's words but
 * those written per frame. */
const volatile __u32 l4_base = 0;
const volatile __u32 ip_base = 0;
/* CLOCK_REALTIME - CLOCK_MONOTONIC when trafgen started: the receiver's clock. */
const volatile __u64 realtime_offset = 0;

/* Across runs. One trafgen runs this instance from one thread: no two CPUs at once. */
__u32 next_flow = 0;
__u32 seq = 0;
__u64 frames = 0;
/* The send stamp: read once per batch of the kernel's loop (BATCH frames from the start of a
 * run, which trafgen marks by zeroing run_pos), since the frames of a batch leave together
 * when it ends and the clock costs ~60 ns a read here (a quarter of the rate if read per
 * frame). */
__u32 run_pos = 0;
__u64 batch_stamp = 0;

/* PayloadHeader: magic (2), flow (4), seq (4), tx_ns (8); the 16 bytes after magic change. */
#define PAYLOAD_LEN 18
#define PAYLOAD_VARIABLE 2
#define BATCH 64 /* xdp_live.cc's kBatch */

static __always_inline __u16 word(const __u8* p) {
  return *(const __u16*)p;
}

static __always_inline __u16 finish(__u32 sum) {
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  return (__u16)~sum;
}

SEC("xdp")
int xdp_live(struct xdp_md* ctx) {
  __u8* data = (__u8*)(long)ctx->data;
  const __u8* end = (const __u8*)(long)ctx->data_end;
  if (ctx->ingress_ifindex != ifindex) return XDP_PASS;
  __u8* payload = data + payload_off;
  __u8* sport = data + sport_off;
  __u8* addr = data + addr_off;
  if (payload + PAYLOAD_LEN > end || sport + 2 > end || addr + 2 > end) return XDP_ABORTED;
#pragma unroll
  for (int i = 0; i < HEADERS_MAX; i += 8) {
    if (i >= headers_len) break;
    if (data + i + 8 > end) return XDP_ABORTED;
    __u64 w = headers[i / 8]; /* a volatile read: the values are set at load time */
    __builtin_memcpy(data + i, &w, 8);
  }

  __u32 flow = first_flow + next_flow;
  __u32 spread = flow / 60000;
  __u16 port = bpf_htons((__u16)(src_port + flow % 60000));
  __builtin_memcpy(sport, &port, 2);
  addr[0] = (__u8)(addr_hi + (spread >> 8));
  addr[1] = (__u8)(addr_lo + spread);
  if (run_pos++ % BATCH == 0) batch_stamp = bpf_ktime_get_ns() + realtime_offset;
  __u64 tx_ns = batch_stamp;
  __builtin_memcpy(payload + 2, &flow, 4);
  __builtin_memcpy(payload + 6, &seq, 4);
  __builtin_memcpy(payload + 10, &tx_ns, 8);

  if (ip_csum_off) {
    __u8* c = data + ip_csum_off;
    if (c + 2 > end) return XDP_ABORTED;
    __u16 v = finish(ip_base + word(addr));
    __builtin_memcpy(c, &v, 2);
  }
  if (l4_csum_off) {
    __u8* c = data + l4_csum_off;
    if (c + 2 > end) return XDP_ABORTED;
    __u32 sum = l4_base + word(addr) + word(sport);
#pragma unroll
    for (int i = PAYLOAD_VARIABLE; i < PAYLOAD_LEN; i += 2)
      sum += word(payload + i);
    __u16 v = finish(sum);
    if (v == 0) v = 0xffff; /* UDP: 0 means "no checksum"; as stamp() in frame.cc */
    __builtin_memcpy(c, &v, 2);
  }

  if (++next_flow == flows) {
    next_flow = 0;
    ++seq;
  }
  ++frames;
  return XDP_TX;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
