#include "io/rx_classify.h"

#include "core/parse.h"

namespace vecflow {

uint32_t packet_type_of(const vf_xdp_meta& md) noexcept {
  ParsedFrame p{};
  p.key.ip_version = md.ip_version;
  p.key.l4_proto = md.l4_proto;
  p.l2_len = md.l2_len;
  p.l3_len = md.l3_len;
  p.vlan_count = static_cast<uint8_t>(md.l2_len > VF_ETH_HLEN ? (md.l2_len - VF_ETH_HLEN) / 4 : 0);
  if (md.flags & VF_META_FRAGMENT) p.flags |= VF_PARSED_FRAGMENT;
  return packet_type_of(p);
}

std::optional<DropReason> classify_rx(rte_mbuf* m, const RxClassify& c, bool try_meta) noexcept {
  m->port = to_index(c.port);
  reset_meta(m);
  if (try_meta) {
    if (const vf_xdp_meta* md = take_xdp_meta(m)) {
      apply_xdp_meta(m, *md);
      return std::nullopt;
    }
  }
  const bool keep_rss = c.flow_id != FlowIdFrom::Software && (m->ol_flags & RTE_MBUF_F_RX_RSS_HASH);
  const uint32_t rss = m->hash.rss;
  auto bad = parse_packet(m, c.symmetric);
  if (keep_rss) m->hash.rss = rss;
  if (bad && c.drop_malformed) return bad;
  return std::nullopt;
}

}  // namespace vecflow
