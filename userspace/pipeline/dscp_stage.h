// The `dscp` stage: marks IP packets with a configured DSCP (RFC 2474), the upper six bits of
// the IPv4 TOS byte or the IPv6 traffic class; the two ECN bits (RFC 3168) are kept. An IPv4
// header checksum is updated incrementally (RFC 1624); IPv6 has none, and no L4 checksum
// covers the field. Packets that are not IP pass unchanged.
#pragma once

#include <cstdint>
#include <memory>

#include <rte_ip.h>

#include "config/config.h"
#include "pipeline/stage.h"

namespace vecflow {

// The keys of a `stage: dscp` entry (configs/reference.yaml).
struct DscpConfig {
  uint8_t dscp = 0;  // 0-63
};

class DscpStage final : public PerPacketStage<DscpStage> {
 public:
  bool reads_flow_hash() const noexcept override { return false; }
  DscpStage(const config::StageConfig& cfg, StageContext& ctx);

  struct VectorState {};
  VectorState begin(StageEnv&) noexcept { return {}; }
  void process_packet(rte_mbuf* m, VectorState& vs, StageEnv& env) noexcept;

 private:
  uint8_t dscp_;
};

// Sets the DSCP of an IPv4 header, keeping ECN, and updates its checksum incrementally.
void ipv4_set_dscp(rte_ipv4_hdr* ip, uint8_t dscp) noexcept;

struct StageModule;
// The dscp stage type: its configuration and factory.
StageModule dscp_stage_module();

}  // namespace vecflow
