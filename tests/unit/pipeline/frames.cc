#include "frames.h"

#include <cstring>
#include <stdexcept>

#include <rte_ether.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_tcp.h>
#include <rte_udp.h>

#include "core/flow.h"
#include "core/packet.h"
#include "core/parse.h"
#include "pipeline/packet_view.h"

namespace vecflow::test {

rte_mempool* test_pool() {
  static rte_mempool* pool = rte_pktmbuf_pool_create("vpi_test_pool", 32767, 256, 0,
                                                     RTE_MBUF_DEFAULT_BUF_SIZE, SOCKET_ID_ANY);
  return pool;
}

IpAddress address(const std::string& text) {
  auto a = parse_ip_address(text);
  if (!a) throw std::invalid_argument(text);
  return *a;
}

IpPrefix prefix(const std::string& text) {
  auto p = parse_ip_prefix(text);
  if (!p) throw std::invalid_argument(text);
  return *p;
}

MacAddress mac(const std::string& text) {
  auto m = parse_mac_address(text);
  if (!m) throw std::invalid_argument(text);
  return *m;
}

namespace {

rte_mbuf* alloc(uint16_t len) {
  rte_mbuf* m = rte_pktmbuf_alloc(test_pool());
  if (m == nullptr) throw std::runtime_error("test pool exhausted");
  if (rte_pktmbuf_append(m, len) == nullptr) throw std::runtime_error("frame too long");
  std::memset(rte_pktmbuf_mtod(m, void*), 0, len);
  return m;
}

}  // namespace

rte_mbuf* make_frame(const FrameSpec& s) {
  const uint16_t l2 = sizeof(rte_ether_hdr) + (s.vlan ? sizeof(rte_vlan_hdr) : 0);
  const uint16_t l3 = s.version == 4 ? sizeof(rte_ipv4_hdr) : sizeof(rte_ipv6_hdr);
  uint16_t l4 = 8;
  if (s.proto == IPPROTO_TCP) l4 = sizeof(rte_tcp_hdr);
  rte_mbuf* m = alloc(l2 + l3 + l4 + s.payload);
  uint8_t* p = rte_pktmbuf_mtod(m, uint8_t*);
  auto* eth = reinterpret_cast<rte_ether_hdr*>(p);
  std::memcpy(eth->dst_addr.addr_bytes, s.dst_mac.bytes.data(), 6);
  std::memcpy(eth->src_addr.addr_bytes, s.src_mac.bytes.data(), 6);
  const uint16_t type = s.version == 4 ? RTE_ETHER_TYPE_IPV4 : RTE_ETHER_TYPE_IPV6;
  if (s.vlan) {
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN);
    auto* vh = reinterpret_cast<rte_vlan_hdr*>(eth + 1);
    vh->vlan_tci = rte_cpu_to_be_16(s.vlan);
    vh->eth_proto = rte_cpu_to_be_16(type);
  } else {
    eth->ether_type = rte_cpu_to_be_16(type);
  }
  const IpAddress src = address(s.src), dst = address(s.dst);
  if (s.version == 4) {
    auto* h = reinterpret_cast<rte_ipv4_hdr*>(p + l2);
    h->version_ihl = RTE_IPV4_VHL_DEF;
    h->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(l3 + l4 + s.payload));
    h->packet_id = rte_cpu_to_be_16(0x1234);
    h->time_to_live = s.ttl;
    h->next_proto_id = s.proto;
    // Through byte pointers: the header struct is packed.
    std::memcpy(p + l2 + offsetof(rte_ipv4_hdr, src_addr), src.bytes.data(), 4);
    std::memcpy(p + l2 + offsetof(rte_ipv4_hdr, dst_addr), dst.bytes.data(), 4);
    h->hdr_checksum = rte_ipv4_cksum(h);
  } else {
    auto* h = reinterpret_cast<rte_ipv6_hdr*>(p + l2);
    h->vtc_flow = rte_cpu_to_be_32(6u << 28);
    h->payload_len = rte_cpu_to_be_16(static_cast<uint16_t>(l4 + s.payload));
    h->proto = s.proto;
    h->hop_limits = s.ttl;
    std::memcpy(h->src_addr, src.bytes.data(), 16);
    std::memcpy(h->dst_addr, dst.bytes.data(), 16);
  }
  uint8_t* l4p = p + l2 + l3;
  uint16_t sp = rte_cpu_to_be_16(s.sport), dp = rte_cpu_to_be_16(s.dport);
  if (s.proto == IPPROTO_TCP || s.proto == IPPROTO_UDP) {
    std::memcpy(l4p, &sp, 2);
    std::memcpy(l4p + 2, &dp, 2);
    if (s.proto == IPPROTO_UDP) {
      uint16_t len = rte_cpu_to_be_16(static_cast<uint16_t>(l4 + s.payload));
      std::memcpy(l4p + 4, &len, 2);
    } else {
      l4p[12] = 5 << 4;
    }
  } else {
    l4p[0] = s.version == 4 ? 8 : 128;  // echo request
  }
  m->port = s.port;
  m->l2_len = l2;
  m->l3_len = l3;
  uint32_t ptype = s.vlan ? RTE_PTYPE_L2_ETHER_VLAN : RTE_PTYPE_L2_ETHER;
  ptype |= s.version == 4 ? RTE_PTYPE_L3_IPV4 : RTE_PTYPE_L3_IPV6;
  ptype |= s.proto == IPPROTO_TCP   ? RTE_PTYPE_L4_TCP
           : s.proto == IPPROTO_UDP ? RTE_PTYPE_L4_UDP
                                    : RTE_PTYPE_L4_ICMP;
  m->packet_type = ptype;
  reset_meta(m);
  m->hash.rss = flow_hash(pkt::flow_key(m), true);
  m->ol_flags |= RTE_MBUF_F_RX_RSS_HASH;
  return m;
}

