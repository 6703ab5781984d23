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

}  // namespace vecflow
