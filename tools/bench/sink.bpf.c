// The offload part's receiver (tools/bench/suite.py, run_offload): attached to the server's
// interface, it drops every UDP frame (the test traffic) and passes the rest (ARP, ICMP), so
// that the server still answers its neighbours. It counts nothing itself: veth counts the
// frames an XDP program dropped per receive queue (ethtool -S: rx_queue_N_xdp_drops). It runs
// in the softirq of whoever transmits into the server's veth, before any skb exists: tens of
// nanoseconds a frame, so it cannot be the bottleneck of a path that forwards skbs or copies
// frames, and it costs every row the same.
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>

#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int sink(struct xdp_md* ctx) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  struct ethhdr* eth = data;
  if ((void*)(eth + 1) > end) return XDP_PASS;
  if (eth->h_proto == bpf_htons(ETH_P_IP)) {
    struct iphdr* ip = (void*)(eth + 1);
    if ((void*)(ip + 1) > end) return XDP_PASS;
    return ip->protocol == IPPROTO_UDP ? XDP_DROP : XDP_PASS;
  }
  if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
    struct ipv6hdr* ip6 = (void*)(eth + 1);
    if ((void*)(ip6 + 1) > end) return XDP_PASS;
    return ip6->nexthdr == IPPROTO_UDP ? XDP_DROP : XDP_PASS;
  }
  return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
