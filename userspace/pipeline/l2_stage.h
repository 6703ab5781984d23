// The `l2` stage: the Ethernet header a packet leaves with, per egress port. For a packet with
// an egress port (meta.out_port): pop the outer VLAN tag (802.1Q or 802.1ad) when the port says
// vlan_pop, set the source MAC (the port's `src_mac`, by default the port's own address) and
// the destination MAC when the port gives one (a fixed peer; otherwise the neighbour stage's),
// then push a VLAN tag when the port says vlan_push. Packets without an egress port pass.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "config/config.h"
#include "pipeline/stage.h"

namespace vecflow {

struct L2PortRewrite {
  std::string port;
  std::optional<MacAddress> src_mac;  // default: the port's own MAC
  std::optional<MacAddress> dst_mac;
  std::optional<uint16_t> vlan_push;
  bool vlan_pop = false;
};

// The keys of a `stage: l2` entry (configs/reference.yaml).
struct L2Config {
  std::vector<L2PortRewrite> ports;
};

class L2Stage final : public PerPacketStage<L2Stage> {
 public:
  bool reads_flow_hash() const noexcept override { return false; }
  static Result<std::unique_ptr<L2Stage>> create(const config::StageConfig& cfg, StageContext& ctx);

  struct VectorState {};
  VectorState begin(StageEnv&) noexcept { return {}; }
  void process_packet(rte_mbuf* m, VectorState& vs, StageEnv& env) noexcept;
  // A new port's frames get its MAC as the source (the file's rewrites are read at start).
  void set_port(PortId id, const PortInfo& info) override;

 private:
  struct Rewrite {
    std::optional<MacAddress> src;
    std::optional<MacAddress> dst;
    uint16_t vlan_push = 0;  // 0: none (VLAN 0 is not a valid id to push)
    bool vlan_pop = false;
  };
  L2Stage(const config::StageConfig& cfg, StageContext& ctx);
  std::vector<Rewrite> rewrite_;  // by PortId
};

struct StageModule;
// The l2 stage type: its configuration and factory.
StageModule l2_stage_module();

}  // namespace vecflow
