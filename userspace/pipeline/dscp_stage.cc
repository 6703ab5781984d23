#include "pipeline/dscp_stage.h"

#include <bit>
#include <cstring>

#include <rte_byteorder.h>
#include <rte_ip.h>
#include <nlohmann/json.hpp>

#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

void ipv4_set_dscp(rte_ipv4_hdr* ip, uint8_t dscp) noexcept {
  // The version/IHL byte and the TOS byte as one 16-bit word, updated incrementally (RFC 1624,
  // eqn. 3: HC' = ~(~HC + ~m + m')). The one's-complement sum does not depend on byte order as
  // long as every word is read the same way, so the words are used as they sit in memory: TOS
  // is the word's high byte in host order.
  static_assert(std::endian::native == std::endian::little);
  uint16_t old_word;
  std::memcpy(&old_word, &ip->version_ihl, 2);
  const uint8_t tos = static_cast<uint8_t>(dscp << 2 | (ip->type_of_service & 0x03));
  const uint16_t new_word = static_cast<uint16_t>((old_word & 0x00ff) | tos << 8);
  std::memcpy(&ip->version_ihl, &new_word, 2);
  uint32_t sum = uint32_t(uint16_t(~ip->hdr_checksum)) + uint16_t(~old_word) + new_word;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  ip->hdr_checksum = static_cast<uint16_t>(~sum);
}

DscpStage::DscpStage(const config::StageConfig& cfg, StageContext& ctx)
    : PerPacketStage(cfg.type, cfg.name, ctx.lcore_slots),
      dscp_(cfg.params.get<DscpConfig>().dscp) {}

void DscpStage::process_packet(rte_mbuf* m, VectorState&, StageEnv&) noexcept {
  if (pkt::is_ipv4(m)) {
    ipv4_set_dscp(pkt::ipv4(m), dscp_);
  } else if (pkt::is_ipv6(m)) {
    // Version (4 bits), traffic class (8: DSCP then ECN), flow label (20).
    rte_ipv6_hdr* ip = pkt::ipv6(m);
    const uint32_t vtc = rte_be_to_cpu_32(ip->vtc_flow);
    ip->vtc_flow = rte_cpu_to_be_32((vtc & ~(uint32_t{0x3f} << 22)) | uint32_t{dscp_} << 22);
  }
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_dscp_stage(const config::StageConfig& cfg, StageContext& ctx) {
  return std::make_unique<DscpStage>(cfg, ctx);
}

DscpConfig read_dscp(config::Ctx&, config::MapReader& m) {
  DscpConfig s;
  uint16_t dscp = 0;
  if (m.require("dscp") && m.get("dscp", dscp, 0, 63)) s.dscp = static_cast<uint8_t>(dscp);
  return s;
}

Json dscp_json(const DscpConfig& p) {
  return {{"dscp", p.dscp}};
}

}  // namespace

StageModule dscp_stage_module() {
  return StageModule{config::stage_type<DscpConfig>("dscp", {"dscp"}, read_dscp, dscp_json),
                     make_dscp_stage,
                     nullptr,
                     {}};
}

}  // namespace vecflow
