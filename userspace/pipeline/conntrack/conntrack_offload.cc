// The conntrack stage's part in flow offload to XDP (core/offload_feed.h): which packets'
// flows it vouches for, and keeping the sessions of offloaded flows alive.
#include <netinet/in.h>

#include <cstring>

#include <rte_cycles.h>

#include "core/packet.h"
#include "pipeline/conntrack/conntrack_stage.h"
#include "pipeline/conntrack/fragment_table.h"
#include "pipeline/packet_view.h"

namespace vecflow {

void ConntrackStage::keep_alive(uint32_t session, uint8_t l4_proto) noexcept {
  const ConnState s = l4_proto == IPPROTO_TCP ? ConnState::TcpEstablished : ConnState::UdpAssured;
  table_->keep(session, expiry(s, ConnTable::tick(rte_rdtsc())));
}

void ConntrackStage::vouch(rte_mbuf* m, ConnEntry* e, unsigned slot, uint64_t tsc) noexcept {
  PacketMeta& pm = meta(m);
  const uint8_t proto = e->key.proto;
  const bool v4 = pkt::is_ipv4(m);
  const bool established = proto == IPPROTO_TCP   ? e->state == ConnState::TcpEstablished
                           : proto == IPPROTO_UDP ? e->state == ConnState::UdpAssured
                                                  : false;
  if (!established || ct_mark(m) != CtMark::Established || is_fragment(m) ||
      m->l3_len != (v4 ? sizeof(rte_ipv4_hdr) : sizeof(rte_ipv6_hdr))) {
    pm.flags |= kMetaFlagKeep;
    return;
  }
  // The key the XDP parser reads from this packet (bpf/include/vecflow/parse.h).
  vf_flow_key k{};
  if (v4) {
    const rte_ipv4_hdr* ip = pkt::ipv4(m);
    k.src[0] = ip->src_addr;
    k.dst[0] = ip->dst_addr;
    k.ip_version = 4;
  } else {
    const rte_ipv6_hdr* ip = pkt::ipv6(m);
    std::memcpy(k.src, ip->src_addr, 16);
    std::memcpy(k.dst, ip->dst_addr, 16);
    k.ip_version = 6;
  }
  const uint8_t* l4 = rte_pktmbuf_mtod_offset(m, const uint8_t*, m->l2_len + m->l3_len);
  std::memcpy(&k.src_port, l4, 2);
  std::memcpy(&k.dst_port, l4 + 2, 2);
  k.l4_proto = proto;
  if (proto == IPPROTO_TCP && !(e->flags & kConnLiberal)) {
    rte_seqcount_write_begin(&e->seq);
    e->flags |= kConnLiberal;
    rte_seqcount_write_end(&e->seq);
  }
  offload_->note(slot, m, k, table_->index_of(e), tsc);
  pm.flags |= kMetaFlagTracked;
}

}  // namespace vecflow
