// Two test stages for the paths that run a pipeline (the direct path, the pipeline handler),
// and a registry that knows them beside the builtin stages.
#pragma once

#include <memory>

#include "core/packet.h"
#include "pipeline/stage.h"
#include "pipeline/stage_registry.h"
#include "unit/pipeline/fixture.h"
#include "unit/sched/sched_support.h"

namespace vecflow::test {

// Decides by the packet's sequence number (payload word 1, sched_support.h): 1 mod 4 is sent on
// lan, 2 dropped (acl_deny), 3 to the kernel; 0 goes on to the next group.
class Decide final : public PerPacketStage<Decide> {
 public:
  Decide(const config::StageConfig& cfg, StageContext& ctx)
      : PerPacketStage(cfg.type, cfg.name, ctx.lcore_slots) {}
  struct VectorState {};
  VectorState begin(StageEnv&) noexcept { return {}; }
  void process_packet(rte_mbuf* m, VectorState&, StageEnv&) noexcept {
    switch (packet_words(m)[1] % 4) {
      case 1:
        set_transmit(m, PortId{kLan});
        break;
      case 2:
        set_drop(m, DropReason::ACL_DENY);
        break;
      case 3:
        set_kernel(m);
        break;
      default:
        break;
    }
  }
};

// Places every packet on wan; the end of the pipeline then transmits it.
class PlaceOnWan final : public PerPacketStage<PlaceOnWan> {
 public:
  PlaceOnWan(const config::StageConfig& cfg, StageContext& ctx)
      : PerPacketStage(cfg.type, cfg.name, ctx.lcore_slots) {}
  struct VectorState {};
  VectorState begin(StageEnv&) noexcept { return {}; }
  void process_packet(rte_mbuf* m, VectorState&, StageEnv&) noexcept { meta(m).out_port = kWan; }
};

// The builtin stages, "decide" and "place".
inline StageRegistry decide_registry() {
  StageRegistry r = StageRegistry::builtin();
  r.add("decide", [](const config::StageConfig& c, StageContext& ctx) {
    return Result<std::unique_ptr<Stage>>(std::make_unique<Decide>(c, ctx));
  });
  r.add("place", [](const config::StageConfig& c, StageContext& ctx) {
    return Result<std::unique_ptr<Stage>>(std::make_unique<PlaceOnWan>(c, ctx));
  });
  return r;
}

}  // namespace vecflow::test