namespace {
rte_mbuf* make_l2_only(uint16_t port, uint16_t ether_type, uint32_t ptype) {
  rte_mbuf* m = alloc(60);
  auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
  std::memset(eth->dst_addr.addr_bytes, 0xff, 6);
  eth->src_addr.addr_bytes[0] = 0x02;
  eth->ether_type = rte_cpu_to_be_16(ether_type);
  m->port = port;
  m->l2_len = sizeof(rte_ether_hdr);
  m->l3_len = 0;
  m->packet_type = ptype;
  reset_meta(m);
  m->hash.rss = 1;
  return m;
}
}  // namespace

rte_mbuf* make_arp(uint16_t port) {
  return make_l2_only(port, RTE_ETHER_TYPE_ARP, RTE_PTYPE_L2_ETHER_ARP);
}

rte_mbuf* make_lldp(uint16_t port) {
  return make_l2_only(port, RTE_ETHER_TYPE_LLDP, RTE_PTYPE_L2_ETHER_LLDP);
}

void CollectSinks::free_all() {
  for (auto* v : {&tx, &to_kernel, &later, &copied}) {
    for (rte_mbuf* m : *v)
      rte_pktmbuf_free(m);
    v->clear();
  }
}

std::vector<rte_mbuf*> make_fragments(FrameSpec s, uint32_t id,
                                      const std::vector<uint16_t>& sizes) {
  uint16_t total = 0;
  for (uint16_t n : sizes)
    total = static_cast<uint16_t>(total + n);
  const bool v4 = s.version == 4;
  s.proto = IPPROTO_UDP;
  s.payload = static_cast<uint16_t>(total - sizeof(rte_udp_hdr));
  rte_mbuf* whole = make_frame(s);
  uint8_t* ip = rte_pktmbuf_mtod_offset(whole, uint8_t*, whole->l2_len);
  auto* udp = reinterpret_cast<rte_udp_hdr*>(ip + whole->l3_len);
  auto* data = reinterpret_cast<uint8_t*>(udp);
  for (uint16_t i = sizeof(rte_udp_hdr); i < total; ++i)
    data[i] = static_cast<uint8_t>(i * 7 + 1);
  udp->dgram_cksum = 0;
  udp->dgram_cksum = v4 ? rte_ipv4_udptcp_cksum(reinterpret_cast<rte_ipv4_hdr*>(ip), udp)
                        : rte_ipv6_udptcp_cksum(reinterpret_cast<rte_ipv6_hdr*>(ip), udp);
  // An IPv6 fragment's IP payload starts with the fragment header (RFC 8200 4.5).
  const uint16_t frag_hdr = v4 ? 0 : sizeof(rte_ipv6_fragment_ext);
  std::vector<rte_mbuf*> out;
  uint16_t off = 0;
  for (uint16_t n : sizes) {
    FrameSpec f = s;
    f.payload = static_cast<uint16_t>(n + frag_hdr - sizeof(rte_udp_hdr));
    rte_mbuf* m = make_frame(f);
    uint8_t* fip = rte_pktmbuf_mtod_offset(m, uint8_t*, m->l2_len);
    const bool more = off + n < total;
    if (v4) {
      auto* h = reinterpret_cast<rte_ipv4_hdr*>(fip);
      h->packet_id = rte_cpu_to_be_16(static_cast<uint16_t>(id));
      h->fragment_offset =
          rte_cpu_to_be_16(static_cast<uint16_t>(off / 8 | (more ? RTE_IPV4_HDR_MF_FLAG : 0)));
      h->hdr_checksum = 0;
      h->hdr_checksum = rte_ipv4_cksum(h);
    } else {
      auto* h = reinterpret_cast<rte_ipv6_hdr*>(fip);
      h->proto = IPPROTO_FRAGMENT;
      auto* fh = reinterpret_cast<rte_ipv6_fragment_ext*>(h + 1);
      fh->next_header = IPPROTO_UDP;
      fh->reserved = 0;
      fh->frag_data = rte_cpu_to_be_16(static_cast<uint16_t>(off | (more ? 1 : 0)));
      fh->id = rte_cpu_to_be_32(id);
    }
    std::memcpy(fip + (v4 ? sizeof(rte_ipv4_hdr) : sizeof(rte_ipv6_hdr)) + frag_hdr, data + off, n);
    if (parse_packet(m, true)) throw std::runtime_error("a fragment the parser refuses");
    out.push_back(m);
    off = static_cast<uint16_t>(off + n);
  }
  rte_pktmbuf_free(whole);
  return out;
}

}  // namespace vecflow::test
